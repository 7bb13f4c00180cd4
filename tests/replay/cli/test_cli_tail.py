"""``replay tail -f`` on a terminal: the live view (fixed header, fixed widths, a bounded window, a status
line), driven with a fake terminal (a rich Console with force_terminal on a StringIO); piped, JSON lines."""

from __future__ import annotations

import io
import os
import re
import threading
import time

import pytest
from rich.console import Console

import replay.cli._live as live_mod
from capture import Capture
from eventlog import open_log
from replay.cli._live import LiveTail
from tests.support.cli import LOG_KINDS, SCHEMA, capture_numbers, jsonl, replay_cli

COLUMNS = [("part", "part"), ("seq", "seq"), ("kind", "kind"), ("time", "time"), ("record.n", "n"),
           ("record.word", "word")]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture(params=[k for k in LOG_KINDS if k != "kafka"])
def cli_uri(request, tmp_path) -> str:
    """A fresh file or memory log URI."""
    return f"memory://tail-{os.getpid()}-{tmp_path.name}" if request.param == "memory" else str(tmp_path / "log")


def terminal(width: int = 80, height: int = 12) -> tuple[Console, io.StringIO]:
    screen = io.StringIO()
    return Console(file=screen, force_terminal=True, width=width, height=height, highlight=False), screen


def plain(view: LiveTail, width: int = 80) -> list[str]:
    """The view's current frame as plain text lines."""
    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None, highlight=False).print(view.frame())
    return buf.getvalue().splitlines()


def row(seq: int, n: int, word: str) -> dict:
    return {"part": 0, "seq": seq, "kind": "messages", "time": seq, "record": {"n": n, "word": word}}


def starts(line: str) -> list[int]:
    """Where each column of a line starts (runs of non-spaces)."""
    return [m.start() for m in re.finditer(r"\S+", line)]


def test_widths_stay_fixed_as_longer_and_shorter_values_arrive():
    console, _ = terminal(width=60)
    view = LiveTail(COLUMNS, SCHEMA, console, "numbers")
    try:
        frames = []
        for seq, (n, word) in enumerate([(1, "a"), (123456789012, "a much longer word than any before it"),
                                         (-5, ""), (7, "mid-size")]):
            view.write(row(seq, n, word))
            view.flush()
            frames.append(plain(view, 60))
    finally:
        view.close()
    first = view.widths
    assert first is not None and sum(first) + len(first) - 1 <= 60
    headers = [f[0] for f in frames]
    expected = [sum(w + 1 for w in first[:i]) for i in range(len(first))]  # one space between fixed columns
    assert all(h == headers[0] for h in headers) and starts(headers[0]) == expected
    for f in frames:  # every row line is as wide as the header's columns say, long values cut with …
        for line in f[1:-1]:
            assert len(line.rstrip()) <= 60
    assert any("…" in line for line in frames[1]) and "a much longer word than any before it" not in "\n".join(frames[1])
    assert view.widths == first


def test_the_header_is_in_every_frame_and_the_window_keeps_the_newest_rows():
    console, screen = terminal(width=80, height=8)  # 8 lines: header, 5 rows, status, one spare
    view = LiveTail(COLUMNS, SCHEMA, console, "numbers")
    try:
        assert view.window() == 5
        refreshes = 0
        for seq in range(20):
            view.write(row(seq, seq, f"w{seq}"))
            if seq % 4 == 3:
                view.flush()
                refreshes += 1
                lines = plain(view)
                assert lines[0].split() == ["part", "seq", "kind", "time", "n", "word"]
                shown = [int(line.split()[4]) for line in lines[1:-1] if line.strip()]  # blank: window not full yet
                assert shown == list(range(max(0, seq - 4), seq + 1))
                assert "Ctrl-C" in lines[-1] and len(lines) == 7
    finally:
        view.close()
    shown = ANSI.sub("", screen.getvalue())
    assert shown.count("part seq") >= refreshes  # the header was redrawn with every frame


def test_tail_follow_on_a_terminal_is_a_live_view(cli_uri, monkeypatch):
    console, screen = terminal(width=100, height=10)
    monkeypatch.setattr(live_mod, "live_console", lambda: console)
    log = open_log(cli_uri)
    caps = [Capture(log, "live", w, 2, schema=SCHEMA) for w in range(2)]

    def write() -> None:
        for t in range(4):
            for w, cap in enumerate(caps):
                cap.send(t, [{"n": 10 * t + w, "word": "x" * (1 + 7 * t)}])
                cap.advance_to(t + 1)
            time.sleep(0.05)
        for cap in caps:
            cap.close()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        r = replay_cli("tail", "-f", cli_uri, "live", "--kind", "messages", "--interval", "0.01")
    finally:
        writer.join()
    assert r.stdout == ""  # everything went to the live view
    shown = ANSI.sub("", screen.getvalue())
    assert "waiting for data…" in shown and "2 parts" in shown and "Ctrl-C quits" in shown
    assert "2 parts (2 finished)" in shown.splitlines()[-1]  # the last frame: every part finished
    headers = {line for line in shown.splitlines() if line.startswith("part ")}
    assert len(headers) == 1  # the same header (same column widths) in every frame


def test_ctrl_c_stops_the_live_view_with_130(cli_uri, monkeypatch):
    import sys
    import types

    console, screen = terminal()
    monkeypatch.setattr(live_mod, "live_console", lambda: console)
    capture_numbers(cli_uri, peers=1, times=2, finish=False)

    def interrupt(_: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(sys.modules["replay.cli.cat"], "_time", types.SimpleNamespace(sleep=interrupt))
    r = replay_cli("tail", "-f", cli_uri, "numbers", expect=130)
    assert "interrupted" in r.stderr
    assert screen.getvalue().endswith("\x1b[?25h") or "\x1b[?25h" in screen.getvalue()  # cursor shown again


def test_piped_tail_follow_is_unchanged_json_lines(cli_uri):
    capture_numbers(cli_uri, peers=2, times=3)
    followed = replay_cli("tail", "-f", cli_uri, "numbers", "-n", "100", "--interval", "0.01")
    assert followed.stdout == replay_cli("cat", cli_uri, "numbers").stdout
    assert len(jsonl(followed)) > 0


def test_tail_without_follow_and_table_format_keep_the_chunked_table(cli_uri, monkeypatch):
    console, screen = terminal()
    monkeypatch.setattr(live_mod, "live_console", lambda: console)
    capture_numbers(cli_uri, peers=1, times=2)
    r = replay_cli("tail", cli_uri, "numbers", "--format", "table")
    header = r.stdout.splitlines()[0].split()
    assert header[:3] == ["part", "seq", "ts"] and header[4:6] == ["kind", "time"] and screen.getvalue() == ""
