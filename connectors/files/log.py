"""The file log: a directory per stream, a folder per part, size-rotated segments named by first sequence id.

Format 2.0 (``layout.py``; a stream folder is a dataset third-party readers open)::

    <root>/<stream>/_header.json
    <root>/<stream>/part=3/00000000000000000001.arrow           (or .avro)
    <root>/<stream>/part=3/_00000000000000000001.index
    <root>/<stream>/part=3/00000000000000004711.arrow           (next segment, first seq 4711)

Format 1.x streams (``header.json``, ``part-00003/…arrows``) stay readable and are appended to as 1.x.

Each writer session starts a new segment, so a segment is never appended to after its writer closed or
crashed; reopening a part first repairs its newest segment (``writer.py``). Readers follow live parts
(``reader.py``); ``check_part`` reports what is wrong with a part's files without raising (``check.py``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import time
from typing import Any, Callable, Mapping, TypeVar

import pyarrow as pa
import pyarrow.fs as pafs

from eventlog.encoding.avro_codecs import DEFAULT_AVRO_CODEC, check_avro_codec  # not avro_rows: no fastavro for Arrow
from eventlog.errors import (
    CorruptLogError,
    EventLogError,
    InvalidURIError,
    LogLimitError,
    PartLockedError,
    StreamNotFoundError,
    UnsupportedVersionError,
)
from eventlog.header import StreamHeader, check_stream_name
from eventlog.limits import MAX_HEADER_BYTES
from eventlog.log import PRELOAD_ENV, Log, PartStats, StoredEvent, check_sync_mode
from eventlog.retention import MAX_RETENTION_BYTES, Retention
from eventlog.schema_history import MAX_HISTORY_BYTES, SchemaHistory, check_evolution, evolution_of
from eventlog.uri import local_path

from . import index as ix
from . import readahead
from .check import check_layout, check_part, locate_event, segment_after, stored_event
from .codec import file_codec
from .framing import Malformed
from .layout import HEADER_FILES, LAYOUTS, RETENTION_FILE, RETENTION_LOCK, SCHEMAS_FILE, SCHEMAS_LOCK, layout_for
from .reader import FilePartReader, io_error
from .segment import SegmentFiles, Stop
from .storage import ArrowFsStorage, LocalStorage, S3Storage, Storage, quiet_checksums
from .writer import FilePartWriter, Recovery

_log = logging.getLogger("eventlog.files")
_D = TypeVar("_D")
"""A stream document's type (``FileLog._read_doc``: the schema history, the retention mark)."""

_HISTORY_TTL_S = 1.0
"""How long a log object trusts the schema history it read (readers meeting a newer schema read it again)."""

DEFAULT_SEGMENT_BYTES = 64 << 20

FILE_FORMAT_VERSION = (2, 0)
"""The format version of the streams a file log creates (FORMAT.md §6); ``format="1.2"`` creates 1.2 streams."""
_WRITABLE = {1: (1, 2), 2: FILE_FORMAT_VERSION}
"""The newest version of each major version a file-log writer appends to."""
FORMAT_ENV = "EVENTLOG_FILE_FORMAT"
"""Environment variable naming the format new file-log streams get when ``format`` is not given (``2.0``, the
default, or ``1.2`` for readers older than eventlog's format 2)."""


