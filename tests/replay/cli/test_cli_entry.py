"""The replay CLI as users start it: ``python -m replay.cli`` and the installed ``replay`` script, in real
processes (exit codes, Ctrl-C, a closed pipe)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

from capture import Capture
from eventlog import open_log
from tests.support.cli import ENV, MODULE, SCHEMA, capture_numbers


def installed_script() -> str | None:
    """The ``replay`` console script beside this interpreter, else on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "replay")
    return beside if os.path.exists(beside) else shutil.which("replay")


def run(cmd: list[str], *args: object) -> subprocess.CompletedProcess:
    return subprocess.run([*cmd, *map(str, args)], capture_output=True, text=True, env=ENV, timeout=60)


def test_python_dash_m_runs_the_cli(tmp_path):
    capture_numbers(str(tmp_path), peers=2, times=2)
    r = run(MODULE, "ls", tmp_path, "--json")
    assert r.returncode == 0, r.stderr
    assert [s["stream"] for s in json.loads(r.stdout)] == ["numbers"]
    r = run(MODULE, "cat", tmp_path, "nope")
    assert r.returncode == 3 and "Traceback" not in r.stderr and r.stderr.startswith("replay: error:")
    r = run(MODULE, "cat", tmp_path, "numbers", "--part", "9")
    assert r.returncode == 2 and "Usage: replay cat" in r.stderr


def test_the_installed_replay_script_runs():
    script = installed_script()
    if script is None:
        pytest.fail("no `replay` console script beside the interpreter or on PATH: install the package "
                    "(`make test` runs `pip install -e .[test]`), which creates it from pyproject.toml")
    r = subprocess.run([script, "--version"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "replay" in r.stdout, r.stderr
    r = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "Exit codes" in r.stdout


def test_ctrl_c_while_following_exits_130(tmp_path):
    cap = Capture(open_log(tmp_path), "live", 0, 1, schema=SCHEMA)
    cap.send(0, [{"n": 1, "word": "x"}])
    cap.advance_to(1)  # the part stays open: tail -f waits for more
    proc = subprocess.Popen([*MODULE, "tail", "-f", str(tmp_path), "live", "--interval", "0.05"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        first = json.loads(proc.stdout.readline())  # it printed what is there, then follows
        assert first["kind"] == "messages" and first["record"]["n"] == 1
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        cap.abort()
    assert proc.returncode == 130 and "interrupted" in err and "Traceback" not in err


def test_a_closed_pipe_ends_quietly(tmp_path):
    log = open_log(tmp_path)
    with Capture(log, "big", 0, 1, schema=SCHEMA) as cap:
        for t in range(20):
            cap.send(t, [{"n": i, "word": "y" * 50} for i in range(500)])
            cap.advance_to(t + 1)
    proc = subprocess.Popen([*MODULE, "cat", str(tmp_path), "big"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=ENV)
    assert json.loads(proc.stdout.readline())["record"]["n"] == 0
    proc.stdout.close()  # like `| head -1`
    err = proc.stderr.read().decode()
    proc.wait(timeout=30)
    assert proc.returncode == 141 and "Traceback" not in err and "Error" not in err
