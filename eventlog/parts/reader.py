"""``CheckedPart``: the one reader of a part that applies every rule of reading it (FORMAT.md §1).

Every consumer of a log — ``Replayer``, ``replay.dataset`` and ``replay sql``, the CLI's commands, both Spark
sources and a reopening ``Capture`` — reads parts through this class, so a rule is written here once:

* **sequence ids**: a part's events carry 1, 2, 3, …; a duplicate (an id already read, as a retried Kafka write
  leaves) is dropped and counted, a gap raises ``SequenceError`` naming the stream, part and id;
* **timely's progress rules** (``rules.PartProgress``): every event is checked as it is read, a broken rule
  raises ``ProgressError`` at the event that broke it;
* **writer epochs and committed reads** (``committed.CommittedPart``, FORMAT.md §1.1): with
  ``isolation="committed"`` (the default) a Messages event is released once a later Progress event of its
  part passes its time, and void when a newer writer incarnation writes first;
* **resuming**: a read that starts past the part's first event first rebuilds the part's frontier from the
  Progress events before it (read without decoding Messages);
* **bounds**: an exclusive ``end`` sequence id, and wall-clock bounds on when events were written
  (``since_ts``/``until_ts``, milliseconds since the epoch).

The format's own limits, checksums, footers and indexes are checked by the log's ``PartReader`` beneath (each
backend knows its storage); this class holds the rules that are the same for every backend.

Events pass two stages. ``fill`` reads raw events, checks them and queues what the committed view releases;
``take`` hands the next queued event to the consumer and applies it to ``frontier`` (the part's frontier as
the consumer has seen it). A consumer that merges parts peeks at each part's next event and takes the one
whose turn it is; one that reads a part alone iterates ``read()``.
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Callable, Iterator

import pyarrow as pa

from ..antichain import Antichain
from ..errors import EventLogError, SchemaMismatchError, SequenceError
from ..events import Entry, Messages
from ..header import StreamHeader
from ..retention import TrimmedError
from ..schema_history import conform
from ..time import Time
from .committed import CommittedPart, check_isolation
from .rules import PartProgress

if TYPE_CHECKING:
    from ..log import Log, PartReader


class CheckedPart:
    """One part of ``header``'s stream read from sequence id ``start`` (default 1: the part's first event) by
    every rule of the format (module doc).

    ``progress_only`` skips Messages events without decoding them (sequence ids then have gaps, which are not
    errors, and nothing is held back). ``track_progress=False`` is for a range read whose planner has already
    checked the part's progress (a Spark task): sequence ids are still checked, progress is not, and the
    frontier is not restored. ``end`` (exclusive) stops the part there; ``until_ts`` stops it before its first
    event written after that instant (the part as it was then); ``since_ts`` starts it at the first event
    written at or after that instant (Kafka logs seek by record timestamp, other logs while restoring the
    frontier), its frontier restored from every event before.

    ``report`` (a function taking an ``EventLogError``) is for a checker (``replay.verify``): every broken rule
    is reported instead of raised and reading goes on; past a gap the frontier is unknown and progress rules are
    no longer checked. Errors of the storage beneath (a checksum, a torn event) still raise."""

    def __init__(
        self,
        log: "Log",
        header: StreamHeader,
        part: int,
        *,
        start: int = 1,
        end: int | None = None,
        isolation: str = "committed",
        progress_only: bool = False,
        track_progress: bool = True,
        since_ts: int | None = None,
        until_ts: int | None = None,
        report: "Callable[[EventLogError], None] | None" = None,
    ) -> None:
        self.log, self.header, self.part, self.stream = log, header, part, header.stream
        self._report = report
        self.end = end
        self.until_ts = until_ts
        self.progress_only = progress_only
        self.retention = log.retention(self.stream)
        """The stream's retention mark (None: nothing was dropped): reading starts at the part's cut, whose
        capability counts the frontier starts from, and Messages events of dropped times are skipped."""
        cut = self.retention.cut(part) if self.retention is not None else None
        first = cut.start if cut is not None else 1
        if start < first:
            if start != 1:  # a held position inside what a trim dropped: never a silent skip (Kafka's out-of-range)
                raise TrimmedError(f"sequence id {start} was dropped by a trim of the stream (at "
                                   f"{self.retention.trimmed}); the earliest event still there is {first}",  # type: ignore[union-attr]
                                   earliest=first, stream=self.stream, part=part, seq=start)
            start = first  # "from the beginning": the earliest retained event
        initial = cut.counts if cut is not None else None
        minimum = header.time_type.minimum
        self.rules: PartProgress | None = (PartProgress(minimum, stream=self.stream, part=part, initial=initial)
                                           if track_progress and report is None else None)
        """The part's progress as taken by the consumer (None without ``track_progress``, or when reporting:
        then the rules are applied to the raw events alone)."""
        committed = check_isolation(isolation) == "committed" and not progress_only and track_progress
        self.committed: CommittedPart | None = (CommittedPart(minimum, stream=self.stream, part=part, initial=initial)
                                                if committed else None)
        """The committed-read filter (None when reading uncommitted, progress only or untracked; when reporting,
        it only counts what a committed reader would void or hold back)."""
        self._raw = (PartProgress(minimum, stream=self.stream, part=part, initial=initial)
                     if track_progress and (self.committed is None or report is not None) else None)
        """The rules applied to raw events where the committed view does not apply them."""
        self._first = first
        self._schema = header.schema
        self.start = start
        scan_ts = since_ts
        seek = getattr(log, "seq_for_timestamp", None)
        if since_ts is not None and callable(seek):
            self.start = max(self.start, seek(self.stream, part, since_ts))
            scan_ts = None
        if track_progress and (self.start > self._first or scan_ts is not None):
            self._restore(scan_ts)
        self._reader: "PartReader | None" = None  # opened on first use (a writer that only restores needs none)
        self.raw_last = self.start - 1
        """The sequence id of the last raw event read (before any: one before where the reader starts)."""
        self.last_seq = self.raw_last
        """The sequence id of the last event taken (one before where reading starts, before the first)."""
        self.duplicates = 0
        """Events dropped because their sequence id was already read."""
        self.trimmed = 0
        """Messages events skipped because a trim dropped their time (FORMAT.md §10)."""
        self.raw_read = 0
        """Raw events read (duplicates included)."""
        self._queue: collections.deque[Entry] = collections.deque()
        self._it: Iterator[Entry] | None = None
        self._stashed: Entry | None = None  # read from the log at or past ``end``: the first raw event after it
        self._error: Exception | None = None  # what the log's reader raised after the events queued before it

    def _restore(self, scan_ts: int | None) -> None:
        """Rebuild the frontier from the Progress events before ``start`` (or, with ``scan_ts``, before the
        first event written at or after it, where reading then starts)."""
        last = self._first - 1
        with self.log.reader(self.stream, self.part, start=self._first, progress_only=True) as r:
            for entry in r:
                if entry.seq >= self.start and (scan_ts is None or entry.ts is None or entry.ts >= scan_ts):
                    break
                if entry.seq <= last:
                    continue
                updates = entry.event.updates  # type: ignore[union-attr]
                if self.rules is not None:
                    self.rules.progress(entry.seq, updates)
                if self.committed is not None:
                    self.committed.restore(updates, entry.seq)
                if self._raw is not None:
                    self._raw.progress(entry.seq, updates)
                last = entry.seq
        if scan_ts is not None:
            self.start = max(self.start, last + 1)

    @property
    def reader(self) -> "PartReader":
        """The log's reader of the part, from ``start`` (opened on first use)."""
        if self._reader is None:
            self._reader = self.log.reader(self.stream, self.part, start=self.start, progress_only=self.progress_only)
            if self.raw_last == self.start - 1:  # nothing read yet: the log may start the part later (trimmed)
                self.raw_last = self.last_seq = self._reader.next_seq - 1
        return self._reader

    @property
    def opened_reader(self) -> "PartReader | None":
        """The log's reader of the part if it was opened (``reader`` opens it), else None."""
        return self._reader

    # -- state ---------------------------------------------------------------------------------------------

    def _progress(self) -> PartProgress:
        rules = self.rules or self._raw
        if rules is None:
            raise ValueError("a part read without track_progress (or past a gap it reported) has no frontier")
        return rules

    @property
    def tracks_progress(self) -> bool:
        """True while the part's frontier is known (not without ``track_progress``, nor past a reported gap)."""
        return self.rules is not None or self._raw is not None

    @property
    def frontier(self) -> Antichain:
        """The part's frontier after the events taken so far (empty: the part finished)."""
        return self._progress().frontier

    def counts(self) -> tuple[tuple[Time, int], ...]:
        """The capability counts of the part after the events taken so far, by time."""
        return self._progress().counts()

    @property
    def finished(self) -> bool:
        """True once the part's frontier is empty: it writes nothing more."""
        return self.frontier.is_empty()

    @property
    def next_seq(self) -> int:
        """The sequence id after the last raw event read (``progress_only`` readers count skipped Messages
        events), at most ``end``."""
        n = max(self.reader.next_seq, self.raw_last + 1)
        return min(n, self.end) if self.end is not None else n

    @property
    def at_end(self) -> bool:
        """True when ``end`` is set and reached."""
        if self.end is None:
            return False
        return self.raw_last + 1 >= self.end or (self._stashed is not None and self._stashed.seq >= self.end)

    @property
    def position(self) -> int:
        """Where a later reader continues so that it sees every event this one has not handed out: the first
        queued event, the first held back (reading committed), or after the last raw event."""
        candidates = [self.raw_last + 1]
        if self._queue:
            candidates.append(self._queue[0].seq)
        if self.committed is not None and self.committed.first_held is not None:
            candidates.append(self.committed.first_held)  # a Progress event released ahead of it may come first
        return min(candidates)

    @property
    def voided(self) -> int:
        """Messages events dropped as void (reading committed)."""
        return self.committed.voided if self.committed is not None else 0

    @property
    def held(self) -> int:
        """Events held back by the committed view (uncommitted messages and what waits behind them)."""
        return self.committed.held if self.committed is not None else 0

    @property
    def epoch(self) -> int:
        """The writer epoch of the last raw event read."""
        return self.reader.epoch

    @property
    def tail_problem(self) -> str | None:
        """The reader's torn-tail report of its last pass (None: it stopped at the clean end)."""
        return self.reader.tail_problem

    def check_tail(self) -> str | None:
        """Poll the reader once more and return its torn-tail report (a pass that read whole events does not
        report a partial index entry after them, a pass that starts there does). Call when done reading."""
        for _ in self.reader:
            break
        return self.reader.tail_problem

    # -- reading -------------------------------------------------------------------------------------------

    def fill(self, limit: int | None = None) -> int:
        """Read raw events until ``limit`` events are queued (None: every event there now, up to ``end``) or
        the part has nothing more now; returns the raw events read. Each raw event is checked (sequence id,
        progress rules) and passed through the committed view."""
        if self._error is not None:  # met after events that were handed out first
            error, self._error = self._error, None
            raise error
        got = 0
        while limit is None or len(self._queue) < limit:
            if self.at_end:
                break
            if self._stashed is not None:
                entry, self._stashed = self._stashed, None
            else:
                if self._it is None:
                    self._it = iter(self.reader)
                try:
                    entry = next(self._it)
                except StopIteration:
                    self._it = None  # the next fill polls the part again
                    break
                except Exception as e:
                    told = self._trimmed_under(e)
                    if not self._queue:
                        if told is e:
                            raise
                        raise told from e
                    self._error = told  # the events before it go out first; the next fill raises it
                    self._it = None
                    break
            if self._admit(entry):
                break  # not counted: it lies past ``end``
            got += 1
            self.raw_read += 1
        return got

    def _trimmed_under(self, error: Exception) -> Exception:
        """``error`` of the log's reader, or ``TrimmedError`` when a trim dropped the events this reader was about
        to read (a reader that lags behind a trim meets storage that is gone: it is told where the part starts
        now, never skipped on silently)."""
        if isinstance(error, TrimmedError):
            return error
        try:
            mark = self.log.retention(self.stream)
        except Exception:  # noqa: BLE001 - the original error is the one to report
            return error
        if mark is None or mark.cut(self.part).start <= self.raw_last + 1:
            return error
        earliest = mark.cut(self.part).start
        return TrimmedError(f"sequence id {self.raw_last + 1} was dropped by a trim of the stream while this reader "
                            f"read it (at {mark.trimmed}); the earliest event still there is {earliest}",
                            earliest=earliest, stream=self.stream, part=self.part, seq=self.raw_last + 1)

    def _admit(self, entry: Entry) -> bool:
        """Check one raw event and queue what it releases; True when the part ends before it."""
        if self.until_ts is not None and entry.ts is not None and entry.ts > self.until_ts:
            self.end = entry.seq if self.end is None else min(self.end, entry.seq)  # the part ends here
        if self.end is not None and entry.seq >= self.end:
            self._stashed = entry  # kept for a later fill with ``end`` moved on (a planner's next bound)
            return True
        if entry.seq <= self.raw_last:
            self.duplicates += 1
            return False
        if entry.seq != self.raw_last + 1 and not self.progress_only:
            self._broken(SequenceError(f"gap in sequence ids: expected {self.raw_last + 1}, got {entry.seq}",
                                       stream=self.stream, part=self.part, seq=entry.seq))
            self.rules = self._raw = self.committed = None  # reporting: the frontier is unknown past a gap
        self.raw_last = entry.seq
        if self.retention is not None and isinstance(entry.event, Messages) \
                and self.retention.drops(entry.event.time):
            self.trimmed += 1  # a time the trim dropped, sent before the part finished an earlier one
            return False
        if isinstance(entry.event, Messages) and entry.event.records.schema is not self._schema \
                and not entry.event.records.schema.equals(self._schema):
            entry = self._conformed(entry)
        if self._report is not None:
            self._check_reporting(entry)
            self._queue.append(entry)
            return False
        if self.committed is not None:
            self._queue.extend(self.committed.push(entry, self.reader.epoch))  # checks the rules on every raw event
            return False
        if self._raw is not None:
            ev = entry.event
            if isinstance(ev, Messages):
                self._raw.messages(entry.seq, ev.time)
            else:
                self._raw.progress(entry.seq, ev.updates)
        self._queue.append(entry)
        return False

    def _conformed(self, entry: Entry) -> Entry:
        """``entry``'s records as records of the schema this reader hands out (the stream's current one, or the
        one ``header`` names): written with an earlier schema of the stream (FORMAT.md §12), converted."""
        ev = entry.event
        assert isinstance(ev, Messages)
        try:
            records = conform(ev.records, self._schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            raise SchemaMismatchError(
                f"event {entry.seq} was written with a schema this reader cannot convert to its own ({e}); the "
                "stream's schema changed since the reader opened it: open it again", stream=self.stream,
                part=self.part, seq=entry.seq) from None
        return Entry(entry.seq, Messages(ev.time, records), entry.ts)

    def _broken(self, error: EventLogError) -> None:
        """A rule is broken: raise ``error``, or, reporting, report it and go on."""
        if self._report is None:
            raise error
        self._report(error)

    def _check_reporting(self, entry: Entry) -> None:
        """Reporting: every rule the raw event breaks is reported (the updates of a Progress event are applied
        unless a count would become negative); the committed view only counts what it would void or hold."""
        ev = entry.event
        if self._raw is not None:
            if isinstance(ev, Messages):
                broken = self._raw.messages_problems(entry.seq, ev.time)
            else:
                broken = self._raw.progress_problems(entry.seq, ev.updates)
            for error in broken:
                self._report(error)  # type: ignore[misc]
        if self.committed is not None:
            try:
                self.committed.push(entry, self.reader.epoch)
            except EventLogError:  # reported above: the committed view stops at the first broken rule
                self.committed = None

    def peek(self) -> Entry | None:
        """The next event to take, reading if none is queued (None: nothing more now)."""
        if not self._queue:
            self.fill(1)
        return self._queue[0] if self._queue else None

    @property
    def queued(self) -> int:
        """Events released and not yet taken."""
        return len(self._queue)

    def take(self) -> Entry:
        """Hand out the next queued event and apply it to ``frontier`` (a Messages event must be in advance of
        the frontier; a Progress event moves it). Call ``peek`` or ``fill`` first."""
        entry = self._queue.popleft()
        self.apply(entry)
        return entry

    def apply(self, entry: Entry) -> None:
        """Account for ``entry`` having been handed out (``take`` does this)."""
        if self.rules is not None:
            ev = entry.event
            if isinstance(ev, Messages):
                self.rules.messages(entry.seq, ev.time)
            else:
                self.rules.progress(entry.seq, ev.updates)
        self.last_seq = entry.seq

    def pull(self) -> Iterator[Entry]:
        """The events there now (up to ``end``), handed out without applying them: call ``apply`` on each
        before using the frontier (a merge reads ahead and applies an event when it is its turn). Without
        ``end`` one pass of the log's reader is read; with ``end``, passes follow each other until ``end`` or
        one that finds nothing (a Kafka consumer's pass returns once its queue is empty)."""
        while True:
            got = self.fill(_CHUNK)
            while self._queue:
                yield self._queue.popleft()
            if self._error is None and (not got or self.at_end or (self._it is None and self.end is None)):
                return  # (an error met after the events handed out is raised by the next fill)

    def read(self) -> Iterator[Entry]:
        """The events there now (``pull``), each taken as it is yielded; calling it again continues with events
        appended since."""
        for entry in self.pull():
            self.apply(entry)
            yield entry

    def __iter__(self) -> Iterator[Entry]:
        return self.read()

    def describe_held(self) -> str | None:
        """Reading committed: one line on the events held back (None when nothing is)."""
        if self.committed is None or not self.committed.held:
            return None
        return self.committed.describe_held()

    def prefetch(self) -> None:
        """A hint that iterating begins now (``PartReader.prefetch``)."""
        if self._it is None and not self._queue:
            self.reader.prefetch()

    def close(self) -> None:
        """Release the part's reader."""
        if self._reader is not None:
            self._reader.close()

    def __enter__(self) -> "CheckedPart":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"CheckedPart(stream={self.stream!r}, part={self.part}, next_seq={self.next_seq})"


_CHUNK = 64
"""Raw events read per ``fill`` of ``read()``."""


def part_frontier(log: "Log", header: StreamHeader, part: int, end: int | None = None) -> Antichain:
    """The frontier of ``part`` after its events before ``end`` (default: every event there now), from its
    Progress events alone, each checked against timely's rules."""
    with CheckedPart(log, header, part, end=end, progress_only=True) as p:
        for _ in p.read():
            pass
        return p.frontier


__all__ = ["CheckedPart", "part_frontier"]
