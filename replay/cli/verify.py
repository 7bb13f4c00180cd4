"""``replay verify``: check a log end to end — headers, checksums, sequence continuity, the progress rules,
torn tails — and, for file logs on the local disk, the directory layout of FORMAT.md.

Each problem names its kind and where it is (stream, part, seq, byte offset, file), and verify goes on: an
unreadable header is a problem of its stream only, and after damage inside a part — whatever the reader
raised — reading resumes after the damaged event (or at the next segment of a file log) to find more, but
the progress rules are no longer checked for that part (its frontier is unknown from then on). Every
Messages event is decoded and its record batch validated in full; file logs are also asked for what their
own check of a part's files finds (``FileLog.check_part``).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from typing import Any, Callable

import click
from rich.table import Table
from rich.text import Text

from connectors.files import FileLog
from connectors.files import index as ix
from connectors.files.layout import HEADER_FILES, LAYOUTS, layout_for, part_number
from connectors.memory import MemoryLog
from eventlog.antichain import Antichain
from eventlog.errors import CorruptLogError, EventLogError, ProgressError, SequenceError
from eventlog.events import Entry, Messages
from eventlog.header import StreamHeader
from eventlog.log import Log, PartStats
from eventlog.parts.committed import CommittedPart
from eventlog.parts.rules import PartProgress

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
    void: int = 0
    """Messages events a reader drops as void: a writer restarted before completing their time (FORMAT.md §1.1).
    Information, not a problem."""
    held: int = 0
    """Events a committed reader holds back at the end (uncommitted: times the part has not completed)."""
    truncated: bool = False
    """True when verify stopped reading the part after ``MAX_PROBLEMS_PER_PART`` problems (more may follow)."""


class _PartChecker:
    """Checks the events of one part, in order, against the format's rules."""

    def __init__(self, header: StreamHeader, report: PartReport, track_progress: bool) -> None:
        self.header = header
        self.report = report
        self.rules: PartProgress | None = (
            PartProgress(header.time_type.minimum, stream=header.stream, part=report.part) if track_progress else None
        )
        self.committed: CommittedPart | None = (
            CommittedPart(header.time_type.minimum, stream=header.stream, part=report.part) if track_progress else None
        )

    def follow_epochs(self, entry: Entry, epoch: int) -> None:
        """Count what a committed reader would void or hold back (stops at the first broken rule, which
        ``check`` reports)."""
        if self.committed is None:
            return
        try:
            self.committed.push(entry, epoch)
        except EventLogError:
            self.committed = None
            return
        self.report.void, self.report.held = self.committed.voided, self.committed.held

    def problem(self, kind: str, message: str, seq: int, **where: Any) -> None:
        self.report.problems.append(Problem(kind, message, self.header.stream, self.report.part, seq, **where))

    def lose_track(self) -> None:
        """Stop checking progress rules: events were skipped, so the frontier is unknown."""
        self.rules = None
        self.committed = None

    def check(self, entry: Entry, locate: Callable[[int], tuple[str | None, int | None]]) -> None:
        """Check one event; ``locate(seq)`` gives the file and byte offset of an event (for reports)."""
        ev, seq = entry.event, entry.seq
        if isinstance(ev, Messages):
            records = ev.records
            try:  # every batch handed out must be safe to read: buffers as long as the row count says
                records.validate(full=True)
            except (ValueError, TypeError, OSError) as e:  # pyarrow.ArrowInvalid is a ValueError
                path, offset = locate(seq)
                self.problem("corrupt", f"Messages event does not hold valid records: {e}", seq, offset=offset,
                             path=path)
                return
            if records.num_rows == 0:
                self.problem("messages", "Messages event without records", seq)
            if not records.schema.equals(self.header.schema, check_metadata=False):
                self.problem("messages", "records do not have the stream's schema", seq)
            if self.rules is not None:
                for e in self.rules.messages_problems(seq, ev.time):
                    self.problem("progress", e.reason, seq)
            return
        if self.rules is None:
            times = [t for t, _ in ev.updates]
            if times != sorted(set(times)) or any(d == 0 for _, d in ev.updates):
                self.problem("progress", "progress updates are not sorted by time, unique and non-zero", seq)
            return
        for e in self.rules.progress_problems(seq, ev.updates):
            self.problem("progress", e.reason, seq)


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
            try:
                later = [s for s in log.segments(stream, part) if s > pos]
            except Exception:  # noqa: BLE001 - the part folder cannot be listed: nothing more to read
                later = []
            if later:
                candidates.append(later[0])
    for c in candidates:
        if c not in tried:
            tried.add(c)
            return c
    return None


