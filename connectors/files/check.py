"""``FileLog.check_part``: every problem of a part's files, found without raising.

Where reading stops at the first damage, this goes through every segment and reports, each as a
CorruptLogError naming stream, part, file and byte offset (and seq when known): orphan indexes and
segments without one, damaged prefixes, index headers and entries, an index that lists fewer events than
its segment holds (events a reader finds only by the container's framing) or entries past its events,
index entries that disagree with the segment, events failing their CRC-32 (or, when unindexed, their
decode), torn tails, segments that do not continue each other's sequence ids, and malformed writer epochs or
epochs that go backwards from one segment to the next (FORMAT.md §3.1).

``check_layout`` (``FileLog.check_layout``) checks a log's folders and files against the layout of FORMAT.md §3
and §3.4; ``locate_event`` and ``segment_after`` say where an event lies and where reading may go on after
damage. All of it goes through the storage layer (``storage.py``), so a log on S3 or in memory is checked as
one on the local disk is.
"""

from __future__ import annotations

from typing import Any, Mapping

from eventlog.encoding import SegmentDecoder
from eventlog.errors import CorruptLogError, EventLogError
from eventlog.header import StreamHeader, check_stream_name
from eventlog.log import with_kind

from . import index as ix
from .codec import file_codec
from .framing import Malformed
from .layout import (
    COMPACT_LOCK,
    HEADER_FILES,
    LAYOUTS,
    LOCK_FILE,
    RETENTION_FILE,
    RETENTION_LOCK,
    SCHEMAS_FILE,
    SCHEMAS_LOCK,
    layout_for,
    part_number,
)
from .reader import raw_decode_errors, segment_runs
from .segment import DAMAGED, SegmentFiles, Stop
from .storage import Storage

_MAX_PER_SEGMENT = 50
"""Problems reported per segment before moving on to the next one."""


_LEFTOVER = ("harmless leftover of an interrupted (or running) compaction: readers read these events from the "
             "compacted segment {}, and the next `replay compact` of the part removes it")


def check_part(st: Storage, header: StreamHeader, part_dir: str, part: int) -> list[CorruptLogError]:
    """The problems of one part's files (see the module doc); an empty list when they are whole. What a compaction
    stopped midway leaves (segments inside a compacted one, a compacted segment whose index is not written yet) is
    reported as a harmless leftover (kind ``leftover``: not a problem); compacted segments overlapping each other as
    damage."""
    codec = file_codec(header)
    layout = layout_for(header.version)
    names = st.list_dir(part_dir)
    listing = layout.list_part(st, part_dir, header.encoding, names)
    indexes = layout.list_indexes(st, part_dir)
    compacted_indexes = {r for r in (layout.compacted_index_range(n) for n in names) if r is not None}
    problems: list[CorruptLogError] = []
    where = {"stream": header.stream, "part": part}

    def inside(seq: int) -> tuple[int, int] | None:
        span = listing.covering(seq)
        return (span.first, span.last) if span is not None and span.last is not None else None

    for first in sorted(set(indexes) - set(listing.plain)):
        path = st.join(part_dir, layout.index_name(first))
        rng = inside(first)
        if rng is not None:
            problems.append(with_kind(CorruptLogError(
                "index without its segment, " + _LEFTOVER.format(layout.compacted_name(*rng, header.encoding)),
                seq=first, offset=0, path=path, **where), "leftover"))
        else:
            problems.append(CorruptLogError("orphan index without its segment", seq=first, offset=0, path=path,
                                            **where))
    for rng in sorted(compacted_indexes - set(listing.compacted)):
        problems.append(with_kind(CorruptLogError(
            "compacted index without its segment (what an interrupted removal of a superseded compacted segment "
            "leaves: harmless, the next `replay compact` removes it)", seq=rng[0], offset=0,
            path=st.join(part_dir, layout.compacted_index_name(*rng)), **where), "leftover"))
    for first in listing.hidden:
        rng = inside(first)
        assert rng is not None
        problems.append(with_kind(CorruptLogError(
            "segment inside a compacted segment's range, " + _LEFTOVER.format(
                layout.compacted_name(*rng, header.encoding)), seq=first, offset=0,
            path=st.join(part_dir, layout.sealed_name(first, header.encoding)), **where), "leftover"))
    for rng in listing.superseded:
        covering = inside(rng[0])
        problems.append(with_kind(CorruptLogError(
            "compacted segment inside a larger one, " + _LEFTOVER.format(
                layout.compacted_name(*covering, header.encoding) if covering else "?"), seq=rng[0], offset=0,
            path=st.join(part_dir, layout.compacted_name(*rng, header.encoding)), **where), "leftover"))
    for a, b in listing.overlapping:
        problems.append(CorruptLogError(
            f"compacted segments overlap without one holding the other ({a[0]} … {a[1]} and {b[0]} … {b[1]}): no "
            f"compaction makes them (two tools rewrote the part?)", seq=b[0], offset=0,
            path=st.join(part_dir, layout.compacted_name(*b, header.encoding)), **where))
    prev_end: int | None = None
    epochs: list[tuple[int, str]] = []  # (epoch, path) of the segments whose prefix was read
    spans = listing.spans
    for i, span in enumerate(spans):
        first = span.first
        data_path = st.join(part_dir, layout.compacted_name(first, span.last, header.encoding) if span.last is not None
                            else layout.sealed_name(first, header.encoding))
        if prev_end is not None and first != prev_end and not (span.last is not None and first < prev_end):
            problems.append(CorruptLogError(
                f"segment starts at seq {first} but the previous one ends at seq {prev_end - 1}",
                seq=first, offset=0, path=data_path, **where))
        if span.last is not None and span.compacted and (first, span.last) not in compacted_indexes:
            problems.append(with_kind(CorruptLogError(
                "compacted segment without its index (a compaction stopped after writing the segment, or is writing "
                "its index now): harmless, readers find its events by scanning it, and the next `replay compact` "
                "writes the index", seq=first, offset=0, path=data_path, **where), "leftover"))
        elif span.last is None and first not in indexes:
            problems.append(CorruptLogError("segment without an index (its events are found by scanning it)",
                                            seq=first, offset=0, path=data_path, **where))
        try:
            files = SegmentFiles(st, part_dir, first, layout, header.encoding, stream=header.stream, part=part,
                                 last=span.last)
        except FileNotFoundError:
            continue
        try:
            found: list[CorruptLogError] = []
            prev_end = _check_segment(files, codec, sealed=span.last is not None or i < len(spans) - 1,
                                      problems=found, epochs=epochs)
            problems.extend(found[:_MAX_PER_SEGMENT])
        except OSError as e:
            problems.append(CorruptLogError(f"cannot read the segment: {e}", offset=0, path=data_path, **where))
            prev_end = None
        finally:
            files.close()
    return problems


