"""Reading one part of a file log across its segments, live or finished.

Every event is located through the segment's index where the index has a whole entry (its CRC-32 is
checked before decoding), and by the container's framing where it has none (FORMAT.md 3.3: the segment is
the truth). A segment is *finished* only once its successor exists and the reader has re-read the segment
(both files opened again) after seeing that: a writer closes a segment before it creates the next one, so
that re-read sees all of it, and anything short of a clean end is damage. Until then the segment may still
grow, and bytes that are not a whole event yet are a torn tail or an event being written (``tail_problem``).
"""

from __future__ import annotations

import json
import struct
import sys
from concurrent.futures import CancelledError
from typing import Callable, Iterator

import pyarrow as pa
import zstandard

from eventlog.encoding import EventCodec, SegmentDecoder
from eventlog.errors import CorruptLogError, EventLogError, SequenceError, StorageUnavailableError
from eventlog.events import Entry, Messages
from eventlog.header import StreamHeader
from eventlog.log import PartReader
from eventlog.schema_history import SchemaHistory
from eventlog.writer_mark import EPOCH_KEY, WRITER_KEY, WriterMark, mark_of, parse_mark

from . import index as ix
from . import readahead
from .codec import file_codec
from .framing import Malformed
from .layout import PartListing, Span, layout_for
from .readahead import BadChecksum, ReadAhead
from .segment import Place, SegmentFiles, Stop
from .storage import Storage

_RAW_DECODE_ERRORS: tuple[type[BaseException], ...] = (
    pa.ArrowException, OSError, ValueError, EOFError, KeyError, IndexError, TypeError, AttributeError, struct.error,
    OverflowError, RecursionError, StopIteration, zstandard.ZstdError)


def raw_decode_errors() -> tuple[type[BaseException], ...]:
    """What pyarrow, fastavro, zstandard and the OS raise on bytes that are not an event; a file reader turns
    each into a CorruptLogError naming the place. fastavro's ``SchemaParseException`` is among them once fastavro
    is imported: an Avro stream's codec imports it before it decodes anything, and a process that reads only
    Arrow streams never imports fastavro (``replay cat`` starts faster)."""
    schema = sys.modules.get("fastavro.schema")
    return _RAW_DECODE_ERRORS if schema is None else (*_RAW_DECODE_ERRORS, schema.SchemaParseException)


def relocate(e: CorruptLogError, **where: object) -> CorruptLogError:
    """The same error with its location filled in (fields already known are kept)."""
    loc = {k: getattr(e, k) for k in ("stream", "part", "seq", "offset", "path")}
    loc.update({k: v for k, v in where.items() if v is not None and loc.get(k) is None})
    return type(e)(e.reason, **loc)  # type: ignore[arg-type]


def decode_error(e: BaseException, **where: object) -> CorruptLogError:
    """A CorruptLogError at ``where`` for an error raised while decoding segment bytes."""
    if isinstance(e, CorruptLogError):
        return relocate(e, **where)
    return CorruptLogError(f"undecodable event: {type(e).__name__}: {str(e)[:300]}", **where)  # type: ignore[arg-type]


_UNREACHABLE = ("NETWORK_CONNECTION", "Could not connect", "Connection refused", "Could not resolve host")
"""What pyarrow's and boto3's errors say when an object store does not answer."""


def io_error(e: OSError, *, writing: bool = False, path: str | None = None, **where: object) -> EventLogError:
    """An EventLogError for an OSError met reading the log's files, or ``writing`` them (a full disk, a store
    refusing a put), naming the file: the error's own, else ``path`` (the file being read or written); a
    ``StorageUnavailableError`` when the object store the log lives on does not answer."""
    said = str(e.strerror or e)
    where["path"] = e.filename or path
    if any(m in said for m in _UNREACHABLE):
        return StorageUnavailableError(f"the object store the log lives on does not answer: {said}",
                                       **where)  # type: ignore[arg-type]
    action = "write" if writing else "read"
    return EventLogError(f"cannot {action} the log's files: {said}", **where)  # type: ignore[arg-type]


