"""Cross-job handoff through Kafka: job A killed with SIGKILL and restarted; job B's output equals the
failure-free run — nothing lost, nothing twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from tests.support.paths import EXAMPLES, ROOT

pytestmark = pytest.mark.kafka
JOB_A = str(EXAMPLES / "handoff" / "job_a.py")
JOB_B = str(EXAMPLES / "handoff" / "job_b.py")
EPOCHS = 30


def env():
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT) + os.pathsep + e.get("PYTHONPATH", "")
    return e


def job_a(uri, delay=0.02):
    return subprocess.Popen([sys.executable, JOB_A, "--log", uri, "--epochs", str(EPOCHS), "--delay", str(delay)],
                            env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def job_b(uri, out):
    return subprocess.Popen([sys.executable, JOB_B, "--log", uri, "--out", str(out), "--timeout", "90"],
                            env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def lines(path):
    with open(path) as f:
        return sorted(f.read().splitlines())


def test_handoff_survives_sigkill_of_the_producing_job(kafka_bootstrap, tmp_path):
    # failure-free reference run
    ref_uri = f"kafka://{kafka_bootstrap}/ref{uuid.uuid4().hex[:8]}"
    a = job_a(ref_uri)
    assert a.wait(120) == 0, a.stderr.read()
    b = job_b(ref_uri, tmp_path / "ref.txt")
    assert b.wait(120) == 0, b.stderr.read()
    ref = lines(tmp_path / "ref.txt")
    keys = [tuple(line.split()[:2]) for line in ref]
    assert len(keys) == len(set(keys)) == 3 * EPOCHS  # each worker handles each epoch once

    # job B follows while job A is killed mid-way and restarted
    uri = f"kafka://{kafka_bootstrap}/run{uuid.uuid4().hex[:8]}"
    out = tmp_path / "run.txt"
    b = job_b(uri, out)  # started first: it waits for the stream to appear
    a = job_a(uri, delay=0.15)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not out.exists() or len(lines(out)) < 3 * 5):
        time.sleep(0.05)  # wait until job B has handled a few epochs
    a.send_signal(signal.SIGKILL)
    a.wait(10)
    assert a.returncode == -signal.SIGKILL
    handled_at_kill = len(lines(out))
    assert handled_at_kill < 3 * EPOCHS, "job A finished before it could be killed"
    a = job_a(uri, delay=0.02)  # restart: every part resumes after its last acknowledged sequence id
    assert a.wait(120) == 0, a.stderr.read()
    assert b.wait(120) == 0, b.stderr.read()
    assert lines(out) == ref


def test_job_a_fails_when_a_worker_fails(tmp_path):
    """A worker that raises (here: the stream exists with another schema) makes job A exit 1, naming it."""
    import pyarrow as pa

    from capture import Capture

    uri = str(tmp_path / "log")
    Capture(uri, "readings", 0, 4, schema=pa.schema([("other", pa.string())])).close()
    a = job_a(uri)
    out, err = a.communicate(timeout=60)
    assert a.returncode == 1 and "job A failed" in err and "worker 0" in err, err
    assert "SchemaEvolutionError" in err and "schema cannot change" in err, err  # (a HeaderMismatchError)


def test_the_walkthrough_says_where_job_a_was_killed_and_what_was_voided_and_cleans_up(kafka_bootstrap):
    """`make demo-handoff`'s walkthrough: job A killed once it is well under way (not at a fixed delay, which on a
    busy machine came before its first epoch), the parts' epochs at the kill and what the restart voided said,
    job B's summary checked, and its temporary folder removed."""
    proc = subprocess.run([sys.executable, str(EXAMPLES / "handoff" / "walkthrough.py"), "--bootstrap", kafka_bootstrap],
                          capture_output=True, text=True, timeout=600, env=env())
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    killed = next(line for line in proc.stdout.splitlines() if "SIGKILLed mid-way" in line)
    epochs = [int(x) for x in killed.split("epochs [", 1)[1].split("]", 1)[0].split(",")]
    assert len(epochs) == 4 and max(epochs) >= 10 and min(epochs) < 30
    assert "job A's restart voided" in proc.stdout and "each epoch once and whole" in proc.stdout
    summary = next(line for line in proc.stdout.splitlines() if line.startswith("job B follows, writing "))
    assert not os.path.exists(os.path.dirname(summary.rsplit(" ", 1)[1]))
