"""One segment as readers and writers see it: its data file and its index, read as they grow, and the
places of its events — from the index where it has a whole entry, from the container's framing where it
has none (missing, short or damaged index). The segment is the truth, the index an accelerator.

:meth:`SegmentFiles.next_place` finds the event after a known position; it never decides what a stop
means. A caller that knows the segment is finished (its successor exists and the files were re-read
since) treats bytes that are not a whole event as damage; a caller at the newest segment sees a torn tail
or an event still being written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from eventlog.encoding.ipc_file import EOS, Block, footer, footer_blocks, trailer_length
from eventlog.errors import CorruptLogError, UnsupportedVersionError

from . import index as ix
from .framing import END, Framing, Malformed, framing_for
from .layout import Layout
from .storage import ReadFile, Storage

if TYPE_CHECKING:
    import pyarrow as pa

_BLOCK_ENTRIES = 4096
"""Index entries read at once."""


class _Damaged:
    """An index entry that is there but fails its own checksum."""

    def __repr__(self) -> str:
        return "DAMAGED"


DAMAGED = _Damaged()


@dataclass(frozen=True)
class Place:
    """A whole event's bytes in the segment; ``entry`` is its index entry (None: found by framing only)."""

    seq: int
    offset: int
    length: int
    entry: ix.IndexEntry | None

    @property
    def end(self) -> int:
        return self.offset + self.length


@dataclass(frozen=True)
class Stop:
    """No whole event at ``offset`` (yet): ``eos`` when the Arrow end-of-stream marker is there;
    ``problem`` says what bytes are there but not whole (None when the data simply ends here)."""

    offset: int
    eos: bool = False
    problem: str | None = None
    indexed: bool = False
    """An index entry places an event here whose bytes run past the end of the data (a write cut short)."""


