"""Verify a log end to end, whatever its kind: headers, checksums, sequence continuity, the progress rules, torn
tails, and what the log's own check of its storage finds — for file logs on the local disk, on S3 or in memory
(segments, indexes, footers, the folder layout), for Kafka logs (every record of every partition).

::

    from replay.verify import verify
    report = verify(open_log("s3://bucket/cap"))          # or a file path, kafka://…, memory://…
    if not report.ok:
        for p in report.problems:
            print(p.kind, p.message, p.where())

Each problem names its class (``KINDS``) and where it is: stream, part, sequence id, offset, and the file or
object (``path``) or Kafka record (``record``, ``topic[partition]@offset``) it is in. Verify goes on after a
problem: an unreadable header is a problem of its stream only; after damage inside a part — whatever the reader
raised — reading resumes after the damaged event (or where the log says its next storage unit starts: a file
log's next segment) to find more, but the progress rules are no longer checked for that part (its frontier is
unknown from then on). Every Messages event is decoded and its record batch validated in full.

The library reads through the ``Log`` interface only, and asks the log for what only it knows: ``check_part``
(its storage's own checks of a part, every problem where reading stops at the first), ``check_layout`` (where it
keeps its streams), ``locate`` (which file, object or record holds an event) and ``resume_after`` (where reading
may go on after damage). The rules of reading a part are ``eventlog.parts``' (``PartProgress``,
``CommittedPart``), used in their forms that list every broken rule instead of raising the first.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager

from eventlog.antichain import Antichain
from eventlog.errors import CorruptLogError, EventLogError, ProgressError, SequenceError, StreamNotFoundError
from eventlog.events import Entry, Messages
from eventlog.header import StreamHeader
from eventlog.log import PROBLEM_KINDS, Log, PartStats
from eventlog.parts import CheckedPart

KINDS = PROBLEM_KINDS
"""Classes of problems (``eventlog.log.PROBLEM_KINDS``): ``header`` an unreadable or disagreeing stream header;
``corrupt`` bytes or a record that fail a checksum, do not decode or say another thing than they hold; ``gap``
missing sequence ids; ``progress`` a broken progress rule; ``messages`` a malformed Messages event; ``torn-tail``
what a crashed writer leaves (the next writer of the part cuts it); ``layout`` a storage layout problem (missing
index, stray part folder, …); ``duplicate`` a Kafka record repeating sequence ids with other content. One kind is
no problem: ``leftover``, files an interrupted compaction left that readers pass over — verify lists them as notes
(``PartReport.notes``, ``VerifyReport.notes``), and they do not make a log fail."""

_LEFTOVER = "leftover"

MAX_PROBLEMS_PER_PART = 20
"""After this many problems in one part, verify moves on to the next part."""

_PASSES = 3
"""Passes over a part until one reads nothing (a log being written may grow meanwhile)."""

Advance = Callable[[int], None]
"""``advance(n)``: ``n`` more events were read (for a progress bar)."""


@dataclass
class Problem:
    """One thing wrong with the log, and where (the fields known)."""

    kind: str
    """Its class, one of ``KINDS``."""
    message: str
    stream: str | None = None
    part: int | None = None
    seq: int | None = None
    """The sequence id of the event it is in (or at)."""
    offset: int | None = None
    """The byte offset in ``path`` (file logs), or the Kafka offset of ``record``."""
    path: str | None = None
    """The file (local disk) or object (S3: ``bucket/key``) it is in."""
    record: str | None = None
    """The Kafka record it is in: ``topic[partition]@offset``."""

    def where(self) -> str:
        """``stream 's' part 0 seq 7 offset 120 file /x`` (the parts known)."""
        out = []
        for label, value in (("stream", self.stream), ("part", self.part), ("seq", self.seq),
                             ("offset", self.offset), ("file", self.path), ("record", self.record)):
            if value is not None:
                out.append(f"{label} {value!r}" if label == "stream" else f"{label} {value}")
        return " ".join(out)

    def to_json(self) -> dict[str, Any]:
        """The problem as a JSON object (location fields only when known)."""
        return {k: v for k, v in self.__dict__.items() if v is not None}

    @property
    def located(self) -> bool:
        """Whether the file, object or record it is in is known."""
        return self.path is not None or self.record is not None


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
    duplicates: int = 0
    """Events read again and dropped by sequence id (what a retried Kafka write leaves, FORMAT.md §1).
    Information, not a problem (a repeat with other content is a ``duplicate`` problem)."""
    dropped: list[Problem] = field(default_factory=list)
    """Where the first dropped duplicates were (kind ``duplicate``; information, not problems)."""
    notes: list[Problem] = field(default_factory=list)
    """Harmless leftovers of an interrupted compaction in the part's files (kind ``leftover``; not problems)."""

    def to_json(self) -> dict[str, Any]:
        """The part as a JSON object (``replay verify --json``'s ``parts``)."""
        doc = {"stream": self.stream, "part": self.part, "events": self.events, "last_seq": self.last_seq,
               "frontier": _frontier_json(self.frontier) if self.frontier is not None else None,
               "problems": len(self.problems), "truncated": self.truncated, "void": self.void, "held": self.held,
               "duplicates": self.duplicates}
        if self.dropped:
            doc["dropped"] = [p.to_json() for p in self.dropped]
        if self.notes:
            doc["notes"] = [p.to_json() for p in self.notes]
        return doc