class FileLog(Log):
    """Streams as directories of Arrow IPC / Avro container segments on a local or ``pyarrow.fs`` filesystem."""

    encode_ahead = True
    """With ``sync="none"``, writers encode Messages events on a pool thread while the caller goes on, and write
    them in order later (nothing is promised before rotation, ``flush`` or ``close`` in that mode)."""

    def __init__(
        self,
        root: str,
        *,
        uri: str | None = None,
        filesystem: pafs.FileSystem | None = None,
        sync: str = "fsync",
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        storage: Storage | None = None,
        format: "str | tuple[int, int] | None" = None,  # noqa: A002 - the user-facing option name
        avro_codec: str | None = None,
    ) -> None:
        check_sync_mode(sync)
        if os.environ.get(PRELOAD_ENV, "1") != "0":
            readahead.warm()  # once per process: a first replay decodes ahead as fast as later ones
        self.format_version = _parse_format(os.environ.get(FORMAT_ENV) or FILE_FORMAT_VERSION if format is None
                                            else format)
        """The format version of the streams this log creates (existing streams keep theirs)."""
        if segment_bytes < 1:
            raise ValueError(f"segment_bytes must be positive, got {segment_bytes}")
        if storage is not None:
            self._st: Storage = storage
        elif filesystem is None or isinstance(filesystem, pafs.LocalFileSystem):
            root = os.path.abspath(root)
            self._st = LocalStorage()
        elif isinstance(filesystem, pafs.S3FileSystem):
            self._st = S3Storage(filesystem)
        else:
            self._st = ArrowFsStorage(filesystem)
        self.root = root
        self.uri = uri or root
        self.sync_mode = sync
        self.segment_bytes = segment_bytes
        self.avro_codec = check_avro_codec(avro_codec or DEFAULT_AVRO_CODEC)
        """The block codec of the format 2.x Avro segments this log's writers create: ``deflate`` (the default,
        which every Avro reader has), ``zstandard`` (smaller, faster; Java Avro and fastavro read it, polars and
        the Avro C tools do not) or ``null``. Segments of every codec are read."""
        self.recoveries: list[Recovery] = []
        """What writers opened through this log object repaired (torn tails cut, indexes rebuilt)."""
        self._headers: dict[str, StreamHeader] = {}
        self._histories: dict[str, tuple[float, SchemaHistory | None]] = {}  # (when read, history) per stream

    # -- files beside the streams ------------------------------------------------------------------------

    def list_aside(self, folder: str) -> list[str]:
        """The names in ``folder`` (one name, no slash: e.g. ``_plans``, the plan documents of capture by
        configuration), a folder tools keep beside the streams; empty when there is none."""
        return self._st.list_dir(self._st.join(self.root, _aside_name(folder)))

    def read_aside(self, folder: str, name: str, limit: int) -> bytes:
        """The bytes, at most ``limit``, of ``name`` in ``folder`` beside the streams; FileNotFoundError when
        absent."""
        return self._st.read_file(self._st.join(self.root, _aside_name(folder), _aside_name(name)), limit)

    def aside_path(self, folder: str, name: str) -> str:
        """Where ``name`` in ``folder`` beside the streams is, for messages (a path, or a key on an object store)."""
        return self._st.join(self.root, _aside_name(folder), _aside_name(name))

    # -- streams ---------------------------------------------------------------------------------------

    def _stream_dir(self, stream: str) -> str:
        return self._st.join(self.root, check_stream_name(stream))

    def streams(self) -> list[str]:
        try:
            return [d for d in self._st.list_dir(self.root)
                    if any(self._st.exists(self._st.join(self.root, d, h)) for h in HEADER_FILES)]
        except OSError as e:
            raise io_error(e) from None

    def header(self, stream: str) -> StreamHeader:
        """The stream's header with its current schema (the last of its schema history, FORMAT.md §12)."""
        stored = self.stored_header(stream)
        history = self.schema_history(stream)
        return history.header_of(stored, len(history.versions) - 1) if history is not None else stored

    def stored_header(self, stream: str) -> StreamHeader:
        """The stream's header as created (its first schema)."""
        if stream in self._headers:
            return self._headers[stream]
        try:
            check_stream_name(stream)
        except ValueError:
            if stream in self.streams():  # a folder holding a header, under a name no stream may have
                raise CorruptLogError(
                    "a folder with a stream header whose name is not a valid stream name (not written by eventlog: "
                    "rename or remove it)", stream=stream, path=self._st.join(self.root, stream)) from None
            raise
        try:
            return self._header(stream)
        except OSError as e:
            raise io_error(e, stream=stream) from None

    def _header(self, stream: str) -> StreamHeader:
        d = self._stream_dir(stream)
        for name in HEADER_FILES:  # the newest layout's name first
            path = self._st.join(d, name)
            try:
                data = self._st.read_file(path, limit=MAX_HEADER_BYTES + 1)
                break
            except FileNotFoundError:
                continue
        else:
            raise StreamNotFoundError(f"no stream {stream!r} in log {self.uri}", stream=stream) from None
        if len(data) > MAX_HEADER_BYTES:
            raise LogLimitError(f"stream header is larger than the format's limit of {MAX_HEADER_BYTES} bytes",
                                stream=stream, path=path)
        header = StreamHeader.from_json(data, path=path)
        if header.stream != stream:
            raise CorruptLogError(f"header names stream {header.stream!r}", stream=stream, path=path)
        if header.version[0] not in LAYOUTS:
            raise UnsupportedVersionError(f"stream header has format version {header.version[0]}.{header.version[1]}; "
                                          f"this eventlog reads file logs of format "
                                          f"{' and '.join(f'{m}.x' for m in LAYOUTS)}", stream=stream, path=path)
        if layout_for(header.version).header_file != name:
            raise CorruptLogError(f"a format {header.version[0]}.{header.version[1]} header must be named "
                                  f"{layout_for(header.version).header_file}", stream=stream, path=path)
        self._headers[stream] = header
        return header

    def create_stream(self, header: StreamHeader) -> StreamHeader:
        """Create the stream, or check the stored header matches. Everything is validated first — the
        encoding must be able to store the schema (``file_codec`` raises SchemaMismatchError) — so a refused
        create writes nothing; a failure while writing removes the folders it created."""
        header = dataclasses.replace(header, version=self.format_version)
        file_codec(header)
        try:
            return self._create_stream(header)
        except OSError as e:
            raise io_error(e, writing=True, path=self._stream_dir(header.stream), stream=header.stream) from None

    def _create_stream(self, header: StreamHeader) -> StreamHeader:
        d = self._stream_dir(header.stream)
        if any(self._st.exists(self._st.join(d, h)) for h in HEADER_FILES):  # created before (in any layout)
            return self._existing(header)
        made = [p for p in (self.root, d) if not self._st.exists(p)]
        try:
            self._st.make_dirs(d)
            created = self._st.create_exclusive(self._st.join(d, layout_for(header.version).header_file),
                                                header.to_json())
        except BaseException:
            for p in reversed(made):
                self._st.remove_dir(p)
            raise
        if created:
            self._headers[header.stream] = header
            return header
        return self._existing(header)

    def _existing(self, header: StreamHeader) -> StreamHeader:
        """The stream ``header`` asks for exists: its current header, once ``header`` is the same or a compatible
        change of its schema (recorded as a new version, FORMAT.md §12); HeaderMismatchError or
        SchemaEvolutionError otherwise."""
        self.schema_history(header.stream, fresh=True)  # a writer compares with what is current now
        current = self.header(header.stream)
        changes = evolution_of(current, header)
        return self._evolve(current, header.schema, changes) if changes else current

    # -- schema history (FORMAT.md §12) -----------------------------------------------------------------------

    def _schemas_path(self, stream: str) -> str:
        return self._st.join(self._stream_dir(stream), SCHEMAS_FILE)

    def schema_history(self, stream: str, *, fresh: bool = False) -> SchemaHistory | None:
        stored = self.stored_header(stream)
        if stored.version[0] < 2:
            return None
        cached = self._histories.get(stream)
        now = time.monotonic()
        if cached is not None and not fresh and now - cached[0] < _HISTORY_TTL_S:
            return cached[1]
        history = self._read_history(stored)[0]
        self._histories[stream] = (now, history)
        return history

    def _read_history(self, stored: StreamHeader) -> tuple[SchemaHistory | None, str | None]:
        return self._read_doc(self._schemas_path(stored.stream), stored.stream, MAX_HISTORY_BYTES,
                              lambda data, path: SchemaHistory.from_json(data, stored, path=path))

    def _read_doc(self, path: str, stream: str, limit: int,
                  parse: Callable[[bytes, str], _D]) -> tuple[_D | None, str | None]:
        """A stream's document at ``path`` (``parse(data, path)``; read up to one byte past ``limit``, so that
        ``parse`` sees it is too large) and its storage version; ``(None, None)`` when there is none."""
        try:
            data, version = self._st.read_versioned(path, limit=limit + 1)
        except FileNotFoundError:
            return None, None
        except OSError as e:
            raise io_error(e, stream=stream, path=path) from None
        return parse(data, path), version

    def _update_history(self, stream: str, change: Callable[[SchemaHistory], SchemaHistory]) -> SchemaHistory:
        """Apply ``change`` to the stream's history and store it (``_update_doc``)."""
        stored = self.stored_header(stream)

        def step(history: SchemaHistory | None) -> tuple[SchemaHistory, bool]:
            before = history or SchemaHistory(stream, (stored.schema,))
            after = change(before)
            return after, not (after == before and history is not None)

        after = self._update_doc(stream, self._schemas_path(stream), SCHEMAS_LOCK, lambda: self._read_history(stored),
                                 step, lambda h: h.to_json(stored), attempts=32,
                                 gave_up="the schema history kept changing under this writer; open it again")
        self._histories[stream] = (time.monotonic(), after)
        return after

    def _update_doc(self, stream: str, path: str, lock: str, read: "Callable[[], tuple[Any, str | None]]",
                    step: "Callable[[Any], tuple[Any, bool]]", to_json: "Callable[[Any], bytes]", *, attempts: int,
                    gave_up: str) -> Any:
        """Change one of the stream's documents (FORMAT.md §10, §12): ``step(current)`` gives the new document and
        whether to write it. Under the stream's ``lock`` on a local disk, as a conditional write on S3, read and
        tried again (at most ``attempts`` times) when another writer changed it meanwhile."""
        handle = self._lock_waiting(self._st.join(self._stream_dir(stream), lock), stream)
        try:
            for _ in range(attempts):
                current, version = read()
                after, write = step(current)
                if not write:
                    return after
                done, _ = self._st.replace(path, to_json(after), version)
                if done:
                    return after
            raise EventLogError(gave_up, stream=stream)
        except OSError as e:
            raise io_error(e, writing=True, stream=stream, path=path) from None
        finally:
            self._st.unlock(handle)

    def _evolve(self, current: StreamHeader, schema: pa.Schema, changes: list[str]) -> StreamHeader:
        def add(history: SchemaHistory) -> SchemaHistory:
            check_evolution(history.current, schema, stream=current.stream)  # against what is current now
            return history.with_version(schema)[0]

        history = self._update_history(current.stream, add)
        _log.info("stream %r: schema changed (%s)", current.stream, "; ".join(changes))
        return history.header_of(self.stored_header(current.stream), len(history.versions) - 1)

    def _note_writer_schema(self, stream: str, part: int, seq: int, header: StreamHeader) -> None:
        """Record that ``part`` writes with ``header``'s schema from ``seq`` on (when it did not already)."""
        history = self.schema_history(stream, fresh=True)
        if history is not None and history.switch_for(part, seq, header.schema) is not None:
            self._update_history(stream, lambda h: h.with_switch(part, seq, h.version_of(header.schema) or 0))

    def _part_dir(self, header: StreamHeader, part: int) -> str:
        if isinstance(part, bool) or not isinstance(part, int) or not 0 <= part < header.peers:
            raise ValueError(f"part {part!r} out of range: stream {header.stream!r} has peers={header.peers}")
        return self._st.join(self._stream_dir(header.stream), layout_for(header.version).part_dir(part))

    def segments(self, stream: str, part: int) -> list[int]:
        """First sequence ids of the part's segments, ascending."""
        header = self.header(stream)
        return layout_for(header.version).list_segments(self._st, self._part_dir(header, part), header.encoding)

    def part_path(self, stream: str, part: int) -> str:
        """The folder of a part's files (it may not exist yet)."""
        return self._part_dir(self.header(stream), part)

    def part_stats(self, stream: str, part: int) -> PartStats:
        try:
            return self._part_stats(stream, part)
        except OSError as e:
            raise io_error(e, stream=stream, part=part) from None

    def _part_stats(self, stream: str, part: int) -> PartStats:
        header = self.header(stream)
        d = self._part_dir(header, part)
        layout = layout_for(header.version)
        listing = layout.list_part(self._st, d, header.encoding)
        segs = listing.firsts
        if not segs:
            return PartStats(1, 1, 0, 0)
        sizes = self._st.file_sizes(d)
        size = 0
        for span in listing.spans:
            names = ((layout.compacted_name(span.first, span.last, header.encoding),
                      layout.compacted_index_name(span.first, span.last)) if span.last is not None else
                     (layout.sealed_name(span.first, header.encoding), layout.open_name(span.first, header.encoding),
                      layout.index_name(span.first)))
            for name in dict.fromkeys(names):
                size += sizes.get(name, 0)
        try:
            files = SegmentFiles(self._st, d, segs[-1], layout, header.encoding, stream=stream, part=part,
                                 last=listing.spans[-1].last)
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
        mark = self.retention(stream)
        first = max(segs[0], mark.cut(part).start) if mark is not None else segs[0]
        return PartStats(min(first, next_seq), next_seq, size, len(segs))

    # -- retention -------------------------------------------------------------------------------------------

    def _retention_path(self, header: StreamHeader) -> str:
        return self._st.join(self._stream_dir(header.stream), RETENTION_FILE)

    def retention(self, stream: str) -> Retention | None:
        header = self.header(stream)
        if header.version[0] < 2:
            return None
        return self._read_retention(header)[0]

    def _lock_waiting(self, path: str, stream: str, timeout: float = 60.0) -> object:
        """The lock ``path`` of a short stream-wide update (a retention mark, the schema history), waited for while
        another writer of the stream holds it (the part writers of one job record their schema at once)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self._st.lock(path)
            except PartLockedError:
                if time.monotonic() > deadline:
                    raise PartLockedError(f"another writer held {path} for {timeout:g} s", stream=stream,
                                          path=path) from None
                time.sleep(0.01)

    def _read_retention(self, header: StreamHeader) -> tuple[Retention | None, str | None]:
        return self._read_doc(self._retention_path(header), header.stream, MAX_RETENTION_BYTES,
                              lambda data, path: Retention.from_json(data, header, path=path))

    def record_retention(self, stream: str, mark: Retention) -> Retention:
        header = self.header(stream)
        if header.version[0] < 2:
            raise UnsupportedVersionError(
                f"dropping old events needs a format 2 stream; this one is {header.version[0]}.{header.version[1]} "
                f"(replay copy it to a new log to upgrade it)", stream=stream)
        def step(current: Retention | None) -> tuple[Retention, bool]:
            if current is not None and current.covers(mark):
                return current, False
            if not mark.covers(current):
                raise EventLogError("a concurrent trim recorded a retention mark that neither drops more nor less than "
                                    "this one; run the trim again", stream=stream, path=self._retention_path(header))
            return mark, True

        # one trim of a stream at a time on a local disk (S3: the write is conditional)
        return self._update_doc(stream, self._retention_path(header), RETENTION_LOCK,
                                lambda: self._read_retention(header), step, lambda m: m.to_json(header), attempts=16,
                                gave_up="the retention mark kept changing under this trim; run it again")

    def drop_before(self, stream: str, part: int, seq: int) -> tuple[int, int | None]:
        header = self.header(stream)
        d = self._part_dir(header, part)
        layout = layout_for(header.version)
        try:
            listing = layout.list_part(self._st, d, header.encoding)
            segs = listing.firsts
            sizes = self._st.file_sizes(d) if segs else {}
            events = freed = 0
            for span, after in zip(listing.spans, segs[1:]):  # never the newest segment: a writer reads its tail
                first = span.first
                if after > seq:
                    break
                names = ((layout.compacted_name(first, span.last, header.encoding),
                          layout.compacted_index_name(first, span.last)) if span.last is not None else
                         (layout.sealed_name(first, header.encoding), layout.open_name(first, header.encoding),
                          layout.index_name(first)))  # the data first: an index without its segment is harmless
                for name in dict.fromkeys(names):
                    if name in sizes:
                        with contextlib.suppress(FileNotFoundError):  # a concurrent trim removed it first
                            self._st.remove(self._st.join(d, name))
                        freed += sizes[name]
                events += after - first
            for first in layout.list_indexes(self._st, d):  # what an interrupted removal left
                if first < seq and first not in segs:
                    with contextlib.suppress(FileNotFoundError):
                        self._st.remove(self._st.join(d, layout.index_name(first)))
            return events, freed
        except OSError as e:
            raise io_error(e, writing=True, stream=stream, part=part, path=d) from None

    def compact(self, stream: str, part: int | None = None, *, target_bytes: int | None = None,
                min_segments: int = 2, dry_run: bool = False, hook: "Callable[[str], None] | None" = None) -> Any:
        """Rewrite runs of small sealed segments of ``stream`` (every part, or only ``part``) into compacted
        segments of up to ``target_bytes`` (default: the log's ``segment_bytes``) each, keeping every event byte
        for byte (FORMAT.md §11; ``compact.py``): a ``compact.CompactResult``. Readers running meanwhile see
        every event once; a compaction stopped at any step leaves a readable log, and the next one finishes it.
        ``hook(step)`` is called before each step that changes storage (tests stop a compaction there)."""
        from .compact import compact_stream

        return compact_stream(self, stream, part, target_bytes=target_bytes or self.segment_bytes,
                              min_segments=min_segments, dry_run=dry_run, hook=hook)

    def last_write(self, stream: str, part: int) -> float | None:
        """The modification time of the part's newest segment or its index (whichever is later; seconds
        since the epoch), None when the part has no segment or the filesystem does not tell. Stats two files."""
        header = self.header(stream)
        d = self._part_dir(header, part)
        layout = layout_for(header.version)
        try:
            segs = layout.list_segments(self._st, d, header.encoding)
        except OSError:
            return None
        if not segs:
            return None
        first = segs[-1]
        times = []
        for path in (self._st.join(d, n) for n in (layout.sealed_name(first, header.encoding),
                                                   layout.open_name(first, header.encoding), layout.index_name(first))):
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
        header = self.header(stream)
        return check_part(self._st, header, self._part_dir(header, part), part)

    def check_layout(self, headers: "Mapping[str, StreamHeader]", *, stream: str | None = None) -> list[EventLogError]:
        """The log's folders and files against the format's layout (``check.check_layout``): segments without
        their index and indexes without their segment, part folders beyond the stream's peers or segments of
        another encoding (the header disagrees with the parts), stray files, stream folders without a header.
        Through the storage, so the same on the local disk, S3 and in memory."""
        return check_layout(self._st, self.root, headers, stream=stream)

    def locate(self, stream: str, part: int | None = None, seq: int | None = None,
               offset: int | None = None) -> dict[str, Any]:
        """The header file (``part`` None), or the segment holding event ``seq`` and its body's byte offset (from
        the segment's index); ``offset``, when given, is kept as the byte offset."""
        try:
            d = self._stream_dir(stream)
            if part is None:
                names = self._st.list_dir(d)
                return {"path": self._st.join(d, next((h for h in HEADER_FILES if h in names), HEADER_FILES[0]))}
            if seq is None:
                return {}
            header = self.header(stream)
            out = locate_event(self._st, header, self._part_dir(header, part), part, seq)
        except (EventLogError, OSError, ValueError):
            return {}
        if offset is not None and out:
            out["offset"] = offset
        return out

    def stored(self, stream: str, part: int, seq: int) -> StoredEvent | None:
        """The event's body in its segment (an Arrow IPC message or an Avro block), with the segment's path and
        the body's byte offset."""
        header = self.header(stream)
        found = stored_event(self._st, header, self._part_dir(header, part), part, seq)
        return None if found is None else StoredEvent(found[0], found[1])

    def resume_after(self, stream: str, part: int, error: EventLogError) -> int | None:
        """The first sequence id of the segment after the one ``error`` is in."""
        try:
            header = self.header(stream)
            return segment_after(self._st, header, self._part_dir(header, part), error)
        except (EventLogError, OSError, ValueError):
            return None

    # -- parts -----------------------------------------------------------------------------------------

    def writer(self, stream: str, part: int, *, sync: str | None = None, continues: bool = False) -> FilePartWriter:
        header = self.header(stream)  # writes with the current schema
        header.check_writable(_WRITABLE[header.version[0]])
        w = FilePartWriter(self, header, part, check_sync_mode(sync or self.sync_mode), continues=continues)
        try:
            self._note_writer_schema(stream, part, w.next_seq, header)
        except BaseException:
            w.close()
            raise
        return w

    def reader(self, stream: str, part: int, start: int = 1, *, progress_only: bool = False) -> FilePartReader:
        if start < 1:
            raise ValueError(f"sequence ids start at 1, got start={start}")
        header = self.stored_header(stream)
        return FilePartReader(self._st, header, self._part_dir(header, part), part, start, progress_only,
                              history=self.schema_history(stream),
                              reload=lambda: self.schema_history(stream, fresh=True))


