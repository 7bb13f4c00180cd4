"""Decoding a segment's next large events on other threads while the current one is consumed.

pyarrow decompresses one event's buffers in parallel, but an event's largest buffer (a string column's data)
is decompressed by one thread, and a replay spends the rest of its time in Python between events. A reader
that hands the next Messages events of a segment to a small thread pool keeps both cores busy: pyarrow's
decoding, validation and the checksum release the GIL. Only whole, indexed Messages events of at least
``MIN_BYTES`` that lie inside the bytes already mapped are decoded ahead, in chunks of up to ``CHUNK`` events
(one hand-off to a pool thread for all of them), each chunk by a decoder of its own (an Arrow stream decoder is
positioned per event, so one decoder never serves two threads at once), each event into a future of its own.
Everything else, and every event once anything looks unusual, is decoded in place, as before: decoding ahead
changes when work is done, never what is checked or what is reported. The reader waits for an event the pool
has not begun yet, up to ``PATIENCE``, rather than take it back at once: the replaying thread runs every event's
Python (checks, progress, merging) and is the one to keep free; only a pool kept busy elsewhere that long has the
event taken back and decoded by the reader (``wait``), so a reader never stalls behind it. A segment's first
events start
as its first event is read, and a replayer has every part's reader start them before it reads any
(``prefetch``), so that the parts' first events decode side by side instead of one after another on the
replaying thread.

``EVENTLOG_READ_AHEAD=0`` turns it off (``EVENTLOG_READ_AHEAD=N``: at most N events ahead per reader, four by
default, two while several readers of the process decode ahead); all readers of a process together hold at
most four events per core decoded ahead (a worker replaying three parts keeps two ahead in each). The pool's threads start, each warmed by decoding a small batch, when a process opens its
first file log (``warm``).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Callable

import pyarrow as pa
import pyarrow.ipc

from eventlog import workers
from eventlog.encoding import SegmentDecoder
from eventlog.events import Event

from . import index as ix

MIN_BYTES = 16 << 10
"""Events smaller than this are decoded in place (a hand-off to a thread costs tens of microseconds)."""
LOOK = 8
"""How many index entries past the current event are looked at for events to decode ahead."""
CHUNK = 2
"""At most this many events are handed to a pool thread at once (one hand-off, one thread wake-up, for all of
them), as many as the reader has room for."""
PATIENCE: float | None = 0.05
"""Seconds a reader waits for a pool thread to begin the event it comes to before it takes the event back and
decodes it itself (0: at once; None: never). Taking back at once measured slower on a quiet machine: it put the
decoding on the replaying thread, which also runs all the per-event Python (1M-row replay by 3 workers: 35.7 ->
32.7 ms waiting instead; 4M rows 124 -> 117 ms; a lone reader of 2M rows 57.6 -> 55.3 ms). 5 ms was still
too short on a busy machine (34.3 against 33.1 ms waiting for good); a wait this long means the pool is kept
busy by other readers or writers of the process, and the reader goes on by itself."""
PER_CORE = 4
"""Events all readers of a process may hold decoded ahead, per pool thread (``_budget``)."""
_held = 0
"""Events decoded (or being decoded) ahead and not yet taken, in all readers of the process: a replayer with
many parts open must not hold two decoded batches per part."""
_lock = threading.RLock()
"""Guards ``_held`` and ``_live``; re-entrant, as ``ReadAhead.__del__`` gives back what it held
and may run from a garbage collection inside a section that holds it."""
_live = 0
"""``ReadAhead``s open in the process: a reader alone decodes up to its depth ahead, one among several at most
``SHARED_DEPTH``."""
SHARED_DEPTH = 2
"""Events ahead per reader while several read at once. Deeper, a worker merging three parts got slower (1M rows:
60.9 -> 64.3 ms with four, loaded); three, with the reader waiting for the pool (``PATIENCE``), was no faster in
rounds of rotating order (1M rows 32.4 against 32.7 ms, 4M 120.0 against 117.1 ms) and a first replay in a fresh
process paid for the fresh pages of the deeper queue in system time (0.74x its steady state, target 0.8)."""


def _budget() -> int:
    """How many events all readers of the process may hold decoded ahead at once: ``PER_CORE`` per pool thread.
    With two, a replayer merging three parts left a quarter of its large events to be decoded in place (replay
    of 5M rows: 0.34 s, 0.31 s with four)."""
    return PER_CORE * workers.size()


def _hold() -> bool:
    global _held
    with _lock:
        if _held >= _budget():
            return False
        _held += 1
        return True


def _give_back(n: int) -> None:
    global _held
    if n:
        with _lock:
            _held -= n


def depth() -> int:
    """How many events each reader decodes ahead at most (``EVENTLOG_READ_AHEAD``; 4 on a machine with more
    than one core, else 0): a reader alone in its process; one among several keeps at most ``SHARED_DEPTH``."""
    raw = os.environ.get("EVENTLOG_READ_AHEAD", "")
    if raw.strip():
        try:
            return max(0, int(raw))
        except ValueError:
            raise ValueError(f"EVENTLOG_READ_AHEAD={raw!r} is not a whole number of events") from None
    return 4 if workers.CORES > 1 else 0


class BadChecksum(Exception):
    """An event decoded ahead fails its index entry's checksum (the reader reports it as it would in place)."""


