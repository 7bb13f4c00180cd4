"""Replayer: one replay worker's share of a captured stream, with its merged frontier.

With ``peers=M`` replay workers over a stream of N parts:

* ``mode="assign"``: worker ``j`` reads the parts ``i`` with ``i % M == j`` (no part is split) and starts
  holding the minimum time once per owned part (timely's rule). A worker that owns no part has an empty
  frontier from the start.
* ``mode="repartition"``: every worker reads every part, keeps the records whose ``key`` hashes to it
  (``replay.keyhash``), and tracks every part's progress.

Iterating yields ``Messages`` (this worker's records) and ``Progress`` events; the Progress events are the
changes of the merged frontier, so the events a worker yields form a valid part of a stream (``copy``
writes them as one). ``completed()`` yields each time once, with all its records, when it is complete.

Every part's events are checked against timely's progress rules (``eventlog.parts.rules``) as they are read: a
capability added behind the part's frontier, a negative count, a Messages event behind the frontier, or
anything after the part finished raises ``ProgressError`` naming the stream, part and sequence id. So a
time, once complete, never receives another record, and no record is dropped.
"""

from __future__ import annotations

import heapq
import time as _time
from typing import Iterator, Mapping

import numpy as np
import pyarrow as pa

from eventlog.antichain import Antichain, MutableAntichain
from eventlog.errors import StreamNotFoundError
from eventlog.events import Entry, Event, Messages, Progress
from eventlog.header import StreamHeader
from eventlog.log import Log, open_log
from eventlog.parts import CheckedPart, check_isolation
from eventlog.time import Time, less_equal

from .keyhash import Key, worker_of

MODES = ("assign", "repartition")


def _bool_array(mask: np.ndarray) -> pa.BooleanArray:
    """``mask`` as an Arrow boolean array, built from its bits (``pa.array`` on numpy makes pyarrow import
    pandas, ~0.4 s, on the first call in a process)."""
    return pa.BooleanArray.from_buffers(pa.bool_(), len(mask),
                                        [None, pa.py_buffer(np.packbits(mask, bitorder="little"))])


def order_key(event: Event, minimum: Time) -> Time:
    """The least time an event concerns (a Messages event's time, a Progress event's least updated time,
    ``minimum`` for an empty Progress): the merge key of "lowest pending time first"."""
    if isinstance(event, Messages):
        return event.time
    return min((t for t, _ in event.updates), default=minimum)


