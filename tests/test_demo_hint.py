"""The command `make demo` tells a newcomer to run next works as printed: `replay` is not on PATH after
`make demo` (it lives in .venv/bin), so the demo prints the environment's own path to it."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

from tests.support.paths import ROOT


def test_the_printed_replay_command_runs_from_a_shell_without_the_venv_on_path(tmp_path):
    spec = importlib.util.spec_from_file_location("demo", os.path.join(ROOT, "examples", "demo.py"))
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    env = {**os.environ, "PATH": "/usr/bin:/bin"}  # a newcomer's shell: the environment is not activated
    cmd = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, 'examples'); import demo; "
                          "print(demo._replay_command())"], cwd=ROOT, env=env, capture_output=True, text=True)
    printed = cmd.stdout.strip()
    assert cmd.returncode == 0 and printed, cmd.stderr
    run = subprocess.run(f"{printed} ls {tmp_path}", shell=True, cwd=ROOT, env=env, capture_output=True, text=True)
    assert run.returncode == 0, (printed, run.stderr)
    assert demo._replay_command() in ("replay", printed)
