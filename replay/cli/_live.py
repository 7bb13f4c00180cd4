"""The live view of ``replay tail -f`` on a terminal: a fixed header, fixed column widths, the newest rows that
fit the terminal's height at the bottom, and a status line (parts, frontier, events/s, how to quit).

Column widths are chosen once, from the labels, the schema's types and the first rows, and then kept: values
that do not fit are cut with an ellipsis, so nothing shifts from poll to poll. Piped output never comes here
(``tail -f | jq`` gets JSON lines, see ``_output``).
"""

from __future__ import annotations

import collections
import sys
import time as _time
from typing import Any

import pyarrow as pa
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from ._output import day_of, fit_widths, row_cells, ts_label

MAX_WIDTH = 60
"""No column is wider than this (before shrinking to the terminal's width)."""

_RESERVED = 3
"""Terminal lines not used by rows: the header, the status line and one spare (so the screen never scrolls)."""


def live_console() -> Console:
    """The console of the live view: stdout (a terminal, or the live view is not used)."""
    return Console(file=sys.stdout, highlight=False)


def _type_width(t: pa.DataType) -> int:
    """A starting width for a column of type ``t``, before any value is seen."""
    if pa.types.is_boolean(t):
        return 5
    if pa.types.is_integer(t):
        return min(20, 4 + 2 * t.bit_width // 16)
    if pa.types.is_floating(t) or pa.types.is_decimal(t):
        return 12
    if pa.types.is_timestamp(t):
        return 26 if t.tz is None else 32
    if pa.types.is_date(t) or pa.types.is_time(t) or pa.types.is_duration(t):
        return 12
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return 12
    return 16


class LiveTail:
    """A ``RowWriter`` that redraws one frame per ``flush()`` inside a rich ``Live``: header, the newest rows
    that fit, status. ``status()`` gives the status line its facts before each flush."""

    def __init__(self, columns: list[tuple[str, str]], schema: pa.Schema, console: Console, stream: str) -> None:
        self._columns = columns
        self._console = console
        self._stream = stream
        types = {f"record.{f.name}": f.type for f in schema}
        base = {"part": 4, "seq": 6, "ts": 24, "kind": 8, "time": 6, "updates": 12, "frontier": 8}
        self._guess = [max(len(label), base.get(key) or _type_width(types.get(key, pa.string())))
                       for key, label in columns]
        self._widths: list[int] | None = None
        self._day: str | None = None
        """The UTC day of the first row's write time: write times on it show as times of day."""
        self._first = True
        self._rows: collections.deque[list[Text]] = collections.deque(maxlen=1000)
        self._new = 0
        self._parts = self._finished = 0
        self._frontier = ""
        self._events = 0
        self._rates: collections.deque[tuple[float, int]] = collections.deque()
        self._idle_since: float | None = None
        self._live = Live(console=console, auto_refresh=False, vertical_overflow="crop", transient=False)
        self._live.start()

    # -- RowWriter --

    def write(self, row: dict[str, Any]) -> None:
        if self._first:
            self._first = False
            self._day = day_of(row)
        self._rows.append(row_cells(self._columns, row, self._day))
        self._new += 1

    def flush(self) -> None:
        if self._widths is None:
            self._widths = self._fix_widths()
        now = _time.monotonic()
        if self._new:
            self._idle_since = None
        elif self._idle_since is None:
            self._idle_since = now
        self._new = 0
        self._rates.append((now, self._events))
        while len(self._rates) > 2 and now - self._rates[0][0] > 5:
            self._rates.popleft()
        self._live.update(self.frame(), refresh=True)

    def close(self) -> None:
        if self._new:  # rows read since the last frame (Ctrl-C during a poll)
            self.flush()
        self._live.stop()

    # -- the frame --

    def status(self, parts: int, finished: int, frontier: str, events: int) -> None:
        """The facts of the status line: parts (of which ``finished``), the stream's frontier, events shown."""
        self._parts, self._finished, self._frontier, self._events = parts, finished, frontier, events

    @property
    def widths(self) -> list[int] | None:
        """The column widths, fixed at the first flush (None before)."""
        return self._widths

    def _fix_widths(self) -> list[int]:
        labels = ts_label(self._columns, self._day)
        guess = [13 if k == "ts" and self._day else g for (k, _), g in zip(self._columns, self._guess)]
        widths = [min(MAX_WIDTH, max(g, len(label), *(r[i].cell_len for r in self._rows))) if self._rows
                  else max(g, len(label)) for i, (g, (_, label)) in enumerate(zip(guess, labels))]
        # one space between columns; record fields are cut first, the write time last, part/seq/kind/time never
        return fit_widths([k for k, _ in self._columns], widths, self._console.width, 1)

    def window(self) -> int:
        """How many rows fit below the header and above the status line."""
        return max(1, self._console.height - _RESERVED)

    def frame(self) -> Group:
        widths = self._widths or self._guess
        table = Table(box=None, padding=(0, 1, 0, 0), pad_edge=False, header_style="bold", show_edge=False,
                      expand=False)
        for (_, label), w in zip(ts_label(self._columns, self._day), widths):
            table.add_column(label, width=w, min_width=w, max_width=w, overflow="ellipsis", no_wrap=True)
        n = self.window()
        rows = list(self._rows)[-n:]
        for r in rows:
            table.add_row(*r)
        for _ in range(n - len(rows)):  # keep the status line in place until the window fills
            table.add_row(*([""] * len(self._columns)))
        return Group(table, self._status_line())

    def _status_line(self) -> Text:
        (t0, e0), (t1, e1) = (self._rates[0], self._rates[-1]) if self._rates else ((0.0, 0), (0.0, 0))
        rate = (e1 - e0) / (t1 - t0) if t1 > t0 else 0.0
        parts = f"{self._parts} parts" + (f" ({self._finished} finished)" if self._finished else "")
        line = Text(f" {self._stream}: {parts} · frontier {self._frontier} · {rate:.1f} events/s · ", style="reverse")
        if self._idle_since is not None:
            line.append("waiting for data… ", style="reverse yellow")
        line.append("Ctrl-C quits ", style="reverse dim")
        line.truncate(self._console.width, overflow="ellipsis")
        return line