def segment_mark(codec: EventCodec, prefix: "bytes | memoryview | pa.Buffer", **where: object) -> WriterMark:
    """The writer mark (epoch and id) a segment's prefix carries; epoch 0 for segments without one (written
    before format 1.2). Damage raises CorruptLogError naming ``where``."""
    return segment_runs(codec, prefix, **where)[-1][1]


EPOCHS_KEY = "eventlog.epochs"
"""Metadata key of a compacted segment (FORMAT.md §11): the writer mark of each run of its events, as JSON
``[[first_seq, epoch, writer or null], …]``."""

Runs = list[tuple[int, WriterMark]]
"""``(first_seq, mark)`` of each run of a segment's events written by one writer incarnation, ascending."""


def segment_runs(codec: EventCodec, prefix: "bytes | memoryview | pa.Buffer", *, first: int | None = None,
                 last: int | None = None, **where: object) -> Runs:
    """The writer mark of each run of a segment's events: one run (the prefix's mark, §3.1) for a plain segment,
    the ``eventlog.epochs`` runs of a compacted segment holding ``first … last`` (§11). Damage (a malformed value,
    runs out of order or outside the segment, epochs going down, a plain segment with runs, a compacted one
    without, a prefix mark other than the last run's) raises CorruptLogError naming ``where``."""
    try:
        meta = codec.segment_metadata(memoryview(prefix) if isinstance(prefix, pa.Buffer) else prefix)
    except CorruptLogError as e:
        raise relocate(e, offset=0, **where) from None
    mark = mark_of(meta, what="segment metadata", offset=0, **where)  # type: ignore[arg-type]
    raw = meta.get(EPOCHS_KEY.encode())
    if last is None:
        if raw is not None:
            raise CorruptLogError(f"a segment that is not compacted carries {EPOCHS_KEY}", offset=0,
                                  **where)  # type: ignore[arg-type]
        return [(first or 0, mark)]
    assert first is not None

    def bad(why: str) -> CorruptLogError:
        return CorruptLogError(f"compacted segment has a malformed {EPOCHS_KEY}: {why}", offset=0,
                               **where)  # type: ignore[arg-type]

    if raw is None:
        raise bad("the key is missing")
    try:
        doc = json.loads(bytes(raw))
    except (ValueError, UnicodeDecodeError):
        raise bad("not JSON") from None
    if not isinstance(doc, list) or not doc or len(doc) > last - first + 1:
        raise bad("not a list of 1 to (last - first + 1) runs")
    runs: Runs = []
    for item in doc:
        if not (isinstance(item, list) and len(item) == 3 and type(item[0]) is int and type(item[1]) is int
                and (item[2] is None or isinstance(item[2], str))):
            raise bad(f"run {str(item)[:60]} is not [first_seq, epoch, writer or null]")
        seq, epoch, writer = item
        run = parse_mark(str(epoch).encode(), None if writer is None else writer.encode("utf-8", "replace"),
                         what=f"compacted segment's run at seq {seq}", present=(True, writer is not None),
                         offset=0, **where)  # type: ignore[arg-type]
        if not runs and seq != first:
            raise bad(f"its first run starts at seq {seq}, the segment at {first}")
        if runs and not runs[-1][0] < seq <= last:
            raise bad(f"run at seq {seq} is not after the one before it and inside {first} … {last}")
        if runs and run.epoch < runs[-1][1].epoch:
            raise bad(f"writer epoch {run.epoch} at seq {seq} is lower than {runs[-1][1].epoch} before it")
        if runs and run == runs[-1][1]:
            raise bad(f"run at seq {seq} has the mark of the run before it")
        runs.append((seq, run))
    if mark != runs[-1][1]:
        raise bad(f"the segment's {EPOCH_KEY}/{WRITER_KEY} are not those of its last run")
    return runs


def runs_value(runs: Runs) -> bytes:
    """The ``eventlog.epochs`` value recording ``runs`` (compact JSON)."""
    return json.dumps([[seq, m.epoch, m.writer] for seq, m in runs], separators=(",", ":")).encode()


