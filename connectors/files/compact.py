"""Compaction of a file log part's small segments (FORMAT.md §11): ``replay compact``, ``FileLog.compact``.

A part written in micro-batches (a Structured Streaming tap seals a segment per batch, an object-store writer one
per ``sync``) ends up with many small segments: listing and reading it costs a request per file. A compaction
rewrites runs of small **sealed** segments into one **compacted segment** each, named by its range
(``<first>-<last>.arrow``), byte for byte the same events (each event's message or block is copied, so its
sequence id, time, records and write time do not change), with the writer epoch and id of each run of events in
its metadata (``eventlog.epochs``: a compacted segment spans several writer incarnations).

Crash safety, step by step (each step is safe to interrupt; the next compaction finishes what is left):

1. read and check the small segments (checksums, footers, epochs); nothing is written;
2. create the compacted segment whole (local disks: a temporary file linked in, on S3 a conditional create):
   from now on readers read its events from it and skip the small segments inside its range;
3. write its index (an interrupted compaction leaves a compacted segment without its index: readers find its
   events by its framing, the next compaction writes the index);
4. remove the small segments (each data file, then its index): only now, once the compacted copy is whole and
   durable. A reader inside a removed segment goes on in the compacted one at its next event.

Never compacted: the newest segment of a part, the newest sealed one while a writer's segment is open (a
reopening writer repairs those), segments a retention mark already dropped (the trim removes them), segments of
another schema version or codec than their neighbours, and segments already large (``target_bytes / 2``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Callable

import pyarrow as pa

from eventlog.encoding import EventCodec
from eventlog.encoding.ipc_file import LEADING_MAGIC, Block, footer
from eventlog.errors import CorruptLogError, PartLockedError, UnsupportedVersionError
from eventlog.events import Messages
from eventlog.header import StreamHeader
from eventlog.schema_history import SchemaHistory
from eventlog.writer_mark import EPOCH_KEY, WRITER_KEY, WriterMark

from . import index as ix
from .codec import file_codec
from .framing import Malformed
from .layout import COMPACT_LOCK, OPEN_SUFFIX, Layout, PartListing, Span, layout_for
from .reader import EPOCHS_KEY, Runs, raw_decode_errors, runs_value, segment_runs
from .segment import SegmentFiles, Stop
from .storage import Storage

_log = logging.getLogger("eventlog.files")

DEFAULT_MIN_SEGMENTS = 2
"""Fewest segments a compaction merges into one."""

_MARK_KEYS = (EPOCH_KEY.encode(), WRITER_KEY.encode(), EPOCHS_KEY.encode())
_AVRO_MAGIC = b"Obj\x01"
_SYNC = 16


@dataclass
class Merge:
    """One compacted segment made (or planned, ``dry_run``): it holds ``first … last`` that ``segments`` held."""

    first: int
    last: int
    segments: int
    bytes_before: int
    bytes_after: int = 0
    runs: int = 0
    """Runs of events of one writer incarnation it records."""


@dataclass
class PartCompaction:
    """What a compaction did to one part."""

    part: int
    segments_before: int = 0
    segments_after: int = 0
    merges: list[Merge] = field(default_factory=list)
    leftovers_removed: int = 0
    """Files an earlier, interrupted compaction left that this one removed (or indexes it wrote)."""
    skipped: str | None = None
    """Why the part was not compacted (None: it was, or nothing was to do)."""


@dataclass
class CompactResult:
    """What ``compact`` did to a stream."""

    stream: str
    parts: list[PartCompaction] = field(default_factory=list)
    dry_run: bool = False
    seconds: float = 0.0

    @property
    def segments_before(self) -> int:
        return sum(p.segments_before for p in self.parts)

    @property
    def segments_after(self) -> int:
        return sum(p.segments_after for p in self.parts)

    @property
    def events(self) -> int:
        """Events copied into compacted segments."""
        return sum(m.last - m.first + 1 for p in self.parts for m in p.merges)

    @property
    def bytes_written(self) -> int:
        return sum(m.bytes_after for p in self.parts for m in p.merges)


@dataclass
class _Member:
    """One segment read for a merge: its events' bytes, checked."""

    span: Span
    size: int
    key: bytes
    """What must be equal in every segment merged: the schema (Arrow) or container metadata (Avro) without the
    writer marks, and the schema version."""
    prefix: bytes
    runs: Runs
    bodies: list[tuple[int, bytes, int, int]]
    """``(seq, body, kind, crc)`` of each event."""

    @property
    def end(self) -> int:
        return self.bodies[-1][0] + 1 if self.bodies else self.span.first