def _aside_name(name: str) -> str:
    """``name`` as one component of a path beside the streams (ValueError for separators, ``..`` or nothing)."""
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
        raise ValueError(f"{name!r} is not a file or folder name")
    return name


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
            f.data_size == last.offset + last.length or f.suffix_whole(last.offset + last.length)
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


def _parse_format(value: "str | tuple[int, int]") -> tuple[int, int]:
    """``"2.0"``/``"1.2"`` or a ``(major, minor)`` tuple: a version file logs can create streams of."""
    version = tuple(int(x) for x in value.split(".")) if isinstance(value, str) else tuple(value)
    if version not in ((1, 2), FILE_FORMAT_VERSION):
        raise ValueError(f"file logs create streams of format 2.0 (the default) or 1.2, not {value!r}")
    return version  # type: ignore[return-value]


__all__ = ["DEFAULT_SEGMENT_BYTES", "FILE_FORMAT_VERSION", "FileLog", "FilePartReader", "FilePartWriter", "Recovery"]


def open_uri(uri: str, **options: Any) -> FileLog:
    """The file log at ``uri`` (``open_log``'s opener for ``file://``, plain paths and ``pyarrow.fs`` URIs such as
    ``s3://bucket/path``)."""
    path = local_path(uri)
    if path is not None:
        return FileLog(path, uri=uri, **options)
    if uri.lower().startswith("s3://"):
        quiet_checksums()
    try:
        fs, path = pafs.FileSystem.from_uri(uri)
    except Exception as e:  # pyarrow raises ArrowInvalid/OSError for unknown schemes
        raise InvalidURIError(f"cannot open log URI {uri!r}: {e}") from None
    return FileLog(path, uri=uri, filesystem=fs, **options)
