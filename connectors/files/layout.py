"""Names in a file log (FORMAT.md §3): the stream header, part folders, segments named by their first sequence
id, and the index beside each segment — for each major version of the format.

* **1.x**: ``header.json``, ``part-00003/``, ``<20 digits>.arrows`` (an IPC stream) or ``.avro``, ``<20
  digits>.index``; a segment keeps its name from creation on.
* **2.x** (a stream folder is a dataset): ``_header.json``, ``part=3/`` (Hive style), sealed segments
  ``<20 digits>.arrow`` (IPC files with a footer) or ``.avro``; the segment a writer still appends to is
  ``_<20 digits>.arrow.open`` and is renamed once sealed; indexes are ``_<20 digits>.index``. Everything that
  is not sealed data starts with ``_`` or ``.``, which dataset discovery (pyarrow, Spark, DuckDB) skips.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .storage import Storage

LOCK_FILE = ".lock"
RETENTION_FILE = "_retention.json"
"""A 2.x stream's retention mark (FORMAT.md §10), beside its header."""
RETENTION_LOCK = ".retention.lock"
"""Held by a trim of the stream while it records a mark (local disks)."""
OPEN_SUFFIX = ".open"


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
        """First sequence ids of the part's segments (sealed or not), ascending."""
        out = set()
        for name in st.list_dir(part_dir):
            got = self.segment_first(name, encoding)
            if got is not None:
                out.add(got[0])
        return sorted(out)

    def list_indexes(self, st: Storage, part_dir: str) -> list[int]:
        """First sequence ids of the part's index files, ascending."""
        return sorted(f for f in (self.index_first(n) for n in st.list_dir(part_dir)) if f is not None)


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