def _warm_thread() -> None:
    """What a thread pays on its first decode (pyarrow's per-thread allocator state, zstd contexts), paid now."""
    pa.ipc.open_stream(_WARM_STREAM, options=_ONE_THREAD).read_next_batch().validate(full=True)


def warm() -> None:
    """Start the pool's threads and let each decode a small batch, so that the first replay of a process does
    not pay for it (``open_log`` calls this once, after ``eventlog.preload``; a no-op when decoding ahead is
    off or was warmed already)."""
    global _WARM_STREAM
    if workers.started() or depth() == 0:
        return
    if _WARM_STREAM is None:
        n = 8192  # big enough that pyarrow really compresses it (a buffer zstd cannot shrink is stored raw)
        batch = pa.record_batch([pa.array(range(n)), pa.array([f"{i:032x}" for i in range(n)])], names=["x", "s"])
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batch.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as w:
            w.write_batch(batch)
        _WARM_STREAM = sink.getvalue()
    ex = workers.pool()
    threads = workers.size()
    meet = threading.Barrier(threads)

    def one() -> None:
        _warm_thread()
        meet.wait(timeout=1)  # each thread takes one: none returns before all have started

    for f in [ex.submit(one) for _ in range(threads)]:
        try:
            f.result()
        except threading.BrokenBarrierError:  # fewer threads were started: they start warm enough later
            pass


_WARM_STREAM: pa.Buffer | None = None


def _forget_held() -> None:  # a forked child (Spark's Python workers) holds nothing of the parent's
    global _lock, _held, _live
    _lock = threading.RLock()
    _held = _live = 0


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_forget_held)


_ONE_THREAD = pa.ipc.IpcReadOptions(use_threads=False)


def single_threaded(decoder: SegmentDecoder) -> SegmentDecoder:
    """``decoder``, set to decompress an event's buffers on the calling thread: events decoded ahead run side by
    side already, and pyarrow's own thread pool would only add hand-offs (so does a reader's own decoder while it
    decodes ahead: the events it decodes itself are those the busy pool had not begun)."""
    if hasattr(decoder, "read_options"):
        decoder.read_options = _ONE_THREAD
    return decoder


def decode(decoder: SegmentDecoder, mapped: pa.Buffer, offset: int, length: int,
           crc: int | None) -> tuple[int, Event, int | None]:
    """The event at ``offset`` (checksum first, when its index entry gives one): ``(seq, event, write time)``."""
    if crc is not None and ix.checksum(mapped.slice(offset, length)) != crc:
        raise BadChecksum()
    seq, event = decoder.decode_at(mapped, offset, length)
    return seq, event, getattr(decoder, "last_ts", None)


def wait(fut: Future) -> "tuple[int, Event, int | None] | None":
    """What ``decode`` gave for an event handed to the pool (its error raised as ``decode`` raised it); None when
    no pool thread began it within ``PATIENCE``: it is taken back, for the reader to decode in place."""
    if PATIENCE is not None:
        try:
            return fut.result(timeout=PATIENCE)
        except FutureTimeout:
            if fut.cancel():
                return None
    return fut.result()


