"""The file log: a directory per stream, a folder per part, size-rotated segments named by first sequence id.

::

    <root>/<stream>/header.json
    <root>/<stream>/part-00003/00000000000000000001.arrows   (or .avro)
    <root>/<stream>/part-00003/00000000000000000001.index
    <root>/<stream>/part-00003/00000000000000004711.arrows   (next segment, first seq 4711)

Each writer session starts a new segment, so a segment is never appended to after its writer closed or
crashed; reopening a part first cuts a torn tail of its last segment back to the last whole event.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Iterator

import pyarrow as pa
import pyarrow.fs as pafs

from eventlog.encoding import EventCodec, SegmentDecoder, SegmentEncoder, codec_for
from eventlog.errors import CorruptLogError, EventLogError, SequenceError, StreamNotFoundError
from eventlog.events import Entry, Event, Messages
from eventlog.header import StreamHeader, check_stream_name
from eventlog.log import SYNC_MODES, Log, PartReader, PartStats, PartWriter

from . import index as ix
from .storage import AppendFile, ArrowFsStorage, LocalStorage, ReadFile, Storage

_log = logging.getLogger("eventlog")

HEADER_FILE = "header.json"
DEFAULT_SEGMENT_BYTES = 64 << 20


def part_dir_name(part: int) -> str:
    """The folder name of a part."""
    return f"part-{part:05d}"


def segment_name(first_seq: int) -> str:
    """The file stem of the segment whose first event is ``first_seq``."""
    return f"{first_seq:020d}"


@dataclass(frozen=True)
class Recovery:
    """A torn tail cut by a writer that reopened a part after a crash."""

    stream: str
    part: int
    path: str
    events_cut: int
    bytes_cut: int
    next_seq: int


def _relocate(e: CorruptLogError, **where: object) -> CorruptLogError:
    """The same error with its location filled in."""
    loc = {k: getattr(e, k) for k in ("stream", "part", "seq", "offset", "path")}
    loc.update({k: v for k, v in where.items() if v is not None})
    return type(e)(e.reason, **loc)  # type: ignore[arg-type]


class FileLog(Log):
    """Streams as directories of Arrow IPC / Avro container segments on a local or ``pyarrow.fs`` filesystem."""

    def __init__(
        self,
        root: str,
        *,
        uri: str | None = None,
        filesystem: pafs.FileSystem | None = None,
        sync: str = "fsync",
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        storage: Storage | None = None,
    ) -> None:
        if sync not in SYNC_MODES:
            raise ValueError(f"sync must be one of {SYNC_MODES}, got {sync!r}")
        if segment_bytes < 1:
            raise ValueError(f"segment_bytes must be positive, got {segment_bytes}")
        if storage is not None:
            self._st: Storage = storage
        elif filesystem is None or isinstance(filesystem, pafs.LocalFileSystem):
            root = os.path.abspath(root)
            self._st = LocalStorage()
        else:
            self._st = ArrowFsStorage(filesystem)
        self.root = root
        self.uri = uri or root
        self.sync_mode = sync
        self.segment_bytes = segment_bytes
        self.recoveries: list[Recovery] = []
        """Torn tails cut by writers opened through this log object."""
        self._headers: dict[str, StreamHeader] = {}

    # -- streams ---------------------------------------------------------------------------------------

    def _stream_dir(self, stream: str) -> str:
        return self._st.join(self.root, check_stream_name(stream))

    def streams(self) -> list[str]:
        return [d for d in self._st.list_dir(self.root) if self._st.exists(self._st.join(self.root, d, HEADER_FILE))]

    def header(self, stream: str) -> StreamHeader:
        if stream in self._headers:
            return self._headers[stream]
        path = self._st.join(self._stream_dir(stream), HEADER_FILE)
        try:
            data = self._st.read_file(path)
        except FileNotFoundError:
            raise StreamNotFoundError(f"no stream {stream!r} in log {self.uri}", stream=stream) from None
        header = StreamHeader.from_json(data, path=path)
        if header.stream != stream:
            raise CorruptLogError(f"header names stream {header.stream!r}", stream=stream, path=path)
        self._headers[stream] = header
        return header

    def create_stream(self, header: StreamHeader) -> StreamHeader:
        d = self._stream_dir(header.stream)
        self._st.make_dirs(d)
        if self._st.create_exclusive(self._st.join(d, HEADER_FILE), header.to_json()):
            self._headers[header.stream] = header
            return header
        stored = self.header(header.stream)
        stored.check_same(header)
        return stored

    def _part_dir(self, header: StreamHeader, part: int) -> str:
        if isinstance(part, bool) or not isinstance(part, int) or not 0 <= part < header.peers:
            raise ValueError(f"part {part!r} out of range: stream {header.stream!r} has peers={header.peers}")
        return self._st.join(self._stream_dir(header.stream), part_dir_name(part))

    def segments(self, stream: str, part: int) -> list[int]:
        """First sequence ids of the part's segments, ascending."""
        header = self.header(stream)
        return _list_segments(self._st, self._part_dir(header, part), codec_for(header).file_suffix)

    def part_stats(self, stream: str, part: int) -> PartStats:
        header = self.header(stream)
        d = self._part_dir(header, part)
        suffix = codec_for(header).file_suffix
        segs = _list_segments(self._st, d, suffix)
        if not segs:
            return PartStats(1, 1, 0, 0)
        size = 0
        for first in segs:
            for ext in (suffix, ".index"):
                path = self._st.join(d, segment_name(first) + ext)
                if self._st.exists(path):
                    f = self._st.open_read(path)
                    size += f.size()
                    f.close()
        try:
            index = self._st.open_read(self._st.join(d, segment_name(segs[-1]) + ".index"))
        except FileNotFoundError:  # a crash between creating a segment and its index: no events in it
            n = 0
        else:
            try:
                n = max(0, (index.size() - ix.HEADER_SIZE) // ix.ENTRY_SIZE)
            finally:
                index.close()
        next_seq = segs[-1] + n
        if n == 0 and len(segs) > 1:
            next_seq = segs[-1]
        return PartStats(segs[0], next_seq, size, len(segs))

    # -- parts -----------------------------------------------------------------------------------------

    def writer(self, stream: str, part: int, *, sync: str | None = None) -> "FilePartWriter":
        header = self.header(stream)
        header.check_writable()
        mode = sync or self.sync_mode
        if mode not in SYNC_MODES:
            raise ValueError(f"sync must be one of {SYNC_MODES}, got {mode!r}")
        return FilePartWriter(self, header, part, mode)

    def reader(self, stream: str, part: int, start: int = 1, *, progress_only: bool = False) -> "FilePartReader":
        if start < 1:
            raise ValueError(f"sequence ids start at 1, got start={start}")
        return FilePartReader(self, self.header(stream), part, start, progress_only)


def _list_segments(st: Storage, part_dir: str, suffix: str) -> list[int]:
    out = []
    for name in st.list_dir(part_dir):
        stem, ext = os.path.splitext(name)
        if ext == suffix and stem.isdigit() and len(stem) == 20:
            out.append(int(stem))
    return sorted(out)


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
    """Appends one part's events to segments; recovers a torn tail when it opens."""

    def __init__(self, log: FileLog, header: StreamHeader, part: int, sync: str) -> None:
        self._log = log
        self._st = log._st
        self.header = header
        self.stream = header.stream
        self.part = part
        self._sync_mode = sync
        self._codec: EventCodec = codec_for(header)
        self._dir = log._part_dir(header, part)
        self._st.make_dirs(self._dir)
        self._lock = self._st.lock(self._st.join(self._dir, ".lock"))
        self._seg: _OpenSegment | None = None
        self._closed = False
        try:
            self._next_seq, self.recovery = self._recover()
        except BaseException:
            self._st.unlock(self._lock)
            raise
        if self.recovery is not None:
            log.recoveries.append(self.recovery)

    @property
    def next_seq(self) -> int:
        return self._next_seq

    def _path(self, first_seq: int, ext: str) -> str:
        return self._st.join(self._dir, segment_name(first_seq) + ext)

    # -- recovery --------------------------------------------------------------------------------------

    def _recover(self) -> tuple[int, Recovery | None]:
        segs = _list_segments(self._st, self._dir, self._codec.file_suffix)
        if not segs:
            return 1, None
        first = segs[-1]
        data_path, index_path = self._path(first, self._codec.file_suffix), self._path(first, ".index")
        good, index_bytes, data_size, data_end = _scan_segment(self._st, data_path, index_path, first, self)
        cut_events = (index_bytes - ix.HEADER_SIZE) // ix.ENTRY_SIZE - len(good) if index_bytes >= ix.HEADER_SIZE else 0
        suffix = self._codec.new_segment().suffix if good else b""
        clean_tail = good and data_size == data_end + len(suffix) and (
            not suffix or self._read(data_path, data_end, len(suffix)) == suffix
        )
        recovery = None
        if not good:
            # nothing whole in the newest segment (a crash right after it was created): drop it
            bytes_cut = data_size
            self._st.remove(data_path)
            if self._st.exists(index_path):
                self._st.remove(index_path)
            next_seq = _last_seq(self._st, self._dir, segs[:-1], self._codec.file_suffix, self) + 1
            if bytes_cut or cut_events:
                recovery = Recovery(self.stream, self.part, data_path, cut_events, bytes_cut, next_seq)
        else:
            next_seq = good[-1].seq + 1
            if cut_events or not clean_tail:
                bytes_cut = data_size - data_end
                if data_size > data_end:
                    self._st.truncate(data_path, data_end)
                if index_bytes > ix.HEADER_SIZE + ix.ENTRY_SIZE * len(good):
                    self._st.truncate(index_path, ix.HEADER_SIZE + ix.ENTRY_SIZE * len(good))
                if bytes_cut or cut_events:
                    recovery = Recovery(self.stream, self.part, data_path, cut_events, bytes_cut, next_seq)
        if recovery is not None:
            _log.warning(
                "stream %r part %d: cut a torn tail of %d event(s), %d byte(s) in %s; appending continues at seq %d",
                self.stream, self.part, recovery.events_cut, recovery.bytes_cut, recovery.path, next_seq,
            )
        return next_seq, recovery

    def _read(self, path: str, offset: int, length: int) -> bytes:
        f = self._st.open_read(path)
        try:
            return f.read_at(offset, length)
        finally:
            f.close()

    # -- appending -------------------------------------------------------------------------------------

    def _open_segment(self, first_seq: int) -> None:
        enc = self._codec.new_segment()
        data = self._st.create(self._path(first_seq, self._codec.file_suffix))
        data.write(enc.prefix)
        index = self._st.create(self._path(first_seq, ".index"))
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
        if self._sync_mode == "fsync":
            seg.data.fsync()
            seg.index.fsync()
        seg.data.close()
        seg.index.close()

    def append(self, event: Event) -> int:
        if self._closed:
            raise EventLogError("writer is closed", stream=self.stream, part=self.part)
        seq = self._next_seq
        if self._seg is not None and self._seg.size >= self._log.segment_bytes:
            self._close_segment()
        if self._seg is None:
            self._open_segment(seq)
        seg = self._seg
        assert seg is not None
        body = seg.encoder.encode(seq, event)
        kind = ix.KIND_MESSAGES if isinstance(event, Messages) else ix.KIND_PROGRESS
        seg.data.write(body)
        seg.index.write(ix.pack_entry(ix.IndexEntry(seq, seg.size, len(body), ix.checksum(body), kind)))
        seg.size += len(body)
        seg.count += 1
        seg.dirty = True
        self._next_seq = seq + 1
        return seq

    def sync(self) -> None:
        seg = self._seg
        if seg is None or self._sync_mode == "none" or not seg.dirty:
            return
        seg.dirty = False
        if self._sync_mode == "fsync":
            seg.data.fsync()  # data before index: an entry never becomes durable before its event
            seg.index.fsync()
        else:
            seg.data.flush()
            seg.index.flush()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._close_segment()
        finally:
            self._st.unlock(self._lock)


def _scan_segment(
    st: Storage, data_path: str, index_path: str, first_seq: int, where: PartWriter
) -> tuple[list[ix.IndexEntry], int, int, int]:
    """Verify a segment: ``(whole entries, index bytes, data bytes, end of the last whole event)``.

    The whole entries are the longest prefix of entries whose event bytes match their checksums; a bad
    entry followed by a good one is damage, not a torn tail, and raises CorruptLogError.
    """
    index_data = st.read_file(index_path) if st.exists(index_path) else b""
    data = st.open_read(data_path)
    try:
        data_size = data.size()
        if len(index_data) < ix.HEADER_SIZE:
            return [], len(index_data), data_size, 0
        try:
            _, stored_first = ix.unpack_header(index_data)
        except ValueError as e:
            raise CorruptLogError(str(e), stream=where.stream, part=where.part, path=index_path) from None
        if stored_first != first_seq:
            raise CorruptLogError(
                f"index says first seq {stored_first}", stream=where.stream, part=where.part, path=index_path
            )
        n = (len(index_data) - ix.HEADER_SIZE) // ix.ENTRY_SIZE
        oks: list[ix.IndexEntry | None] = []
        prev_end: int | None = None
        for i in range(n):
            e = ix.unpack_entry(index_data, ix.HEADER_SIZE + i * ix.ENTRY_SIZE)
            ok = (
                e is not None
                and e.seq == first_seq + i
                and (prev_end is None or e.offset == prev_end)
                and e.offset + e.length <= data_size
                and ix.checksum(data.read_at(e.offset, e.length)) == e.crc
            )
            oks.append(e if ok else None)
            prev_end = e.offset + e.length if e is not None else None
        good: list[ix.IndexEntry] = []
        for i, e in enumerate(oks):
            if e is None:
                if any(x is not None for x in oks[i + 1 :]):
                    raise CorruptLogError(
                        "event fails its checksum in the middle of a segment",
                        stream=where.stream, part=where.part, seq=first_seq + i, path=data_path,
                    )
                break
            good.append(e)
        end = good[-1].offset + good[-1].length if good else 0
        return good, len(index_data), data_size, end
    finally:
        data.close()


def _last_seq(st: Storage, part_dir: str, segs: list[int], suffix: str, where: PartWriter) -> int:
    """The last sequence id in the segments ``segs`` (0 when there are none)."""
    if not segs:
        return 0
    first = segs[-1]
    index_path = st.join(part_dir, segment_name(first) + ".index")
    data = st.read_file(index_path)
    n = (len(data) - ix.HEADER_SIZE) // ix.ENTRY_SIZE
    e = ix.unpack_entry(data, ix.HEADER_SIZE + (n - 1) * ix.ENTRY_SIZE) if n > 0 else None
    if e is None:
        raise CorruptLogError("cannot read the last entry of a closed segment", stream=where.stream,
                              part=where.part, path=index_path)
    return e.seq


class _Cursor:
    """Reading position inside one segment."""

    def __init__(self, st: Storage, data_path: str, index_path: str, first_seq: int) -> None:
        self.first_seq = first_seq
        self.data_path = data_path
        self.index_path = index_path
        self.data: ReadFile = st.open_read(data_path)
        self.index: ReadFile | None = None
        self._st = st
        self.index_pos = ix.HEADER_SIZE
        self.next_seq = first_seq
        self.next_offset: int | None = None
        self.prefix_len: int | None = None
        self.mapped: pa.Buffer | None = None
        self.decoder: SegmentDecoder | None = None

    def close(self) -> None:
        self.mapped = None
        self.decoder = None
        self.data.close()
        if self.index is not None:
            self.index.close()


class FilePartReader(PartReader):
    """Reads one part across its segments, verifying every event's checksum before decoding it."""

    def __init__(self, log: FileLog, header: StreamHeader, part: int, start: int, progress_only: bool) -> None:
        self._st = log._st
        self.header = header
        self.stream = header.stream
        self.part = part
        self._codec = codec_for(header)
        self._dir = log._part_dir(header, part)
        self._next = start
        self._progress_only = progress_only
        self._cur: _Cursor | None = None

    @property
    def next_seq(self) -> int:
        return self._next

    def close(self) -> None:
        if self._cur is not None:
            self._cur.close()
            self._cur = None

    def _err(self, reason: str, cur: _Cursor, **where: object) -> CorruptLogError:
        return CorruptLogError(reason, stream=self.stream, part=self.part, path=cur.data_path, **where)  # type: ignore[arg-type]

    def _open_cursor(self) -> bool:
        segs = _list_segments(self._st, self._dir, self._codec.file_suffix)
        candidates = [s for s in segs if s <= self._next]
        if not candidates:
            if segs:
                raise SequenceError(
                    f"events before seq {segs[0]} are not in the log (asked for seq {self._next})",
                    stream=self.stream, part=self.part, seq=self._next,
                )
            return False
        first = candidates[-1]
        name = segment_name(first)
        self._cur = _Cursor(
            self._st,
            self._st.join(self._dir, name + self._codec.file_suffix),
            self._st.join(self._dir, name + ".index"),
            first,
        )
        return True

    def _next_segment_exists(self, after: int) -> int | None:
        segs = [s for s in _list_segments(self._st, self._dir, self._codec.file_suffix) if s > after]
        return segs[0] if segs else None

    def __iter__(self) -> Iterator[Entry]:
        self.tail_problem = None
        while True:
            if self._cur is None and not self._open_cursor():
                return
            cur = self._cur
            assert cur is not None
            yield from self._read_cursor(cur)
            nxt = self._next_segment_exists(cur.first_seq)
            if nxt is None:
                return
            # a later segment exists, so this one is finished: everything in its index must have been read
            if self._pending_entries(cur):
                raise self._err("segment has index entries that point past its data", cur, seq=cur.next_seq)
            if nxt != cur.next_seq:
                raise SequenceError(
                    f"segment ends at seq {cur.next_seq - 1} but the next segment starts at {nxt}",
                    stream=self.stream, part=self.part, seq=cur.next_seq,
                )
            cur.close()
            self._cur = None

    def _pending_entries(self, cur: _Cursor) -> bool:
        return cur.index is not None and cur.index.size() >= cur.index_pos + ix.ENTRY_SIZE

    def _read_cursor(self, cur: _Cursor) -> Iterator[Entry]:
        if cur.index is None:
            if not self._st.exists(cur.index_path):
                return
            cur.index = self._st.open_read(cur.index_path)
            head = cur.index.read_at(0, ix.HEADER_SIZE)
            if len(head) < ix.HEADER_SIZE:
                cur.index.close()
                cur.index = None
                return
            try:
                _, first = ix.unpack_header(head)
            except ValueError as e:
                raise self._err(str(e), cur) from None
            if first != cur.first_seq:
                raise self._err(f"index header says first seq {first}", cur)
        size = cur.index.size()
        n = (size - cur.index_pos) // ix.ENTRY_SIZE
        if n <= 0:
            if size > cur.index_pos:
                self.tail_problem = f"partial index entry at byte {cur.index_pos} of {cur.index_path}"
            return
        block = cur.index.read_at(cur.index_pos, n * ix.ENTRY_SIZE)
        data_size = cur.data.size()
        for i in range(n):
            e = ix.unpack_entry(block, i * ix.ENTRY_SIZE)
            if e is None:
                if i == n - 1:  # a damaged last entry is a torn tail: stop here
                    self.tail_problem = f"damaged last index entry (seq {cur.next_seq}) in {cur.index_path}"
                    return
                raise self._err("index entry fails its checksum", cur, seq=cur.next_seq)
            if e.seq != cur.next_seq or (cur.next_offset is not None and e.offset != cur.next_offset):
                raise self._err(f"index entry out of order (seq {e.seq}, offset {e.offset})", cur, seq=cur.next_seq)
            if e.offset + e.length > data_size:
                data_size = cur.data.size()
                if e.offset + e.length > data_size:  # the event is not (all) there: torn, or not flushed yet
                    self.tail_problem = (f"seq {e.seq} ends at byte {e.offset + e.length} but {cur.data_path} "
                                         f"has {data_size} bytes")
                    return
            if cur.prefix_len is None:
                cur.prefix_len = e.offset
            entry = None
            if e.seq >= self._next and not (self._progress_only and e.kind == ix.KIND_MESSAGES):
                entry = self._decode(cur, e)
                if entry is None:
                    return
            cur.index_pos += ix.ENTRY_SIZE
            cur.next_seq = e.seq + 1
            cur.next_offset = e.offset + e.length
            if e.seq >= self._next:
                self._next = e.seq + 1
            if entry is not None:
                yield entry
        if cur.index.size() > cur.index_pos and (cur.index.size() - cur.index_pos) < ix.ENTRY_SIZE:
            self.tail_problem = f"partial index entry at byte {cur.index_pos} of {cur.index_path}"

    def _decode(self, cur: _Cursor, e: ix.IndexEntry) -> Entry | None:
        end = e.offset + e.length
        if cur.mapped is None or cur.mapped.size < end:
            cur.mapped = cur.data.map()  # (re)map: the segment grew since it was mapped
            if cur.mapped.size < end:
                return None
        body = cur.mapped.slice(e.offset, e.length)
        if ix.checksum(body) != e.crc:
            raise self._err("event fails its checksum", cur, seq=e.seq, offset=e.offset)
        if cur.decoder is None:
            try:
                cur.decoder = self._codec.segment_decoder(cur.mapped.slice(0, cur.prefix_len or 0))
            except CorruptLogError as err:
                raise _relocate(err, stream=self.stream, part=self.part, path=cur.data_path, offset=0) from None
        try:
            seq, event = cur.decoder.decode_at(cur.mapped, e.offset, e.length)
        except CorruptLogError as err:
            raise _relocate(err, stream=self.stream, part=self.part, seq=e.seq, offset=e.offset,
                            path=cur.data_path) from None
        if seq != e.seq:
            raise self._err(f"event carries seq {seq}, its index entry says {e.seq}", cur, seq=e.seq)
        return Entry(seq, event)