def _segment_of(log: Log, header: StreamHeader, part: int, seq: int) -> str | None:
    """File logs: the segment file that holds (or would hold) event ``seq`` of ``part``; None otherwise."""
    if not isinstance(log, FileLog):
        return None
    try:
        firsts = [s for s in log.segments(header.stream, part) if s <= seq]
    except Exception:  # noqa: BLE001 - only a hint for the report
        return None
    if not firsts:
        return None
    layout = layout_for(header.version)
    d = log.part_path(header.stream, part)
    sealed, unsealed = (os.path.join(d, n(firsts[-1], header.encoding)) for n in (layout.sealed_name, layout.open_name))
    return unsealed if not os.path.exists(sealed) and os.path.exists(unsealed) else sealed


def _event_place(log: Log, header: StreamHeader, part: int, seq: int) -> tuple[str | None, int | None]:
    """File logs: the segment holding event ``seq`` and the byte offset of its body (from the index, on the
    local disk); ``(None, None)`` when unknown."""
    path = _segment_of(log, header, part, seq)
    if path is None or isinstance(log, MemoryLog) or local_path(log.uri) is None:
        return path, None
    first = int(os.path.basename(path).split(".")[0])
    try:
        with open(os.path.splitext(path)[0] + ".index", "rb") as f:
            f.seek(ix.HEADER_SIZE + (seq - first) * ix.ENTRY_SIZE)
            raw = f.read(ix.ENTRY_SIZE)
        entry = ix.unpack_entry(raw, 0) if len(raw) == ix.ENTRY_SIZE else None
    except (OSError, ValueError):
        entry = None
    return path, (entry.offset if entry is not None and entry.seq == seq else None)


def _unexpected_error(log: Log, header: StreamHeader, part: int, seq: int, e: Exception) -> CorruptLogError:
    """An error that is no ``EventLogError`` (a reader bug, or damage a decoder did not type), as a
    ``CorruptLogError`` at the place reading stopped."""
    return CorruptLogError(f"cannot read the part here: {type(e).__name__}: {e}", stream=header.stream, part=part,
                           path=_segment_of(log, header, part, seq))


def _add(problems: list[Problem], p: Problem) -> None:
    """Append ``p`` unless the same problem is there (the same damage met again on another pass)."""
    if not any(q == p for q in problems):
        problems.append(p)


