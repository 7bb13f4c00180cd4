"""Sources: where a job's records come from, with offsets a checkpoint saves and a restart rewinds to.

* ``GeneratorSource``: a replayable Python generator. The user's function ``fn(part, offset)`` yields the
  items of source part ``part`` from item number ``offset`` on (0-based), each ``(time, records)``
  (records: list of dicts, RecordBatch or Table), ``Advance(time)`` (the part's frontier moves with no
  data: an idle part), or ``None`` (nothing right now; the part is polled again later). Times of a part
  never decrease; the part is finished when its generator returns. The checkpoint saves, per part, the
  number of items taken and the part's time.
* ``LogSource``: a captured stream replayed with ``replay.Replayer`` (assign mode): instance ``j`` of ``P``
  reads the stream's parts ``i`` with ``i % P == j``; the checkpoint saves each part's position
  (``Replayer.position``), from which a restarted replayer continues, with the part's frontier rebuilt.

An instance's output frontier is the meet of its parts' frontiers (empty once all are finished).
"""

from __future__ import annotations

import time as _time
from typing import Any, Callable, Iterator, NamedTuple

import pyarrow as pa

from eventlog.errors import ProgressError
from eventlog.events import Messages
from eventlog.log import open_log
from replay.replayer import Replayer

from .checkpoints.keygroups import parts_of_instance
from .checkpoints.store import StateCheck
from .operators import OperatorContext, check_state, int_keyed, is_int, to_batch


class Advance(NamedTuple):
    """A generator source item that moves its part's frontier to ``time`` without records."""

    time: int


class Source:
    """Base of source implementations (one object per source instance)."""

    def open(self, ctx: OperatorContext, state: dict[str, Any] | None) -> None:
        """Start the instance at the offsets of ``state`` (None: from the beginning)."""
        self.ctx = ctx

    def poll(self, budget: int) -> bool:
        """Emit up to about ``budget`` items; False when nothing was available."""
        raise NotImplementedError

    def frontier(self) -> int | None:
        """The least time the instance may still emit at (None: finished)."""
        raise NotImplementedError

    def snapshot(self, checkpoint: int) -> dict[str, Any]:
        """The offsets to restart from."""
        raise NotImplementedError

    def verify_state(self, state: dict[str, Any] | None, check: StateCheck) -> None:
        """Check restored offsets (see ``Operator.verify_state``)."""
        check_state(state is None or isinstance(state, dict), "the state is not a map", check.where)

    def notify_complete(self, checkpoint: int) -> None:
        """Checkpoint ``checkpoint`` is complete."""

    def close(self) -> None:
        """Release the source."""


class _GenPart:
    __slots__ = ("part", "offset", "time", "done", "it")

    def __init__(self, part: int, offset: int, time: int, done: bool) -> None:
        self.part, self.offset, self.time, self.done = part, offset, time, done
        self.it: Iterator[Any] | None = None


class GeneratorSource(Source):
    """A source over ``fn(part, offset)`` generators with ``parts`` parts (see the module doc)."""

    def __init__(self, fn: Callable[[int, int], Iterator[Any]], parts: int, schema: pa.Schema | None = None) -> None:
        self.fn = fn
        self.parts = parts
        self.schema = schema

    def open(self, ctx: OperatorContext, state: dict[str, Any] | None) -> None:
        super().open(ctx, state)
        saved = (state or {}).get("parts", {})
        self._parts = []
        for p in parts_of_instance(ctx.index, self.parts, ctx.parallelism):
            s = saved.get(p, {"offset": 0, "time": 0, "done": False})
            self._parts.append(_GenPart(p, s["offset"], s["time"], s["done"]))
        self._next = 0

    def poll(self, budget: int) -> bool:
        live = [p for p in self._parts if not p.done]
        if not live:
            return False
        produced = False
        idle = 0
        n = 0
        while n < budget and idle < len(live):
            part = live[self._next % len(live)]
            self._next += 1
            if part.done:
                idle += 1
                continue
            if part.it is None:
                part.it = iter(self.fn(part.part, part.offset))
            try:
                item = next(part.it)
            except StopIteration:
                part.done = True
                idle += 1
                continue
            if item is None:
                idle += 1
                continue
            idle = 0
            n += 1
            t = item.time if isinstance(item, Advance) else item[0]
            if isinstance(t, bool) or not isinstance(t, int) or t < 0:
                raise ProgressError(f"source item time {t!r} is not a non-negative int", stream=self.ctx.node,
                                    part=part.part, offset=part.offset)
            if t < part.time:
                raise ProgressError(f"source part went back in time from {part.time} to {t}", stream=self.ctx.node,
                                    part=part.part, offset=part.offset)
            part.offset += 1
            part.time = t
            if isinstance(item, Advance):
                continue
            batch = to_batch(item[1], self.schema)
            if batch is not None:
                self.ctx.emit(t, batch)
                produced = True
        return produced or n > 0

    def frontier(self) -> int | None:
        times = [p.time for p in self._parts if not p.done]
        return min(times) if times else None

    def snapshot(self, checkpoint: int) -> dict[str, Any]:
        return {"parts": {p.part: {"offset": p.offset, "time": p.time, "done": p.done} for p in self._parts}}

    def verify_state(self, state: dict[str, Any] | None, check: StateCheck) -> None:
        super().verify_state(state, check)
        for part, s in int_keyed((state or {}).get("parts", {}), check.where, "'parts'").items():
            check_state(isinstance(s, dict) and is_int(s.get("offset")) and is_int(s.get("time"))
                        and type(s.get("done")) is bool,
                        f"part {part} is not {{offset: int >= 0, time: int >= 0, done: bool}}", check.where)


class LogSource(Source):
    """A captured stream of a log, replayed in assign mode (see the module doc)."""

    def __init__(self, uri: str, stream: str, *, poll_interval: float = 0.01) -> None:
        self.uri = uri
        self.stream = stream
        self.poll_interval = poll_interval

    def open(self, ctx: OperatorContext, state: dict[str, Any] | None) -> None:
        super().open(ctx, state)
        self._log = open_log(self.uri)
        saved = (state or {}).get("parts", {})
        peers = self._log.header(self.stream).peers
        start = {p: saved[p] for p in parts_of_instance(ctx.index, peers, ctx.parallelism) if p in saved}
        self._replayer = Replayer(self._log, self.stream, worker=ctx.index, peers=ctx.parallelism, start=start,
                                  poll_interval=self.poll_interval)
        self._it: Iterator[Any] | None = None
        self._idle_until = 0.0

    def poll(self, budget: int) -> bool:
        if self._replayer.is_done():
            return False
        now = _time.monotonic()
        if self._it is None and now < self._idle_until:
            return False
        if self._it is None:
            self._it = iter(self._replayer)
        n = 0
        for ev in self._it:
            if isinstance(ev, Messages):
                self.ctx.emit(ev.time, ev.records)
            n += 1
            if n >= budget:
                return True
        self._it = None
        self._idle_until = now + self.poll_interval
        return n > 0

    def frontier(self) -> int | None:
        f = self._replayer.frontier
        return None if f.is_empty() else min(f.elements)

    def snapshot(self, checkpoint: int) -> dict[str, Any]:
        return {"parts": dict(self._replayer.position)}

    def verify_state(self, state: dict[str, Any] | None, check: StateCheck) -> None:
        super().verify_state(state, check)
        for part, seq in int_keyed((state or {}).get("parts", {}), check.where, "'parts'").items():
            check_state(is_int(seq, 1), f"part {part}'s position is not a sequence id (an int >= 1)", check.where)

    def close(self) -> None:
        self._replayer.close()
        self._log.close()
