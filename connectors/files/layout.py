"""Names in a file log (FORMAT.md §3): the stream header, part folders, segments named by their first sequence
id, and the index beside each segment — for each major version of the format.

* **1.x**: ``header.json``, ``part-00003/``, ``<20 digits>.arrows`` (an IPC stream) or ``.avro``, ``<20
  digits>.index``; a segment keeps its name from creation on.
* **2.x** (a stream folder is a dataset): ``_header.json``, ``part=3/`` (Hive style), sealed segments
  ``<20 digits>.arrow`` (IPC files with a footer) or ``.avro``; the segment a writer still appends to is
  ``_<20 digits>.arrow.open`` and is renamed once sealed; indexes are ``_<20 digits>.index``. Everything that
  is not sealed data starts with ``_`` or ``.``, which dataset discovery (pyarrow, Spark, DuckDB) skips.
* **2.1 compacted segments** (FORMAT.md §11): ``<first 20 digits>-<last 20 digits>.arrow`` (or ``.avro``) holds
  the events ``first … last`` that several sealed segments held, its index ``_<first>-<last>.index``. Readers
  prefer a compacted segment to the small segments inside its range (which a compaction removes once it is
  whole): :meth:`Layout.list_part` says which files are in force.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .storage import Storage

LOCK_FILE = ".lock"
RETENTION_FILE = "_retention.json"
"""A 2.x stream's retention mark (FORMAT.md §10), beside its header."""
RETENTION_LOCK = ".retention.lock"
"""Held by a trim of the stream while it records a mark (local disks)."""
SCHEMAS_FILE = "_schemas.json"
"""A 2.x stream's schema history (FORMAT.md §12), beside its header."""
SCHEMAS_LOCK = ".schemas.lock"
"""Held by a writer while it records a schema version or a part's switch (local disks)."""
OPEN_SUFFIX = ".open"
COMPACT_LOCK = ".compact.lock"
"""Held by a compaction of the part while it runs (local disks; object stores: conditional creates)."""


@dataclass(frozen=True)
class Span:
    """A segment in force: ``first`` its first sequence id, ``last`` its last one when its name says it (a
    compacted segment, FORMAT.md §11), else None (a plain segment: its end is known by reading it)."""

    first: int
    last: int | None = None

    @property
    def compacted(self) -> bool:
        return self.last is not None

    def holds(self, seq: int) -> bool:
        """Whether the name says the segment holds ``seq`` (plain segments: only their first)."""
        return self.first <= seq <= self.last if self.last is not None else seq == self.first


@dataclass
class PartListing:
    """What one listing of a part folder found (:meth:`Layout.list_part`).

    ``plain`` are the first sequence ids of every plain segment (sealed or open), ``compacted`` the ``(first,
    last)`` of every compacted segment. ``spans`` are those in force, ascending: every compacted segment not
    inside another one, and every plain segment no compacted segment covers. A plain segment inside a compacted
    one is ``hidden``: what an interrupted (or running) compaction left, read from the compacted copy, removed by
    the next compaction; a compacted segment inside a larger one is ``superseded`` (the same)."""

    plain: list[int] = field(default_factory=list)
    compacted: list[tuple[int, int]] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    hidden: list[int] = field(default_factory=list)
    superseded: list[tuple[int, int]] = field(default_factory=list)
    overlapping: list[tuple[tuple[int, int], tuple[int, int]]] = field(default_factory=list)
    """Pairs of compacted segments in force whose ranges overlap without one holding the other (no compaction
    makes them; both are read, each event from either)."""

    @property
    def firsts(self) -> list[int]:
        """First sequence ids of the segments in force, ascending."""
        return [s.first for s in self.spans]

    def last_of(self, first: int) -> int | None:
        """The last sequence id of the compacted segment in force that starts at ``first`` (None: plain)."""
        for s in self.spans:
            if s.first == first:
                return s.last
        return None

    def covering(self, seq: int) -> Span | None:
        """The compacted segment in force holding ``seq`` that reaches furthest, None when none does."""
        best: Span | None = None
        for s in self.spans:
            if s.last is not None and s.first <= seq <= s.last and (best is None or s.last > (best.last or 0)):
                best = s
        return best

    def holding(self, seq: int) -> Span | None:
        """The segment in force a reader of ``seq`` opens: a compacted one holding it, else the last plain one
        starting at or before it; None when none starts at or before it."""
        found = self.covering(seq)
        if found is not None:
            return found
        plain = [s for s in self.spans if s.last is None and s.first <= seq]
        return plain[-1] if plain else None

    def newest_plain(self) -> int | None:
        """The first sequence id of the newest plain segment (hidden or not)."""
        return self.plain[-1] if self.plain else None


