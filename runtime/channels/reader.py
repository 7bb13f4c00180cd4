"""Channel readers: one per task input, merging its channels, dropping duplicates, aligning barriers.

The reader keeps a queue of bundles per input channel (at most ``prefetch`` bytes; the store pauses a full
channel) and hands the operator the bundle with the lowest ``BundleTs`` among the channels that have one,
in each channel's order. Every bundle's timestamp is its channel's frontier, so the reader tracks each
channel's frontier and the task's input frontier: a ``MutableAntichain`` with one count per unfinished
channel at that channel's frontier. Message ids are checked per channel: ids at or below the last one seen
are duplicates and dropped (a re-sent bundle, a retried Kafka record), a jump past the next id is a
``ChannelError``. Barriers are aligned: once a channel delivered the barrier of checkpoint ``n`` it is not
read further until every channel delivered it; then the reader yields the barrier.

A task of an operator with several inputs (``union``, ``connect``, joins) reads all its inputs' channels
with one reader: each channel says which input it feeds, data events carry that input's number, and the
reader also tracks each input's frontier (the meet of that input's channels), which a frontier event
carries along with the task's input frontier (the meet of all of them). Barrier alignment is over every
channel of every input, so no record of any input crosses a barrier.
"""

from __future__ import annotations

import collections
import time
from typing import Any, Iterator

from eventlog import bundle
from eventlog.antichain import Antichain, MutableAntichain

from ..errors import ChannelError
from .barrier import decode_barrier
from .base import ChannelTail
from .payload import FINISHED_TS, decode_batch

DATA, FRONTIER, BARRIER = "data", "frontier", "barrier"
"""Kinds of the events ``ChannelReader.poll`` yields: ``(DATA, time, batch, input)``, ``(FRONTIER, antichain,
(antichain per input, …))``, ``(BARRIER, checkpoint id)``."""


class _InChannel:
    __slots__ = ("position", "name", "input", "last_id", "last_barrier", "ts", "blocked", "queue", "queued_bytes",
                 "consumed_bytes", "duplicates", "finished")

    def __init__(self, position: int, name: str, last_id: int, last_barrier: int, input: int = 0) -> None:
        self.position = position
        self.name = name
        self.input = input
        self.last_id = last_id
        self.last_barrier = last_barrier
        self.ts = 0
        self.blocked: int | None = None
        self.queue: collections.deque[bundle.Bundle] = collections.deque()
        self.queued_bytes = 0
        self.consumed_bytes = 0
        self.duplicates = 0
        self.finished = False


