"""The live state of a log: every stream and part, kept up to date by polling only what changed.

``LogWatch.poll()`` reads what each part appended since the last poll, through the CLI's checked part cursor
(``_scan.PartCursor``, reading uncommitted: what was written, as ``tail -f`` reads it). A part's cursor starts
near the part's end — its last ``lookback`` events — after rebuilding the frontier from the Progress events
before them (Messages there are skipped undecoded), so opening a watch on a long log reads each part's Progress
events once and decodes only its tail. Sizes come from ``Log.part_stats`` (no decoding), refreshed every
``stats_every`` seconds, which also notices trimmed parts; the stream list is refreshed every ``discover_every``
seconds, so streams created or removed appear and go without a restart.

What a poll knows, per part: its frontier, whether it finished, records and bytes (Arrow in-memory size, as
``replay stats`` counts them) per second, when it last wrote (the write time of its last event), whether it is
*stalled* (not finished and silent for ``stall_after`` seconds), whether it *holds the stream back* (its frontier
holds the stream's frontier while another unfinished part is ahead), and its **lag**: how long ago the first
record of the oldest time it has not completed was written (0 when no record waits on it). Per stream: the
completed frontier (the meet of its parts'), the same lag, the *completed-time lag* of the last time that became
complete (from its first record's write to the write of the last event read when it completed), the times with
records seen last (each clickable in the page), and a sample per second of frontier, lag and rates for
``history`` seconds (the page's charts).

Lags are measured from the records the watch has read: after a start on a long part, records written before its
last ``lookback`` events do not count (said in docs/ui.md).
"""

from __future__ import annotations

import collections
import time as _time
from dataclasses import dataclass, field
from typing import Any, Callable

from eventlog.antichain import Antichain
from eventlog.errors import EventLogError, StreamNotFoundError
from eventlog.events import Messages
from eventlog.header import StreamHeader
from eventlog.log import Log
from eventlog.time import Time

from .._common import frontier_json, time_json
from .._scan import PartCursor, merged_frontier

LOOKBACK = 200
"""Events of each part's tail a new watch decodes (the Progress events before them are read undecoded)."""
RATE_WINDOW = 5.0
"""Seconds over which records/s and bytes/s are averaged."""
RECENT_TIMES = 24
"""Times with records each stream keeps for the page (the newest)."""
MAX_PENDING = 100_000
"""Incomplete times whose first write a stream remembers (beyond, the newest are not remembered)."""
MAX_TIME_INDEX = 4096
"""Times per part whose first sequence id is remembered (to show a time's records without a scan)."""


def _now_ms() -> int:
    return _time.time_ns() // 1_000_000


def _int_frontier(f: Antichain) -> int | None:
    """The frontier of an ``int64`` stream as one number (None when finished or of product times)."""
    elements = list(f)
    return elements[0] if len(elements) == 1 and isinstance(elements[0], int) else None


@dataclass
class _PartState:
    part: int
    cursor: PartCursor | None = None
    frontier: Antichain = field(default_factory=Antichain)
    first_seq: int = 1
    next_seq: int = 1
    stored_bytes: int | None = None
    stats_at: float = -1e18
    """When ``part_stats`` was last asked (monotonic seconds)."""
    events: int = 0
    records: int = 0
    bytes: int = 0
    """Events, records and record bytes read since the watch started (the lookback included)."""
    last_ts: int | None = None
    """Write time (ms) of the last event read."""
    last_progress_ts: int | None = None
    error: str | None = None
    resume: int | None = None
    """Where a cursor closed after an error continues (None: near the part's end)."""
    rates: collections.deque = field(default_factory=lambda: collections.deque(maxlen=64))
    time_seq: collections.OrderedDict = field(default_factory=collections.OrderedDict)
    """Time -> the first sequence id seen at that time (the newest ``MAX_TIME_INDEX``)."""

    @property
    def finished(self) -> bool:
        return self.cursor is not None and self.frontier.is_empty()


@dataclass
class _TimeInfo:
    records: int = 0
    bytes: int = 0
    first_ms: int | None = None
    last_ms: int | None = None
    parts: set = field(default_factory=set)