def verify_part(log: Log, header: StreamHeader, part: int, advance: Callable[[int], None]) -> PartReport:
    """Read one part entirely, decoding every event (every record batch is validated), checking checksums
    (the reader does), continuity, the progress rules and the Messages events; report a torn tail. Damage
    is reported and reading resumes after it; no error escapes (verify goes on to the next part)."""
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
    except Exception as e:  # noqa: BLE001 - reported; reading may still find the events
        report.problems.append(_from_error(_unexpected_error(log, header, part, 1, e), stream, part))
    first_seq = stats.first_seq if stats is not None else 1
    checker = _PartChecker(header, report, track_progress=first_seq == 1)
    if first_seq > 1:
        checker.problem("gap", f"events 1..{first_seq - 1} are not in the log (the part starts at seq "
                        f"{first_seq})", 1)
    start = expected = first_seq
    report.last_seq = start - 1
    tried: set[int] = set()
    locate = functools.partial(_event_place, log, header, part)
    while True:
        if len(report.problems) >= MAX_PROBLEMS_PER_PART:  # damage after damage: move on to the next part
            report.truncated = True
            break
        reader = None
        try:
            reader = log.reader(stream, part, start=start)
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
                    checker.check(entry, locate)
                    checker.follow_epochs(entry, reader.epoch)
                if not read:
                    break
            if reader.tail_problem:
                checker.problem("torn-tail", f"torn tail: {reader.tail_problem}", expected)
            break
        except Exception as e:  # noqa: BLE001 - every error is reported; verify goes on after it
            err = e if isinstance(e, EventLogError) else _unexpected_error(log, header, part, expected, e)
            _add(report.problems, _from_error(err, stream, part))
            checker.lose_track()
            resume = _resume_at(log, stream, part, err, tried)
            if resume is None:
                break
            start = expected = resume
        finally:
            if reader is not None:
                reader.close()
    if stats is not None and not report.problems and report.last_seq + 1 < stats.next_seq:
        checker.problem("gap", f"the log reports events up to seq {stats.next_seq - 1}, but reading stopped after "
                        f"seq {report.last_seq}", report.last_seq + 1)
    report.frontier = checker.rules.frontier if checker.rules is not None else None
    return report


def _file_kind(e: EventLogError) -> str:
    """The problem kind of an error ``FileLog.check_part`` found."""
    kind = getattr(e, "kind", None)
    if kind in KINDS:
        return kind
    reason = e.reason.lower()
    if "torn" in reason:
        return "torn-tail"
    if any(w in reason for w in ("orphan", "without its", "without an index", "no index", "missing")):
        return "layout"
    return "corrupt"


def _same_place(p: Problem, q: Problem) -> bool:
    """True when ``p`` and ``q`` report the same thing: one torn tail per part, or the same file and event."""
    if (p.stream, p.part) != (q.stream, q.part):
        return False
    if p.kind == q.kind == "torn-tail":
        return True
    return (p.path is not None and p.path == q.path and (p.seq is None or q.seq is None or p.seq == q.seq)
            and (p.offset is None or q.offset is None or p.offset == q.offset))


def file_problems(log: Log, header: StreamHeader, part: int, known: list[Problem]) -> list[Problem]:
    """File logs: what ``FileLog.check_part`` finds in the part's files (index and segment disagreeing,
    orphan index, torn tail, damaged prefix, …), leaving out what reading the part already reported."""
    check = getattr(log, "check_part", None)
    if check is None:
        return []
    try:
        found = list(check(header.stream, part))
    except Exception as e:  # noqa: BLE001 - reported, verify goes on
        err = e if isinstance(e, EventLogError) else _unexpected_error(log, header, part, 1, e)
        found = [err]
    out: list[Problem] = []
    for e in found:
        p = _from_error(e, header.stream, part)
        p.kind = _file_kind(e) if not isinstance(e, (SequenceError, ProgressError)) else p.kind
        if not any(_same_place(p, q) for q in known + out):
            out.append(p)
    return out


def _header_problem(log: Log, stream: str, e: Exception) -> Problem:
    """An unreadable or damaged stream header, as a "header" problem naming its file where known."""
    path = getattr(e, "path", None)
    if path is None and isinstance(log, FileLog) and not isinstance(log, MemoryLog):
        path = next((p for p in (os.path.join(log.root, stream, h) for h in HEADER_FILES) if os.path.exists(p)),
                    os.path.join(log.root, stream, HEADER_FILES[0]))
    reason = e.reason if isinstance(e, EventLogError) else f"{type(e).__name__}: {e}"
    return Problem("header", f"cannot read the stream header: {reason}", stream, path=path)




