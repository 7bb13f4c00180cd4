"""Writing one part of a file log: appends to size-rotated segments, and recovery when a writer opens a
part a crashed writer left behind.

Recovery (FORMAT.md 3.3) keeps every whole, valid event of the newest segment — through its index entry
and CRC-32, or, where the index has no whole entry, by the container's framing and a full decode — and
rebuilds the index to list exactly those. It cuts only a torn tail: bytes after the last whole event that
hold no whole event. A failing event followed by a whole one is damage, not a torn tail: the writer raises
CorruptLogError and changes nothing. Every step is safe to interrupt: the next writer redoes what is left
(indexes are replaced atomically, an index is removed before its segment, leftovers are removed first).
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from eventlog.encoding import EventCodec, SegmentDecoder, SegmentEncoder
from eventlog.errors import CorruptLogError, EventLogError, SequenceError, WriterFencedError
from eventlog.events import Event, Messages, Progress
from eventlog.header import StreamHeader
from eventlog.log import PartWriter
from eventlog.writer_mark import EPOCH_KEY, MAX_EPOCH, WRITER_KEY, WriterMark

from . import index as ix
from .codec import file_codec
from .framing import ArrowFraming, Malformed
from .layout import LOCK_FILE, layout_for
from .reader import io_error, raw_decode_errors, segment_mark
from .segment import Place, SegmentFiles, Stop
from .storage import AppendFile, MemoryFile, Storage

if TYPE_CHECKING:
    from .log import FileLog

_log = logging.getLogger("eventlog")

_AHEAD = 6
"""Messages events a ``sync="none"`` writer lets be encoded ahead at once before it waits for the oldest. With
two, the caller waited for the pool after every few batches and the pool for the caller in between (2M rows in
10k-row batches: 118 ms; with six, 96 ms, a plain pyarrow writer 95 ms)."""
_AHEAD_BYTES = 32 << 20
"""...and at most this many bytes of their records (the copies being encoded), unless only ``_AHEAD_ANY`` are:
large events are encoded two at a time, as before."""
_AHEAD_ANY = 2
"""Events encoded ahead at once whatever their size."""

_QUEUEABLE_UPDATES = 1024
"""A Progress event with at most this many updates is far inside every limit: it may wait in the queue behind
events being encoded (a larger one is encoded in the caller, so that a LimitError is the caller's)."""


def _queueable(event: Event) -> bool:
    return isinstance(event, Progress) and len(event.updates) <= _QUEUEABLE_UPDATES


_PROBE_LIMIT = 1 << 14
"""Candidate event starts a recovery tries after a torn tail before it decides nothing whole follows."""


@dataclass(frozen=True)
class Recovery:
    """What a writer that reopened a part after a crash repaired: a torn tail it cut, an index it rebuilt."""

    stream: str
    part: int
    path: str
    events_cut: int
    """Index entries removed (entries of events that were not whole)."""
    bytes_cut: int
    """Bytes cut from the end of the segment (or the size of a segment removed for holding no event)."""
    next_seq: int
    """Where appending continues."""
    events_indexed: int = 0
    """Whole events the index did not list (or listed in a damaged entry) that were added to it."""


@dataclass
class _OpenSegment:
    first_seq: int
    encoder: SegmentEncoder
    data: AppendFile
    index: AppendFile
    size: int
    count: int = 0
    dirty: bool = False


class FilePartWriter(PartWriter):
    """Appends one part's events to segments; recovers what a crashed writer left when it opens."""

    def __init__(self, log: "FileLog", header: StreamHeader, part: int, sync: str, *, continues: bool = False) -> None:
        self._log = log
        self._st: Storage = log._st
        self.header = header
        self.stream = header.stream
        self.part = part
        self._sync_mode = sync
        self._codec: EventCodec = file_codec(header, avro_codec=log.avro_codec)
        self._layout = layout_for(header.version)
        self._dir = log._part_dir(header, part)
        try:
            self._st.make_dirs(self._dir)
            self._lock = self._st.lock(self._st.join(self._dir, LOCK_FILE))
        except OSError as e:
            raise io_error(e, writing=True, path=self._dir, stream=self.stream, part=self.part) from None
        self._seg: _OpenSegment | None = None
        self._ahead = sync == "none" and log.encode_ahead and hasattr(self._codec, "start")
        """Encode Messages events ahead on a pool thread (``sync="none"``: nothing is promised before rotation,
        ``flush`` or ``close``, so an event may reach the files after ``append`` returned)."""
        self._pending: deque[tuple[int, Event, object]] = deque()
        """Events appended (their sequence ids given) but not yet written: being encoded, or queued behind one."""
        self._closed = False
        self._failed: EventLogError | None = None
        """Why this writer can append nothing more (a segment it could not put, or a writer that fenced it)."""
        self.recovery: Recovery | None = None
        try:
            self._next_seq = self._recover()
        except OSError as e:
            self._st.unlock(self._lock)
            raise io_error(e, writing=True, path=self._dir, stream=self.stream, part=self.part) from None
        except BaseException:
            self._st.unlock(self._lock)
            raise
        if self.recovery is not None:
            log.recoveries.append(self.recovery)
        try:
            newest = self._newest_mark()
            self.mark: WriterMark = (newest if continues and newest is not None
                                     else WriterMark.new((newest.epoch if newest else 0) + 1))
            """This incarnation's writer epoch and id, stored in the metadata of every segment it creates (the
            newest segment's when ``continues``)."""
        except BaseException:
            self._st.unlock(self._lock)
            raise

    def _newest_mark(self) -> WriterMark | None:
        """The writer mark of the part's newest segment (epochs never decrease: the highest); None for none."""
        segs = self._layout.list_segments(self._st, self._dir, self.header.encoding)
        if not segs:
            return None
        f = self._files(segs[-1])
        try:
            f.refresh()
            try:
                end = f.prefix()
            except Malformed as m:
                raise f.error(f"damaged segment prefix: {m.reason}", offset=m.offset) from None
            if end is None:
                raise f.error("segment ends inside its prefix", offset=0)
            return segment_mark(self._codec, f.read(0, end), stream=self.stream, part=self.part,
                                path=f.data_path)
        except OSError as e:
            raise io_error(e, stream=self.stream, part=self.part) from None
        finally:
            f.close()

    @property
    def next_seq(self) -> int:
        return self._next_seq

    def _index_path(self, first_seq: int) -> str:
        return self._st.join(self._dir, self._layout.index_name(first_seq))

    def _open_path(self, first_seq: int) -> str:
        return self._st.join(self._dir, self._layout.open_name(first_seq, self.header.encoding))

    def _sealed_path(self, first_seq: int) -> str:
        return self._st.join(self._dir, self._layout.sealed_name(first_seq, self.header.encoding))

    def _files(self, first_seq: int) -> SegmentFiles:
        return SegmentFiles(self._st, self._dir, first_seq, self._layout, self.header.encoding,
                            stream=self.stream, part=self.part)

    # -- recovery --------------------------------------------------------------------------------------

    def _recover(self) -> int:
        for name in self._st.list_dir(self._dir):  # temporary files of an interrupted index rebuild
            if name.endswith(".tmp"):
                self._st.remove(self._st.join(self._dir, name))
        segs = self._layout.list_segments(self._st, self._dir, self.header.encoding)
        newest = segs[-1] if segs else 0
        for first in self._layout.list_indexes(self._st, self._dir):
            if first > newest:  # an index whose segment was removed by an interrupted recovery
                path = self._index_path(first)
                _log.warning("stream %r part %d: removing %s, an index without its segment", self.stream,
                             self.part, path)
                self._st.remove(path)
        removed: list[Recovery] = []
        rec: Recovery | None = None
        next_seq = 1
        while segs:
            first = segs[-1]
            seg_next, rec = self._recover_segment(first)
            if seg_next is not None:
                next_seq = seg_next
                break
            # the newest segment holds no whole event (a crash right after it was created): drop it, index
            # first, so that an interruption leaves a segment without an index, which the next writer drops
            assert rec is not None
            removed.append(rec)
            rec = None
            index_path = self._index_path(first)
            if self._st.exists(index_path):
                self._st.remove(index_path)
            for path in (self._open_path(first), self._sealed_path(first)):
                if self._st.exists(path):
                    self._st.remove(path)
            self._st.sync_dir(self._dir)
            _log.warning("stream %r part %d: removed %s (%d bytes), a segment holding no whole event", self.stream,
                         self.part, removed[-1].path, removed[-1].bytes_cut)
            segs.pop()
        if rec is not None:
            self._note(rec)
        if rec is not None or removed:
            parts = ([rec] if rec is not None else []) + removed
            self.recovery = Recovery(self.stream, self.part, parts[0].path, sum(r.events_cut for r in parts),
                                     sum(r.bytes_cut for r in parts), next_seq, rec.events_indexed if rec else 0)
        return next_seq

    def _note(self, rec: Recovery) -> None:
        if rec.events_cut or rec.bytes_cut:
            _log.warning("stream %r part %d: cut a torn tail of %d event(s), %d byte(s) in %s; appending continues "
                         "at seq %d", self.stream, self.part, rec.events_cut, rec.bytes_cut, rec.path, rec.next_seq)
        if rec.events_indexed:
            _log.warning("stream %r part %d: rebuilt the index of %s: %d whole event(s) it did not list were added",
                         self.stream, self.part, rec.path, rec.events_indexed)

    def _max_prefix(self) -> int:
        """The longest prefix a writer creates (the longest epoch; writer ids are 16 characters): a segment no
        longer than it that does not frame holds no whole event (any event is longer than the 18 bytes the
        epoch's digits may vary by)."""
        return len(self._codec.new_segment({EPOCH_KEY: str(MAX_EPOCH).encode(), WRITER_KEY: b"w" * 16}).prefix)

    def _recover_segment(self, first: int) -> tuple[int | None, Recovery | None]:
        """Repair the newest segment: ``(next_seq, what was repaired or None)``, or ``(None, Recovery)``
        when it holds no whole event and is to be removed."""
        f = self._files(first)
        try:
            f.refresh()
            return self._repair(f)
        finally:
            f.close()

    def _repair(self, f: SegmentFiles) -> tuple[int | None, Recovery | None]:
        first = f.first_seq
        try:
            prefix = f.prefix()
        except Malformed as m:
            # a crash may leave a new segment's prefix short or zero-filled; anything larger is damage
            if f.data_size <= self._max_prefix() and not self._verified_entry(f, first, None):
                prefix = None
            else:
                raise f.error(f"damaged segment prefix: {m.reason}", offset=m.offset) from None
        if prefix is None:
            return None, Recovery(self.stream, self.part, f.data_path, f.entries(), f.data_size, first)
        decoder: list[SegmentDecoder] = []
        good: list[tuple[Place, int, int]] = []  # (place, kind, crc)
        seq, offset = first, prefix
        stop: Stop | None = None
        bad: Place | None = None
        while True:
            try:
                step = f.next_place(seq, offset)
            except Malformed:
                break
            if isinstance(step, Stop):
                stop = step
                break
            checked = self._check_event(f, step, decoder)
            if checked is None:
                bad = step
                break
            good.append((step, *checked))
            seq, offset = step.seq + 1, step.end
        clean_end = (stop is not None and stop.problem is None and
                     (f.suffix_whole(offset) if stop.eos else f.data_size == offset))
        if f.is_sealed and not clean_end:
            raise f.error("sealed segment does not end with its whole suffix (end-of-stream marker and footer): "
                          "damage, the writer changes nothing", seq=seq, offset=offset)
        if bad is not None and bad.entry is not None:
            # all its bytes are there and fail the CRC its entry vouches for: torn only if they end in the
            # zeros of blocks a crash left unwritten, else damage
            torn = len(f.read(offset, f.data_size - offset).rstrip(b"\0")) < bad.length
        else:
            torn = (stop is not None and stop.indexed) or f.tail_is_torn(offset)
        if not clean_end and (not torn or self._whole_after(f, seq, offset, decoder)):
            raise f.error("event fails its checksum or does not decode in the middle of a segment or at its end, "
                          "and it is no torn write (damage: the writer changes nothing)", seq=seq, offset=offset)
        if not good:
            return None, Recovery(self.stream, self.part, f.data_path, f.entries(), f.data_size, first)
        index_complete = f.index_ok and all(p.entry is not None for p, _, _ in good)
        index_end = ix.entry_position(first, seq)
        cut_data = not clean_end
        events_cut = max(0, f.entries() - len(good))
        indexed = 0
        if not index_complete:  # rebuild it from the segment, atomically
            entries = [ix.pack_entry(p.entry or ix.IndexEntry(p.seq, p.offset, p.length, crc, kind))
                       for p, kind, crc in good]
            indexed = sum(1 for p, _, _ in good if p.entry is None)
            self._st.write_file(f.index_path, ix.pack_header(first) + b"".join(entries))
        elif f.index_size > index_end:
            self._st.truncate(f.index_path, index_end)
        bytes_cut = 0
        if cut_data and f.data_size > offset:
            bytes_cut = f.data_size - offset
            self._st.truncate(f.data_path, offset)
        if self._layout.seals and not f.is_sealed:
            self._seal(f, [p for p, _, _ in good], suffix_written=clean_end and stop is not None and stop.eos)
        if not (events_cut or bytes_cut or indexed):
            return seq, None
        return seq, Recovery(self.stream, self.part, f.data_path, events_cut, bytes_cut, seq, indexed)

    def _seal(self, f: SegmentFiles, places: list[Place], *, suffix_written: bool) -> None:
        """Seal a 2.x segment a crashed writer left open: write its suffix (the end-of-stream marker and the
        footer listing ``places``, Arrow) unless it is whole already, then give it its sealed name."""
        if not suffix_written and f.encoding == "arrow":
            suffix = f.suffix_for([(p.offset, p.length) for p in places])
            out = self._st.append_to(f.data_path)
            try:
                out.write(suffix)
                out.fsync()
            finally:
                out.close()
        self._st.rename(f.data_path, f.sealed_path)
        _log.info("stream %r part %d: sealed %s, which its writer left open", self.stream, self.part, f.sealed_path)

    def _check_event(self, f: SegmentFiles, place: Place, decoder: list[SegmentDecoder]) -> tuple[int, int] | None:
        """``(kind, crc)`` of a whole, valid event; None when it is not (its CRC fails or it does not decode)."""
        body = f.read(place.offset, place.length)
        if len(body) < place.length:
            return None
        if place.entry is not None:
            return (place.entry.kind, place.entry.crc) if ix.checksum(body) == place.entry.crc else None
        event = self._decode(f, place.seq, place.offset, body, decoder)
        if event is None:
            return None
        return (ix.KIND_MESSAGES if isinstance(event, Messages) else ix.KIND_PROGRESS), ix.checksum(body)

    def _try_decode(self, f: SegmentFiles, body: bytes, decoder: list[SegmentDecoder]) -> tuple[int, Event] | None:
        """``(seq, event)`` decoded from ``body`` (the segment's decoder made once, kept in ``decoder``), or None
        when the bytes do not decode."""
        try:
            if not decoder:
                decoder.append(self._codec.segment_decoder(f.read(0, f.prefix_len or 0), part=self.part))
            return decoder[0].decode(body)
        except (CorruptLogError, *raw_decode_errors()):
            return None

    def _decode(self, f: SegmentFiles, seq: int, offset: int, body: bytes,
                decoder: list[SegmentDecoder]) -> Event | None:
        """The event ``seq`` decoded from ``body``, or None when the bytes are not that event."""
        got = self._try_decode(f, body, decoder)
        return got[1] if got is not None and got[0] == seq else None

    def _verified_entry(self, f: SegmentFiles, seq: int, offset: int | None) -> bool:
        """Whether the index has an entry of ``seq`` or later (at or after ``offset``) whose event verifies."""
        for s in range(seq, f.first_seq + f.entries()):
            e = f.entry(s)
            if isinstance(e, ix.IndexEntry) and e.seq == s and (offset is None or e.offset >= offset):
                body = f.read(e.offset, e.length)
                if len(body) == e.length and ix.checksum(body) == e.crc:
                    return True
        return False

    def _whole_after(self, f: SegmentFiles, seq: int, offset: int, decoder: list[SegmentDecoder]) -> bool:
        """Whether a whole, valid event lies after the first bytes (at ``offset``) that are not one: an index
        entry that verifies, or an event the container's framing finds at a later start and that decodes
        to a later seq. Only then is the tail damage rather than torn."""
        if self._verified_entry(f, seq, offset):
            return True
        if f.prefix_len is None:
            return False
        framing = f.framing
        chunk = 1 << 20
        tried = 0
        marker = framing.marker
        if not marker:
            return False
        pos = offset + 1
        while pos < f.data_size and tried < _PROBE_LIMIT:
            window = f.read(pos, chunk + len(marker) - 1)  # markers across the chunk's end are found once
            i = window.find(marker)
            while 0 <= i < chunk and tried < _PROBE_LIMIT:
                at = pos + i
                i = window.find(marker, i + 1)
                start = at if isinstance(framing, ArrowFraming) else at + len(marker)  # Avro: after a sync marker
                tried += 1
                try:
                    n = framing.body_length(f.read, f.data_size, start)
                except Malformed:
                    continue
                if n is not None and n > 0 and self._decode_any(f, f.read(start, n), seq, decoder):
                    return True
            pos += chunk
        return False

    def _decode_any(self, f: SegmentFiles, body: bytes, seq: int, decoder: list[SegmentDecoder]) -> bool:
        got = self._try_decode(f, body, decoder)
        return got is not None and got[0] >= seq

    # -- appending -------------------------------------------------------------------------------------

    def _open_segment(self, first_seq: int) -> None:
        enc = self._codec.new_segment(dict(self.mark.items()), part=self.part)
        path = self._open_path(first_seq)
        if self._layout.seals and self._st.exists(self._sealed_path(first_seq)):
            self._failed = self._fenced(first_seq)
            raise self._failed
        if self._st.objects:  # written whole when sealed (FORMAT.md §3.5): nothing is created before
            data, index = MemoryFile(), MemoryFile()
            data.write(enc.prefix)
            index.write(ix.pack_header(first_seq))
            self._seg = _OpenSegment(first_seq, enc, data, index, len(enc.prefix))
            return
        try:
            data = self._st.create(path)
        except FileExistsError:
            raise SequenceError("a segment starting at this seq already exists (another writer?)",
                                stream=self.stream, part=self.part, seq=first_seq, path=path) from None
        data.write(enc.prefix)
        try:
            index = self._st.create(self._index_path(first_seq))
        except FileExistsError:
            data.close()
            raise SequenceError("an index for a new segment already exists (another writer?)",
                                stream=self.stream, part=self.part, seq=first_seq,
                                path=self._index_path(first_seq)) from None
        index.write(ix.pack_header(first_seq))
        if self._sync_mode == "fsync":
            data.fsync()
            index.fsync()
            self._st.sync_dir(self._dir)
        self._seg = _OpenSegment(first_seq, enc, data, index, len(enc.prefix))

    def _close_segment(self) -> None:
        seg = self._seg
        if seg is None:
            return
        self._seg = None
        seg.data.write(seg.encoder.suffix)
        if self._st.objects:
            self._put(seg)
            return
        if self._sync_mode == "fsync":  # before the rename: a sealed name promises a whole footer (OS crashes too)
            seg.data.fsync()
            seg.index.fsync()
        # both files are closed (their bytes handed to the OS) before a next segment is created: a reader
        # that sees the next segment and then re-reads this one sees all of it
        seg.data.close()
        seg.index.close()
        if self._layout.seals:
            self._st.rename(self._open_path(seg.first_seq), self._sealed_path(seg.first_seq))

    def _fenced(self, first_seq: int) -> WriterFencedError:
        path = self._sealed_path(first_seq)
        return WriterFencedError(f"another writer wrote the segment starting at seq {first_seq} of this part first; "
                                 f"this writer can append nothing more (its events since its last sync are not in "
                                 f"the log)", stream=self.stream, part=self.part, seq=first_seq, path=path)

    def _put(self, seg: _OpenSegment) -> None:
        """Put a sealed segment (then its index) on an object store; the conditional create of the segment is
        where a writer learns that another one wrote this seq first (it is then fenced)."""
        assert isinstance(seg.data, MemoryFile) and isinstance(seg.index, MemoryFile)
        path = self._sealed_path(seg.first_seq)
        try:
            won = self._st.create_exclusive(path, bytes(seg.data.data))
        except OSError as e:
            raise self._io(e, path) from None
        if not won:
            self._failed = self._fenced(seg.first_seq)
            raise self._failed
        try:  # the segment is the truth: a missing index is rebuilt by the next writer, read around by readers
            self._st.write_file(self._index_path(seg.first_seq), bytes(seg.index.data))
        except OSError as e:
            raise self._io(e, self._index_path(seg.first_seq)) from None

    def _check_usable(self) -> None:
        if self._closed:
            raise EventLogError("writer is closed", stream=self.stream, part=self.part)
        if self._failed is not None:
            raise EventLogError(f"writer failed earlier and can append nothing more (open a new one): {self._failed}",
                                stream=self.stream, part=self.part)

    def _io(self, e: OSError, path: str | None = None) -> EventLogError:
        """The writer cannot know what of its last write reached the files: it takes nothing more. The error
        names the file being written (``path``, else the open segment: an OSError of a write often names none)."""
        if path is None:
            path = self._open_path(self._seg.first_seq) if self._seg is not None else self._dir
        self._failed = io_error(e, writing=True, path=path, stream=self.stream, part=self.part)
        return self._failed

    def append(self, event: Event) -> int:
        self._check_usable()
        seq = self._next_seq
        if self._ahead:
            started = self._codec.start(event, seq)  # type: ignore[attr-defined]
            if started is not None or (self._pending and _queueable(event)):
                self._pending.append((seq, event, started))
                self._next_seq = seq + 1
                self._write_ready()
                return seq
            self._write_pending()
        self._write(seq, event)
        self._next_seq = seq + 1
        return seq

    def _write(self, seq: int, event: Event, started: object = None) -> None:
        """Encode ``event`` as ``seq`` into the open segment (rotating first when it is full) and write it."""
        try:
            if self._seg is not None and self._seg.size >= self._log.segment_bytes:
                self._close_segment()
            if self._seg is None:
                self._open_segment(seq)
        except OSError as e:
            raise self._io(e, self._open_path(self._seg.first_seq if self._seg is not None else seq)) from None
        seg = self._seg
        assert seg is not None
        body = seg.encoder.encode(seq, event, started) if started is not None else seg.encoder.encode(seq, event)
        kind = ix.KIND_MESSAGES if isinstance(event, Messages) else ix.KIND_PROGRESS
        try:
            seg.data.write(body)
            seg.index.write(ix.pack_entry(ix.IndexEntry(seq, seg.size, len(body), ix.checksum(body), kind)))
        except OSError as e:
            raise self._io(e) from None
        seg.size += len(body)
        seg.count += 1
        seg.dirty = True

    # -- encoding ahead (sync="none") -------------------------------------------------------------------

    def _write_ready(self) -> None:
        """Write the queued events whose encoding has finished, in order; wait for the oldest while more than
        ``_AHEAD`` events, or more than ``_AHEAD_ANY`` holding over ``_AHEAD_BYTES``, are being encoded (so that
        memory stays bounded)."""
        while self._pending:
            seq, event, started = self._pending[0]
            if started is not None and not started.done():  # type: ignore[attr-defined]
                flight = [s for _, _, s in self._pending if s is not None]
                if len(flight) <= _AHEAD_ANY or (len(flight) <= _AHEAD
                                        and sum(s.nbytes for s in flight) <= _AHEAD_BYTES):  # type: ignore[attr-defined]
                    return
            self._write_head()

    def _write_pending(self) -> None:
        """Write every queued event (waiting for their encoding): before anything that needs them in the
        files (a sync that makes them durable, rotation, close) and before an event encoded in the caller."""
        while self._pending:
            self._write_head()

    def _write_head(self) -> None:
        seq, event, started = self._pending.popleft()
        try:
            self._write(seq, event, started)
        except BaseException as e:
            # later events already have their sequence ids: this writer can append nothing more
            self._pending.clear()
            if self._failed is None:
                self._failed = e if isinstance(e, EventLogError) else EventLogError(
                    f"encoding event {seq} failed: {type(e).__name__}: {e}", stream=self.stream, part=self.part,
                    seq=seq)
            if isinstance(e, EventLogError):
                raise
            raise self._failed from e

    def sync(self) -> None:
        self._sync(self._sync_mode)

    def flush(self) -> None:
        """Make every event appended so far durable now, whatever the sync mode (fsync on a disk; the sealed
        segment put on an object store): how a ``sync="none"`` writer makes its events durable at a point of its
        choosing (``Capture.flush``)."""
        self._sync("fsync")

    def _sync(self, mode: str) -> None:
        if self._failed is not None:
            self._check_usable()
        if mode == "none":
            if self._pending:
                self._write_ready()
            return
        self._write_pending()
        seg = self._seg
        if seg is None or not seg.dirty:
            return
        try:
            if self._st.objects:  # seal the segment: the object is durable and visible once put
                self._close_segment()
                return
            seg.dirty = False
            if mode == "fsync":
                seg.data.fsync()  # data before index: an entry never becomes durable before its event
                seg.index.fsync()
            else:
                seg.data.flush()
                seg.index.flush()
        except OSError as e:
            raise self._io(e) from None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._failed is None:
                self._write_pending()
                self._close_segment()
        finally:
            self._pending.clear()
            if self._failed is not None:
                self._abandon_segment()
            self._st.unlock(self._lock)

    def _abandon_segment(self) -> None:
        """Close a failed writer's open segment as it is, unsealed (what was written reaches the files; the
        next writer of the part recovers it)."""
        seg, self._seg = self._seg, None
        if seg is None or self._st.objects:
            return
        for f in (seg.data, seg.index):
            try:
                f.close()
            except OSError:
                pass


__all__ = ["FilePartWriter", "Recovery"]
