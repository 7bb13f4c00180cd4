"""Names in a file log (FORMAT.md section 3): part folders, segments named by their first sequence id, and
the index beside each segment."""

from __future__ import annotations

import os

from .storage import Storage

HEADER_FILE = "header.json"
INDEX_SUFFIX = ".index"
LOCK_FILE = ".lock"


def part_dir_name(part: int) -> str:
    """The folder name of a part."""
    return f"part-{part:05d}"


def segment_name(first_seq: int) -> str:
    """The file stem of the segment whose first event is ``first_seq``."""
    return f"{first_seq:020d}"


def list_firsts(st: Storage, part_dir: str, suffix: str) -> list[int]:
    """First sequence ids of the files ``<20 digits><suffix>`` in ``part_dir``, ascending."""
    out = []
    for name in st.list_dir(part_dir):
        stem, ext = os.path.splitext(name)
        if ext == suffix and stem.isdigit() and len(stem) == 20:
            out.append(int(stem))
    return sorted(out)
