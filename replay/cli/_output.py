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


def terminal_width() -> int | None:
    """The width of the terminal stdout is, None when stdout is not a terminal (``$COLUMNS`` first, as rich)."""
    if not sys.stdout.isatty():
        return None
    import shutil

    return shutil.get_terminal_size().columns


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

    def write(self, row: dict[str, Any]) -> None:
        self._w.writerow([csv_cell(_lookup(row, k)) for k in self._keys])

    def flush(self) -> None:
        self._out.flush()

    def close(self) -> None:
        self._out.flush()


_ABSENT = object()
"""What ``_lookup`` returns for a key the row does not have (a blank cell, unlike a null value)."""


def csv_cell(v: Any) -> str:
    """A JSON value (``_values``) as a CSV cell: null and a missing value empty, booleans ``true``/``false``,
    nested values as compact JSON (``cat --format csv`` and ``export --to csv`` alike)."""
    if v is None or v is _ABSENT:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (dict, list)):
        return _compact(v)
    return str(v)


def _lookup(row: dict[str, Any], key: str) -> Any:
    """``row[key]``, where ``record.NAME`` looks inside the row's ``record`` object; ``_ABSENT`` if missing."""
    if key.startswith("record."):
        record = row.get("record")
        return record.get(key[7:], _ABSENT) if isinstance(record, dict) else _ABSENT
    return row.get(key, _ABSENT)


def row_cells(columns: list[tuple[str, str]], row: dict[str, Any], day: str | None = None) -> list[Text]:
    """The table cells of ``row`` for ``columns`` (key, label), Progress rows in cyan: the terminal table and
    the live view of ``tail -f`` draw rows alike. A write time on ``day`` (``YYYY-MM-DD``) shows as its time of
    day (``08:20:30.673Z``); the column's label says the day (:func:`ts_label`)."""
    cells = [_Table._cell(k, _lookup(row, k), day) for k, _ in columns]
    if row.get("kind") == "progress":
        for c in cells:
            c.stylize("cyan")
    return cells


def day_of(row: dict[str, Any]) -> str | None:
    """The UTC day (``YYYY-MM-DD``) of ``row``'s write time, None without one."""
    ts = row.get("ts")
    return ts[:10] if isinstance(ts, str) and len(ts) > 11 and ts[10] == "T" else None


def ts_label(columns: list[tuple[str, str]], day: str | None) -> list[tuple[str, str]]:
    """``columns`` with the write time's label naming ``day`` (its cells then show times of day)."""
    return [(k, f"{label} {day}" if k == "ts" and day else label) for k, label in columns]


KEEP_WHOLE = ("part", "seq", "kind", "time")
"""Columns a table never cuts to fit the terminal: they say where a row came from."""

MIN_CUT = 8
"""Cut columns keep at least this many cells (an ellipsis included) before key columns are touched."""


def fit_widths(keys: list[str], widths: list[int], room: int, gap: int) -> list[int]:
    """Column widths that fit ``room`` cells with ``gap`` cells between columns: the widest cuttable column (a
    record field, updates, frontier) loses a cell at a time down to ``MIN_CUT``, then the write time down to
    its time of day (13); the key columns (``KEEP_WHOLE``) are never cut. What still does not fit overflows."""
    widths = list(widths)
    room -= gap * (len(widths) - 1)
    order = [[i for i, k in enumerate(keys) if k not in KEEP_WHOLE and k != "ts"],
             [i for i, k in enumerate(keys) if k == "ts"]]
    floors = {i: (13 if keys[i] == "ts" else MIN_CUT) for group in order for i in group}
    for group in order:
        while sum(widths) > room:
            candidates = [i for i in group if widths[i] > floors[i]]
            if not candidates:
                break
            i = max(candidates, key=lambda j: widths[j])
            widths[i] -= 1
    return widths


class _Table:
    """Rich tables of at most ``chunk`` rows; the header is printed once and column widths only grow, so
    consecutive chunks line up."""

    def __init__(self, columns: list[tuple[str, str]], chunk: int = 200, width: int | None = None) -> None:
        self._columns = columns
        self._rows: list[list[Text]] = []
        self._widths = [len(label) for _, label in columns]
        self._chunk = chunk
        self._width = width
        """The terminal's width (columns are cut to fit it), None when not writing to a terminal."""
        self._day: str | None = None
        self._shown: list[int] | None = None
        """The columns the last chunk showed (those with a value in some row): a new set prints the header again."""

    @staticmethod
    def _cell(key: str, v: Any, day: str | None = None) -> Text:
        if v is _ABSENT:
            return Text("")
        if v is None:
            return Text("null", style="dim")
        if key == "ts" and day and isinstance(v, str) and v.startswith(day + "T"):
            return Text(v[11:])
        if isinstance(v, str):
            return Text(v)
        if key == "updates":  # [[time, delta], …] as "time:+delta …"
            return Text(" ".join(f"{_compact(t)}:{d:+d}" for t, d in v))
        return Text(_compact(v))

    def write(self, row: dict[str, Any]) -> None:
        if self._day is None and self._shown is None:
            self._day = day_of(row)
        self._rows.append(row_cells(self._columns, row, self._day))
        if len(self._rows) >= self._chunk:
            self.flush()

    def flush(self) -> None:
        if not self._rows:
            return
        labels = ts_label(self._columns, self._day)
        for i, (_, label) in enumerate(labels):
            self._widths[i] = min(60, max(self._widths[i], len(label), *(r[i].cell_len for r in self._rows)))
        # columns empty in every row of the chunk (updates and frontier among Messages, fields among Progress)
        shown = [i for i in range(len(self._columns)) if any(r[i].cell_len for r in self._rows)]
        widths = [self._widths[i] for i in shown]
        if self._width is not None:
            widths = fit_widths([self._columns[i][0] for i in shown], widths, self._width, 2)
        table = Table(show_header=shown != self._shown, box=None, pad_edge=False, header_style="bold")
        for i, width in zip(shown, widths):
            table.add_column(labels[i][1], width=width, overflow="ellipsis", no_wrap=True)
        for r in self._rows:
            table.add_row(*(r[i] for i in shown))
        print_rich(table)
        self._rows.clear()
        self._shown = shown

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
        return _Table(columns, width=terminal_width())
    raise ValueError(f"unknown format {fmt!r}: expected one of {FORMATS}")