def _run_chunk(ahead: "ReadAhead", decoder: SegmentDecoder, mapped: pa.Buffer,
               items: "list[tuple[int, int, int | None, Future]]") -> None:
    """Decode a chunk of a segment's events in order with one decoder, on a pool thread, each into its future
    (set as soon as it is decoded, so the reader takes the first while the rest decode). After a failure the
    decoder's state is unknown: the events after it are left to the reader (cancelled)."""
    failed = False
    for offset, length, crc, fut in items:
        if failed or ahead.closed:
            fut.cancel()  # left to the reader (decoded in place if it is read)
            continue
        if not fut.set_running_or_notify_cancel():
            continue  # the reader took it back before it started (``wait``) and decodes it itself
        try:
            fut.set_result(decode(decoder, mapped, offset, length, crc))
        except BaseException as e:  # noqa: BLE001 - handed to the reader, which reports it as in place
            fut.set_exception(e)
            failed = True
    if not failed:
        ahead.give_decoder(decoder)


class ReadAhead:
    """The events of one segment being decoded ahead, by seq; ``make_decoder`` builds a decoder of the
    segment's prefix (one per chunk in flight). Events are handed to the pool in chunks of up to ``CHUNK``
    (one hand-off per chunk, not per event), each event with its own future."""

    def __init__(self, make_decoder: Callable[[], SegmentDecoder], depth: int) -> None:
        global _live
        self._make = make_decoder
        self._depth = depth
        with _lock:
            _live += 1
        self._open = True
        self.closed = False
        """The reader moved off the segment: chunks still running stop decoding."""
        self._free: list[SegmentDecoder] = []
        self._flight: dict[int, tuple[int, int, Future]] = {}
        self._cursor: tuple[int, int, pa.Buffer] | None = None
        """``(seq, offset, mapping)`` where the last look stopped: the events before it were started or are not
        to be decoded ahead, so the next look resumes there instead of walking them again."""

    def take(self, seq: int, offset: int, length: int) -> "Future | None":
        """The decoding of event ``seq`` at ``offset`` handed to the pool, if it was (and placed it there): its
        result is ``wait``'s."""
        item = self._flight.pop(seq, None)
        if item is None:
            return None
        _give_back(1)
        at, n, fut = item
        if (at, n) != (offset, length):
            return None
        return fut

    def give_decoder(self, dec: SegmentDecoder) -> None:
        """A decoder whose chunk decoded without error, free for the next chunk."""
        self._free.append(dec)

    def start(self, files, mapped: pa.Buffer, seq: int, end: int) -> None:  # noqa: ANN001
        """Start decoding the large Messages events that follow event ``seq - 1`` (which ends at ``end``),
        as far as their index entries are whole and their bytes are mapped, a chunk at a time."""
        depth = self._depth if _live <= 1 else min(self._depth, SHARED_DEPTH)
        room = depth - len(self._flight)
        if room < 1:
            return
        s = seq
        if self._cursor is not None and self._cursor[0] > seq and self._cursor[2] is mapped:
            s, end = self._cursor[0], self._cursor[1]
        chunk: list[tuple[int, int, int, int | None]] = []
        try:
            while s < seq + LOOK and len(chunk) < room:
                e = files.entry(s)
                if not isinstance(e, ix.IndexEntry) or e.seq != s or e.offset != end or \
                        e.offset + e.length > mapped.size:
                    break
                if s not in self._flight and e.kind == ix.KIND_MESSAGES and e.length >= MIN_BYTES:
                    if not _hold():
                        break
                    chunk.append((s, e.offset, e.length, e.crc))
                s, end = s + 1, e.offset + e.length
        finally:
            self._cursor = (s, end, mapped)
            self._submit(mapped, chunk)

    def _submit(self, mapped: pa.Buffer, events: "list[tuple[int, int, int, int | None]]") -> None:
        for i in range(0, len(events), CHUNK):
            items = []
            for s, offset, length, crc in events[i:i + CHUNK]:
                fut: Future = Future()
                self._flight[s] = (offset, length, fut)
                items.append((offset, length, crc, fut))
            dec = self._free.pop() if self._free else self._make()
            workers.pool().submit(_run_chunk, self, dec, mapped, items)

    def close(self) -> None:
        """Forget what is decoding ahead (the reader moved off the segment): it is never taken."""
        global _live
        self.closed = True
        flight, self._flight = self._flight, {}
        _give_back(len(flight))
        if getattr(self, "_open", False):
            self._open = False
            with _lock:
                _live = max(0, _live - 1)

    def __del__(self) -> None:
        self.close()


__all__ = ["BadChecksum", "CHUNK", "MIN_BYTES", "ReadAhead", "decode", "wait"]