class _Part:
    """A compaction of one part's files."""

    def __init__(self, st: Storage, header: StreamHeader, part_dir: str, part: int, *,
                 history: SchemaHistory | None, cut_start: int | None) -> None:
        self.st, self.header, self.dir, self.part = st, header, part_dir, part
        self.stream, self.encoding = header.stream, header.encoding
        self.layout: Layout = layout_for(header.version)
        self.history = history
        self.cut_start = cut_start
        self._codecs: dict[int, EventCodec] = {}

    # -- names ---------------------------------------------------------------------------------------------

    def path(self, name: str) -> str:
        return self.st.join(self.dir, name)

    def data_name(self, span: Span) -> str:
        if span.last is not None:
            return self.layout.compacted_name(span.first, span.last, self.encoding)
        return self.layout.sealed_name(span.first, self.encoding)

    def index_name(self, span: Span) -> str:
        if span.last is not None:
            return self.layout.compacted_index_name(span.first, span.last)
        return self.layout.index_name(span.first)

    def files(self, span: Span) -> SegmentFiles:
        return SegmentFiles(self.st, self.dir, span.first, self.layout, self.encoding, stream=self.stream,
                            part=self.part, last=span.last)

    def version(self, seq: int) -> int:
        return self.history.version_at(self.part, seq) if self.history is not None else 0

    def codec(self, seq: int) -> EventCodec:
        v = self.version(seq)
        if v not in self._codecs:
            header = self.history.header_of(self.header, v) if self.history is not None else self.header
            self._codecs[v] = file_codec(header)
        return self._codecs[v]

    def remove(self, name: str) -> bool:
        try:
            self.st.remove(self.path(name))
            return True
        except FileNotFoundError:
            return False

    # -- leftovers of an interrupted compaction -------------------------------------------------------------

    def finish_leftovers(self, listing: PartListing, names: list[str]) -> int:
        """Write the missing index of compacted segments in force, then remove what compacted segments made
        redundant (data first, then index): returns the files written or removed."""
        done = 0
        have = set(names)
        for span in listing.spans:
            if span.last is not None and self.index_name(span) not in have:
                self.st.write_file(self.path(self.index_name(span)), self._rebuild_index(span))
                _log.info("stream %r part %d: wrote the index of %s, which an interrupted compaction left without "
                          "one", self.stream, self.part, self.data_name(span))
                done += 1
        for first in listing.hidden:
            span = Span(first)
            for name in (self.data_name(span), self.layout.open_name(first, self.encoding), self.index_name(span)):
                done += self.remove(name) if name in have else 0
        for rng in listing.superseded:
            span = Span(*rng)
            for name in (self.data_name(span), self.index_name(span)):
                done += self.remove(name) if name in have else 0
        kept = [(s.first, s.last) for s in listing.spans if s.last is not None]
        for name in names:
            first = self.layout.index_first(name)
            if first is not None and first not in listing.plain and any(a <= first <= b for a, b in kept):
                done += self.remove(name)  # a small segment's index whose data a compaction removed
            rng = self.layout.compacted_index_range(name)
            if rng is not None and rng not in listing.compacted:
                done += self.remove(name)  # a superseded compacted segment's index whose data was removed
            if name.startswith(".") and name.endswith(".tmp") and "-" in name.split(".")[1]:
                done += self.remove(name)  # a compacted segment's temporary file a killed compaction left
        if done:
            self.st.sync_dir(self.dir)
        return done

    def _rebuild_index(self, span: Span) -> bytes:
        """The index of a compacted segment, from its framing (each event decoded for its kind)."""
        m = self.read_member(span, 0, rebuild=True)
        return ix.pack_header(span.first) + b"".join(
            ix.pack_entry(ix.IndexEntry(seq, off, len(body), crc, kind)) for seq, body, kind, crc, off in m)

    # -- reading a segment ------------------------------------------------------------------------------------

    def read_member(self, span: Span, size: int, *, rebuild: bool = False):  # noqa: ANN201
        """Read and check every event of a sealed segment: a ``_Member`` (``rebuild``: the list of ``(seq, body,
        kind, crc, offset)``). Anything not whole and valid raises CorruptLogError: the compaction changes
        nothing of a part whose segments are damaged (``replay verify`` says what)."""
        f = self.files(span)
        try:
            f.refresh()
            if not f.is_sealed:
                raise f.error("segment is not sealed (a writer still appends to it)", offset=0)
            try:
                prefix_len = f.prefix()
            except Malformed as m:
                raise f.error(f"damaged segment prefix: {m.reason}", offset=m.offset) from None
            if prefix_len is None:
                raise f.error("sealed segment ends inside its prefix", offset=0)
            prefix = f.read(0, prefix_len)
            codec = self.codec(span.first)
            runs = segment_runs(codec, prefix, first=span.first, last=span.last, stream=self.stream, part=self.part,
                                path=f.data_path)
            decoder = None
            seq, offset = span.first, prefix_len
            out: list = []
            places: list[tuple[int, int]] = []
            while True:
                try:
                    step = f.next_place(seq, offset)
                except Malformed as m:
                    raise f.error(f"damaged event bytes in a sealed segment: {m.reason}", seq=seq,
                                  offset=m.offset) from None
                if isinstance(step, Stop):
                    break
                body = f.read(step.offset, step.length)
                if step.entry is not None and not rebuild:
                    if ix.checksum(body) != step.entry.crc:
                        raise f.error("event fails its checksum", seq=seq, offset=step.offset)
                    kind, crc = step.entry.kind, step.entry.crc
                else:
                    try:
                        if decoder is None:
                            decoder = codec.segment_decoder(prefix, part=self.part)
                        got, event = decoder.decode(body)
                    except (CorruptLogError, *raw_decode_errors()) as e:
                        raise f.error(f"event does not decode: {e}", seq=seq, offset=step.offset) from None
                    if got != seq:
                        raise f.error(f"event carries seq {got}, its place is seq {seq}", seq=seq, offset=step.offset)
                    kind = ix.KIND_MESSAGES if isinstance(event, Messages) else ix.KIND_PROGRESS
                    crc = ix.checksum(body)
                out.append((seq, body, kind, crc, step.offset) if rebuild else (seq, body, kind, crc))
                places.append((step.offset, step.length))
                seq, offset = seq + 1, step.end
            if step.problem or (step.eos and not f.suffix_whole(step.offset)) or (
                    not step.eos and f.data_size != step.offset):
                raise f.error("sealed segment does not end cleanly after its last event", seq=seq, offset=step.offset)
            if f.layout.seals and self.encoding == "arrow":
                if not step.eos:
                    raise f.error("sealed segment has no footer", offset=step.offset)
                problem = f.footer_problem(step.offset, places)
                if problem is not None:
                    raise f.error(problem, offset=step.offset + 8)
            if span.last is not None and seq != span.last + 1:
                raise f.error(f"compacted segment named to hold seq {span.first} … {span.last} ends at seq {seq - 1}",
                              seq=seq, offset=step.offset)
            if not out:
                raise f.error("sealed segment holds no event", offset=step.offset)
            if rebuild:
                return out
            return _Member(span, size, self._key(prefix, span.first), prefix, runs, out)
        finally:
            f.close()

    def _key(self, prefix: bytes, first: int) -> bytes:
        """What segments merged into one must share: the prefix without the writer marks, and the schema version."""
        version = str(self.version(first)).encode()
        if self.encoding == "arrow":
            schema = pa.ipc.read_schema(pa.py_buffer(prefix[len(LEADING_MAGIC):]))
            meta = {k: v for k, v in (schema.metadata or {}).items() if k not in _MARK_KEYS}
            return version + b"\0" + schema.with_metadata(meta).serialize().to_pybytes()
        entries, _ = _avro_header(prefix)
        return version + b"\0" + json.dumps([[k.hex(), v.hex()] for k, v in entries if k not in _MARK_KEYS]).encode()

    # -- writing a compacted segment --------------------------------------------------------------------------

    def build(self, members: list[_Member]) -> tuple[Span, bytes, bytes, Runs]:
        """The compacted segment holding ``members``' events: ``(span, data, index, runs)``."""
        first, last = members[0].span.first, members[-1].end - 1
        runs: Runs = []
        for m in members:
            for seq, mark in m.runs:
                if runs and mark.epoch < runs[-1][1].epoch:
                    raise CorruptLogError(
                        f"segment has writer epoch {mark.epoch} at seq {seq}, lower than epoch {runs[-1][1].epoch} "
                        f"before it: two writer histories are interleaved (not compacted)", stream=self.stream,
                        part=self.part, seq=seq, path=self.path(self.data_name(m.span)))
                if not runs or mark != runs[-1][1]:
                    runs.append((seq, mark))
        last_mark: WriterMark = runs[-1][1]
        marks = [(k.encode(), v) for k, v in last_mark.items()] + [(EPOCHS_KEY.encode(), runs_value(runs))]
        if self.encoding == "arrow":
            schema = pa.ipc.read_schema(pa.py_buffer(members[0].prefix[len(LEADING_MAGIC):]))
            meta = {k: v for k, v in (schema.metadata or {}).items() if k not in _MARK_KEYS}
            meta.update(marks)
            message = schema.with_metadata(meta).serialize().to_pybytes()
            prefix = LEADING_MAGIC + message
            sync = b""
        else:
            entries, _ = _avro_header(members[0].prefix)
            entries = [(k, v) for k, v in entries if k not in _MARK_KEYS] + marks
            sync = hashlib.blake2b(f"eventlog-compacted:{self.stream}:{self.part}:{first}:{last}".encode(),
                                   digest_size=_SYNC).digest()
            prefix = _avro_header_bytes(entries, sync)
        pieces = [prefix]
        entries_ix = []
        blocks = []
        offset = len(prefix)
        for m in members:
            for seq, body, kind, crc in m.bodies:
                if sync:  # an Avro block ends with its container's sync marker
                    body = body[:-_SYNC] + sync
                    crc = ix.checksum(body)
                pieces.append(body)
                entries_ix.append(ix.pack_entry(ix.IndexEntry(seq, offset, len(body), crc, kind)))
                if not sync:
                    meta_len = 8 + int.from_bytes(body[4:8], "little", signed=True)
                    blocks.append(Block(offset, meta_len, len(body) - meta_len))
                offset += len(body)
        if self.encoding == "arrow":
            pieces.append(footer(message, blocks))
        return Span(first, last), b"".join(pieces), ix.pack_header(first) + b"".join(entries_ix), runs