class ChannelReader:
    """Reads a task's input channels ``[(position, name, last id)]`` or ``[(position, name, last id, input)]``
    from ``tail`` (see the module doc).

    ``last_barrier`` is the checkpoint the task was restored from (barriers up to it are old)."""

    def __init__(self, tail: ChannelTail, channels: list[tuple[Any, ...]], *, last_barrier: int = 0,
                 prefetch: int = 8 << 20) -> None:
        self._tail = tail
        self._channels = {c[0]: _InChannel(c[0], c[1], c[2], last_barrier, c[3] if len(c) > 3 else 0)
                          for c in channels}
        self._prefetch = prefetch
        self._frontier = MutableAntichain([(0, len(self._channels))])
        n_inputs = max((c.input for c in self._channels.values()), default=0) + 1
        self._inputs = [MutableAntichain([(0, sum(c.input == i for c in self._channels.values()))])
                        for i in range(n_inputs)]
        self._aligning: int | None = None
        self._align_started = 0.0
        self.messages = 0
        """Data messages handed to the operator."""
        self.align_seconds = 0.0
        """Seconds spent aligning barriers: from a checkpoint's first barrier on a channel to its last."""

    @property
    def frontier(self) -> Antichain:
        """The input frontier: the meet of the channels' frontiers (empty once every channel finished)."""
        return self._frontier.frontier

    def input_frontiers(self) -> tuple[Antichain, ...]:
        """Each input's frontier (the meet of its channels'), by input number."""
        if len(self._inputs) == 1:
            return (self._frontier.frontier,)
        return tuple(m.frontier for m in self._inputs)

    def offsets(self) -> dict[str, int]:
        """The last message id consumed per channel name (the task's input offsets)."""
        return {c.name: c.last_id for c in self._channels.values()}

    def acks(self) -> dict[str, int]:
        """Bytes consumed per channel name (acknowledged to the channels' writers)."""
        return {c.name: c.consumed_bytes for c in self._channels.values()}

    @property
    def duplicates(self) -> int:
        """Data messages dropped as duplicates."""
        return sum(c.duplicates for c in self._channels.values())

    def queued_bytes(self) -> int:
        """Bytes of bundles waiting in the reader's queues."""
        return sum(c.queued_bytes for c in self._channels.values())

    def _fetch(self) -> None:
        wanted = [c.position for c in self._channels.values() if c.queued_bytes < self._prefetch]
        for pos, b in self._tail.poll(wanted):
            ch = self._channels[pos]
            ch.queue.append(b)
            ch.queued_bytes += b.nbytes

    def _pick(self) -> _InChannel | None:
        best = None
        for c in self._channels.values():
            if c.queue and c.blocked is None:
                if best is None or c.queue[0].ts < best.queue[0].ts:
                    best = c
        return best

    def poll(self, max_bundles: int = 64) -> list[tuple[Any, ...]]:
        """The next events (possibly none; never blocks): data, frontier changes and aligned barriers, in
        the order the operator must see them."""
        self._fetch()
        events: list[tuple[Any, ...]] = []
        for _ in range(max_bundles):
            ch = self._pick()
            if ch is None:
                break
            b = ch.queue.popleft()
            ch.queued_bytes -= b.nbytes
            ch.consumed_bytes += b.nbytes
            self._take(ch, b, events)
            if events and events[-1][0] == BARRIER:
                break
        return events

    def _take(self, ch: _InChannel, b: bundle.Bundle, events: list[tuple[Any, ...]]) -> None:
        if b.type == bundle.BUNDLE:
            first = b.last_id - b.count + 1
            if b.last_id <= ch.last_id:
                ch.duplicates += b.count
                return
            if first > ch.last_id + 1:
                raise ChannelError(f"gap in channel {ch.name!r}: expected message {ch.last_id + 1}, got {first} "
                                   f"(messages {ch.last_id + 1}-{first - 1} are missing from the channel's log)",
                                   seq=first)
            skip = ch.last_id + 1 - first
            ch.duplicates += skip
            port = ch.input
            for i in range(skip, b.count):
                t, batch = decode_batch(b.payload(i))
                events.append((DATA, t, batch, port))
            self.messages += b.count - skip
            ch.last_id = b.last_id
        elif b.type == bundle.BARRIER:
            ckpt = decode_barrier(b.payload(0), channel=ch.name)
            if ckpt <= ch.last_barrier:
                return  # a duplicate barrier
            if b.last_id != ch.last_id:
                raise ChannelError(f"barrier {ckpt} of channel {ch.name!r} follows message {b.last_id}, "
                                   f"the reader is at {ch.last_id}", seq=b.last_id)
            if self._aligning is not None and ckpt != self._aligning:
                raise ChannelError(f"barrier {ckpt} on channel {ch.name!r} while aligning barrier {self._aligning}")
            ch.last_barrier = ckpt
            ch.blocked = ckpt
            if self._aligning is None:
                self._align_started = time.monotonic()
            self._aligning = ckpt
        else:  # EMPTY
            if b.last_id > ch.last_id:
                raise ChannelError(f"gap in channel {ch.name!r}: an empty bundle after message {b.last_id}, "
                                   f"the reader is at {ch.last_id}", seq=b.last_id)
        self._move(ch, b.ts, events)
        if b.type == bundle.BARRIER and all(c.blocked is not None for c in self._channels.values()):
            for c in self._channels.values():
                c.blocked = None
            self._aligning = None
            self.align_seconds += time.monotonic() - self._align_started
            events.append((BARRIER, ch.last_barrier))

    def _move(self, ch: _InChannel, ts: int, events: list[tuple[Any, ...]]) -> None:
        if ts <= ch.ts or ch.finished:
            return
        updates = [(ch.ts, -1)]
        if ts >= FINISHED_TS:
            ch.finished = True
        else:
            updates.append((ts, 1))
        ch.ts = ts
        moved = bool(self._frontier.update_iter(updates))
        if len(self._inputs) > 1:
            moved = bool(self._inputs[ch.input].update_iter(updates)) or moved
        if moved:
            events.append((FRONTIER, self._frontier.frontier, self.input_frontiers() if len(self._inputs) > 1
                           else (self._frontier.frontier,)))

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        while True:
            events = self.poll()
            if not events:
                time.sleep(0.001)
            yield from events

    def close(self) -> None:
        """Release the channel tail."""
        self._tail.close()