def layout_problems(log: FileLog, headers: dict[str, StreamHeader], whole_log: bool) -> list[Problem]:
    """File logs on the local disk: folders and files against FORMAT.md's layout — every segment has its
    index and every index its segment, part folders match the stream's peers and segments its encoding (else
    the header disagrees with the parts), no stray files; with ``whole_log``, folders that look like streams
    but have no header."""
    root = local_path(log.uri)
    if isinstance(log, MemoryLog) or root is None or not os.path.isdir(log.root):
        return []
    problems: list[Problem] = []
    if whole_log:
        for name in sorted(os.listdir(log.root)):
            d = os.path.join(log.root, name)
            if name not in headers and not any(os.path.exists(os.path.join(d, h)) for h in HEADER_FILES) and _has_parts(d):
                problems.append(Problem("layout", "stream folder without its header file", name, path=d))
    for stream, header in headers.items():
        sdir = os.path.join(log.root, stream)
        try:
            names = sorted(os.listdir(sdir))
        except OSError as e:
            problems.append(Problem("layout", f"cannot list the stream folder: {e.strerror or e}", stream, path=sdir))
            continue
        layout = layout_for(header.version)
        for name in names:
            number = layout.part_of(name)
            path = os.path.join(sdir, name)
            if number is not None and number >= header.peers:
                if _holds_segments(path):
                    problems.append(Problem("header", f"the header says peers {header.peers}, but part folder "
                                            f"{name} holds segments: the header disagrees with the parts", stream,
                                            number, path=path))
                else:
                    problems.append(Problem("layout", f"part folder beyond the stream's {header.peers} peers",
                                            stream, number, path=path))
            elif number is None and name != layout.header_file and not name.endswith(".tmp"):
                what = ("a part folder of another format version" if part_number(name) is not None
                        else "unexpected file")
                problems.append(Problem("layout", f"{what} in the stream folder", stream, path=path))
        for part in range(header.peers):
            problems += _part_layout(header, part, os.path.join(sdir, layout.part_dir(part)))
    return problems


def _has_parts(d: str) -> bool:
    try:
        return os.path.isdir(d) and any(part_number(x) is not None for x in os.listdir(d))
    except OSError:
        return False


def _holds_segments(d: str) -> bool:
    try:
        return any(lay.segment_first(x, enc) or lay.index_first(x) for x in os.listdir(d)
                   for lay in LAYOUTS.values() for enc in ("arrow", "avro"))
    except OSError:
        return False


def _part_layout(header: StreamHeader, part: int, pdir: str) -> list[Problem]:
    stream, layout = header.stream, layout_for(header.version)
    other = "avro" if header.encoding == "arrow" else "arrow"
    if not os.path.isdir(pdir):
        return []
    data, index, problems = {}, {}, []
    try:
        names = sorted(os.listdir(pdir))
    except OSError as e:
        return [Problem("layout", f"cannot list the part folder: {e.strerror or e}", stream, part, path=pdir)]
    for name in names:
        path = os.path.join(pdir, name)
        if (seg := layout.segment_first(name, header.encoding)) is not None:
            data[seg[0]] = path
        elif (first := layout.index_first(name)) is not None:
            index[first] = path
        elif (seg := layout.segment_first(name, other)) is not None:
            problems.append(Problem("header", f"segment in the {other} encoding, but the header says "
                                    f"{header.encoding}: the header disagrees with the parts", stream, part,
                                    seg[0], path=path))
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
        if first not in data and not any(p.seq == first and p.kind == "header" for p in problems):
            problems.append(Problem("layout", "index without its segment", stream, part, first, path=path))
    return problems


