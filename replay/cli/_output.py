"""Writers of the rows ``cat`` and ``tail`` print: a table for people, JSON, JSON lines or CSV for programs.

Rows are dicts of JSON values (``_values``); every writer streams (nothing is held back but one table
chunk), and ``flush()`` makes what was written visible at once (``tail -f``).
"""

from __future__ import annotations

import csv
import json
import sys
from typing import Any, Protocol, TextIO

from rich.table import Table
from rich.text import Text

from ._common import print_rich

FORMATS = ("table", "json", "jsonl", "csv")
"""The output formats of ``cat``/``tail``; the default is ``table`` on a terminal, ``jsonl`` otherwise."""


def default_format() -> str:
    """``table`` when stdout is a terminal, ``jsonl`` when it is piped or redirected."""
    return "table" if sys.stdout.isatty() else "jsonl"


class RowWriter(Protocol):
    """Writes rows (dicts of JSON values) to stdout."""

    def write(self, row: dict[str, Any]) -> None: ...
    def flush(self) -> None: ...
    def close(self) -> None: ...


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class _JsonLines:
    def __init__(self, out: TextIO) -> None:
        self._out = out

    def write(self, row: dict[str, Any]) -> None:
        self._out.write(_compact(row) + "\n")

    def flush(self) -> None:
        self._out.flush()

    def close(self) -> None:
        self._out.flush()


class _JsonArray:
    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._first = True

    def write(self, row: dict[str, Any]) -> None:
        self._out.write(("[\n" if self._first else ",\n") + _compact(row))
        self._first = False

    def flush(self) -> None:
        self._out.flush()

    def close(self) -> None:
        self._out.write("[]\n" if self._first else "\n]\n")
        self._out.flush()


class _Csv:
    def __init__(self, out: TextIO, columns: list[tuple[str, str]]) -> None:
        self._out = out
        self._keys = [k for k, _ in columns]
        self._w = csv.writer(out)
        self._w.writerow([label for _, label in columns])

    @staticmethod
    def _cell(v: Any) -> str:
        if v is None or v is _ABSENT:
            return ""
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (dict, list)):
            return _compact(v)
        return str(v)

    def write(self, row: dict[str, Any]) -> None:
        self._w.writerow([self._cell(_lookup(row, k)) for k in self._keys])

    def flush(self) -> None:
        self._out.flush()

    def close(self) -> None:
        self._out.flush()


_ABSENT = object()
"""What ``_lookup`` returns for a key the row does not have (a blank cell, unlike a null value)."""


def _lookup(row: dict[str, Any], key: str) -> Any:
    """``row[key]``, where ``record.NAME`` looks inside the row's ``record`` object; ``_ABSENT`` if missing."""
    if key.startswith("record."):
        record = row.get("record")
        return record.get(key[7:], _ABSENT) if isinstance(record, dict) else _ABSENT
    return row.get(key, _ABSENT)


def row_cells(columns: list[tuple[str, str]], row: dict[str, Any]) -> list[Text]:
    """The table cells of ``row`` for ``columns`` (key, label), Progress rows in cyan: the terminal table and
    the live view of ``tail -f`` draw rows alike."""
    cells = [_Table._cell(k, _lookup(row, k)) for k, _ in columns]
    if row.get("kind") == "progress":
        for c in cells:
            c.stylize("cyan")
    return cells


class _Table:
    """Rich tables of at most ``chunk`` rows; the header is printed once and column widths only grow, so
    consecutive chunks line up."""

    def __init__(self, columns: list[tuple[str, str]], chunk: int = 200) -> None:
        self._columns = columns
        self._rows: list[list[Text]] = []
        self._widths = [len(label) for _, label in columns]
        self._chunk = chunk
        self._header_done = False

    @staticmethod
    def _cell(key: str, v: Any) -> Text:
        if v is _ABSENT:
            return Text("")
        if v is None:
            return Text("null", style="dim")
        if isinstance(v, str):
            return Text(v)
        if key == "updates":  # [[time, delta], …] as "time:+delta …"
            return Text(" ".join(f"{_compact(t)}:{d:+d}" for t, d in v))
        return Text(_compact(v))

    def write(self, row: dict[str, Any]) -> None:
        self._rows.append(row_cells(self._columns, row))
        if len(self._rows) >= self._chunk:
            self.flush()

    def flush(self) -> None:
        if not self._rows:
            return
        for i in range(len(self._columns)):
            self._widths[i] = min(60, max(self._widths[i], *(r[i].cell_len for r in self._rows)))
        table = Table(show_header=not self._header_done, box=None, pad_edge=False, header_style="bold")
        for (_, label), width in zip(self._columns, self._widths):
            table.add_column(label, min_width=width, max_width=60, overflow="ellipsis", no_wrap=True)
        for r in self._rows:
            table.add_row(*r)
        print_rich(table)
        self._rows.clear()
        self._header_done = True

    def close(self) -> None:
        self.flush()


def row_writer(fmt: str, columns: list[tuple[str, str]]) -> RowWriter:
    """A writer of ``fmt`` (one of ``FORMATS``) to stdout. ``columns`` are ``(key, label)`` pairs for the
    table and CSV formats; a key ``record.NAME`` is a field of the row's ``record`` object."""
    out = sys.stdout
    if fmt == "jsonl":
        return _JsonLines(out)
    if fmt == "json":
        return _JsonArray(out)
    if fmt == "csv":
        return _Csv(out, columns)
    if fmt == "table":
        return _Table(columns)
    raise ValueError(f"unknown format {fmt!r}: expected one of {FORMATS}")