@dataclass
class VerifyReport:
    """What ``verify`` found in a log."""

    uri: str
    streams: list[str] = field(default_factory=list)
    """The streams verify looked at."""
    headers: dict[str, StreamHeader] = field(default_factory=dict)
    """Those whose header could be read (their parts were verified)."""
    parts: list[PartReport] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    """Every problem: those of headers, then each part's, then those of the storage layout."""
    notes: list[Problem] = field(default_factory=list)
    """Every harmless leftover of an interrupted compaction (kind ``leftover``): not problems."""

    @property
    def ok(self) -> bool:
        """True when no problem was found."""
        return not self.problems

    @property
    def events(self) -> int:
        """Events read in every part."""
        return sum(r.events for r in self.parts)

    def to_json(self) -> dict[str, Any]:
        """The report as ``replay verify --json`` prints it."""
        return {"ok": self.ok, "parts": [r.to_json() for r in self.parts],
                "problems": [p.to_json() for p in self.problems], "notes": [p.to_json() for p in self.notes]}


def _frontier_json(f: Antichain) -> list:
    return [list(t) if isinstance(t, tuple) else t for t in f]


# -- errors as problems -------------------------------------------------------------------------------------------


def _kind(e: EventLogError) -> str:
    """The class of a problem an error reports: the kind a log marked it with, else its type's."""
    kind = getattr(e, "kind", None)
    if kind in KINDS:
        return kind
    return "gap" if isinstance(e, SequenceError) else "progress" if isinstance(e, ProgressError) else "corrupt"


def _storage_kind(e: EventLogError) -> str:
    """The class of a problem a log's ``check_part`` found. An error the log did not mark is classed by its type,
    else by its wording (file logs' own checks: torn tails, missing files)."""
    if getattr(e, "kind", None) in KINDS or isinstance(e, (SequenceError, ProgressError)):
        return _kind(e)
    reason = e.reason.lower()
    if "torn" in reason:
        return "torn-tail"
    if any(w in reason for w in ("orphan", "without its", "without an index", "no index", "missing")):
        return "layout"
    return "corrupt"


def problem_of(e: EventLogError, stream: str | None, part: int | None = None, kind: str | None = None) -> Problem:
    """The problem an error reports, at the location it names (``stream``/``part`` where it names none)."""
    return Problem(kind or _kind(e), e.reason, e.stream or stream, e.part if e.part is not None else part, e.seq,
                   e.offset, e.path)


def _place(log: Log, stream: str, part: int | None = None, seq: int | None = None,
           offset: int | None = None) -> dict[str, Any]:
    """``log.locate``, never raising (only a hint for a report)."""
    try:
        return dict(log.locate(stream, part, seq, offset))
    except Exception:  # noqa: BLE001 - a damaged log may fail anywhere; the report goes on without the place
        return {}


def _locate(log: Log, p: Problem) -> None:
    """Fill in the file, object or Kafka record a problem is in, where the log can tell."""
    if p.located or p.stream is None or (p.part is None and p.kind != "header"):
        return
    if p.part is not None and p.seq is None and p.offset is None:
        return
    place = _place(log, p.stream, p.part, p.seq, p.offset)
    p.path, p.record = place.get("path"), place.get("record")
    if p.offset is None:
        p.offset = place.get("offset")


