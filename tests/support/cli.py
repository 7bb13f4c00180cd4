"""The replay CLI in the tests: run it in-process (click's CliRunner) or as a process, on logs captured alike."""

from __future__ import annotations

import json
import os
import sys

import pyarrow as pa
from click.testing import CliRunner, Result

from capture import Capture
from eventlog import Log, open_log
from replay.cli import main
from tests.support.paths import ROOT

SCHEMA = pa.schema([("n", pa.int64()), ("word", pa.string())])
"""The schema :func:`capture_numbers` writes."""

LOG_KINDS = ["file", "memory"]
"""The logs every log-independent CLI test runs on (the ``cli_uri`` fixture, ``tests/replay/cli/conftest.py``).
The CLI reads logs only through the Log interface, so ``pytest.param("kafka", marks=pytest.mark.kafka)`` can join
(it passes, at about 4 s a test)."""

ENV = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
"""The environment of a CLI process: the project imported from this checkout."""
MODULE = [sys.executable, "-m", "replay.cli"]
"""The command line of the CLI as ``python -m replay.cli``."""


def replay_cli(*args: object, expect: int | None = 0) -> Result:
    """Run ``replay ARGS…`` in-process; check the exit code unless ``expect`` is None."""
    result = CliRunner().invoke(main, [str(a) for a in args])
    if expect is not None:
        assert result.exit_code == expect, (
            f"exit {result.exit_code}, expected {expect}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
            + (f"\nexception: {result.exception!r}" if result.exception else "")
        )
    return result


def capture_numbers(uri: "str | Log", stream: str = "numbers", peers: int = 3, times: int = 5, rows: int = 2,
                    encoding: str = "arrow", finish: bool = True) -> None:
    """Each part w sends ``rows`` records at each time t: n = 100*t + 10*w + i, word = f"w{t}"."""
    log = uri if isinstance(uri, Log) else open_log(uri)
    for w in range(peers):
        cap = Capture(log, stream, w, peers, schema=SCHEMA, encoding=encoding)
        for t in range(times):
            cap.send(t, [{"n": 100 * t + 10 * w + i, "word": f"w{t}"} for i in range(rows)])
            cap.advance_to(t + 1)
        cap.close() if finish else cap.abort()


def jsonl(result: Result) -> list[dict]:
    """The JSON lines a command printed."""
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