class _StreamState:
    def __init__(self, header: StreamHeader, history: float) -> None:
        self.header = header
        self.parts = [_PartState(p) for p in range(header.peers)]
        self.pending: dict[Time, int] = {}
        """Incomplete times (for the stream) with records: the write time of the first record seen (ms)."""
        self.recent: collections.OrderedDict[Time, _TimeInfo] = collections.OrderedDict()
        self.completed_lag_ms: int | None = None
        self.completed: collections.deque = collections.deque(maxlen=RECENT_TIMES)
        """``(time, lag ms)`` of the times seen to become complete, newest last."""
        self.history: collections.deque = collections.deque()
        self.history_seconds = history
        self.frontier = Antichain([header.time_type.minimum])
        self.sampled_at = -1e18

    def saw_messages(self, p: _PartState, seq: int, t: Time, records: int, nbytes: int, ts: int | None) -> None:
        if t not in p.time_seq:
            p.time_seq[t] = seq
            if len(p.time_seq) > MAX_TIME_INDEX:
                p.time_seq.popitem(last=False)
        info = self.recent.get(t)
        if info is None:
            info = self.recent[t] = _TimeInfo()
            while len(self.recent) > RECENT_TIMES:
                self.recent.popitem(last=False)
        info.records += records
        info.bytes += nbytes
        info.parts.add(p.part)
        if ts is not None:
            info.first_ms = ts if info.first_ms is None else min(info.first_ms, ts)
            info.last_ms = ts if info.last_ms is None else max(info.last_ms, ts)
            if self.frontier.less_equal(t) and (t in self.pending or len(self.pending) < MAX_PENDING):
                self.pending[t] = min(self.pending.get(t, ts), ts)