@dataclass(frozen=True)
class Layout:
    """The file names of one major version of the file-log format."""

    major: int
    header_file: str
    """The stream header's file name in the stream folder."""
    _part_prefix: str
    _part_digits: int
    _hidden: str
    """Prefix of the index and of segments not sealed yet ("" in 1.x)."""
    _suffixes: tuple[tuple[str, str], ...]

    @property
    def index_suffix(self) -> str:
        return ".index"

    def suffix(self, encoding: str) -> str:
        """The file name extension of sealed segments of ``encoding``."""
        return dict(self._suffixes)[encoding]

    def part_dir(self, part: int) -> str:
        """The folder name of a part."""
        return f"{self._part_prefix}{part:0{self._part_digits}d}" if self._part_digits else f"{self._part_prefix}{part}"

    def part_of(self, name: str) -> int | None:
        """The part number a folder name holds, None when it is no part folder of this layout."""
        if not name.startswith(self._part_prefix):
            return None
        digits = name[len(self._part_prefix):]
        if not digits.isdigit() or not digits.isascii():
            return None
        if self._part_digits and len(digits) != self._part_digits:
            return None
        if not self._part_digits and (len(digits) > 1 and digits[0] == "0"):
            return None
        return int(digits)

    def sealed_name(self, first_seq: int, encoding: str) -> str:
        """The name of a segment once sealed (1.x: from creation on)."""
        return f"{first_seq:020d}{self.suffix(encoding)}"

    def open_name(self, first_seq: int, encoding: str) -> str:
        """The name of a segment a writer still appends to."""
        if not self._hidden:
            return self.sealed_name(first_seq, encoding)
        return f"{self._hidden}{first_seq:020d}{self.suffix(encoding)}{OPEN_SUFFIX}"

    @property
    def seals(self) -> bool:
        """Whether segments are renamed when sealed (2.x)."""
        return bool(self._hidden)

    def index_name(self, first_seq: int) -> str:
        """The name of the index of the segment ``first_seq``."""
        return f"{self._hidden}{first_seq:020d}{self.index_suffix}"

    def compacted_name(self, first: int, last: int, encoding: str) -> str:
        """The name of the compacted segment holding ``first … last`` (2.x, FORMAT.md §11)."""
        return f"{first:020d}-{last:020d}{self.suffix(encoding)}"

    def compacted_index_name(self, first: int, last: int) -> str:
        """The name of the index of the compacted segment ``first … last``."""
        return f"{self._hidden}{first:020d}-{last:020d}{self.index_suffix}"

    @staticmethod
    def _range(stem: str) -> tuple[int, int] | None:
        a, sep, b = stem.partition("-")
        if not sep or len(a) != 20 or len(b) != 20 or not (a + b).isdigit() or not (a + b).isascii():
            return None
        first, last = int(a), int(b)
        return (first, last) if 1 <= first <= last else None

    def compacted_range(self, name: str, encoding: str) -> tuple[int, int] | None:
        """``(first, last)`` of a compacted segment's file name, None when ``name`` is none (1.x has none)."""
        suffix = self.suffix(encoding)
        if not self._hidden or not name.endswith(suffix) or name.startswith(self._hidden):
            return None
        return self._range(name[: -len(suffix)])

    def compacted_index_range(self, name: str) -> tuple[int, int] | None:
        """``(first, last)`` of a compacted segment's index file name, else None."""
        if not self._hidden or not (name.startswith(self._hidden) and name.endswith(self.index_suffix)):
            return None
        return self._range(name[len(self._hidden) : -len(self.index_suffix)])

    def segment_first(self, name: str, encoding: str) -> tuple[int, bool] | None:
        """``(first_seq, sealed)`` of a segment file name, None when ``name`` is no segment of ``encoding``."""
        suffix = self.suffix(encoding)
        sealed = True
        if self._hidden and name.startswith(self._hidden) and name.endswith(suffix + OPEN_SUFFIX):
            stem, sealed = name[len(self._hidden) : -len(suffix + OPEN_SUFFIX)], False
        elif name.endswith(suffix):
            stem = name[: -len(suffix)]
        else:
            return None
        return (int(stem), sealed) if len(stem) == 20 and stem.isdigit() and stem.isascii() else None

    def index_first(self, name: str) -> int | None:
        """The first sequence id an index file name holds, None when ``name`` is no index."""
        if not (name.startswith(self._hidden) and name.endswith(self.index_suffix)):
            return None
        stem = name[len(self._hidden) : -len(self.index_suffix)]
        return int(stem) if len(stem) == 20 and stem.isdigit() and stem.isascii() else None

    def list_segments(self, st: Storage, part_dir: str, encoding: str) -> list[int]:
        """First sequence ids of the part's segments in force (sealed or not; a compacted segment instead of the
        segments inside its range), ascending."""
        return self.list_part(st, part_dir, encoding).firsts

    def list_part(self, st: Storage, part_dir: str, encoding: str, names: "list[str] | None" = None) -> PartListing:
        """The part's segments, plain and compacted, and which are in force (:class:`PartListing`), from one
        listing of its folder (or ``names``)."""
        plain, compacted = set(), set()
        for name in st.list_dir(part_dir) if names is None else names:
            got = self.segment_first(name, encoding)
            if got is not None:
                plain.add(got[0])
            elif (rng := self.compacted_range(name, encoding)) is not None:
                compacted.add(rng)
        return resolve(sorted(plain), sorted(compacted))

    def list_indexes(self, st: Storage, part_dir: str) -> list[int]:
        """First sequence ids of the part's index files, ascending."""
        return sorted(f for f in (self.index_first(n) for n in st.list_dir(part_dir)) if f is not None)