def _unexpected_error(log: Log, header: StreamHeader, part: int, seq: int, e: Exception) -> CorruptLogError:
    """An error that is no ``EventLogError`` (a reader bug, or damage a decoder did not type), as a
    ``CorruptLogError`` at the place reading stopped."""
    return CorruptLogError(f"cannot read the part here: {type(e).__name__}: {e}", stream=header.stream, part=part,
                           path=_place(log, header.stream, part, seq).get("path"))


def _add(problems: list[Problem], p: Problem) -> None:
    """Append ``p`` unless the same problem is there (the same damage met again on another pass)."""
    if not any(q == p for q in problems):
        problems.append(p)


def _same_place(p: Problem, q: Problem) -> bool:
    """True when ``p`` and ``q`` report the same thing: one torn tail per part, the same file and event, or the
    same class of problem at the same Kafka record."""
    if (p.stream, p.part) != (q.stream, q.part):
        return False
    if p.kind == q.kind == "torn-tail":
        return True
    same_seq = p.seq is None or q.seq is None or p.seq == q.seq
    if p.path is None and q.path is None:  # a record (Kafka): named by its offset
        return p.kind == q.kind and p.offset is not None and p.offset == q.offset and same_seq
    return (p.path is not None and p.path == q.path and same_seq
            and (p.offset is None or q.offset is None or p.offset == q.offset))


# -- one part ----------------------------------------------------------------------------------------------------


class _PartChecker:
    """Checks one part's events, read through ``CheckedPart`` in its reporting form (sequence ids, timely's
    rules, committed reads: every broken rule reported, reading goes on), and what only a full check looks at:
    every record batch valid and of the stream's schema."""

    def __init__(self, log: Log, header: StreamHeader, report: PartReport) -> None:
        self.log = log
        self.header = header
        self.report = report

    def problem(self, kind: str, message: str, seq: int, **where: Any) -> None:
        self.report.problems.append(Problem(kind, message, self.header.stream, self.report.part, seq, **where))

    def broken(self, error: EventLogError) -> None:
        """A rule the part's reader found broken."""
        kind = "gap" if isinstance(error, SequenceError) else "progress"
        self.problem(kind, error.reason, error.seq if error.seq is not None else self.report.last_seq + 1)

    def open(self, start: int, *, track_progress: bool) -> CheckedPart:
        return CheckedPart(self.log, self.header, self.report.part, start=start, track_progress=track_progress,
                           report=self.broken)

    def check(self, entry: Entry, part: CheckedPart) -> None:
        """Check one event's records, and note what a committed reader would void or hold back."""
        if part.committed is not None:
            self.report.void, self.report.held = part.voided, part.held
        ev, seq = entry.event, entry.seq
        if not isinstance(ev, Messages):
            return
        records = ev.records
        try:  # every batch handed out must be safe to read: buffers as long as the row count says
            records.validate(full=True)
        except (ValueError, TypeError, OSError) as e:  # pyarrow.ArrowInvalid is a ValueError
            place = _place(self.log, self.header.stream, self.report.part, seq)
            self.problem("corrupt", f"Messages event does not hold valid records: {e}", seq,
                         offset=place.get("offset"), path=place.get("path"), record=place.get("record"))
            return
        if records.num_rows == 0:
            self.problem("messages", "Messages event without records", seq)
        if not records.schema.equals(self.header.schema, check_metadata=False):
            self.problem("messages", "records do not have the stream's schema", seq)


def resume_at(log: Log, stream: str, part: int, e: EventLogError, expected: int, tried: set[int]) -> int | None:
    """Where to continue reading a part after error ``e`` (met while expecting seq ``expected``): after the damaged
    event, at the events after a gap, else where the log says its next storage unit starts; None to give up on
    the part. ``tried`` (updated) holds the places already resumed at, so no place is tried twice."""
    candidates = []
    if isinstance(e, CorruptLogError) and e.seq is not None:
        candidates.append(e.seq + 1)
    if isinstance(e, SequenceError) and e.seq is not None and e.seq > expected:
        candidates.append(e.seq)
    try:
        after = log.resume_after(stream, part, e)
    except Exception:  # noqa: BLE001 - the storage cannot be listed: nothing more to read
        after = None
    if after is not None:
        candidates.append(after)
    for c in candidates:
        if c not in tried:
            tried.add(c)
            return c
    return None