class LogWatch:
    """What a log holds now, per stream and part, updated by ``poll()`` (see the module doc); ``snapshot()`` is
    the last poll's state as a JSON-ready dict. ``streams`` limits the watch to those names (default: all)."""

    def __init__(self, log: Log, *, streams: tuple[str, ...] = (), stall_after: float = 30.0,
                 lookback: int = LOOKBACK, history: float = 300.0, stats_every: float = 5.0,
                 discover_every: float = 1.0, clock: Callable[[], int] = _now_ms) -> None:
        self.log = log
        self.only = tuple(streams)
        self.stall_after = stall_after
        self.lookback = lookback
        self.history = history
        self.stats_every = stats_every
        self.discover_every = discover_every
        self._clock = clock
        self._streams: dict[str, _StreamState] = {}
        self._listed_at = -1e18
        self.errors: list[str] = []
        """Problems of the last poll that concern the log as a whole (it cannot be listed, …)."""
        self.polls = 0
        self.poll_seconds = 0.0
        """How long the last poll took."""
        self._snapshot: dict[str, Any] = {"log": log.uri, "streams": [], "polls": 0}

    # -- polling -------------------------------------------------------------------------------------------

    def poll(self) -> dict[str, Any]:
        """Read what changed since the last poll; returns (and keeps) the new snapshot."""
        started = _time.monotonic()
        errors: list[str] = []
        if started - self._listed_at >= self.discover_every:
            self._listed_at = started
            self._discover(errors)
        for state in list(self._streams.values()):
            self._poll_stream(state, started)
        self.polls += 1
        self.poll_seconds = _time.monotonic() - started
        self.errors = errors
        self._snapshot = self._build()
        return self._snapshot

    def _discover(self, errors: list[str]) -> None:
        try:
            names = self.log.streams()
        except (EventLogError, OSError) as e:
            errors.append(f"cannot list the streams of {self.log.uri}: {e}")
            return
        if self.only:
            names = [n for n in names if n in self.only]
        for gone in set(self._streams) - set(names):
            self._drop(self._streams.pop(gone))
        for name in names:
            if name in self._streams:
                continue
            try:
                header = self.log.header(name)
            except StreamNotFoundError:  # being created: its header is not there yet
                continue
            except (EventLogError, OSError) as e:
                errors.append(f"stream {name!r}: {e}")
                continue
            self._streams[name] = _StreamState(header, self.history)

    @staticmethod
    def _drop(state: _StreamState) -> None:
        for p in state.parts:
            if p.cursor is not None:
                p.cursor.close()

    def _poll_stream(self, state: _StreamState, mono: float) -> None:
        for p in state.parts:
            try:
                self._poll_part(state, p, mono)
            except (EventLogError, OSError) as e:
                p.error = str(e)
                if p.cursor is not None:
                    p.resume = p.cursor.raw_last + 1
                    p.cursor.close()
                p.cursor = None  # opened again at the next poll, where it stopped
        state.frontier = merged_frontier(p.frontier for p in state.parts if p.cursor is not None) \
            if all(p.cursor is not None for p in state.parts) else state.frontier
        now = self._clock()
        done = [t for t in state.pending if not state.frontier.less_equal(t)]
        if done:
            completed_at = max((p.last_ts for p in state.parts if p.last_ts is not None), default=now)
            for t in sorted(done):
                lag = max(0, completed_at - state.pending.pop(t))
                state.completed.append((t, lag))
                state.completed_lag_ms = lag

    def _poll_part(self, state: _StreamState, p: _PartState, mono: float) -> None:
        stream = state.header.stream
        refreshed = mono - p.stats_at >= self.stats_every
        if refreshed:
            p.stats_at = mono
            st = self.log.part_stats(stream, p.part)
            p.first_seq, p.next_seq, p.stored_bytes = st.first_seq, st.next_seq, st.bytes
            if p.cursor is not None and p.cursor.raw_last + 1 < st.first_seq:  # trimmed past where we read
                p.cursor.close()
                p.cursor = None
            if p.resume is not None and p.resume < st.first_seq:
                p.resume = None
            if p.last_ts is None and st.events:  # a log without write times (format 1.x): the files' time
                last = self.log.last_write(stream, p.part)
                if last is not None:
                    p.last_ts = int(last * 1000)
        if p.cursor is None and p.error is not None and not refreshed:
            return  # a part that failed is tried again at its next refresh, not at every poll
        if p.cursor is None:
            start = p.resume if p.resume is not None else max(p.first_seq, p.next_seq - self.lookback)
            p.cursor = PartCursor(self.log, state.header, p.part, start=start, isolation="uncommitted")
            p.frontier = p.cursor.frontier
            p.resume = None
        if not p.finished:
            for entry in p.cursor.read():
                p.events += 1
                if entry.ts is not None:
                    p.last_ts = entry.ts
                ev = entry.event
                if isinstance(ev, Messages):
                    n, b = ev.records.num_rows, ev.records.nbytes
                    p.records += n
                    p.bytes += b
                    state.saw_messages(p, entry.seq, ev.time, n, b, entry.ts)
                elif entry.ts is not None:
                    p.last_progress_ts = entry.ts
            p.frontier = p.cursor.frontier
            p.next_seq = max(p.next_seq, p.cursor.raw_last + 1)
            p.error = None
        p.rates.append((mono, p.records, p.bytes))

    # -- the snapshot -------------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The state after the last poll (see the module doc), as plain JSON values."""
        return self._snapshot

    def history_of(self, stream: str) -> list[dict[str, Any]]:
        """The samples of ``stream``'s history (oldest first; empty for a stream not watched)."""
        state = self._streams.get(stream)
        return list(state.history) if state is not None else []

    def header(self, stream: str) -> StreamHeader | None:
        """The header of a watched stream (None if it is not watched)."""
        state = self._streams.get(stream)
        return state.header if state is not None else None

    def time_seqs(self, stream: str, t: Time) -> dict[int, int]:
        """Per part, the first sequence id the watch saw at time ``t`` (parts it saw none at are left out)."""
        state = self._streams.get(stream)
        if state is None:
            return {}
        return {p.part: p.time_seq[t] for p in state.parts if t in p.time_seq}

    def close(self) -> None:
        """Release every part's reader."""
        for state in self._streams.values():
            self._drop(state)
        self._streams.clear()

    def _build(self) -> dict[str, Any]:
        now = self._clock()
        mono = _time.monotonic()
        streams = [self._stream_doc(s, now, mono) for _, s in sorted(self._streams.items())]
        return {"log": self.log.uri, "now_ms": now, "polls": self.polls, "poll_ms": round(self.poll_seconds * 1000, 1),
                "stall_after_s": self.stall_after, "history_s": self.history, "errors": list(self.errors), "streams": streams}

    @staticmethod
    def _rate(p: _PartState) -> tuple[float, float]:
        if len(p.rates) < 2:
            return 0.0, 0.0
        t1, r1, b1 = p.rates[-1]
        t0, r0, b0 = p.rates[0]
        for sample in p.rates:
            if t1 - sample[0] <= RATE_WINDOW:
                t0, r0, b0 = sample
                break
        if t1 - t0 <= 0:
            return 0.0, 0.0
        return (r1 - r0) / (t1 - t0), (b1 - b0) / (t1 - t0)

    def _stream_doc(self, s: _StreamState, now: int, mono: float) -> dict[str, Any]:
        header = s.header
        ready = [p for p in s.parts if p.cursor is not None]
        unfinished = [p for p in ready if not p.finished]
        held = set(s.frontier)
        holders = {p.part for p in unfinished if held & set(p.frontier)}
        if len(holders) == len(unfinished):
            holders = set()  # every unfinished part is at the stream's frontier: none holds it back alone
        pending = sorted(s.pending.items(), key=lambda kv: kv[1])
        parts = []
        rec_s = byt_s = 0.0
        stalled_parts = 0
        created_ms = _iso_ms(header.created)
        for p in s.parts:
            rr, br = self._rate(p)
            rec_s += rr
            byt_s += br
            last = p.last_ts if p.last_ts is not None else created_ms
            idle = None if last is None else max(0.0, (now - last) / 1000)
            stalled = p.cursor is not None and not p.finished and idle is not None and idle >= self.stall_after
            stalled_parts += stalled
            lag = next((max(0, now - ts) for t, ts in pending if p.frontier.less_equal(t)), 0) \
                if p.cursor is not None and not p.finished else 0
            parts.append({
                "part": p.part, "frontier": frontier_json(p.frontier) if p.cursor is not None else None,
                "frontier_int": _int_frontier(p.frontier) if p.cursor is not None else None,
                "finished": p.finished, "stalled": stalled, "holding": p.part in holders, "lag_s": lag / 1000,
                "records_per_s": round(rr, 3), "bytes_per_s": round(br, 1), "records": p.records,
                "bytes": p.bytes, "events": p.events, "first_seq": p.first_seq, "next_seq": p.next_seq,
                "stored_bytes": p.stored_bytes, "last_write_ms": p.last_ts, "idle_s": idle, "error": p.error,
            })
        lag_ms = max(0, now - pending[0][1]) if pending else 0
        finished = bool(ready) and len(ready) == len(s.parts) and not unfinished
        frontier = s.frontier if len(ready) == len(s.parts) else None
        if mono - s.sampled_at >= 1.0:
            s.sampled_at = mono
            s.history.append({"t": now, "frontier": _int_frontier(s.frontier) if frontier is not None else None,
                              "max_frontier": max((f for p in unfinished if (f := _int_frontier(p.frontier))
                                                   is not None), default=None),
                              "lag_s": lag_ms / 1000, "records_per_s": round(rec_s, 3),
                              "bytes_per_s": round(byt_s, 1)})
            while s.history and now - s.history[0]["t"] > s.history_seconds * 1000:
                s.history.popleft()
        complete = (lambda t: not s.frontier.less_equal(t)) if frontier is not None else (lambda t: False)
        return {
            "stream": header.stream, "peers": header.peers, "time_type": header.time_type.name,
            "encoding": header.encoding, "created": header.created,
            "schema": [{"name": f.name, "type": str(f.type), "nullable": f.nullable} for f in header.schema],
            "frontier": frontier_json(frontier) if frontier is not None else None,
            "frontier_int": _int_frontier(frontier) if frontier is not None else None,
            "finished": finished, "stalled_parts": stalled_parts, "holding": sorted(holders),
            "lag_s": lag_ms / 1000,
            "completed_lag_s": None if s.completed_lag_ms is None else s.completed_lag_ms / 1000,
            "records_per_s": round(rec_s, 3), "bytes_per_s": round(byt_s, 1),
            "records": sum(p.records for p in s.parts), "bytes": sum(p.bytes for p in s.parts),
            "stored_bytes": None if any(p.stored_bytes is None for p in s.parts)
            else sum(p.stored_bytes or 0 for p in s.parts),
            "recent_times": [
                {"time": time_json(t), "records": i.records, "bytes": i.bytes, "parts": len(i.parts),
                 "first_ms": i.first_ms, "last_ms": i.last_ms, "complete": complete(t)}
                for t, i in reversed(s.recent.items())
            ],
            "sample": s.history[-1] if s.history else None,
            "parts": parts,
        }


def _iso_ms(text: str) -> int | None:
    """Milliseconds since the epoch of a header's ``created`` (None if it does not parse)."""
    import datetime as dt

    try:
        return int(dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None