def _check_segment(f: SegmentFiles, codec, *, sealed: bool, problems: list[CorruptLogError],  # noqa: ANN001
                   epochs: list[tuple[int, str]]) -> int:
    """Report the segment's problems; returns the seq after its last whole event."""
    first = f.first_seq
    try:
        f.refresh()
    except EventLogError as e:
        problems.append(e if isinstance(e, CorruptLogError) else CorruptLogError(e.reason, **e.location()))
        f.index_ok = False  # go on without the index
    try:
        prefix = f.prefix()
    except Malformed as m:
        problems.append(f.error(f"damaged segment prefix: {m.reason}", offset=m.offset))
        return first
    if prefix is None:
        if f.data_size or sealed:
            what = "finished segment ends" if sealed else "torn tail: segment ends"
            problems.append(f.error(f"{what} inside its prefix ({f.data_size} bytes)", offset=0))
        return first
    try:
        runs = segment_runs(codec, f.read(0, prefix), first=first, last=f.last_seq, stream=f.stream, part=f.part,
                            path=f.data_path)
        epoch = runs[0][1].epoch
        if epochs and epoch < epochs[-1][0]:
            problems.append(f.error(f"segment has writer epoch {epoch}, lower than epoch {epochs[-1][0]} of the "
                                    f"segment before it ({epochs[-1][1]}): two writer histories are interleaved",
                                    offset=0))
        epochs.append((runs[-1][1].epoch, f.data_path))
    except CorruptLogError as e:
        problems.append(e)
    decoder: list[SegmentDecoder] = []
    seq, offset = first, prefix
    unindexed: list[tuple[int, int]] = []
    places: list[tuple[int, int]] = []  # (offset, length) of every event: what a 2.x footer must list
    stop: Stop | None = None
    while len(problems) < _MAX_PER_SEGMENT:
        entry = f.entry(seq)
        if entry is DAMAGED:
            problems.append(f.error("index entry fails its checksum", seq=seq,
                                    offset=ix.entry_position(first, seq), index=True))
        try:
            step = f.next_place(seq, offset, strict=False)
        except CorruptLogError as e:  # an entry that disagrees with the segment: go on by the framing
            problems.append(e)
            f.index_ok = False
            continue
        except Malformed as m:
            later = f.entries() > seq - first
            torn = not sealed and not later
            problems.append(f.error(f"{'torn tail: ' if torn else ''}bytes that are no event: {m.reason}", seq=seq,
                                    offset=m.offset))
            break
        if isinstance(step, Stop):
            stop = step
            break
        body = f.read(step.offset, step.length)
        if step.entry is not None:
            if ix.checksum(body) != step.entry.crc:
                problems.append(f.error("event fails its checksum", seq=seq, offset=step.offset))
        else:
            unindexed.append((seq, step.offset))
            problem = _decode_problem(f, codec, decoder, seq, step.offset, body)
            if problem is not None:
                problems.append(problem)
        places.append((step.offset, step.length))
        seq, offset = seq + 1, step.end
    if unindexed and f.index_exists:
        s, o = unindexed[0]
        problems.append(f.error(f"index is shorter than its segment: it lists {f.entries()} entries, the segment "
                                f"holds {seq - first} events ({len(unindexed)} found by scanning it, the first at "
                                f"byte {o} of {f.data_path})", seq=s, offset=ix.entry_position(first, s), index=True))
    if stop is not None:
        beyond = f.index_beyond(seq)
        if stop.eos:
            end = f.framing.suffix_end(f.read, f.data_size, stop.offset)
            if end is None:
                what = "sealed segment does not end with a whole footer" if sealed or f.is_sealed else "torn tail"
                problems.append(f.error(f"{what} after its end-of-stream marker", offset=stop.offset))
            elif f.data_size > end:
                problems.append(f.error("bytes after the end-of-stream marker", offset=end))
            elif f.layout.seals and f.encoding == "arrow":
                footer = f.footer_problem(stop.offset, places)
                if footer is not None:
                    problems.append(f.error(footer, offset=stop.offset + 8))
        if sealed and f.layout.seals and not f.is_sealed:
            problems.append(f.error("segment was never sealed (a writer crashed; the next writer of the part seals "
                                    "it)", offset=0))
        if stop.problem:
            what = "finished segment does not end with a whole event" if sealed else "torn tail"
            problems.append(f.error(f"{what}: {stop.problem}", seq=seq, offset=stop.offset))
        if beyond:
            what = "index has more than its segment" if sealed or "partial" not in beyond else "torn tail"
            problems.append(f.error(f"{what}: {beyond}", seq=seq, offset=ix.entry_position(first, seq), index=True))
    if f.last_seq is not None and seq != f.last_seq + 1 and len(problems) < _MAX_PER_SEGMENT:
        problems.append(f.error(f"compacted segment named to hold seq {first} … {f.last_seq} ends at seq {seq - 1}",
                                seq=seq, offset=offset))
    return seq


