"""``replay verify``: check a log end to end — headers, checksums, sequence continuity, the progress rules,
torn tails — and, for file logs on the local disk, the directory layout of FORMAT.md.

Each problem names its kind and where it is (stream, part, seq, byte offset, file). After damage inside
a part, reading resumes after the damaged event (or at the next segment of a file log) to find more, but
the progress rules are no longer checked for that part (its frontier is unknown from then on).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import click
from rich.table import Table
from rich.text import Text

from connectors.files import FileLog
from connectors.memory import MemoryLog
from eventlog.antichain import Antichain, MutableAntichain
from eventlog.errors import CorruptLogError, EventLogError, ProgressError, SequenceError
from eventlog.events import Entry, Messages
from eventlog.header import StreamHeader
from eventlog.log import Log, PartStats

from ._common import (
    EXIT_DIFFERENT,
    frontier_json,
    frontier_text,
    local_path,
    open_uri,
    print_json,
    progress,
    print_rich,
    stream_header,
    time_text,
    warn,
)

MAX_PROBLEMS_PER_PART = 20
"""After this many problems in one part, verify moves on to the next part."""

_PASSES = 3
"""Passes over a part until one reads nothing (a log being written may grow meanwhile)."""

KINDS = ("header", "corrupt", "gap", "progress", "messages", "torn-tail", "layout")
"""Kinds of problems: an unreadable header; bytes that fail a checksum or do not decode; missing sequence
ids; a broken progress rule; a malformed Messages event; a torn tail (what a crashed writer leaves; the
next writer of the part cuts it); a file-log layout problem (missing index, stray part folder, …)."""


@dataclass
class Problem:
    """One thing wrong with the log, and where."""

    kind: str
    message: str
    stream: str | None = None
    part: int | None = None
    seq: int | None = None
    offset: int | None = None
    path: str | None = None

    def where(self) -> str:
        """``stream 's' part 0 seq 7 offset 120 file /x`` (the parts known)."""
        out = []
        for label, value in (("stream", self.stream), ("part", self.part), ("seq", self.seq),
                             ("offset", self.offset), ("file", self.path)):
            if value is not None:
                out.append(f"{label} {value!r}" if label == "stream" else f"{label} {value}")
        return " ".join(out)

    def to_json(self) -> dict[str, Any]:
        """The problem as a JSON object (location fields only when known)."""
        return {k: v for k, v in self.__dict__.items() if v is not None}


def _from_error(e: EventLogError, stream: str, part: int | None) -> Problem:
    kind = "gap" if isinstance(e, SequenceError) else "progress" if isinstance(e, ProgressError) else "corrupt"
    return Problem(kind, e.reason, e.stream or stream, e.part if e.part is not None else part, e.seq, e.offset, e.path)


@dataclass
class PartReport:
    """What verify read of one part."""

    stream: str
    part: int
    events: int = 0
    last_seq: int = 0
    frontier: Antichain | None = None
    """The part's frontier, None when it could not be followed (damage or missing events)."""
    problems: list[Problem] = field(default_factory=list)


class _PartChecker:
    """Checks the events of one part, in order, against the format's rules."""

    def __init__(self, header: StreamHeader, report: PartReport, track_progress: bool) -> None:
        self.header = header
        self.report = report
        self.counts: MutableAntichain | None = (
            MutableAntichain([(header.time_type.minimum, 1)]) if track_progress else None
        )

    def problem(self, kind: str, message: str, seq: int) -> None:
        self.report.problems.append(Problem(kind, message, self.header.stream, self.report.part, seq))

    def lose_track(self) -> None:
        """Stop checking progress rules: events were skipped, so the frontier is unknown."""
        self.counts = None

    def check(self, entry: Entry) -> None:
        ev, seq = entry.event, entry.seq
        if isinstance(ev, Messages):
            if ev.records.num_rows == 0:
                self.problem("messages", "Messages event without records", seq)
            if not ev.records.schema.equals(self.header.schema, check_metadata=False):
                self.problem("messages", "records do not have the stream's schema", seq)
            if self.counts is not None and not self.counts.less_equal(ev.time):
                f = self.counts.frontier
                self.problem("progress", f"messages at time {time_text(ev.time)} behind the part's frontier "
                             f"{frontier_text(f)}" if f else f"messages at time {time_text(ev.time)} after the part "
                             "finished", seq)
            return
        times = [t for t, _ in ev.updates]
        if times != sorted(set(times)) or any(d == 0 for _, d in ev.updates):
            self.problem("progress", "progress updates are not sorted, unique and non-zero", seq)
        if self.counts is None:
            return
        before = self.counts.frontier
        if before.is_empty():
            self.problem("progress", "progress after the part finished", seq)
        try:
            self.counts.update_iter(ev.updates)
        except ProgressError as e:
            self.problem("progress", f"negative capability count: {e.reason}", seq)
            return
        after = self.counts.frontier
        if not before.dominates(after):
            self.problem("progress", f"frontier moves backwards from {frontier_text(before)} to "
                         f"{frontier_text(after)}", seq)