@click.command("verify", short_help="Check checksums, continuity, progress rules, torn tails.")
@click.argument("uri")
@click.argument("stream", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
def verify(uri: str, stream: str | None, as_json: bool) -> None:
    """Check every stream of the log at URI (or only STREAM): headers; every event's checksum and decoding
    (every record batch is validated); sequence ids without gaps; the progress rules (counts never
    negative, capabilities never added behind the part's frontier, no Messages behind the part's frontier,
    nothing after the part finished); torn tails; and, for file logs, the files of each part (index against
    segment) and the folder layout (every segment with its index, part folders and segments matching the
    header's peers and encoding).

    Every problem is reported with where it is (stream, part, seq, byte offset, file), and verify goes on:
    after damage it resumes reading behind it, an unreadable header is a problem of that stream only.
    Exit 0 when nothing is wrong, 1 when problems were found, 2 when URI is not a log (a stream's or a
    part's folder, a file, a folder without streams). A log being written may show a torn tail at the end
    of a part while an event is half written.

    \b
    Example:
      replay verify /tmp/cap
      replay verify /tmp/cap numbers --json | jq '.problems[]'
    """
    log = open_uri(uri)
    streams = log.streams()
    problems: list[Problem] = []
    if stream is not None:
        if stream not in streams:
            headless = _headless_stream(log, stream)
            if headless is None:
                stream_header(log, stream)  # a log error naming the streams there are
            else:
                problems.append(headless)
        streams = [stream] if not problems else []
    reports: list[PartReport] = []
    headers: dict[str, StreamHeader] = {}
    for s in streams:
        try:
            headers[s] = log.header(s)
        except Exception as e:  # noqa: BLE001 - a damaged header is a problem of its stream; verify goes on
            problems.append(_header_problem(log, s, e))
    total = 0
    for s, h in headers.items():
        try:
            total += sum(log.part_stats(s, p).events for p in range(h.peers))
        except Exception:  # noqa: BLE001 - only for the progress bar; verify_part reports it
            pass
    layout: list[Problem] = []
    if isinstance(log, FileLog):
        layout = layout_problems(log, headers, whole_log=stream is None)
    with progress("verifying", total) as advance:
        for h in headers.values():
            for p in range(h.peers):
                report = verify_part(log, h, p, advance)
                own_layout = [q for q in layout if (q.stream, q.part) == (h.stream, p)]
                report.problems += file_problems(log, h, p, report.problems + own_layout)
                reports.append(report)
                problems += report.problems
    problems += layout
    if as_json:
        print_json({
            "ok": not problems,
            "parts": [{"stream": r.stream, "part": r.part, "events": r.events, "last_seq": r.last_seq,
                       "frontier": frontier_json(r.frontier) if r.frontier is not None else None,
                       "problems": len(r.problems), "truncated": r.truncated, "void": r.void, "held": r.held}
                      for r in reports],
            "problems": [p.to_json() for p in problems],
        })
    else:
        _print_report(log, reports, problems, len(headers))
    if not streams and not problems:
        warn(f"no streams in log {log.uri}")
    if problems:
        raise click.exceptions.Exit(EXIT_DIFFERENT)


def _headless_stream(log: Log, stream: str) -> Problem | None:
    """A "layout" problem when ``stream``'s folder exists in a local file log but has no header.json."""
    if not isinstance(log, FileLog) or isinstance(log, MemoryLog) or local_path(log.uri) is None:
        return None
    d = os.path.join(log.root, stream)
    if os.path.basename(os.path.normpath(d)) != stream or not _has_parts(d):
        return None
    return Problem("layout", "stream folder without its header file", stream, path=d)


def _print_report(log: Log, reports: list[PartReport], problems: list[Problem], n_streams: int) -> None:
    out: list[Any] = []
    if reports:
        table = Table(title=f"log {log.uri}", title_justify="left")
        for c in ("stream", "part", "events", "last seq", "frontier", "status"):
            table.add_column(c, justify="right" if c in ("part", "events", "last seq") else "left")
        for r in reports:
            status = Text("ok", style="green") if not r.problems else Text(
                f"{len(r.problems)} problem(s)" + (" (stopped reading: more may follow)" if r.truncated else ""),
                style="red")
            notes = ([f"{r.void} void (a writer restarted mid-time)"] if r.void else []) + (
                [f"{r.held} held back (times not complete)"] if r.held else [])
            if notes:
                status.append(", " + ", ".join(notes), style="dim")
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