def resolve(plain: list[int], compacted: list[tuple[int, int]]) -> PartListing:
    """Which of a part's segments are in force (:class:`PartListing`): ``plain`` and ``compacted`` ascending."""
    out = PartListing(plain=list(plain), compacted=list(compacted))
    kept: list[tuple[int, int]] = []
    for first, last in sorted(compacted, key=lambda r: (r[0], -r[1])):
        if any(a <= first and last <= b for a, b in kept):
            out.superseded.append((first, last))
            continue
        out.overlapping += [((a, b), (first, last)) for a, b in kept if first <= b]
        kept.append((first, last))
    for first in plain:
        if any(a <= first <= b for a, b in kept):
            out.hidden.append(first)
    spans = [Span(a, b) for a, b in kept] + [Span(f) for f in plain if f not in out.hidden]
    out.spans = sorted(spans, key=lambda s: (s.first, s.last is None))
    return out


LAYOUT_1 = Layout(1, "header.json", "part-", 5, "", (("arrow", ".arrows"), ("avro", ".avro")))
LAYOUT_2 = Layout(2, "_header.json", "part=", 0, "_", (("arrow", ".arrow"), ("avro", ".avro")))
LAYOUTS = {1: LAYOUT_1, 2: LAYOUT_2}
HEADER_FILES = (LAYOUT_2.header_file, LAYOUT_1.header_file)
"""Header file names a stream folder may hold, newest layout first."""


def layout_for(version: tuple[int, int]) -> Layout:
    """The layout of streams of format ``version`` (``(major, minor)``)."""
    return LAYOUTS[version[0]]


def part_number(name: str) -> int | None:
    """The part number of a part folder name of any layout (``part-00003``, ``part=3``), else None."""
    for layout in LAYOUTS.values():
        if (n := layout.part_of(name)) is not None:
            return n
    return None
