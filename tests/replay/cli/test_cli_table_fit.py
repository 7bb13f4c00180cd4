"""Tables that fit the terminal (issue 35 §7): on a 100-column terminal nothing is clipped mid-word at the edge
and no column is dropped; part, seq, kind and time are never cut; wide record fields are cut with an ellipsis
first; write times within one day show as times of day (the day in the header); columns empty in every row of a
chunk (updates and frontier among Messages rows) are not drawn. The live view of ``tail -f`` keeps write times
as times of day instead of cutting them to the date."""

from __future__ import annotations

import io

from rich.console import Console

from replay.cli._live import LiveTail
from replay.cli._output import _Table, fit_widths
from tests.support.cli import SCHEMA

COLUMNS = [("part", "part"), ("seq", "seq"), ("ts", "ts"), ("kind", "kind"), ("time", "time"),
           ("updates", "updates"), ("frontier", "frontier"), ("record.n", "n"), ("record.word", "word")]
LONG = "a fairly long comment about the thing " * 3


def _messages(seq: int) -> dict:
    return {"part": 0, "seq": seq, "ts": f"2026-11-28T08:20:3{seq}.673Z", "kind": "messages", "time": seq,
            "record": {"n": 10 ** 12 + seq, "word": LONG}}


def _progress(seq: int) -> dict:
    return {"part": 0, "seq": seq, "ts": f"2026-11-28T08:20:3{seq}.700Z", "kind": "progress",
            "updates": [[seq, -1], [seq + 1, 1]], "frontier": [seq + 1]}


def _table(rows: list[dict], width: int, capsys) -> list[str]:
    t = _Table(COLUMNS, width=width)
    for r in rows:
        t.write(r)
    t.close()
    return capsys.readouterr().out.splitlines()


def test_a_100_column_terminal_gets_every_column_with_keys_whole(capsys):
    lines = _table([_messages(1), _progress(2), _messages(3)], 100, capsys)
    assert all(len(line) <= 100 for line in lines)
    header = lines[0].split()
    assert header == ["part", "seq", "ts", "2026-11-28", "kind", "time", "updates", "frontier", "n", "word"]
    first = lines[1].split()
    assert first[:5] == ["0", "1", "08:20:31.673Z", "messages", "1"]
    assert first[5] == str(10 ** 12 + 1)  # the number is whole: the long text was cut first
    assert lines[1].rstrip().endswith("…")
    assert lines[2].split()[:6] == ["0", "2", "08:20:32.700Z", "progress", "2:-1", "3:+1"]


def test_messages_only_chunks_do_not_draw_progress_columns_and_a_new_set_repeats_the_header(capsys):
    t = _Table(COLUMNS, chunk=2, width=120)
    for r in (_messages(1), _messages(2), _progress(3), _messages(4)):
        t.write(r)
    t.close()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["part", "seq", "ts", "2026-11-28", "kind", "time", "n", "word"]
    assert "updates" in lines[3] and "frontier" in lines[3]  # the second chunk has a Progress row: header again
    assert len([line for line in lines if line.startswith("part")]) == 2


def test_a_pipe_gets_the_natural_widths_and_other_days_stay_whole(capsys):
    rows = [_messages(1), {**_messages(2), "ts": "2026-11-29T00:00:01.000Z"}]
    lines = _table(rows, None, capsys)
    assert LONG.strip()[:40] in lines[1]
    assert "2026-11-29T00:00:01.000Z" in lines[2]


def test_fit_never_cuts_the_key_columns():
    keys = ["part", "seq", "ts", "kind", "time", "record.a", "record.b"]
    widths = fit_widths(keys, [4, 6, 24, 8, 6, 60, 40], 80, 2)
    assert widths[:2] == [4, 6] and widths[3:5] == [8, 6]
    assert sum(widths) + 2 * 6 <= 80 and widths[2] >= 13
    assert fit_widths(keys, [4, 6, 24, 8, 6, 60, 40], 30, 2)[:2] == [4, 6]  # too narrow: keys still whole


def test_the_live_view_shows_times_of_day_not_dates():
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=100, height=12, highlight=False)
    view = LiveTail(COLUMNS, SCHEMA, console, "numbers")
    try:
        view.write(_messages(1))
        view.write(_progress(2))
        view.flush()
        buf = io.StringIO()
        Console(file=buf, width=100, color_system=None, highlight=False).print(view.frame())
    finally:
        view.close()
    lines = buf.getvalue().splitlines()
    assert lines[0].split()[:4] == ["part", "seq", "ts", "2026-11-28"]
    assert "08:20:31.673Z" in lines[1] and "08:20:32.700Z" in lines[2]