def _decode_problem(f: SegmentFiles, codec, decoder: list[SegmentDecoder], seq: int, offset: int,  # noqa: ANN001
                    body: bytes) -> CorruptLogError | None:
    where = {"seq": seq, "offset": offset}
    try:
        if not decoder:
            decoder.append(codec.segment_decoder(f.read(0, f.prefix_len or 0)))
        got, _ = decoder[0].decode(body)
    except CorruptLogError as e:
        return f.error(f"unindexed event does not decode: {e.reason}", **where)
    except raw_decode_errors() as e:
        return f.error(f"unindexed event does not decode: {type(e).__name__}: {str(e)[:200]}", **where)
    if got != seq:
        return f.error(f"unindexed event carries seq {got}", **where)
    return None


# -- the layout of a log's folders (FileLog.check_layout) ----------------------------------------------------


def check_layout(st: Storage, root: str, headers: "Mapping[str, StreamHeader]", *,
                 stream: str | None = None) -> list[EventLogError]:
    """Folders and files of the file log at ``root`` against FORMAT.md's layout, through the storage (the local
    disk, S3, memory alike): every segment with its index and every index with its segment, part folders and
    segments matching the stream's peers and encoding (else the header disagrees with the parts), no stray files;
    for the whole log (``stream`` None), folders that look like streams but have no header; for ``stream``
    without a readable header in ``headers``, whether its folder lost its header. Each problem is marked with its
    kind (``layout``, ``header``, ``torn-tail``, or ``leftover`` for what an interrupted compaction harmlessly left)."""
    problems: list[EventLogError] = []
    if stream is not None and stream not in headers:
        d = st.join(root, check_stream_name(stream))
        if _headless(st, d):
            problems.append(_problem("layout", "stream folder without its header file", stream, path=d))
        return problems
    if stream is None:
        for name in _listing(st, root):
            d = st.join(root, name)
            if name not in headers and _headless(st, d):
                problems.append(_problem("layout", "stream folder without its header file", name, path=d))
    for name, header in headers.items():
        if stream is not None and name != stream:
            continue
        problems += _stream_layout(st, st.join(root, name), header)
    return problems