# -- the Avro container header ------------------------------------------------------------------------------


def _zigzag(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _avro_header(prefix: bytes) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """``(metadata entries in order, sync marker)`` of an Avro object container header (already framed whole)."""
    pos = 4

    def long() -> int:
        nonlocal pos
        n = shift = 0
        while True:
            b = prefix[pos]
            pos += 1
            n |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return (n >> 1) ^ -(n & 1)

    entries = []
    while True:
        count = long()
        if count == 0:
            break
        if count < 0:
            count = -count
            long()
        for _ in range(count):
            n = long()
            key = prefix[pos : pos + n]
            pos += n
            n = long()
            value = prefix[pos : pos + n]
            pos += n
            entries.append((bytes(key), bytes(value)))
    return entries, bytes(prefix[pos : pos + _SYNC])


def _avro_header_bytes(entries: list[tuple[bytes, bytes]], sync: bytes) -> bytes:
    out = [_AVRO_MAGIC, _zigzag(len(entries))]
    for k, v in entries:
        out += [_zigzag(len(k)), k, _zigzag(len(v)), v]
    return b"".join([*out, _zigzag(0), sync])


# -- planning --------------------------------------------------------------------------------------------------


def _eligible(p: _Part, listing: PartListing, names: set[str]) -> list[Span]:
    """The segments in force a compaction may merge: sealed, not the newest, not the newest sealed one while the
    newest is open, not wholly before the part's retention cut."""
    spans = list(listing.spans)
    if not spans:
        return []
    newest = spans[-1]
    spans = spans[:-1]  # never the newest segment: a reopening writer reads and repairs it
    open_name = p.layout.open_name(newest.first, p.encoding)
    if newest.last is None and open_name.endswith(OPEN_SUFFIX) and open_name in names:
        spans = spans[:-1]  # ...nor the one before an open one: a writer removing an empty open segment repairs it
    if p.cut_start is not None:
        starts = [s.first for s in listing.spans]
        spans = [s for i, s in enumerate(spans) if starts[i + 1] > p.cut_start]  # the trim removes the others
    return spans


def plan(spans: list[Span], sizes: dict[str, int], p: _Part, target_bytes: int,
         min_segments: int) -> list[list[tuple[Span, int]]]:
    """Groups of consecutive segments to merge, by size alone: each under ``target_bytes`` in all, of at least
    ``min_segments`` segments, none of them already large (``target_bytes / 2``)."""
    groups: list[list[tuple[Span, int]]] = []
    cur: list[tuple[Span, int]] = []
    total = 0
    for span in spans:
        size = sizes.get(p.data_name(span), 0)
        if size >= target_bytes // 2 or (cur and total + size > target_bytes):
            if len(cur) >= min_segments:
                groups.append(cur)
            cur, total = [], 0
            if size >= target_bytes // 2:
                continue
        cur.append((span, size))
        total += size
    if len(cur) >= min_segments:
        groups.append(cur)
    return groups


def compact_part(st: Storage, header: StreamHeader, part_dir: str, part: int, *, target_bytes: int,
                 min_segments: int = DEFAULT_MIN_SEGMENTS, history: SchemaHistory | None = None,
                 cut_start: int | None = None, dry_run: bool = False,
                 hook: "Callable[[str], None] | None" = None) -> PartCompaction:
    """Compact one part (module doc). ``hook(step)`` is called before each step that changes storage (``create``,
    ``index``, ``remove``): tests stop a compaction there."""
    if header.version[0] < 2:
        raise UnsupportedVersionError(
            f"compacting segments needs a format 2 stream; this one is {header.version[0]}.{header.version[1]} "
            f"(replay copy it to a new log to upgrade it)", stream=header.stream, part=part)
    if min_segments < 2:
        raise ValueError(f"min_segments must be at least 2, got {min_segments}")
    if target_bytes < 1:
        raise ValueError(f"target_bytes must be positive, got {target_bytes}")
    p = _Part(st, header, part_dir, part, history=history, cut_start=cut_start)
    result = PartCompaction(part)
    step = hook or (lambda _step: None)
    handle = None
    if not dry_run:
        if not st.objects and not st.exists(part_dir):
            return result
        try:
            handle = st.lock(p.path(COMPACT_LOCK))
        except PartLockedError:
            result.skipped = "another compaction of this part is running"
            return result
    try:
        names = st.list_dir(part_dir)
        listing = p.layout.list_part(st, part_dir, header.encoding, names)
        result.segments_before = len(listing.spans)
        if not dry_run and (listing.hidden or listing.superseded or any(
                s.last is not None and p.index_name(s) not in names for s in listing.spans)
                or any(n.endswith(".tmp") or p.layout.compacted_index_range(n) for n in names)):
            step("leftovers")
            result.leftovers_removed = p.finish_leftovers(listing, names)
            names = st.list_dir(part_dir)
            listing = p.layout.list_part(st, part_dir, header.encoding, names)
        if listing.overlapping:
            result.skipped = "compacted segments overlap (damage: see replay verify)"
            result.segments_after = len(listing.spans)
            return result
        sizes = st.file_sizes(part_dir)
        groups = plan(_eligible(p, listing, set(names)), sizes, p, target_bytes, min_segments)
        merged = 0
        for group in groups:
            if dry_run:
                first = group[0][0].first
                nxt = [s.first for s in listing.spans if s.first > group[-1][0].first]
                result.merges.append(Merge(first, nxt[0] - 1, len(group), sum(sz for _, sz in group)))
                merged += len(group) - 1
                continue
            merged += _merge_runs(p, group, result, step)
        result.segments_after = result.segments_before - merged
        return result
    finally:
        if handle is not None:
            st.unlock(handle)


def _merge_runs(p: _Part, group: list[tuple[Span, int]], result: PartCompaction,
                step: Callable[[str], None]) -> int:
    """Read the group's segments, splitting it where the schema or codec changes, and merge each run of two or more
    (at least ``min_segments`` was checked by size); returns the segments fewer."""
    members: list[_Member] = []
    fewer = 0
    for span, size in group:
        m = p.read_member(span, size)
        if members and m.span.first != members[-1].end:
            raise CorruptLogError(f"segment starts at seq {m.span.first} but the one before it ends at seq "
                                  f"{members[-1].end - 1} (not compacted)", stream=p.stream, part=p.part,
                                  seq=m.span.first, path=p.path(p.data_name(m.span)))
        if members and m.key != members[-1].key:  # another schema version or codec: merged apart
            fewer += _merge(p, members, result, step)
            members = []
        members.append(m)
    return fewer + _merge(p, members, result, step)


def _merge(p: _Part, members: list[_Member], result: PartCompaction, step: Callable[[str], None]) -> int:
    if len(members) < 2:
        return 0
    span, data, index, runs = p.build(members)
    data_path = p.path(p.data_name(span))
    step("create")
    if not p.st.create_exclusive(data_path, data):  # a compaction racing this one made it first: it is whole
        if p.st.read_file(data_path) != data:
            _log.warning("stream %r part %d: %s exists already with other bytes; its small segments are kept",
                         p.stream, p.part, data_path)
            return 0
    step("index")
    p.st.write_file(p.path(p.index_name(span)), index)
    # only once the compacted segment is whole and durable, and in force (no compaction racing on an object store
    # made an overlapping one), are the segments inside it removed
    listing = p.layout.list_part(p.st, p.dir, p.encoding)
    if listing.covering(span.first) != span or listing.overlapping:
        _log.warning("stream %r part %d: %s is not in force after it was written (a concurrent compaction); its "
                     "small segments are kept", p.stream, p.part, data_path)
        return 0
    for m in members:
        step("remove")
        p.remove(p.data_name(m.span))  # data first: an index without its segment is harmless
        p.remove(p.index_name(m.span))
    p.st.sync_dir(p.dir)
    result.merges.append(Merge(span.first, span.last or span.first, len(members), sum(m.size for m in members),
                               len(data), len(runs)))
    _log.info("stream %r part %d: compacted %d segments (seq %d … %d) into %s", p.stream, p.part, len(members),
              span.first, span.last, data_path)
    return len(members) - 1


def compact_stream(log, stream: str, part: int | None = None, *, target_bytes: int,  # noqa: ANN001 - a FileLog
                   min_segments: int = DEFAULT_MIN_SEGMENTS, dry_run: bool = False,
                   hook: "Callable[[str], None] | None" = None) -> CompactResult:
    """Compact every part of ``stream`` (or only ``part``) of the file log ``log`` (``FileLog.compact``)."""
    started = time.monotonic()
    header = log.stored_header(stream)
    history = log.schema_history(stream) if header.version[0] >= 2 else None
    mark = log.retention(stream) if header.version[0] >= 2 else None
    result = CompactResult(stream, dry_run=dry_run)
    parts = range(header.peers) if part is None else [part]
    for p in parts:
        d = log.part_path(stream, p)
        cut = mark.cut(p).start if mark is not None else None
        try:
            result.parts.append(compact_part(log._st, header, d, p, target_bytes=target_bytes,
                                             min_segments=min_segments, history=history, cut_start=cut,
                                             dry_run=dry_run, hook=hook))
        except OSError as e:
            from .reader import io_error

            raise io_error(e, writing=True, stream=stream, part=p, path=d) from None
    result.seconds = time.monotonic() - started
    return result


__all__ = ["DEFAULT_MIN_SEGMENTS", "CompactResult", "Merge", "PartCompaction", "compact_part",
           "compact_stream", "plan"]