class _Cursor:
    """Reading position inside one segment."""

    def __init__(self, files: SegmentFiles) -> None:
        self.files = files
        self.first_seq = files.first_seq
        self.seq = files.first_seq
        """The next event of the segment to look at."""
        self.offset: int | None = None
        """Its byte offset (None until the prefix was framed)."""
        self.sealed = False
        """The next segment exists and the files were reopened since: the segment is finished."""
        self.mapped: pa.Buffer | None = None
        self.decoder: SegmentDecoder | None = None
        self.runs: Runs | None = None
        """The writer mark of each run of the segment's events (read with its prefix; one run unless compacted)."""
        self.run_i = 0
        self.run_end = 0
        """The first seq after the run ``run_i`` (the run of the last event stepped over)."""
        self.run_epoch = 0
        """The writer epoch of that run."""
        self.blocks: list[tuple[int, int]] | None = [] if files.layout.seals and files.encoding == "arrow" else None
        """``(offset, length)`` of every event read from the segment (2.x Arrow: checked against its footer)."""
        self.footer_checked: tuple[int, int, int] | None = None
        """``(end-of-stream offset, data size, events)`` at which the footer was found to list the events."""
        self.ahead: ReadAhead | None = None
        """The segment's next large events being decoded on other threads (``readahead``)."""
        self.primed = False
        """``prefetch`` opened the segment's files again, framed its prefix and started its first events: the
        first read begins there (as if it had begun at the prefetch) instead of reopening the files."""
        if files.last_seq is not None:
            self.sealed = True  # a compacted segment is written whole before it is named: finished from the start

    def set_runs(self, runs: Runs) -> None:
        self.runs = runs
        self.run_i = 0
        self.run_end = runs[1][0] if len(runs) > 1 else 1 << 64
        self.run_epoch = runs[0][1].epoch

    def epoch_at(self, seq: int) -> int:
        """The writer epoch of event ``seq`` of the segment."""
        assert self.runs is not None
        epoch = self.runs[0][1].epoch
        for first, mark in self.runs:
            if first > seq:
                break
            epoch = mark.epoch
        return epoch

    def advance(self, seq: int) -> None:
        """Step the run to the one holding ``seq`` (at or after the current one)."""
        assert self.runs is not None
        while seq >= self.run_end:
            self.run_i += 1
            self.run_epoch = self.runs[self.run_i][1].epoch
            self.run_end = self.runs[self.run_i + 1][0] if self.run_i + 1 < len(self.runs) else 1 << 64

    def drop_ahead(self) -> None:
        """Forget the events being decoded ahead (they are decoded again, in place, if read)."""
        if self.ahead is not None:
            self.ahead.close()
            self.ahead = None

    def reopen(self, *, forget_prefix: bool = False) -> None:
        self.mapped = None
        self.footer_checked = None  # the files opened again are checked again
        self.drop_ahead()
        self.files.reopen(forget_prefix=forget_prefix)

    def close(self) -> None:
        self.mapped = None
        self.decoder = None
        self.drop_ahead()
        self.files.close()