class SegmentFiles:
    """The data file and index of the segment ``first_seq`` of one part, opened for reading."""

    def __init__(self, st: Storage, part_dir: str, first_seq: int, layout: Layout, encoding: str, *,
                 stream: str, part: int, last: int | None = None) -> None:
        self._st = st
        self._dir = part_dir
        self.layout = layout
        self.first_seq = first_seq
        self.last_seq = last
        """The last sequence id of a compacted segment (FORMAT.md §11: its name says it), None for a plain one."""
        self.encoding = encoding
        self.stream, self.part = stream, part
        if last is not None:  # written whole under its one name
            self.sealed_path = self.open_path = st.join(part_dir, layout.compacted_name(first_seq, last, encoding))
            self.index_path = st.join(part_dir, layout.compacted_index_name(first_seq, last))
        else:
            self.sealed_path = st.join(part_dir, layout.sealed_name(first_seq, encoding))
            """The data file's name once sealed (2.x; 1.x segments keep one name)."""
            self.open_path = st.join(part_dir, layout.open_name(first_seq, encoding))
            """The data file's name while a writer appends to it."""
            self.index_path = st.join(part_dir, layout.index_name(first_seq))
        self.data_path = self.sealed_path
        self.is_sealed = False
        """The data file was opened under its sealed name (2.x): its writer finished it."""
        self.data: ReadFile = self._open_data()  # FileNotFoundError when the segment is gone
        self.index: ReadFile | None = None
        self._reset()

    def _open_data(self) -> ReadFile:
        """Open the data file under its sealed name, else its open name (a 2.x writer renames it once sealed:
        the sealed name is tried again after the open one)."""
        paths = ([self.sealed_path] if not self.layout.seals or self.last_seq is not None
                 else [self.sealed_path, self.open_path, self.sealed_path])
        for i, path in enumerate(paths):
            try:
                f = self._st.open_read(path)
            except FileNotFoundError:
                if i == len(paths) - 1:
                    raise
                continue
            self.data_path = path
            self.is_sealed = self.layout.seals and path == self.sealed_path
            return f
        raise AssertionError("unreachable")

    def _reset(self) -> None:
        self.framing: Framing = framing_for(self.encoding, self.layout.major)
        self.index_ok = False
        """The index has a whole, valid header (its entries can be read)."""
        self.index_exists = False
        self.data_size = 0
        self.index_size = 0
        self.prefix_len: int | None = None
        self._block = b""
        self._block_first = 0

    def close(self) -> None:
        self.data.close()
        if self.index is not None:
            self.index.close()
            self.index = None

    def reopen(self, *, forget_prefix: bool = False) -> None:
        """Open both files again by name (a recovering writer may have replaced the index, or removed an
        empty segment and created another of the same name: then ``forget_prefix``) and forget the sizes
        and entries read."""
        self.close()
        self.data = self._open_data()
        framing, prefix_len = self.framing, self.prefix_len
        self._reset()
        if not forget_prefix:
            self.framing, self.prefix_len = framing, prefix_len

    def error(self, reason: str, *, seq: int | None = None, offset: int | None = None,
              index: bool = False) -> CorruptLogError:
        """A CorruptLogError at this segment (its index file with ``index=True``)."""
        return CorruptLogError(reason, stream=self.stream, part=self.part, seq=seq, offset=offset,
                               path=self.index_path if index else self.data_path)

    # -- reading ---------------------------------------------------------------------------------------

    def refresh(self) -> None:
        """Take the files' current sizes; open the index once it exists and check its header."""
        self.data_size = self.data.size()
        if self.index is None:
            try:
                self.index = self._st.open_read(self.index_path)
            except FileNotFoundError:
                self.index_exists = False
                self.index_size = 0
                return
        self.index_exists = True
        self.index_size = self.index.size()
        if not self.index_ok and self.index_size >= ix.HEADER_SIZE:
            head = self.index.read_at(0, ix.HEADER_SIZE)
            try:
                _, first = ix.unpack_header(head)
            except ValueError as e:
                raise self.error(f"damaged index header: {e}", offset=0, index=True) from None
            except UnsupportedVersionError as e:
                raise UnsupportedVersionError(e.reason, stream=self.stream, part=self.part, offset=0,
                                              path=self.index_path) from None
            if first != self.first_seq:
                raise self.error(f"index header says first seq {first}, its name {self.first_seq}", offset=8,
                                 index=True)
            self.index_ok = True

    def read(self, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes of the data at ``offset`` (never past the size last taken)."""
        length = max(0, min(length, self.data_size - offset))
        return self.data.read_at(offset, length) if length else b""

    def entries(self) -> int:
        """Whole entries in the index (0 while it has no valid header)."""
        if not self.index_ok:
            return 0
        return (self.index_size - ix.HEADER_SIZE) // ix.ENTRY_SIZE

    def entry(self, seq: int) -> ix.IndexEntry | _Damaged | None:
        """The index entry of ``seq``: None when the index has no whole entry there, DAMAGED when the entry
        fails its checksum."""
        k = seq - self.first_seq
        n = self.entries()
        if k < 0 or k >= n or self.index is None:
            return None
        i = k - self._block_first
        if not 0 <= i < len(self._block) // ix.ENTRY_SIZE:
            count = min(n - k, _BLOCK_ENTRIES)
            self._block = self.index.read_at(ix.entry_position(self.first_seq, seq), count * ix.ENTRY_SIZE)
            self._block_first = k
            i = 0
            if len(self._block) < ix.ENTRY_SIZE:  # the index shrank under us (a writer cut a torn tail)
                self._block = b""
                return None
        e = ix.unpack_entry(self._block, i * ix.ENTRY_SIZE)
        return DAMAGED if e is None else e

    def prefix(self) -> int | None:
        """Length of the segment's prefix; None while it is incomplete. Raises Malformed."""
        if self.prefix_len is None:
            n = self.framing.prefix_length(self.read, self.data_size)
            e0 = self.entry(self.first_seq)
            if isinstance(e0, ix.IndexEntry) and (n != e0.offset if n is not None else self.data_size >= e0.offset):
                # the entry is checksummed, the prefix is not: the prefix is what is damaged
                raise Malformed(f"the segment prefix does not end where the index places the first event "
                                f"(byte {e0.offset})", 0)
            self.prefix_len = n
        return self.prefix_len

    def next_place(self, seq: int, offset: int, *, strict: bool = True) -> Place | Stop:
        """The whole event ``seq`` at ``offset`` (after :meth:`prefix`), or where and why there is none.
        An index entry that disagrees with the position raises CorruptLogError, and so does (``strict``) a
        damaged entry followed by more entries: damage, where a damaged last entry may be a torn write and
        the event is found by framing. Bytes that cannot be an event raise Malformed."""
        e = self.entry(seq)
        if e is DAMAGED and strict and seq - self.first_seq < self.entries() - 1:
            raise self.error("index entry fails its checksum", seq=seq,
                             offset=ix.entry_position(self.first_seq, seq), index=True)
        if isinstance(e, ix.IndexEntry):
            if e.seq != seq or e.offset != offset:
                raise self.error(f"index entry disagrees with the segment: it places seq {e.seq} at byte "
                                 f"{e.offset}, the segment has seq {seq} at byte {offset}", seq=seq,
                                 offset=ix.entry_position(self.first_seq, seq), index=True)
            if e.offset + e.length > self.data_size:
                self.data_size = self.data.size()
                if e.offset + e.length > self.data_size:
                    return Stop(offset, problem=f"seq {seq} ends at byte {e.offset + e.length} but "
                                                f"{self.data_path} has {self.data_size} bytes", indexed=True)
            return Place(seq, offset, e.length, e)
        n = self.framing.body_length(self.read, self.data_size, offset)
        if n == END:
            return Stop(offset, eos=True)
        if n is None:
            if self.data_size > offset:
                return Stop(offset, problem=f"partial event at byte {offset} of {self.data_path} "
                                            f"({self.data_size - offset} bytes)")
            return Stop(offset)
        return Place(seq, offset, n, None)

    def tail_is_torn(self, offset: int) -> bool:
        """Whether the data from ``offset`` to its end is what a crash leaves after the last whole event: the
        start of an event whose writing was cut short, possibly followed by zeros (blocks allocated but never
        written), or nothing. A whole event there (one that failed its checks) or bytes that cannot start an
        event are damage instead."""
        if self.data_size <= offset:
            return True
        rest = self.read(offset, self.data_size - offset)
        end = offset + len(rest.rstrip(b"\0"))
        if end == offset:
            return True

        def read(o: int, n: int) -> bytes:
            return rest[o - offset : min(o + n, end) - offset]

        try:
            n = self.framing.body_length(read, end, offset)
        except Malformed:
            return False
        if n == END:  # 1.x: a cut end-of-stream marker; 2.x: a footer not whole yet (no event lies past it)
            return end <= offset + len(self.framing.suffix) if self.framing.suffix else True
        return n is None

    def footer_problem(self, eos: int, places: list[tuple[int, int]], mapped: pa.Buffer | None = None) -> str | None:
        """What is wrong with the footer of a 2.x Arrow segment whose end-of-stream marker is at ``eos``,
        given the ``(offset, length)`` of every event the segment holds (None when it lists exactly them:
        third-party readers believe the footer, never the index). ``mapped``: the data file as its reader mapped
        it, read instead of the file where it reaches (``_finished_read``)."""
        read = self._finished_read(mapped)
        trailer = trailer_length(read(self.data_size - 16, 16), self.data_size)
        start = eos + len(EOS)
        if trailer is None or self.data_size - trailer != start:
            return "no whole footer after the end-of-stream marker"
        try:
            blocks = footer_blocks(read(start, trailer - 10))
        except ValueError as e:
            return f"damaged footer: {e}"
        if [(b.offset, b.meta_length + b.body_length) for b in blocks] != places:
            return (f"the footer lists {len(blocks)} record batches that are not the segment's {len(places)} events "
                    f"(offsets and lengths)")
        if read(eos, self.data_size - eos) != self.suffix_for(places, mapped):
            return ("the footer is not the one the segment's schema and events make (its schema, version or "
                    "blocks say something else than the segment: third-party readers would believe it)")
        return None

    def suffix_for(self, places: "list[tuple[int, int]]", mapped: pa.Buffer | None = None) -> bytes:
        """The end-of-stream marker and footer a 2.x Arrow segment holding the events at ``places``
        (``(offset, length)``) ends with: the prefix's schema message and each event's block, its metadata length
        read from the event itself. Every writer writes exactly these bytes. ``mapped`` as for ``footer_problem``."""
        read = self._finished_read(mapped)
        blocks = []
        for offset, length in places:
            meta = 8 + int.from_bytes(read(offset + 4, 4), "little", signed=True)
            blocks.append(Block(offset, meta, length - meta))
        return footer(read(8, (self.prefix_len or 0) - 8), blocks)

    def _finished_read(self, mapped: pa.Buffer | None) -> Callable[[int, int], bytes]:
        """``read`` for a finished segment's bytes (its footer check): from ``mapped`` where it holds them, else from
        the file. A finished segment is never cut, so its mapping holds what the file does; and a footer check
        reads every event's metadata length, a system call apiece from the file, each letting the GIL go (the
        replaying thread then waits behind the threads decoding ahead to get it back)."""
        if mapped is None:
            return self.read
        reach = min(mapped.size, self.data_size)

        def read(offset: int, length: int) -> bytes:
            length = max(0, min(length, self.data_size - offset))
            if 0 <= offset and offset + length <= reach:
                return mapped.slice(offset, length).to_pybytes()
            return self.read(offset, length)

        return read

    def suffix_whole(self, offset: int) -> bool:
        """Whether the segment ends, cleanly, with the whole suffix that starts at ``offset`` (where the
        framing found the end-of-stream marker)."""
        return self.framing.suffix_end(self.read, self.data_size, offset) == self.data_size

    def index_beyond(self, seq: int) -> str | None:
        """What the index holds past the entry of ``seq - 1`` (None when nothing)."""
        if not self.index_exists:
            return None
        if not self.index_ok:
            if self.index_size:
                return f"partial index header ({self.index_size} bytes) in {self.index_path}"
            return None
        pos = ix.entry_position(self.first_seq, seq)
        extra = self.index_size - pos
        if extra <= 0:
            return None
        whole = extra // ix.ENTRY_SIZE
        if whole:
            entries = "entry" if whole == 1 else "entries"
            return f"{whole} index {entries} past the last whole event (byte {pos} of {self.index_path})"
        return f"partial index entry at byte {pos} of {self.index_path}"


__all__ = ["DAMAGED", "Malformed", "Place", "SegmentFiles", "Stop"]