def _resume_at(log: Log, stream: str, part: int, e: EventLogError, tried: set[int]) -> int | None:
    """Where to continue reading after error ``e``: after the damaged event, else (file logs) at the next
    segment; None to give up on the part."""
    candidates = []
    if isinstance(e, CorruptLogError) and e.seq is not None:
        candidates.append(e.seq + 1)
    if isinstance(log, FileLog):
        pos = e.seq
        if pos is None and e.path and os.path.basename(e.path).split(".")[0].isdigit():
            pos = int(os.path.basename(e.path).split(".")[0])
        if pos is not None:
            later = [s for s in log.segments(stream, part) if s > pos]
            if later:
                candidates.append(later[0])
    for c in candidates:
        if c not in tried:
            tried.add(c)
            return c
    return None


def verify_part(log: Log, header: StreamHeader, part: int, advance: Callable[[int], None]) -> PartReport:
    """Read one part entirely, checking checksums (the reader does), continuity, the progress rules and
    the Messages events; report a torn tail."""
    stream = header.stream
    report = PartReport(stream, part)
    stats: PartStats | None = None
    try:
        stats = log.part_stats(stream, part)
    except EventLogError as e:
        report.problems.append(_from_error(e, stream, part))
    except OSError as e:  # a file the log expected is missing; reading may still find the events
        report.problems.append(Problem("layout", f"cannot size the part: {e.strerror or e}", stream, part,
                                       path=e.filename))
    first_seq = stats.first_seq if stats is not None else 1
    checker = _PartChecker(header, report, track_progress=first_seq == 1)
    if first_seq > 1:
        checker.problem("gap", f"events 1..{first_seq - 1} are not in the log (the part starts at seq "
                        f"{first_seq})", 1)
    start = expected = first_seq
    report.last_seq = start - 1
    tried: set[int] = set()
    while len(report.problems) < MAX_PROBLEMS_PER_PART:
        reader = log.reader(stream, part, start=start)
        try:
            for _ in range(_PASSES):  # a pass that read events may not report a torn tail behind them
                read = 0
                for entry in reader:
                    advance(1)
                    read += 1
                    report.events += 1
                    if entry.seq != expected:
                        checker.problem("gap", f"expected seq {expected}, read {entry.seq}", entry.seq)
                        checker.lose_track()
                    expected = report.last_seq = entry.seq
                    expected += 1
                    checker.check(entry)
                if not read:
                    break
            if reader.tail_problem:
                checker.problem("torn-tail", f"torn tail: {reader.tail_problem}", expected)
            break
        except EventLogError as e:
            report.problems.append(_from_error(e, stream, part))
            checker.lose_track()
            resume = _resume_at(log, stream, part, e, tried)
            if resume is None:
                break
            start = expected = resume
        finally:
            reader.close()
    if stats is not None and not report.problems and report.last_seq + 1 < stats.next_seq:
        checker.problem("gap", f"the log reports events up to seq {stats.next_seq - 1}, but reading stopped after "
                        f"seq {report.last_seq}", report.last_seq + 1)
    report.frontier = checker.counts.frontier if checker.counts is not None else None
    return report


_PART_DIR = re.compile(r"^part-(\d{5})$")
_SEGMENT = re.compile(r"^(\d{20})\.(arrows|avro|index)$")


def layout_problems(log: FileLog, streams: list[str], whole_log: bool) -> list[Problem]:
    """File logs on the local disk: folders and files against FORMAT.md's layout — every segment has its
    index and every index its segment, part folders match the stream's peers, no stray files; with
    ``whole_log``, folders that look like streams but have no header."""
    root = local_path(log.uri)
    if isinstance(log, MemoryLog) or root is None or not os.path.isdir(log.root):
        return []
    problems: list[Problem] = []
    if whole_log:
        for name in sorted(os.listdir(log.root)):
            d = os.path.join(log.root, name)
            if name not in streams and os.path.isdir(d) and any(_PART_DIR.match(x) for x in os.listdir(d)):
                problems.append(Problem("layout", "stream folder without header.json", name, path=d))
    for stream in streams:
        try:
            header = log.header(stream)
        except EventLogError:
            continue  # reported as a header problem
        suffix = ".arrows" if header.encoding == "arrow" else ".avro"
        sdir = os.path.join(log.root, stream)
        for name in sorted(os.listdir(sdir)):
            m = _PART_DIR.match(name)
            path = os.path.join(sdir, name)
            if m and int(m.group(1)) >= header.peers:
                problems.append(Problem("layout", f"part folder beyond the stream's {header.peers} peers", stream,
                                        int(m.group(1)), path=path))
            elif not m and name != "header.json" and not name.endswith(".tmp"):
                problems.append(Problem("layout", "unexpected file in the stream folder", stream, path=path))
        for part in range(header.peers):
            problems += _part_layout(stream, part, os.path.join(sdir, f"part-{part:05d}"), suffix)
    return problems