def _problem(kind: str, message: str, stream: str, part: int | None = None, seq: int | None = None, *,
             path: str) -> CorruptLogError:
    return with_kind(CorruptLogError(message, stream=stream, part=part, seq=seq, path=path), kind)


def _listing(st: Storage, path: str) -> list[str]:
    """The names in folder ``path``; [] when it is no folder (or cannot be listed)."""
    try:
        return st.list_dir(path)
    except OSError:
        return []


def _headless(st: Storage, d: str) -> bool:
    """A folder holding part folders but no header file."""
    names = _listing(st, d)
    return not any(h in names for h in HEADER_FILES) and any(part_number(n) is not None for n in names)


def _holds_segments(st: Storage, d: str) -> bool:
    return any(lay.segment_first(x, enc) or lay.index_first(x) or lay.compacted_range(x, enc)
               or lay.compacted_index_range(x) for x in _listing(st, d)
               for lay in LAYOUTS.values() for enc in ("arrow", "avro"))


def _stream_layout(st: Storage, sdir: str, header: StreamHeader) -> list[EventLogError]:
    stream, layout = header.stream, layout_for(header.version)
    try:
        names = st.list_dir(sdir)
    except OSError as e:
        return [_problem("layout", f"cannot list the stream folder: {e.strerror or e}", stream, path=sdir)]
    problems: list[EventLogError] = []
    for name in names:
        number = layout.part_of(name)
        path = st.join(sdir, name)
        if number is not None and number >= header.peers:
            if _holds_segments(st, path):
                problems.append(_problem("header", f"the header says peers {header.peers}, but part folder {name} "
                                         "holds segments: the header disagrees with the parts", stream, number,
                                         path=path))
            else:
                problems.append(_problem("layout", f"part folder beyond the stream's {header.peers} peers", stream,
                                         number, path=path))
        elif number is None and name not in (layout.header_file, RETENTION_FILE, RETENTION_LOCK, SCHEMAS_FILE, SCHEMAS_LOCK) \
                and not name.endswith(".tmp"):
            what = "a part folder of another format version" if part_number(name) is not None else "unexpected file"
            problems.append(_problem("layout", f"{what} in the stream folder", stream, path=path))
    for part in range(header.peers):
        problems += _part_layout(st, header, part, st.join(sdir, layout.part_dir(part)))
    return problems


def _part_layout(st: Storage, header: StreamHeader, part: int, pdir: str) -> list[EventLogError]:
    stream, layout = header.stream, layout_for(header.version)
    other = "avro" if header.encoding == "arrow" else "arrow"
    try:
        names = st.list_dir(pdir)
    except OSError as e:
        return [_problem("layout", f"cannot list the part folder: {e.strerror or e}", stream, part, path=pdir)]
    data: dict[int, str] = {}
    index: dict[int, str] = {}
    cdata: dict[tuple[int, int], str] = {}
    cindex: dict[tuple[int, int], str] = {}
    problems: list[EventLogError] = []
    for name in names:
        path = st.join(pdir, name)
        if (seg := layout.segment_first(name, header.encoding)) is not None:
            data[seg[0]] = path
        elif (first := layout.index_first(name)) is not None:
            index[first] = path
        elif (rng := layout.compacted_range(name, header.encoding)) is not None:
            cdata[rng] = path
        elif (rng := layout.compacted_index_range(name)) is not None:
            cindex[rng] = path
        elif (rng := layout.compacted_range(name, other)) is not None:
            problems.append(_problem("header", f"compacted segment in the {other} encoding, but the header says "
                                     f"{header.encoding}: the header disagrees with the parts", stream, part, rng[0],
                                     path=path))
        elif (seg := layout.segment_first(name, other)) is not None:
            problems.append(_problem("header", f"segment in the {other} encoding, but the header says "
                                     f"{header.encoding}: the header disagrees with the parts", stream, part, seg[0],
                                     path=path))
        elif name not in (LOCK_FILE, COMPACT_LOCK):
            problems.append(_problem("layout", "unexpected file in the part folder", stream, part, path=path))
    for rng, path in cdata.items():  # check_part says more (which leftovers are harmless)
        if rng not in cindex:
            problems.append(_problem("leftover", "compacted segment without its index (a compaction stopped after "
                                     "writing it, or is writing its index now; harmless, `replay compact` writes it)",
                                     stream, part, rng[0], path=path))
    for rng, path in cindex.items():
        if rng not in cdata:
            problems.append(_problem("leftover", "compacted index without its segment (an interrupted removal; "
                                     "harmless, `replay compact` removes it)", stream, part, rng[0], path=path))
    covered = [r for r in cdata if r in cindex]
    newest = max(data, default=None)
    for first, path in data.items():
        if first not in index:
            if first == newest:
                problems.append(_problem("torn-tail", "newest segment has no index (a writer crashed as it created "
                                         "it)", stream, part, first, path=path))
            else:
                problems.append(_problem("layout", "segment without its index", stream, part, first, path=path))
    for first, path in index.items():
        if first not in data and not any(p.seq == first and getattr(p, "kind", None) == "header" for p in problems):
            if any(a <= first <= b for a, b in covered):
                problems.append(_problem("leftover", "index without its segment inside a compacted segment's range "
                                         "(an interrupted compaction's removal; harmless, `replay compact` removes "
                                         "it)", stream, part, first, path=path))
            else:
                problems.append(_problem("layout", "index without its segment", stream, part, first, path=path))
    return problems


