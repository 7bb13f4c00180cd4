"""Exactly-once capture across writer restarts (FORMAT.md §1.1): job A, with a nondeterministic source,
SIGKILLed at random points and restarted each time until it finishes, re-sends every time from the recovered
frontier; job B sees, for every time, the records of exactly one run, complete."""

from __future__ import annotations

import collections
import os
import random
import signal
import subprocess
import sys
import time
import uuid

import pyarrow.parquet as pq
import pytest

from replay import Replayer
from tests.support.cli import replay_cli
from tests.support.paths import SUPPORT

CHILD = str(SUPPORT / "nondeterministic_child.py")
PEERS, TIMES, KILLS = 2, 300, 22
ADVANCES_PER_RUN = 10  # KILLS runs advance at most ~KILLS * 10 of the PEERS * TIMES part-times


def _spawn(uri: str, env: dict) -> subprocess.Popen:
    """A job A process that has started and imported what it needs, waiting for its turn (a line on stdin)
    before it opens the log: the next run warms up while the current one runs, and only one of them writes."""
    return subprocess.Popen([sys.executable, CHILD, uri, str(PEERS), str(TIMES), "0.008", "--wait"], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _run_killed(uri: str, seed: int) -> tuple[int, int]:
    """Run job A, SIGKILLing it at KILLS random moments, then let a last run finish. Returns (kills, runs)."""
    rnd = random.Random(seed)
    kills = runs = 0
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    spare = None
    try:
        while True:
            runs += 1
            child, spare = spare or _spawn(uri, env), None
            child.stdin.write("go\n")  # its turn: the run before it is dead (or done)
            child.stdin.flush()
            if kills < KILLS:
                child.stdout.readline()  # started: its captures are open
                spare = _spawn(uri, env)
                # kill after a bounded number of advances (plus a random moment within the next time): the
                # kills never add up to the whole job however fast or loaded the machine is
                for _ in range(rnd.randint(0, ADVANCES_PER_RUN)):
                    if not child.stdout.readline():
                        break
                time.sleep(rnd.uniform(0, 0.05))
                if child.poll() is None:
                    child.send_signal(signal.SIGKILL)
                    child.wait()
                    child.stdin.close()
                    kills += 1
                    continue
            out, err = child.communicate(timeout=120)
            if child.returncode != 0:
                raise AssertionError(f"job A failed (exit {child.returncode}):\n{err[-3000:]}")
            if "done" in out:
                return kills, runs
            # it finished before the kill: every part was already done
    finally:
        if spare is not None:
            spare.kill()
            spare.communicate()


def _check_times_part(by_time: dict[int, list[dict]]) -> None:
    for t, rows in by_time.items():
        runs = {r["run"] for r in rows}
        assert len(runs) == 1, f"part, time {t}: records of runs {sorted(runs)}"
        ns = {r["n"] for r in rows}
        assert len(ns) == 1 and sorted(r["i"] for r in rows) == list(range(ns.pop())), f"time {t} is not whole"


def _check_by_part(uri: str) -> collections.Counter:
    """Per source part (assign mode, a worker per part): every time is one run's records, whole. Returns
    every record delivered."""
    everything: collections.Counter = collections.Counter()
    for part in range(PEERS):
        with Replayer(uri, "numbers", part, PEERS) as r:
            by_time: dict[int, list[dict]] = collections.defaultdict(list)
            for t, table in r.completed():
                by_time[t] += table.to_pylist()
        assert sorted(by_time) == list(range(TIMES))
        _check_times_part(by_time)
        everything.update(tuple(sorted(row.items())) for rows in by_time.values() for row in rows)
    return everything


@pytest.mark.parametrize("kind", ["file", "kafka"])
def test_a_nondeterministic_job_killed_anywhere_is_seen_exactly_once(kind, tmp_path, request):
    if kind == "file":
        uri = str(tmp_path / "log")
    else:
        bootstrap = request.getfixturevalue("kafka_bootstrap")
        uri = f"kafka://{bootstrap}/eo{uuid.uuid4().hex[:8]}"
    kills, runs = _run_killed(uri, seed=random.randrange(1 << 30))
    assert kills >= 20
    expected = _check_by_part(uri)
    # job B with other worker counts (parts merged, or a worker with no part) sees the same records, each
    # time once per worker, and drops the void records the kills left
    voided = 0
    for workers in (1, 3):
        got: collections.Counter = collections.Counter()
        for j in range(workers):
            with Replayer(uri, "numbers", j, workers) as r:
                times = [t for t, table in r.completed() if not got.update(
                    tuple(sorted(row.items())) for row in table.to_pylist())]
                assert len(times) == len(set(times))
                voided += r.voided
        assert got == expected
    assert voided > 0, "no kill left records of an incomplete time behind: the test proves nothing"
    out = tmp_path / "b.parquet"
    replay_cli("export", uri, "numbers", out)
    rows = pq.read_table(out).to_pylist()
    for part in range(PEERS):
        _check_times_part({t: [r for r in rows if r["_part"] == part and r["_time"] == t] for t in range(TIMES)})
    with Replayer(uri, "numbers", 0, 1, isolation="uncommitted") as r:
        raw = sum(table.num_rows for _, table in r.completed())
    assert raw > len(rows), "no kill left records of an incomplete time in the log: the test proves nothing"