class Replayer:
    """Replays ``stream`` from ``log`` as worker ``worker`` of ``peers``; see the module doc for modes.

    ``since``/``until`` keep the times ``t`` with ``since <= t`` and not ``until <= t``; ``start`` maps parts
    to the sequence id to resume from (``position`` of an earlier replayer); ``follow=True`` keeps polling a
    live log until every tracked part is finished (or every time before ``until`` is complete), waiting for
    the stream to be created if it does not exist yet, and raising ``TimeoutError`` after ``timeout``
    seconds without a new event. ``isolation="committed"`` (the default) delivers, for every time of a part,
    the records of one writer incarnation: messages a crashed writer left at times its part had not completed
    are void, and a part's messages wait until a later Progress event of the part passes their time
    (``eventlog.parts.committed``, FORMAT.md §1.1); ``"uncommitted"`` delivers every event as it is read.
    """

    def __init__(
        self,
        log: "Log | str",
        stream: str,
        worker: int = 0,
        peers: int = 1,
        *,
        mode: str = "assign",
        key: Key | None = None,
        since: Time | None = None,
        until: Time | None = None,
        start: Mapping[int, int] | None = None,
        follow: bool = False,
        poll_interval: float = 0.05,
        timeout: float | None = None,
        read_ahead: int = 2,
        isolation: str = "committed",
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if mode == "repartition" and key is None:
            raise ValueError("repartition mode needs a key (a column name, names, or a function)")
        if isinstance(peers, bool) or not isinstance(peers, int) or peers < 1:
            raise ValueError(f"peers must be a positive int, got {peers!r}")
        if not 0 <= worker < peers:
            raise ValueError(f"worker {worker} out of range for peers={peers}")
        self.isolation = check_isolation(isolation)
        self.log = log if isinstance(log, Log) else open_log(log)
        self.stream = stream
        self.header = self._await_header(follow, poll_interval, timeout)
        self.worker, self.peers, self.mode, self.key = worker, peers, mode, key
        tt = self.header.time_type
        self.since = tt.check(since) if since is not None else None
        self.until = tt.check(until) if until is not None else None
        self.follow, self.poll_interval, self.timeout, self._read_ahead = follow, poll_interval, timeout, read_ahead
        n = self.header.peers
        owned = [i for i in range(n) if mode == "repartition" or i % peers == worker]
        start = dict(start or {})
        for p in start:
            if p not in owned:
                raise ValueError(f"start names part {p}, which worker {worker} does not read")
        self._frontier = MutableAntichain([(tt.minimum, len(owned))])
        self._parts: dict[int, CheckedPart] = {}
        for i in owned:
            part = CheckedPart(self.log, self.header, i, start=start.get(i, 1), isolation=isolation)
            if part.start > 1:  # resumed: its frontier was rebuilt from the Progress events before start
                self._frontier.update_iter([(tt.minimum, -1), *part.counts()])
            self._parts[i] = part
        self._taken: dict[int, int] = dict.fromkeys(self._parts, 0)
        self._heap: list[tuple[Time, int, int]] = []
        self._in_heap: set[int] = set()
        self.events_read = 0
        """Events taken from the parts (duplicates and void events excluded)."""
        self.last_seq: int | None = None
        """The sequence id, in its part, of the event last taken: that of the event just yielded (``position``
        is where a later replayer continues, which reading committed may be an earlier, held event)."""

    def _await_header(self, follow: bool, poll_interval: float, timeout: float | None) -> StreamHeader:
        """The stream's header; a following replayer waits for a stream that does not exist yet."""
        deadline = None if timeout is None else _time.monotonic() + timeout
        while True:
            try:
                return self.log.header(self.stream)
            except StreamNotFoundError:
                if not follow or (deadline is not None and _time.monotonic() > deadline):
                    raise
                _time.sleep(max(poll_interval, 0.05))

    # -- state -----------------------------------------------------------------------------------------

    @property
    def frontier(self) -> Antichain:
        """The merged frontier of the parts this worker reads: a time is complete when it is not ``>=``
        any element."""
        return self._frontier.frontier

    @property
    def parts(self) -> list[int]:
        """The source parts this worker reads."""
        return list(self._parts)

    def part_frontiers(self) -> dict[int, Antichain]:
        """Each source part's own frontier."""
        return {i: p.frontier for i, p in self._parts.items()}

    @property
    def position(self) -> dict[int, int]:
        """Per part, the sequence id to continue from (pass as ``start=`` to a later replayer to continue
        iterating events where this one stopped): after the last event yielded, or, reading committed, at
        the first event held back (so the later replayer reads the held events again)."""
        return {i: p.position for i, p in self._parts.items()}

    @property
    def duplicates(self) -> int:
        """Events dropped because their sequence id was already read."""
        return sum(p.duplicates for p in self._parts.values())

    @property
    def voided(self) -> int:
        """Messages events dropped as void (reading committed): a writer incarnation left them at times its
        part had not completed, and the next incarnation re-sent those times (FORMAT.md §1.1)."""
        return sum(p.voided for p in self._parts.values())

    def held(self) -> dict[int, str]:
        """Per part that holds events back (reading committed: uncommitted messages of a live part or of a
        writer that stopped mid-time), one line saying how many and at which times."""
        return {i: d for i, p in self._parts.items() if (d := p.describe_held()) is not None}

    def is_done(self) -> bool:
        """True when nothing more can arrive: every part finished, or every time before ``until`` complete."""
        f = self._frontier.frontier
        if f.is_empty():
            return True
        return self.until is not None and all(less_equal(self.until, e) for e in f)

    def is_complete(self, t: Time) -> bool:
        """True when time ``t`` is complete for this worker."""
        return not self._frontier.less_equal(t)

    def _keep_time(self, t: Time) -> bool:
        if self.since is not None and not less_equal(self.since, t):
            return False
        return self.until is None or not less_equal(self.until, t)

    # -- merging ---------------------------------------------------------------------------------------

    def _push(self, part: CheckedPart) -> None:
        head = part.peek() if part.queued else None
        if head is not None and part.part not in self._in_heap:
            heapq.heappush(self._heap, (order_key(head.event, self.header.time_type.minimum), self._taken[part.part],
                                        part.part))
            self._in_heap.add(part.part)

    def _poll(self) -> bool:
        """Read what the parts have now; True if anything arrived."""
        got = False
        for part in self._parts.values():
            if not part.queued and part.fill(self._read_ahead):
                got = True
            self._push(part)
        return got

    def _take(self) -> tuple[CheckedPart, Entry] | None:
        """The next entry, lowest pending time first (ties: the part taken from least), applied to its part's
        frontier (timely's rules: never a record behind it)."""
        if not self._heap:
            self._poll()
        if not self._heap:
            return None
        _, _, index = heapq.heappop(self._heap)
        self._in_heap.discard(index)
        part = self._parts[index]
        entry = part.take()
        self._taken[index] += 1
        if not part.queued:
            part.fill(self._read_ahead)
        self._push(part)
        return part, entry

    def _events(self, *, route: bool = True) -> Iterator[tuple[Event, int]]:
        """``(event, part)`` pairs: filtered Messages (possibly empty; all their records in repartition mode
        without ``route``) and merged-frontier Progress."""
        if self._frontier.frontier != Antichain([self.header.time_type.minimum]):
            # a worker that owns no part (or resumed past progress) reports its frontier at once
            owned = MutableAntichain([(self.header.time_type.minimum, 1)])
            delta = owned.update_iter([(self.header.time_type.minimum, -1)] + [(t, 1) for t in self.frontier])
            if delta:
                yield Progress(delta), -1
        for part in self._parts.values():
            part.prefetch()  # every part's first events decode side by side, not one part after another
        idle_since = _time.monotonic()
        while True:
            if self.is_done():
                # every time before ``until`` is complete (or every part finished): what is left to read lies at
                # or after ``until`` (a part's messages precede the progress that completed their times), so
                # nothing more is read
                return
            taken = self._take()
            if taken is None:
                if not self.follow or self.is_done():
                    return
                if self.timeout is not None and _time.monotonic() - idle_since > self.timeout:
                    raise TimeoutError(
                        f"no new event in stream {self.stream!r} for {self.timeout} s; frontier {list(self.frontier)}"
                    )
                _time.sleep(self.poll_interval)
                continue
            idle_since = _time.monotonic()
            part, entry = taken
            self.events_read += 1
            self.last_seq = entry.seq
            ev = entry.event
            if isinstance(ev, Messages):
                if not self._keep_time(ev.time):
                    continue
                if self.mode == "repartition" and route:
                    records = ev.records
                    mask = worker_of(records, self.key, self.peers) == self.worker  # type: ignore[arg-type]
                    if not mask.all():
                        ev = Messages(ev.time, records.filter(_bool_array(mask)))
                yield ev, part.part
            else:
                changes = self._frontier.update_iter(ev.updates)
                if changes:
                    yield Progress(changes), part.part

    def __iter__(self) -> Iterator[Event]:
        """This worker's events: Messages with at least one record, and merged-frontier Progress."""
        for ev, _ in self._events():
            if isinstance(ev, Progress) or ev.records.num_rows:
                yield ev

    def split(self) -> Iterator[tuple[int, Event]]:
        """Every replay worker's events in one pass (``mode="repartition"``): ``(j, event)`` pairs such that, for
        each worker ``j`` of ``peers``, the events paired with ``j`` are exactly those ``Replayer(..., worker=j)``
        yields — its share of each Messages event that has rows for it, and every merged-frontier Progress
        event (in repartition mode every worker tracks every part: they share one frontier). Each event is
        read, checked and decoded once and each key hashed once, where ``peers`` replayers do it ``peers``
        times: copying or exporting a stream into ``peers`` repartitioned parts costs about one replay. The
        ``worker`` this replayer was made for plays no part; ``frontier`` and ``position`` are every worker's."""
        if self.mode != "repartition":
            raise ValueError("split() replays every worker of repartition mode (in assign mode each worker "
                             "reads its own parts: use one replayer per worker)")
        peers = self.peers
        for ev, _ in self._events(route=False):
            if isinstance(ev, Progress):
                for j in range(peers):
                    yield j, ev
                continue
            records = ev.records
            if not records.num_rows:
                continue
            owner = worker_of(records, self.key, peers)  # type: ignore[arg-type]
            counts = np.bincount(owner, minlength=peers)
            if counts.max() == records.num_rows:  # one worker takes every row: no copy
                yield int(owner[0]), ev
                continue
            small = owner.astype(np.uint8 if peers <= 256 else np.uint16 if peers <= 65536 else np.int64)
            order = np.argsort(small, kind="stable")  # each worker's rows, in their order (a radix sort)
            grouped = records.take(pa.Array.from_buffers(pa.int64(), len(order), [None, pa.py_buffer(order)]))
            start = 0
            for j in range(peers):
                n = int(counts[j])
                if n:
                    yield j, Messages(ev.time, grouped.slice(start, n))
                    start += n

    def completed(self) -> Iterator[tuple[Time, pa.Table]]:
        """``(time, table)`` once per time that any read part sent at (within since/until), with all of this
        worker's records at that time (possibly none), as soon as the time is complete, in time order."""
        pending: dict[Time, list[pa.RecordBatch]] = {}
        schema = self.header.schema
        for ev, _ in self._events():
            if isinstance(ev, Messages):
                pending.setdefault(ev.time, []).append(ev.records)
                continue
            ready = sorted(t for t in pending if self.is_complete(t))
            for t in ready:
                yield t, pa.Table.from_batches(pending.pop(t), schema=schema)
        for t in sorted(t for t in pending if self.is_complete(t)):
            yield t, pa.Table.from_batches(pending.pop(t), schema=schema)

    def close(self) -> None:
        """Release the parts' readers."""
        for p in self._parts.values():
            p.close()

    def __enter__(self) -> "Replayer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Replayer({self.stream!r}, worker={self.worker}, peers={self.peers}, mode={self.mode!r}, "
                f"parts={self.parts}, frontier={list(self.frontier)})")