# -- where an event lies (FileLog.locate, FileLog.resume_after) -----------------------------------------------


def locate_event(st: Storage, header: StreamHeader, part_dir: str, part: int, seq: int) -> dict[str, Any]:
    """``{"path": the segment holding event seq, "offset": the byte offset of its body}`` (the offset from the
    segment's index, when it lists the event); ``{}`` when no segment may hold it."""
    layout = layout_for(header.version)
    try:
        span = layout.list_part(st, part_dir, header.encoding).holding(seq)
    except OSError:
        return {}
    if span is None:
        return {}
    try:
        files = SegmentFiles(st, part_dir, span.first, layout, header.encoding, stream=header.stream, part=part,
                             last=span.last)
    except OSError:  # removed since listed
        return {"path": st.join(part_dir, layout.sealed_name(span.first, header.encoding))}
    try:
        files.refresh()
        entry = files.entry(seq)
    except (EventLogError, OSError):
        entry = None
    finally:
        files.close()
    out: dict[str, Any] = {"path": files.data_path}
    if isinstance(entry, ix.IndexEntry) and entry.seq == seq:
        out["offset"] = entry.offset
    return out


def stored_event(st: Storage, header: StreamHeader, part_dir: str, part: int, seq: int) -> "tuple[bytes, dict] | None":
    """The bytes event ``seq`` is stored as in its segment (its body) and ``{"path", "offset"}``: the segment
    walked from its prefix by the index entries, else by framing; None when no segment holds it whole."""
    layout = layout_for(header.version)
    try:
        span = layout.list_part(st, part_dir, header.encoding).holding(seq)
    except OSError:
        return None
    if span is None:
        return None
    try:
        files = SegmentFiles(st, part_dir, span.first, layout, header.encoding, stream=header.stream, part=part,
                             last=span.last)
    except OSError:
        return None
    try:
        files.refresh()
        offset = files.prefix()
        if offset is None:
            return None
        for s in range(files.first_seq, seq + 1):
            place = files.next_place(s, offset, strict=False)
            if isinstance(place, Stop):
                return None
            if s == seq:
                return files.read(place.offset, place.length), {"path": files.data_path, "offset": place.offset}
            offset = place.end
    except (EventLogError, OSError, Malformed):
        return None
    finally:
        files.close()
    return None


def segment_after(st: Storage, header: StreamHeader, part_dir: str, error: EventLogError) -> int | None:
    """The first sequence id of the segment after the one ``error`` names (by its seq, else its file's name),
    None when there is none (or the part cannot be listed)."""
    pos = error.seq
    if pos is None and error.path:
        stem = error.path.replace("\\", "/").rsplit("/", 1)[-1].lstrip("_").split(".")[0].split("-")[-1]
        pos = int(stem) if stem.isdigit() else None
    if pos is None:
        return None
    try:
        later = [s for s in layout_for(header.version).list_segments(st, part_dir, header.encoding) if s > pos]
    except OSError:
        return None
    return later[0] if later else None
