"""The file log: a directory per stream, a folder per part, size-rotated segments named by first sequence id.

::

    <root>/<stream>/header.json
    <root>/<stream>/part-00003/00000000000000000001.arrows   (or .avro)
    <root>/<stream>/part-00003/00000000000000000001.index
    <root>/<stream>/part-00003/00000000000000004711.arrows   (next segment, first seq 4711)

Each writer session starts a new segment, so a segment is never appended to after its writer closed or
crashed; reopening a part first repairs its newest segment (``writer.py``). Readers follow live parts
(``reader.py``); ``check_part`` reports what is wrong with a part's files without raising (``check.py``).
"""

from __future__ import annotations

import dataclasses
import os

import pyarrow.fs as pafs

from eventlog.encoding import codec_for
from eventlog.errors import CorruptLogError, LogLimitError, StreamNotFoundError, UnsupportedVersionError
from eventlog.header import StreamHeader, check_stream_name
from eventlog.limits import MAX_HEADER_BYTES
from eventlog.log import Log, PartStats, check_sync_mode

from . import index as ix
from .framing import Malformed
from .layout import HEADER_FILE, INDEX_SUFFIX, list_firsts, part_dir_name, segment_name
from .reader import FilePartReader, io_error
from .segment import SegmentFiles, Stop
from .storage import ArrowFsStorage, LocalStorage, Storage
from .writer import FilePartWriter, Recovery

DEFAULT_SEGMENT_BYTES = 64 << 20


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
        check_sync_mode(sync)
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
        """What writers opened through this log object repaired (torn tails cut, indexes rebuilt)."""
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
            data = self._st.read_file(path, limit=MAX_HEADER_BYTES + 1)
        except FileNotFoundError:
            raise StreamNotFoundError(f"no stream {stream!r} in log {self.uri}", stream=stream) from None
        if len(data) > MAX_HEADER_BYTES:
            raise LogLimitError(f"stream header is larger than the format's limit of {MAX_HEADER_BYTES} bytes",
                                stream=stream, path=path)
        header = StreamHeader.from_json(data, path=path)
        if header.stream != stream:
            raise CorruptLogError(f"header names stream {header.stream!r}", stream=stream, path=path)
        if header.version[0] != self.format_version[0]:
            raise UnsupportedVersionError(f"stream header has format version {header.version[0]}.{header.version[1]}; "
                                          f"this eventlog reads file logs of format {self.format_version[0]}.x",
                                          stream=stream, path=path)
        self._headers[stream] = header
        return header

    def create_stream(self, header: StreamHeader) -> StreamHeader:
        """Create the stream, or check the stored header matches. Everything is validated first — the
        encoding must be able to store the schema (``codec_for`` raises SchemaMismatchError) — so a refused
        create writes nothing; a failure while writing removes the folders it created."""
        codec_for(header)
        header = dataclasses.replace(header, version=self.format_version)
        d = self._stream_dir(header.stream)
        made = [p for p in (self.root, d) if not self._st.exists(p)]
        try:
            self._st.make_dirs(d)
            created = self._st.create_exclusive(self._st.join(d, HEADER_FILE), header.to_json())
        except BaseException:
            for p in reversed(made):
                self._st.remove_dir(p)
            raise
        if created:
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
        return list_firsts(self._st, self._part_dir(header, part), codec_for(header).file_suffix)

    def part_stats(self, stream: str, part: int) -> PartStats:
        try:
            return self._part_stats(stream, part)
        except OSError as e:
            raise io_error(e, stream=stream, part=part) from None

    def _part_stats(self, stream: str, part: int) -> PartStats:
        header = self.header(stream)
        d = self._part_dir(header, part)
        suffix = codec_for(header).file_suffix
        segs = list_firsts(self._st, d, suffix)
        if not segs:
            return PartStats(1, 1, 0, 0)
        size = 0
        for first in segs:
            for ext in (suffix, INDEX_SUFFIX):
                try:
                    f = self._st.open_read(self._st.join(d, segment_name(first) + ext))
                except FileNotFoundError:
                    continue
                size += f.size()
                f.close()
        try:
            files = SegmentFiles(self._st, d, segs[-1], suffix, header.encoding, stream=stream, part=part)
        except FileNotFoundError:  # removed since listed: a writer dropped an empty segment
            n = 0
        else:
            try:
                n = _count_events(files)
            finally:
                files.close()
        next_seq = segs[-1] + n
        if n == 0 and len(segs) > 1:
            next_seq = segs[-1]
        return PartStats(segs[0], next_seq, size, len(segs))

    def last_write(self, stream: str, part: int) -> float | None:
        """The modification time of the part's newest segment or its index (whichever is later; seconds
        since the epoch), None when the part has no segment or the filesystem does not tell. Stats two files."""
        header = self.header(stream)
        d = self._part_dir(header, part)
        suffix = codec_for(header).file_suffix
        try:
            segs = list_firsts(self._st, d, suffix)
        except OSError:
            return None
        if not segs:
            return None
        base = self._st.join(d, segment_name(segs[-1]))
        times = []
        for path in (base + suffix, base + INDEX_SUFFIX):
            try:
                t = self._st.mtime(path)
            except OSError:
                continue  # removed since listed
            if t is not None:
                times.append(t)
        return max(times) if times else None

    def check_part(self, stream: str, part: int) -> list[CorruptLogError]:
        """What is wrong with one part's files, found without raising: an index shorter or longer than its
        segment, an index entry disagreeing with the segment, an orphan index (no segment) or a segment
        without index, a torn tail, a damaged prefix or event, segments that do not continue each other.
        Each problem is a CorruptLogError naming stream, part, file and byte offset (and seq when known);
        an empty list means the files are whole. Events are not decoded unless the index does not list them."""
        from .check import check_part

        header = self.header(stream)
        return check_part(self._st, header, self._part_dir(header, part), part)

    # -- parts -----------------------------------------------------------------------------------------

    def writer(self, stream: str, part: int, *, sync: str | None = None, continues: bool = False) -> FilePartWriter:
        header = self.header(stream)
        header.check_writable(self.format_version)
        return FilePartWriter(self, header, part, check_sync_mode(sync or self.sync_mode), continues=continues)

    def reader(self, stream: str, part: int, start: int = 1, *, progress_only: bool = False) -> FilePartReader:
        if start < 1:
            raise ValueError(f"sequence ids start at 1, got start={start}")
        header = self.header(stream)
        return FilePartReader(self._st, header, self._part_dir(header, part), part, start, progress_only)


def _count_events(f: SegmentFiles) -> int:
    """Whole events in a segment: its index's entries when they account for all its bytes, else what the
    index and the container's framing find (without decoding)."""
    try:
        f.refresh()
    except (CorruptLogError, UnsupportedVersionError):  # an unusable index: count by framing alone
        pass
    n = f.entries()
    if n:
        last = f.entry(f.first_seq + n - 1)
        if isinstance(last, ix.IndexEntry) and last.seq == f.first_seq + n - 1 and (
            f.data_size - (last.offset + last.length) in (0, len(f.framing.suffix))
        ) and f.index_size == ix.entry_position(f.first_seq, last.seq + 1):
            return n
    seq = f.first_seq
    try:
        offset = f.prefix()
        while offset is not None:
            step = f.next_place(seq, offset)
            if isinstance(step, Stop):
                break
            seq, offset = step.seq + 1, step.end
    except (Malformed, CorruptLogError):
        pass
    return seq - f.first_seq


__all__ = ["DEFAULT_SEGMENT_BYTES", "FileLog", "FilePartReader", "FilePartWriter", "Recovery", "part_dir_name",
           "segment_name"]