class FilePartReader(PartReader):
    """Reads one part across its segments, verifying every indexed event's checksum before decoding it."""

    def __init__(self, st: Storage, header: StreamHeader, part_dir: str, part: int, start: int,
                 progress_only: bool, *, history: "SchemaHistory | None" = None,
                 reload: "Callable[[], SchemaHistory | None] | None" = None) -> None:
        self._st = st
        self.header = header
        self.stream = header.stream
        self.part = part
        self._codec = file_codec(header)
        self._history = history
        self._reload = reload  # the log's schema history read again (a writer may change the schema meanwhile)
        self._codecs: dict[int, EventCodec] = {0: self._codec}  # per schema version (FORMAT.md §12)
        self._layout = layout_for(header.version)
        self._dir = part_dir
        self._next = start
        self._progress_only = progress_only
        self._cur: _Cursor | None = None
        self._listing: PartListing | None = None
        self._prev_epoch: tuple[int, str] | None = None  # (epoch, path) of the last segment read
        self.epoch = 0
        self._ahead_depth = 0 if progress_only or header.encoding != "arrow" else readahead.depth()

    @property
    def next_seq(self) -> int:
        return self._next

    def close(self) -> None:
        if self._cur is not None:
            self._cur.close()
            self._cur = None

    # -- segments --------------------------------------------------------------------------------------

    def _list(self) -> PartListing:
        self._listing = self._layout.list_part(self._st, self._dir, self.header.encoding)
        return self._listing

    def _open_cursor(self) -> bool:
        # moving on to a segment already listed (the usual step after a finished one) lists nothing
        listing = self._listing
        if listing is None or (span := listing.holding(self._next)) is None or not span.holds(self._next):
            listing = self._list()
        for attempt in range(2):
            span = listing.holding(self._next)
            if span is None:
                if listing.spans and attempt == 0:  # a listing is no snapshot: a compaction may have run under it
                    listing = self._list()
                    continue
                if listing.spans:
                    raise SequenceError(
                        f"events before seq {listing.spans[0].first} are not in the log (asked for seq {self._next})",
                        stream=self.stream, part=self.part, seq=self._next,
                    )
                return False
            try:
                files = SegmentFiles(self._st, self._dir, span.first, self._layout, self.header.encoding,
                                     stream=self.stream, part=self.part, last=span.last)
            except FileNotFoundError:
                # removed since listed: a writer dropping an empty segment (next poll), or a compaction that
                # replaced it (the listing now has the compacted segment)
                listing = self._list()
                continue
            self._cur = _Cursor(files)
            return True
        self._listing = None
        return False

    def _has_later(self, cur: _Cursor) -> bool:
        """Whether a segment after ``cur``'s exists (then ``cur``'s is finished): one starting later, or a compacted
        one holding it (a compaction takes only finished segments)."""
        first, plain = cur.first_seq, cur.files.last_seq is None

        def later(listing: PartListing) -> bool:
            return any(f > first for f in listing.plain) or any(
                a > first or (plain and a <= first <= b) for a, b in listing.compacted)

        return (self._listing is not None and later(self._listing)) or later(self._list())

    def _next_span(self, cur: _Cursor) -> Span | None:
        """The segment in force holding ``cur.seq`` (the event after ``cur``'s last), other than ``cur``'s; None
        when there is none (a gap)."""
        def find(listing: PartListing) -> Span | None:
            span = listing.holding(cur.seq)
            if span is None or (span.first == cur.first_seq and span.last == cur.files.last_seq):
                return None
            return span if span.first == cur.seq or (span.last is not None and span.first <= cur.seq) else None

        found = find(self._listing) if self._listing is not None else None
        # a listing is no snapshot: a file created while it ran may be missing from it (ext4 lists in hash order),
        # while a later one is there. A listing started now holds every segment created before the one seen.
        return found if found is not None else find(self._list())

    def _moved(self, cur: _Cursor | None) -> bool:
        """After ``cur``'s files vanished while being read: True when a compacted segment now holds the next event
        to read (a compaction replaced the segment; reading goes on there), False otherwise."""
        listing = self._list()
        span = listing.covering(self._next)
        if span is None and cur is not None:  # its events up to the one before ``_next`` are in a compacted segment
            span = listing.covering(cur.first_seq)
        return span is not None and (cur is None or (span.first, span.last) != (cur.first_seq, cur.files.last_seq))

    def __iter__(self) -> Iterator[Entry]:
        self.tail_problem = None
        try:
            yield from self._iter()
        except OSError as e:  # the files cannot be opened or read (permissions, I/O errors): not decoding
            raise io_error(e, stream=self.stream, part=self.part) from None

    def _iter(self) -> Iterator[Entry]:
        while True:
            if self._cur is None and not self._open_cursor():
                return
            cur = self._cur
            assert cur is not None
            try:
                if cur.primed:
                    cur.primed = False
                elif not cur.sealed and cur.seq == cur.first_seq:
                    # no event read from it yet: open it again, in case a recovering writer removed it (it held
                    # no whole event) and a new session created a segment of the same name
                    try:
                        cur.reopen(forget_prefix=True)
                    except FileNotFoundError:
                        self.close()
                        if self._moved(None):  # a compaction replaced it: read on from the compacted segment
                            continue
                        return
                    cur.offset = None
                    cur.decoder = None
                    cur.runs = None
                yield from self._read(cur)
                if not cur.sealed:
                    if not self._has_later(cur):
                        return
                    # the next segment exists, so this one was closed before it was created: read it again,
                    # from freshly opened files, to its end; anything short of a clean end is damage
                    cur.reopen()
                    cur.sealed = True
                    yield from self._read(cur)
            except OSError:
                # the segment vanished under the reader (an object store's read fails, or the reopen finds no
                # file): a compaction removed it once its compacted copy was whole. Read on from that copy at the
                # next event, which no event before it was delivered past; anything else is an error
                if not self._moved(cur):
                    raise
                self.close()
                continue
            nxt = self._next_span(cur)
            if nxt is None:
                later = [s.first for s in (self._listing.spans if self._listing else []) if s.first > cur.first_seq]
                raise SequenceError(
                    f"segment ends at seq {cur.seq - 1} but the next segment starts at {later[0] if later else None}",
                    stream=self.stream, part=self.part, seq=cur.seq, path=cur.files.data_path,
                )
            cur.close()
            self._cur = None

    def prefetch(self) -> None:
        """Start decoding the first large events of the segment the next read begins with, on the pool threads
        (``readahead``), doing now what that read does first: open the segment's files, frame its prefix, check
        its writer epoch. Anything unusual (no segment yet, a resumed position inside a segment, damage)
        leaves the reader as it was, for the read to find and report."""
        if not self._ahead_depth or self._cur is not None:
            return
        prev_epoch = self._prev_epoch
        try:
            if not self._open_cursor():
                return
            cur = self._cur
            assert cur is not None
            if cur.first_seq != self._next:
                raise LookupError("resuming inside a segment")
            cur.files.refresh()  # opened just now: what a read would reopen first is fresh
            if not self._frame(cur):
                raise LookupError("no whole prefix yet")
            cur.mapped = cur.files.data.map()
            cur.decoder = self._main_decoder(cur)
            cur.ahead = ReadAhead(self._ahead_decoder(cur), self._ahead_depth)
            cur.ahead.start(cur.files, cur.mapped, cur.seq, cur.offset)
            cur.primed = True
        except Exception:  # noqa: BLE001 - a hint only: the read does it all again and reports what it finds
            self._prev_epoch = prev_epoch
            self.close()

    # -- one segment -----------------------------------------------------------------------------------

    def _read(self, cur: _Cursor) -> Iterator[Entry]:
        self.tail_problem = None  # what the newest segment read ends with is what counts
        f = cur.files
        f.refresh()
        if cur.offset is None and not self._frame(cur):
            return
        path = f.data_path
        while True:
            try:
                step = f.next_place(cur.seq, cur.offset)
            except Malformed as m:
                if cur.sealed or f.is_sealed:  # a sealed segment (its name says so) is whole, footer included
                    raise f.error(f"damaged event bytes in a finished segment: {m.reason}", seq=cur.seq,
                                  offset=m.offset) from None
                self.tail_problem = f"bytes that are no event at byte {m.offset} of {f.data_path}: {m.reason}"
                return
            if isinstance(step, Stop):
                break
            entry = None
            if step.seq >= self._next and not (
                self._progress_only and step.entry is not None and step.entry.kind == ix.KIND_MESSAGES
            ):
                entry = self._decode(cur, step)
            if cur.blocks is not None:
                cur.blocks.append((step.offset, step.length))
            if step.seq >= cur.run_end:  # the next run of a compacted segment (another writer incarnation)
                cur.advance(step.seq)
                self._prev_epoch = (cur.run_epoch, path)
            cur.seq, cur.offset = step.seq + 1, step.end
            if step.seq >= self._next:
                self._next = step.seq + 1
            if entry is not None:
                self.epoch = cur.run_epoch
                yield entry
        self._at_stop(cur, step)

    def _frame(self, cur: _Cursor) -> bool:
        """Frame the segment's prefix (where its first event begins) and read its writer epoch; False while a
        live segment holds no whole prefix yet. Damage raises CorruptLogError."""
        f = cur.files
        try:
            prefix = f.prefix()
        except Malformed as m:
            raise f.error(f"damaged segment prefix: {m.reason}", offset=m.offset) from None
        if prefix is None:
            if cur.sealed:
                raise f.error("finished segment ends inside its prefix", offset=0)
            return False
        cur.offset = prefix
        if cur.runs is None:
            self._segment_epoch(cur, prefix)
        return True

    def _segment_decoder(self, cur: _Cursor) -> SegmentDecoder:
        """A decoder of the events of ``cur``'s segment, built from its mapped prefix."""
        assert cur.mapped is not None  # mapped before any event of the segment is decoded
        prefix = cur.mapped.slice(0, cur.files.prefix_len or 0)
        try:
            return self._codec_of(cur).segment_decoder(prefix, part=self.part)
        except CorruptLogError:
            if self._reload is None or not self._history_changed():
                raise
            return self._codec_of(cur).segment_decoder(prefix, part=self.part)  # a schema recorded since we opened

    def _history_changed(self) -> bool:
        """Read the schema history again; True when it differs from the one this reader had."""
        assert self._reload is not None
        history = self._reload()
        if history == self._history:
            return False
        self._history = history
        return True

    def _codec_of(self, cur: _Cursor) -> EventCodec:
        """The codec of the schema version the segment was written with (the part's switches, FORMAT.md §12):
        a segment begins a writer session, and a session writes one schema."""
        if self._history is None:
            return self._codec
        version = self._history.version_at(self.part, cur.files.first_seq)
        codec = self._codecs.get(version)
        if codec is None:
            codec = self._codecs[version] = file_codec(self._history.header_of(self.header, version))
        return codec

    def _segment_epoch(self, cur: _Cursor, prefix_len: int) -> None:
        """Read the writer mark of each run of the segment's events; the epoch where reading begins is checked
        against the segment read before it (epochs never decrease)."""
        f = cur.files
        runs = segment_runs(self._codec_of(cur), f.read(0, prefix_len), first=cur.first_seq, last=f.last_seq,
                            stream=self.stream, part=self.part, path=f.data_path)
        cur.set_runs(runs)
        epoch = cur.epoch_at(max(cur.first_seq, self._next))
        if self._prev_epoch is not None and epoch < self._prev_epoch[0]:
            raise f.error(f"segment has writer epoch {epoch}, lower than epoch {self._prev_epoch[0]} of the segment "
                          f"before it ({self._prev_epoch[1]}): two writer histories are interleaved", offset=0)
        self._prev_epoch = (epoch, f.data_path)

    def _at_stop(self, cur: _Cursor, stop: Stop) -> None:
        f = cur.files
        if f.last_seq is not None and cur.seq != f.last_seq + 1 and not stop.problem:
            raise f.error(f"compacted segment named to hold seq {f.first_seq} … {f.last_seq} ends at seq "
                          f"{cur.seq - 1}", seq=cur.seq, offset=stop.offset)
        beyond = f.index_beyond(cur.seq)
        extra_entries = beyond is not None and "partial" not in beyond  # whole entries past the events
        if stop.eos:
            after = f.framing.suffix_end(f.read, f.data_size, stop.offset)
            if after is None:  # 2.x: the footer after the marker is not whole
                if cur.sealed or f.is_sealed:
                    raise f.error("sealed segment does not end with a whole footer after its end-of-stream marker",
                                  offset=stop.offset)
                self.tail_problem = f"end-of-stream marker without a whole footer yet at byte {stop.offset} of {f.data_path}"
                return
            if f.data_size > after:
                raise f.error("bytes after the end-of-stream marker", offset=after)
            if cur.blocks is not None:
                self._check_footer(cur, stop.offset)
        elif cur.blocks is not None and (cur.sealed or f.is_sealed) and not stop.problem:
            raise f.error("sealed segment does not end with its end-of-stream marker and footer after its last event",
                          offset=stop.offset)
        if extra_entries and (stop.eos or cur.sealed):
            raise f.error(f"index has more than the segment: {beyond}", seq=cur.seq,
                          offset=ix.entry_position(cur.first_seq, cur.seq), index=True)
        if cur.sealed or f.is_sealed:
            if stop.problem:
                raise f.error(f"finished segment does not end with a whole event: {stop.problem}", seq=cur.seq,
                              offset=stop.offset)
            return  # a partial entry or header after the last event: the index is short, not the segment
        problem = stop.problem or beyond
        if problem is not None:
            self.tail_problem = problem

    def _check_footer(self, cur: _Cursor, eos: int) -> None:
        """A 2.x segment's footer must list exactly the segment's events (third-party readers believe it);
        checked once for the same end, size and events (a reader polls a finished segment again)."""
        key = (eos, cur.files.data_size, len(cur.blocks or []))
        if cur.footer_checked == key:
            return
        problem = cur.files.footer_problem(eos, cur.blocks or [], cur.mapped)
        if problem is not None:
            raise cur.files.error(problem, offset=eos + 8)
        cur.footer_checked = key

    def _decode(self, cur: _Cursor, place: Place) -> Entry | None:
        f = cur.files
        if cur.mapped is None or cur.mapped.size < place.end:
            cur.mapped = cur.files.data.map()  # (re)map: the segment grew since it was mapped
            cur.drop_ahead()  # what was decoded ahead came from the old mapping: decoded again, in place
            if cur.mapped.size < place.end:
                raise f.error("segment shrank while it was read", seq=place.seq, offset=place.offset)
        if cur.decoder is None:
            try:
                cur.decoder = self._main_decoder(cur)
            except (*raw_decode_errors(), CorruptLogError) as e:
                raise decode_error(e, stream=self.stream, part=self.part, offset=0, path=f.data_path) from None
        ahead = None
        if self._ahead_depth:
            if cur.ahead is None:
                cur.ahead = ReadAhead(self._ahead_decoder(cur), self._ahead_depth)
            ahead = cur.ahead.take(place.seq, place.offset, place.length)
            cur.ahead.start(f, cur.mapped, place.seq + 1, place.end)  # the next ones decode while this one is used
        try:
            got = None
            if ahead is not None:
                try:
                    got = readahead.wait(ahead)
                except CancelledError:  # not decoded ahead after all (an event before it in its chunk failed)
                    ahead = None
                if got is None:  # taken back: no pool thread began it in time
                    ahead = None
            if got is not None:
                seq, event, ts = got
            else:
                body = cur.mapped.slice(place.offset, place.length)
                if place.entry is not None and ix.checksum(body) != place.entry.crc:
                    raise BadChecksum()
                seq, event = cur.decoder.decode_at(cur.mapped, place.offset, place.length)
                ts = getattr(cur.decoder, "last_ts", None)
        except BadChecksum:
            raise f.error("event fails its checksum", seq=place.seq, offset=place.offset) from None
        except CorruptLogError as e:
            raise relocate(e, **self._where(cur, place)) from None
        except raw_decode_errors() as e:
            if ahead is None:
                cur.decoder = None  # its state is unknown after an error
            raise decode_error(e, **self._where(cur, place)) from None
        if seq != place.seq:
            raise f.error(f"event carries seq {seq}, its place in the segment is seq {place.seq}", seq=place.seq,
                          offset=place.offset)
        if self._progress_only and isinstance(event, Messages):
            return None
        return Entry(seq, event, ts)

    def _where(self, cur: _Cursor, place: Place) -> dict[str, object]:
        """The location of the event at ``place`` for an error about it."""
        return {"stream": self.stream, "part": self.part, "seq": place.seq, "offset": place.offset,
                "path": cur.files.data_path}

    def _main_decoder(self, cur: _Cursor) -> SegmentDecoder:
        """The decoder of the events read in place: on this thread alone while pool threads decode ahead (pyarrow's
        own threads would only add hand-offs beside them), with pyarrow's threads otherwise."""
        dec = self._segment_decoder(cur)
        return readahead.single_threaded(dec) if self._ahead_depth else dec

    def _ahead_decoder(self, cur: _Cursor):  # noqa: ANN202
        """What builds the decoders of events decoded ahead in ``cur``'s segment (one per event in flight)."""
        return lambda: readahead.single_threaded(self._segment_decoder(cur))
