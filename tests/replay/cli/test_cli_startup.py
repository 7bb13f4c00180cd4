"""Issue 35: a plain ``replay`` command imports only what it uses. Each command runs in a fresh process, as the
``replay`` script runs it (``python -m replay.cli``), on a small file log; the process then lists the modules it
imported. No command that reads a file log imports pandas, PySpark, DuckDB, matplotlib, ``pyarrow.dataset``,
confluent-kafka or boto3; ``--version`` and ``--help`` import no pyarrow at all. Behaviour, not timing: the
start-up times are ``tools/bench/bench_cli_startup.py``'s."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from capture import Capture
from eventlog import open_log
from tests.support.cli import ENV, SCHEMA

HEAVY = ("pandas", "pyspark", "duckdb", "matplotlib", "pyarrow.dataset", "confluent_kafka", "boto3")
"""Modules no plain command on a file log may import (nor any of their submodules)."""

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
"""Runs ``replay ARGS`` as ``python -m replay.cli`` does, then writes its exit code and ``sys.modules``."""


@pytest.fixture(scope="module")
def log(tmp_path_factory) -> str:
    """A file log: stream ``numbers``, 2 parts, 4 times of 3 records each, finished."""
    root = str(tmp_path_factory.mktemp("startup") / "log")
    log = open_log(root)
    for w in range(2):
        with Capture(log, "numbers", w, 2, schema=SCHEMA) as cap:
            for t in range(4):
                cap.send(t, [{"n": 100 * t + 10 * w + i, "word": f"w{t}"} for i in range(3)])
                cap.advance_to(t + 1)
    return root


def run_replay(tmp_path, *args: str) -> tuple[dict, subprocess.CompletedProcess]:
    out = tmp_path / "modules.json"
    env = {k: v for k, v in ENV.items() if k != "EVENTLOG_PRELOAD"}  # the default: what a user gets
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(out), *args], capture_output=True, text=True,
                          env=env, timeout=120)
    assert out.exists(), proc.stderr
    return json.loads(out.read_text()), proc


def heavy_in(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)]


COMMANDS = [
    pytest.param(["ls", "{log}"], id="ls"),
    pytest.param(["info", "{log}", "numbers"], id="info"),
    pytest.param(["cat", "{log}", "numbers", "-n", "3"], id="cat"),
    pytest.param(["tail", "{log}", "numbers", "-n", "3"], id="tail"),
    pytest.param(["stats", "{log}", "numbers"], id="stats"),
    pytest.param(["verify", "{log}"], id="verify"),
    pytest.param(["frontier", "{log}", "numbers"], id="frontier"),
]


@pytest.mark.parametrize("args", COMMANDS)
def test_a_plain_command_imports_no_heavy_module(tmp_path, log, args):
    got, proc = run_replay(tmp_path, *(a.format(log=log) for a in args))
    assert got["exit"] in (0, None), proc.stderr
    assert proc.stdout.strip(), proc.stderr  # it did its work
    if args[0] == "cat":
        assert len(proc.stdout.splitlines()) == 3
    assert heavy_in(got["modules"]) == []
    assert "pyarrow" in got["modules"]  # it read the log
    assert not [m for m in got["modules"] if m.startswith("fastavro")]  # an Arrow stream: no Avro codec
    # only the command that ran was imported, not its neighbours
    assert not {"replay.cli.sql", "replay.cli.gen", "replay.cli.import_", "replay.cli.convert"} & set(got["modules"])


@pytest.mark.parametrize("flag", ["--version", "--help"])
def test_version_and_help_import_no_pyarrow(tmp_path, flag):
    got, proc = run_replay(tmp_path, flag)
    assert got["exit"] in (0, None), proc.stderr
    assert ("replay (eventlog), version" in proc.stdout) if flag == "--version" else ("Commands:" in proc.stdout)
    assert not [m for m in got["modules"] if m == "pyarrow" or m.startswith("pyarrow.")]
    assert heavy_in(got["modules"]) == []
    assert not [m for m in got["modules"] if m.startswith("replay.cli.") and m not in
                ("replay.cli.__main__", "replay.cli._common", "replay.cli._lazy")]


def test_help_lists_every_command_with_its_own_short_help():
    """The short help ``replay --help`` shows without importing a command is the command's own."""
    from replay.cli import COMMANDS as REGISTERED
    from replay.cli import main

    main.get_command(None, "gen")  # type: ignore[arg-type] # loaded out of order: the listing keeps its order
    listed = CliRunner().invoke(main, ["--help"]).stdout
    for name, (_, short_help) in REGISTERED.items():
        command = main.get_command(None, name)  # type: ignore[arg-type]
        assert command is not None and command.name == name
        assert command.short_help == short_help, name
        assert f"  {name} " in listed
    assert main.list_commands(None) == list(REGISTERED)  # type: ignore[arg-type]
    assert CliRunner().invoke(main, ["--help"]).stdout == listed  # the same once every command is loaded


def test_in_process_runs_leave_the_preload_setting_alone(log):
    """Only the process's own command line turns ``open_log``'s preload off (a test's CliRunner does not)."""
    from replay.cli import main

    before = os.environ.get("EVENTLOG_PRELOAD")
    result = CliRunner().invoke(main, ["ls", log])
    assert result.exit_code == 0, result.output
    assert os.environ.get("EVENTLOG_PRELOAD") == before
