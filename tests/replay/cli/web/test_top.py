"""Issue 34: ``replay top``, the per-part numbers in the terminal; and ``replay ui``/``top`` stay out of the other
commands' way (registered lazily: ``--help`` lists them without importing them)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from tests.support.cli import ENV, replay_cli

_CHILD = """
import json, runpy, sys
out, sys.argv = sys.argv[1], ["replay", *sys.argv[2:]]
code = 0
try:
    runpy.run_module("replay.cli", run_name="__main__", alter_sys=True)
except SystemExit as e:
    code = e.code
with open(out, "w") as f:
    json.dump({"exit": code, "modules": sorted(sys.modules)}, f)
"""


def test_top_shows_each_parts_frontier_and_state(tmp_path, writers):
    uri = str(tmp_path / "log")
    w = writers(uri, "live", 3)
    for t in range(4):
        w.write(0, t)
    w.write(1, 0)
    w.finish(2)
    out = replay_cli("top", uri, "-n", "2", "--interval", "0.05", "--stall-after", "600").stdout
    lines = out.splitlines()
    assert lines[0].startswith("replay top · ") and "1 stream(s)" in lines[0]
    flat = " ".join(out.split())
    assert "live frontier 1 · lag" in flat and "held back by part(s) 1" in flat
    rows = {line.split()[0]: line.split() for line in lines if line.strip()[:1].isdigit()}
    assert rows["0"][1:3] == ["4", "running"]
    assert rows["1"][1:4] == ["1", "holding", "back"]
    assert rows["2"][1:3] == ["finished", "finished"]
    assert "rec/s" in out and "B/s" in out
    time.sleep(0.2)  # parts 0 and 1 have now been idle longer than --stall-after (the first look may be fast)
    out = replay_cli("top", uri, "-n", "1", "--stall-after", "0.1").stdout
    assert "stalled" in out, out  # parts 0 and 1 wrote nothing since


def test_top_on_a_log_without_streams(tmp_path):
    out = replay_cli("top", str(tmp_path / "nothing-yet"), "-n", "1").stdout
    assert "no stream in this log yet" in out


def test_ui_and_top_are_listed_and_not_imported_by_other_commands(tmp_path):
    listed = replay_cli("--help").stdout
    assert "  ui " in listed and "  top " in listed
    out = tmp_path / "modules.json"
    env = {k: v for k, v in ENV.items() if k != "EVENTLOG_PRELOAD"}
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(out), "--version"], capture_output=True, text=True,
                          env=env, timeout=120)
    got = json.loads(out.read_text())
    assert got["exit"] in (0, None), proc.stderr
    assert not [m for m in got["modules"] if m.startswith(("replay.cli._web", "replay.cli.ui", "replay.cli.top",
                                                            "prometheus_client"))]
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(out), "top", str(tmp_path), "-n", "1"],
                          capture_output=True, text=True, env=env, timeout=120)
    got = json.loads(out.read_text())
    assert got["exit"] in (0, None), proc.stderr
    # the terminal watch needs neither the server nor the metrics library
    assert not [m for m in got["modules"] if m.startswith(("replay.cli._web.server", "prometheus_client", "pandas"))]