def verify_part(log: Log, header: StreamHeader, part: int, advance: Advance | None = None, *,
                max_problems: int = MAX_PROBLEMS_PER_PART) -> PartReport:
    """Read one part entirely, decoding every event (every record batch is validated), checking checksums (the
    reader does), continuity, the progress rules and the Messages events; report a torn tail and the events
    dropped as duplicates. Damage is reported and reading resumes after it; no error escapes. (``verify`` adds what
    the log's ``check_part`` finds, and the places of the problems.)"""
    advance = advance or (lambda n: None)
    stream = header.stream
    report = PartReport(stream, part)
    stats: PartStats | None = None
    try:
        stats = log.part_stats(stream, part)
    except EventLogError as e:
        report.problems.append(problem_of(e, stream, part))
    except OSError as e:  # a file the log expected is missing; reading may still find the events
        report.problems.append(Problem("layout", f"cannot size the part: {e.strerror or e}", stream, part,
                                       path=e.filename))
    except Exception as e:  # noqa: BLE001 - reported; reading may still find the events
        report.problems.append(problem_of(_unexpected_error(log, header, part, 1, e), stream, part))
    retained = 1  # where the part starts: 1, or its cut once a trim dropped old times (FORMAT.md §10)
    try:
        mark = log.retention(stream)
        retained = mark.cut(part).start if mark is not None else 1
    except EventLogError as e:
        report.problems.append(problem_of(e, stream, part))
    first_seq = stats.first_seq if stats is not None else retained
    checker = _PartChecker(log, header, report)
    if first_seq > retained:
        checker.problem("gap", f"events {retained}..{first_seq - 1} are not in the log (the part starts at seq "
                        f"{first_seq})", retained)
    start = expected = first_seq
    report.last_seq = start - 1
    track = first_seq == retained  # progress rules from the part's first event only (before it, it is unknown)
    tried: set[int] = set()
    frontier = None
    while True:
        if len(report.problems) >= max_problems:  # damage after damage: move on to the next part
            report.truncated = True
            break
        part_reader: CheckedPart | None = None
        try:
            part_reader = checker.open(start, track_progress=track)
            for _ in range(_PASSES):  # a pass that read events may not report a torn tail behind them
                read = 0
                for entry in part_reader.read():
                    advance(1)
                    read += 1
                    report.events += 1
                    report.last_seq = entry.seq
                    expected = entry.seq + 1
                    checker.check(entry, part_reader)
                if not read:
                    break
            if part_reader.tail_problem:
                checker.problem("torn-tail", f"torn tail: {part_reader.tail_problem}", expected)
            frontier = part_reader.frontier if part_reader.tracks_progress else None
            break
        except Exception as e:  # noqa: BLE001 - every error of the storage is reported; verify goes on after it
            err = e if isinstance(e, EventLogError) else _unexpected_error(log, header, part, expected, e)
            _add(report.problems, problem_of(err, stream, part))
            track = False  # events were skipped: the frontier is unknown from here
            resume = resume_at(log, stream, part, err, expected, tried)
            if resume is None:
                break
            start = expected = resume
        finally:
            if part_reader is not None:
                _count_duplicates(report, part_reader)
                part_reader.close()
    if stats is not None and not report.problems and report.last_seq + 1 < stats.next_seq:
        checker.problem("gap", f"the log reports events up to seq {stats.next_seq - 1}, but reading stopped after "
                        f"seq {report.last_seq}", report.last_seq + 1)
    report.frontier = frontier
    return report


def _count_duplicates(report: PartReport, part: CheckedPart) -> None:
    """Take what a part's reader (and the log's reader beneath it) dropped as duplicates into the report."""
    beneath = part.opened_reader
    report.duplicates += part.duplicates + getattr(beneath, "duplicates", 0)
    for seq, offset in getattr(beneath, "duplicate_records", ()):
        report.dropped.append(Problem("duplicate", f"seq {seq} read again and dropped (a retried write)",
                                      report.stream, report.part, seq, offset))


def storage_problems(log: Log, header: StreamHeader, part: int, known: list[Problem]) -> list[Problem]:
    """What the log's own check of the part's storage finds (``Log.check_part``: a file log's index and segments
    disagreeing, an orphan index, a torn tail, a damaged prefix; a Kafka record that does not decode, …), leaving
    out what ``known`` (reading the part, the layout) already reported."""
    try:
        found: list[EventLogError] = list(log.check_part(header.stream, part))
    except Exception as e:  # noqa: BLE001 - reported, verify goes on
        err = e if isinstance(e, EventLogError) else _unexpected_error(log, header, part, 1, e)
        found = [err]
    out: list[Problem] = []
    for error in found:
        p = problem_of(error, header.stream, part, _storage_kind(error))
        if not any(_same_place(p, q) for q in known + out):
            out.append(p)
    return out


