"""Channel writers: a bounded ring buffer per output channel and one transfer thread per task.

The operator (user thread) calls ``ChannelWriter.write`` with a message payload; the writer numbers it
(message ids are per-channel sequence numbers 1, 2, 3, …) and puts it in its ring. When the ring holds
``capacity`` bytes the user thread blocks until the transfer thread drained it: that is backpressure, and it
bounds the writer's memory. The transfer thread (``Transfer``) serves every writer of the task: it cuts a
BUNDLE from a ring once it holds ``bundle_messages`` messages or ``bundle_bytes`` bytes, or its oldest message
waited ``bundle_delay`` seconds, or a barrier follows; it sends a BARRIER bundle for each checkpoint barrier
(after the data before it), and an EMPTY bundle when a channel was idle for ``idle_interval`` seconds (20 ms by
default; none once it sent its final frontier) or only its frontier moved. Every bundle's ``BundleTs`` is the channel's frontier when it was cut
(the writer's logical clock: no later message has a smaller time), so empty bundles move downstream
frontiers. A channel whose reader lags by more than ``channel_capacity`` bytes (acknowledged through the job
master) gets nothing until the reader catches up, so a slow consumer holds back its producers instead of
filling the channel log.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any, Callable

from eventlog import bundle

from ..errors import JobAbortedError
from .barrier import MAX_BUNDLE_MESSAGES, encode_barrier
from .base import ChannelAppender
from .payload import FINISHED_TS

_DATA, _FRONTIER, _BARRIER = 0, 1, 2


class WriterSettings:
    """Sizes and delays of channel writers (one object shared by a job's writers)."""

    def __init__(
        self,
        *,
        capacity: int = 8 << 20,
        bundle_messages: int = 256,
        bundle_bytes: int = 1 << 20,
        bundle_delay: float = 0.002,
        idle_interval: float = 0.020,
        channel_capacity: int = 32 << 20,
    ) -> None:
        if capacity <= 0 or bundle_messages <= 0 or bundle_bytes <= 0 or channel_capacity <= 0:
            raise ValueError("writer sizes must be positive")
        if bundle_messages > MAX_BUNDLE_MESSAGES:
            raise ValueError(f"bundle_messages {bundle_messages} is over {MAX_BUNDLE_MESSAGES}, the most a bundle holds "
                             "(Ray Streaming's reader limit; schemas/BUNDLE.md)")
        self.capacity = capacity
        """Bytes of message payloads a writer's ring holds before the user thread blocks."""
        self.bundle_messages = bundle_messages
        """Most messages in one bundle (at most ``barrier.MAX_BUNDLE_MESSAGES``, 2048)."""
        self.bundle_bytes = bundle_bytes
        """A bundle is cut once its payloads reach this many bytes."""
        self.bundle_delay = bundle_delay
        """Seconds the oldest message of a ring may wait for more before a bundle is cut."""
        self.idle_interval = idle_interval
        """Seconds without a bundle after which a channel gets an EMPTY bundle."""
        self.channel_capacity = channel_capacity
        """Bytes a channel's log may hold beyond what its reader acknowledged."""

    def as_dict(self) -> dict[str, Any]:
        """The settings as a dict."""
        return dict(vars(self))


class ChannelWriter:
    """Writes one output channel: message ids, a bounded ring, the channel's frontier and barriers."""

    def __init__(self, name: str, appender: ChannelAppender, transfer: "Transfer", *, start_id: int = 0,
                 start_ts: int = 0, max_bundle_bytes: int | None = None, min_idle_interval: float = 0.0) -> None:
        self.name = name
        # the storage may ask for fewer idle EMPTY bundles (ChannelStore.min_idle_interval)
        self._idle = max(transfer.settings.idle_interval, min_idle_interval)
        limit = transfer.settings.bundle_bytes
        if max_bundle_bytes is not None:   # the storage's record limit, less the bundle's headers
            limit = min(limit, max_bundle_bytes - bundle.BUNDLE_HEADER_SIZE - 16 * transfer.settings.bundle_messages)
        self._bundle_bytes = max(1, limit)
        self._appender = appender
        self._transfer = transfer
        self._settings = transfer.settings
        self._cond = transfer.cond
        self._ring: collections.deque[tuple[int, Any, int, float]] = collections.deque()
        self._ring_bytes = 0
        self._last_id = start_id
        self._sent_id = start_id
        self._ts = start_ts          # frontier of the last entry put into the ring
        self._sent_ts = -1           # ts of the last bundle sent (-1: none yet)
        self._last_send = 0.0
        self.sent_bytes = 0
        """Bytes of bundles appended to the channel log."""
        self.acked_bytes = 0
        """Bytes the channel's reader acknowledged (through the job master)."""
        self.peak_bytes = 0
        """The most payload bytes this writer held at once (ring plus the bundle being sent)."""
        self.messages = 0
        """Data messages written."""
        self.bundles = 0
        """Bundles sent (all types)."""
        self.blocked_seconds = 0.0
        """Time the user thread spent blocked on a full ring (backpressure)."""
        self.peak_unacked = 0
        """The most bytes the channel held beyond what its reader acknowledged."""
        transfer._add(self)

    # -- the user thread -------------------------------------------------------------------------------

    @property
    def last_id(self) -> int:
        """The id of the last data message written (the channel's output offset)."""
        return self._last_id

    def write(self, payload: Any, nbytes: int | None = None) -> int:
        """Put one data message into the ring (blocks while the ring is full); returns its id."""
        n = len(payload) if nbytes is None else nbytes
        cap = self._settings.capacity
        with self._cond:
            if self._ring_bytes and self._ring_bytes + n > cap:
                t0 = time.monotonic()
                while self._ring_bytes and self._ring_bytes + n > cap:
                    self._transfer.check()
                    self._cond.wait(0.05)
                self.blocked_seconds += time.monotonic() - t0
            self._last_id += 1
            was_empty = not self._ring
            self._ring.append((_DATA, payload, n, time.monotonic()))
            self._ring_bytes += n
            if self._ring_bytes > self.peak_bytes:
                self.peak_bytes = self._ring_bytes
            self.messages += 1
            if was_empty:
                self._transfer._wake()
            return self._last_id

    def advance(self, ts: int) -> None:
        """Move the channel's frontier to ``ts`` (``payload.FINISHED_TS`` when it is empty)."""
        if ts <= self._ts:
            return
        with self._cond:
            self._ts = ts
            self._ring.append((_FRONTIER, None, ts, time.monotonic()))
            self._transfer._wake()

    def barrier(self, checkpoint: int) -> None:
        """Put the barrier of ``checkpoint`` after everything written so far."""
        with self._cond:
            self._ring.append((_BARRIER, None, checkpoint, time.monotonic()))
            self._transfer._wake()

    def pending(self) -> int:
        """Entries in the ring not yet sent."""
        return len(self._ring)

    # -- the transfer thread ---------------------------------------------------------------------------

    def _take(self, now: float, flush: bool) -> tuple[list[tuple[int, Any, int, float]], float | None]:
        """Under the lock: the entries to send now and the next deadline of this writer (or None)."""
        s = self._settings
        ring = self._ring
        if self.sent_bytes - self.acked_bytes >= s.channel_capacity:
            return [], None                     # the reader lags: send nothing (an ack wakes us)
        if not ring:
            if self._sent_ts >= FINISHED_TS:
                return [], None                 # finished: an EMPTY bundle would tell the reader nothing
            if now - self._last_send >= self._idle:
                return [(_FRONTIER, None, self._ts, now)], None   # idle: an EMPTY bundle
            return [], self._last_send + self._idle
        count = size = 0
        cut = flush
        oldest = None
        for kind, _payload, n, t in ring:
            if kind == _DATA:
                count += 1
                size += n
                if oldest is None:
                    oldest = t
                if count >= s.bundle_messages or size >= self._bundle_bytes:
                    cut = True
                    break
            elif kind == _BARRIER or (kind == _FRONTIER and n == FINISHED_TS):
                cut = True
                break
        if not cut:
            first_t = oldest if oldest is not None else ring[0][3]
            if now - first_t < s.bundle_delay:
                return [], first_t + s.bundle_delay
        taken = []
        data = size = 0
        while ring:
            kind, _payload, n, _t = ring[0]
            if kind == _DATA:
                if data >= s.bundle_messages or (data and size + n > self._bundle_bytes):
                    break
                data += 1
                size += n
            elif kind == _BARRIER:
                if data:
                    break                       # send the data first; the barrier goes next round
                taken.append(ring.popleft())
                break
            taken.append(ring.popleft())
        return taken, (now if ring else None)

    def _send(self, entries: list[tuple[int, Any, int, float]], out: bytearray) -> int:
        """Encode and append the bundles for ``entries`` (outside the lock); returns payload bytes sent."""
        payloads = []
        ts = self._sent_ts if self._sent_ts >= 0 else 0
        freed = 0
        barrier = None
        for kind, payload, n, _t in entries:
            if kind == _DATA:
                payloads.append(payload)
                freed += n
            elif kind == _FRONTIER:
                ts = max(ts, n)
            else:
                barrier = n
        if payloads:
            first = self._sent_id + 1
            self._sent_id += len(payloads)
            size = bundle.encoded_size(payloads)
            if len(out) < size:
                out.extend(bytes(size - len(out)))
            k = bundle.encode_into(out, payloads, first, bundle_ts=ts)
            self._appender.append(memoryview(out)[:k])
            self.sent_bytes += k
            self.bundles += 1
        if barrier is not None:
            data = bundle.encode([encode_barrier(barrier)], bundle_ts=ts, bundle_type=bundle.BARRIER,
                                 last_id=self._sent_id)
            self._appender.append(data, barrier=True)
            self.sent_bytes += len(data)
            self.bundles += 1
        elif not payloads:
            data = bundle.encode([], bundle_ts=ts, bundle_type=bundle.EMPTY, last_id=self._sent_id)
            self._appender.append(data)
            self.sent_bytes += len(data)
            self.bundles += 1
        self._sent_ts = ts
        self._last_send = time.monotonic()
        lag = self.sent_bytes - self.acked_bytes
        if lag > self.peak_unacked:
            self.peak_unacked = lag
        return freed

    def _close(self) -> None:
        self._appender.close()


class Transfer:
    """The transfer thread of one task: moves every writer's ring into its channel log as bundles."""

    def __init__(self, settings: WriterSettings, check: Callable[[], None] | None = None, name: str = "transfer") -> None:
        self.settings = settings
        self.cond = threading.Condition()
        self._abort_check = check or (lambda: None)
        self._writers: list[ChannelWriter] = []
        self._stop = False
        self._sleeping = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._started = False
        self.cpu_seconds = 0.0
        """CPU time the transfer thread used (set when it ends)."""

    def _add(self, writer: ChannelWriter) -> None:
        self._writers.append(writer)

    def start(self) -> None:
        """Start the thread (after every writer was made)."""
        if not self._started:
            self._started = True
            self._thread.start()

    def check(self) -> None:
        """Raise the transfer thread's error, or the task's abort (called while the user thread waits)."""
        if self._error is not None:
            raise self._error
        self._abort_check()

    def _wake(self) -> None:
        if self._sleeping:
            self.cond.notify_all()

    def acknowledge(self, acks: dict[str, int]) -> None:
        """Readers' acknowledged bytes per channel name (from the job master)."""
        with self.cond:
            for w in self._writers:
                a = acks.get(w.name)
                if a is not None and a > w.acked_bytes:
                    w.acked_bytes = a
            self.cond.notify_all()

    def _run(self) -> None:
        try:
            self._loop()
        finally:
            self.cpu_seconds = time.thread_time()

    def _loop(self) -> None:
        out = bytearray(1 << 16)
        try:
            while True:
                for w in self._writers:         # a bundle the storage did not take stops the task at once
                    w._appender.check()
                work = []
                with self.cond:
                    now = time.monotonic()
                    deadline = None
                    for w in self._writers:
                        entries, d = w._take(now, self._stop)
                        if entries:
                            work.append((w, entries))
                        if d is not None and (deadline is None or d < deadline):
                            deadline = d
                    if not work:
                        if self._stop and all(not w._ring for w in self._writers):
                            return
                        self._sleeping = True
                        wait = 0.05 if deadline is None else max(0.0, min(0.05, deadline - now))
                        self.cond.wait(wait)
                        self._sleeping = False
                        continue
                for w, entries in work:
                    freed = w._send(entries, out)
                    if freed:
                        with self.cond:
                            w._ring_bytes -= freed
                            self.cond.notify_all()
        except BaseException as e:  # noqa: BLE001 - handed to the user thread by check()
            self._error = e
            with self.cond:
                self.cond.notify_all()

    def error(self) -> BaseException | None:
        """The exception that stopped the thread, if any."""
        return self._error

    def drain(self, timeout: float | None = None) -> None:
        """Send everything in the rings (cut bundles at once), stop the thread and close the appenders."""
        with self.cond:
            self._stop = True
            self.cond.notify_all()
        if self._started:
            self._thread.join(timeout)
        if self._error is not None and not isinstance(self._error, JobAbortedError):
            raise self._error
        for w in self._writers:
            w._close()

    def stop(self) -> None:
        """Stop without draining (a failing task); appenders are closed, unsent entries are dropped."""
        with self.cond:
            for w in self._writers:
                w._ring.clear()
                w._ring_bytes = 0
            self._stop = True
            self.cond.notify_all()
        if self._started:
            self._thread.join(5)
        for w in self._writers:
            try:
                w._close()
            except Exception:  # noqa: BLE001 - already failing
                pass