def _part_layout(stream: str, part: int, pdir: str, suffix: str) -> list[Problem]:
    if not os.path.isdir(pdir):
        return []
    data, index, problems = {}, {}, []
    for name in sorted(os.listdir(pdir)):
        m = _SEGMENT.match(name)
        path = os.path.join(pdir, name)
        if m and "." + m.group(2) == suffix:
            data[int(m.group(1))] = path
        elif m and m.group(2) == "index":
            index[int(m.group(1))] = path
        elif name != ".lock":
            problems.append(Problem("layout", "unexpected file in the part folder", stream, part, path=path))
    newest = max(data, default=None)
    for first, path in data.items():
        if first not in index:
            if first == newest:
                problems.append(Problem("torn-tail", "newest segment has no index (a writer crashed as it "
                                        "created it)", stream, part, first, path=path))
            else:
                problems.append(Problem("layout", "segment without its index", stream, part, first, path=path))
    for first, path in index.items():
        if first not in data:
            problems.append(Problem("layout", "index without its segment", stream, part, first, path=path))
    return problems


@click.command("verify", short_help="Check checksums, continuity, progress rules, torn tails.")
@click.argument("uri")
@click.argument("stream", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
def verify(uri: str, stream: str | None, as_json: bool) -> None:
    """Check every stream of the log at URI (or only STREAM): headers; every event's checksum and decoding;
    sequence ids without gaps; the progress rules (counts never negative, frontiers never moving back,
    no Messages behind the part's frontier or after it finished); torn tails; and, for file logs, the
    folder layout (every segment with its index, no stray part folders).

    Exit 0 when nothing is wrong, 1 with each problem and where it is (stream, part, seq, byte offset,
    file). A log being written may show a torn tail at the end of a part while an event is half written.

    \b
    Example:
      replay verify /tmp/cap
      replay verify /tmp/cap numbers --json | jq '.problems[]'
    """
    log = open_uri(uri)
    streams = log.streams()
    if stream is not None:
        if stream not in streams:
            stream_header(log, stream)  # a log error naming the streams there are
        streams = [stream]
    problems: list[Problem] = []
    reports: list[PartReport] = []
    headers: dict[str, StreamHeader] = {}
    for s in streams:
        try:
            headers[s] = log.header(s)
        except EventLogError as e:
            problems.append(Problem("header", e.reason, s, path=e.path))
    total = 0
    for s, h in headers.items():
        try:
            total += sum(log.part_stats(s, p).events for p in range(h.peers))
        except (EventLogError, OSError):
            pass  # verify_part reports it
    with progress("verifying", total) as advance:
        for h in headers.values():
            for p in range(h.peers):
                report = verify_part(log, h, p, advance)
                reports.append(report)
                problems += report.problems
    if isinstance(log, FileLog):
        problems += layout_problems(log, list(headers), whole_log=stream is None)
    if as_json:
        print_json({
            "ok": not problems,
            "parts": [{"stream": r.stream, "part": r.part, "events": r.events, "last_seq": r.last_seq,
                       "frontier": frontier_json(r.frontier) if r.frontier is not None else None,
                       "problems": len(r.problems)} for r in reports],
            "problems": [p.to_json() for p in problems],
        })
    else:
        _print_report(log, reports, problems, len(headers))
    if not streams:
        warn(f"no streams in log {log.uri}")
    if problems:
        raise click.exceptions.Exit(EXIT_DIFFERENT)


def _print_report(log: Log, reports: list[PartReport], problems: list[Problem], n_streams: int) -> None:
    out: list[Any] = []
    if reports:
        table = Table(title=f"log {log.uri}", title_justify="left")
        for c in ("stream", "part", "events", "last seq", "frontier", "status"):
            table.add_column(c, justify="right" if c in ("part", "events", "last seq") else "left")
        for r in reports:
            status = Text("ok", style="green") if not r.problems else Text(f"{len(r.problems)} problem(s)", style="red")
            f = frontier_text(r.frontier) if r.frontier is not None else "unknown"
            table.add_row(Text(r.stream), str(r.part), str(r.events), str(r.last_seq), Text(f), status)
        out.append(table)
    for p in problems:
        out.append(Text.assemble(("PROBLEM ", "bold red"), (f"{p.kind}: ", "bold"), p.message,
                                    (f" ({p.where()})" if p.where() else "", "dim")))
    events = sum(r.events for r in reports)
    summary = f"verified {n_streams} stream(s), {len(reports)} part(s), {events} event(s): "
    out.append(Text(summary + (f"{len(problems)} problem(s)" if problems else "ok"),
                    style="bold red" if problems else "bold green"))
    print_rich(*out)