# -- a log ----------------------------------------------------------------------------------------------------


def _layout_problems(log: Log, headers: dict[str, StreamHeader], stream: str | None) -> list[Problem]:
    try:
        found = log.check_layout(headers, stream=stream)
    except ValueError:  # an invalid stream name: the caller's mistake
        raise
    except EventLogError as e:
        found = [e]
    except OSError as e:
        return [Problem("layout", f"cannot check the log's layout: {e.strerror or e}", stream, path=e.filename)]
    return [problem_of(e, stream, kind=_kind(e) if getattr(e, "kind", None) else "layout") for e in found]


def _header_problem(log: Log, stream: str, e: Exception) -> Problem:
    """An unreadable or damaged stream header, as a "header" problem naming its file (or record) where known."""
    reason = e.reason if isinstance(e, EventLogError) else f"{type(e).__name__}: {e}"
    p = Problem("header", f"cannot read the stream header: {reason}", stream, path=getattr(e, "path", None))
    if p.path is None:
        place = _place(log, stream)
        p.path, p.record = place.get("path"), place.get("record")
    return p


def verify(log: Log, stream: str | None = None, *,
           progress: "Callable[[int | None], ContextManager[Advance]] | None" = None,
           max_problems_per_part: int = MAX_PROBLEMS_PER_PART) -> VerifyReport:
    """Check every stream of ``log`` (or only ``stream``): its header; every event's checksum and decoding (every
    record batch is validated); sequence ids without gaps; the progress rules (counts never negative, capabilities
    never added behind the part's frontier, no Messages behind the part's frontier, nothing after the part
    finished); torn tails; what the log's own check of each part's storage finds (``Log.check_part``) and of where
    it keeps its streams (``Log.check_layout``). Nothing raises for a damaged log: every problem is in the report,
    with where it is (``Log.locate`` fills in the file, object or Kafka record where reading did not say).

    ``stream`` that is not in the log raises ``StreamNotFoundError`` (ValueError for an invalid name) unless the
    log reports a layout problem for it (a stream folder that lost its header). ``progress(total)``: a context
    manager yielding ``advance(n)``, called as events are read (``total``: the events the parts hold, None when
    unknown), e.g. the CLI's progress bar."""
    report = VerifyReport(log.uri)
    streams = log.streams()
    if stream is not None:
        if stream not in streams:
            report.problems += _layout_problems(log, {}, stream)
            if not report.problems:
                raise StreamNotFoundError(f"no stream {stream!r} in log {log.uri}", stream=stream)
            streams = []
        else:
            streams = [stream]
    report.streams = list(streams)
    for s in streams:
        try:
            report.headers[s] = log.header(s)
        except Exception as e:  # noqa: BLE001 - a damaged header is a problem of its stream; verify goes on
            report.problems.append(_header_problem(log, s, e))
    layout = _layout_problems(log, report.headers, stream) if streams or stream is None else []
    total: int | None = None
    if progress is not None:
        total = 0
        for s, h in report.headers.items():
            try:
                total += sum(log.part_stats(s, p).events for p in range(h.peers))
            except Exception:  # noqa: BLE001 - only for the progress bar; verify_part reports it
                pass
    with (progress(total) if progress is not None else contextlib.nullcontext(None)) as advance:
        for h in report.headers.values():
            for p in range(h.peers):
                part = verify_part(log, h, p, advance, max_problems=max_problems_per_part)
                own_layout = [q for q in layout if (q.stream, q.part) == (h.stream, p)]
                part.problems += storage_problems(log, h, p, part.problems + own_layout)
                part.notes = [q for q in part.problems if q.kind == _LEFTOVER]
                part.problems = [q for q in part.problems if q.kind != _LEFTOVER]
                report.parts.append(part)
                report.problems += part.problems
                report.notes += part.notes
    report.notes += [q for q in layout if q.kind == _LEFTOVER and not any(_same_place(q, n) for n in report.notes)]
    report.problems += [q for q in layout if q.kind != _LEFTOVER]
    for problem in report.problems + report.notes + [d for r in report.parts for d in r.dropped]:
        _locate(log, problem)
    return report


__all__ = ["KINDS", "MAX_PROBLEMS_PER_PART", "PartReport", "Problem", "VerifyReport", "problem_of", "storage_problems",
           "verify", "verify_part"]
