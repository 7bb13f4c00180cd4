"""Exactly once with joins: jobs joining two inputs (windowed, interval, with a changing table; inner and left
outer) whose output, after failures — random task failures at records, barriers and commits, a SIGKILLed
driver, SIGKILLed Spark workers — and after rescales from checkpoints, equals the failure-free run's (which
equals the definition, tests/runtime/test_joins.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from runtime import Fault, FaultPlan, RestartBackoff
from tests.runtime import join_pipelines as jp
from tests.support.paths import ROOT


def _tasks(job):
    return {n: node.parallelism for n, node in job.nodes.items()}


@pytest.mark.parametrize("kind,how", [("window", "inner"), ("interval", "left"), ("table", "left")])
def test_failure_free_join_runs_equal_the_definition(tmp_path, kind, how):
    out = str(tmp_path / "out")
    result = jp.join_job(f"clean_{kind}", out, kind, how).run(channels=str(tmp_path / "ch"),
                                                             checkpoints=str(tmp_path / "ck"),
                                                             checkpoint_interval=0.05, timeout=120)
    assert result.status == "finished" and result.restarts == 0
    assert jp.read_joined(out) == jp.expected(kind, how)


@pytest.mark.parametrize("kind,how,seed", [("window", "left", 11), ("interval", "inner", 12), ("table", "inner", 13)])
def test_exactly_once_joins_with_random_failures_in_process(tmp_path, kind, how, seed):
    """12 planned failures at random tasks (sources, join, sink) and points; the join's buffered sides and
    table are restored from checkpoints each time."""
    out = str(tmp_path / "out")
    job = jp.join_job(f"faults_{kind}", out, kind, how, items=400, delay=0.002)
    max_after = {n: 30 for n in job.nodes} | {"join": 60, "out": 3}
    planned = FaultPlan.random(12, seed, _tasks(job), max_after=max_after, points=("record", "record", "barrier",
                                                                                    "commit"), sinks=["out"])
    faults = FaultPlan([Fault(0, "join", 0, "record", 5), *(f for f in planned.faults if f.attempt > 0)])
    result = job.run(channels=str(tmp_path / "ch"), checkpoints=str(tmp_path / "ck"), checkpoint_interval=0.05,
                     faults=faults, timeout=240, restart_backoff=RestartBackoff(initial=0.005, maximum=0.05))
    assert result.status == "finished"
    assert result.restarts >= 8, result.failures
    assert all("InjectedFailure" in f for f in result.failures)
    assert "join.0" in result.failures[0]
    restored = [c for c in result.restored_from if c]
    assert len(restored) >= 4 and len(set(restored)) >= 3, result.restored_from   # restores from state midway
    assert jp.read_joined(out) == jp.expected(kind, how, items=400)


@pytest.mark.parametrize("kind", ["window", "interval", "table"])
def test_join_rescaled_2_3_1_from_checkpoints_equals_the_unscaled_run(tmp_path, kind):
    """Stop at a checkpoint midway, resume with other parallelisms (join 2 → 3 → 1, the sources and the sink
    too): buffered sides and table versions move by key group."""
    out, ch, ck = str(tmp_path / "out"), str(tmp_path / "ch"), str(tmp_path / "ck")
    gate = tmp_path / "gate"
    steps = [2, 3, 1]
    for i, p in enumerate(steps):
        last = i == len(steps) - 1
        gate.write_text(str(10_000 if last else 40 * (i + 1)))
        job = jp.join_job(f"rescale_{kind}", out, kind, "left", items=120, imp_par=min(p, 2), click_par=min(p, 3),
                          join_par=p, sink_par=min(p, 2), gate=str(gate))
        result = job.run(channels=ch, checkpoints=ck, checkpoint_interval=0.05,
                         stop_after_checkpoints=None if last else 2, timeout=120)
        assert result.status == ("finished" if last else "stopped"), result.failures
        if not last:
            latest = json.loads((tmp_path / "ck" / f"rescale_{kind}" / "LATEST").read_text())["body"]
            assert not latest["final"] and latest["parallelism"]["join"] == p
    assert jp.read_joined(out) == jp.expected(kind, "left", items=120)


_DRIVER = """
import sys
from tests.runtime import join_pipelines as jp
job = jp.join_job("driverkill", sys.argv[1], "interval", "left", items=400, delay=0.004)
job.run(channels=sys.argv[2], checkpoints=sys.argv[3], checkpoint_interval=0.1, timeout=300)
"""


def test_exactly_once_after_the_driver_is_sigkilled(tmp_path):
    """The driver process (running every task as a thread) is SIGKILLed once some checkpoints completed and
    output was committed; a new driver resumes the job from its checkpoints and the output is exactly the
    failure-free run's."""
    out, ch, ck = str(tmp_path / "out"), str(tmp_path / "ch"), str(tmp_path / "ck")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", _DRIVER, out, ch, ck], cwd=str(ROOT), env=env)
    try:
        deadline = time.monotonic() + 120
        latest = tmp_path / "ck" / "driverkill" / "LATEST"
        while time.monotonic() < deadline and proc.poll() is None:
            if latest.exists() and json.loads(latest.read_text())["body"]["checkpoint"] >= 4:
                break
            time.sleep(0.02)
        assert proc.poll() is None, "the driver finished before it could be killed (make the job longer)"
        assert latest.exists(), "no checkpoint completed within 120 s"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    job = jp.join_job("driverkill", out, "interval", "left", items=400)
    result = job.run(channels=ch, checkpoints=ck, checkpoint_interval=0.1, timeout=240)
    assert result.status == "finished" and result.restored_from, result
    assert jp.read_joined(out) == jp.expected("interval", "left", items=400)


@pytest.mark.kafka
@pytest.mark.parametrize("kind,how", [("window", "inner"), ("table", "left")])
def test_exactly_once_joins_with_kafka_channels_and_kafka_output(tmp_path, kafka_uri, kind, how):
    """Channels on Kafka (a topic per generation, a partition per channel of both inputs) and the output
    captured into a Kafka log, with failures in the join, at a barrier and in the middle of a commit."""
    job = jp.join_job(f"kafka_{kind}", kafka_uri, kind, how, items=100)
    faults = FaultPlan([Fault(0, "join", 1, "record", 12), Fault(1, "out", 0, "commit", 2),
                        Fault(2, "join", 0, "barrier", 1)])
    result = job.run(channels=kafka_uri, checkpoints=str(tmp_path / "ck"), checkpoint_interval=0.1, faults=faults,
                     timeout=240)
    assert result.status == "finished" and result.restarts == 3, result.failures
    assert jp.read_joined(kafka_uri) == jp.expected(kind, how, items=100)


@pytest.mark.spark
def test_exactly_once_joins_on_spark_with_sigkill(tmp_path, runtime_spark):
    """On Spark (one barrier task per instance: 2 + 1 + 2 + 2 + 1 = 8 slots): the join's Python worker is
    SIGKILLed while joining, then the sink's in the middle of a commit."""
    out = str(tmp_path / "out")
    job = jp.join_job("sparkjoin", out, "window", "left", items=120, delay=0.002, imp_par=2, click_par=1,
                      join_par=2, sink_par=1)
    assert job.plan().total_slots == 8
    faults = FaultPlan([Fault(0, "join", 0, "record", 30, kind="kill"), Fault(1, "out", 0, "commit", 2, kind="kill")])
    result = job.run(runtime_spark, channels=str(tmp_path / "ch"), checkpoints=str(tmp_path / "ck"),
                     checkpoint_interval=0.2, faults=faults, timeout=300)
    assert result.status == "finished" and result.restarts == 2, result.failures
    assert "Python worker exited unexpectedly" in result.failures[0]
    assert jp.read_joined(out) == jp.expected("window", "left", items=120)


@pytest.mark.kafka
@pytest.mark.slow
def test_exactly_once_join_when_a_kafka_broker_is_killed(tmp_path, kafka_cluster3):
    """Channels and output on a three-broker cluster (replication 3, ``min.insync.replicas=2``): a broker is
    SIGKILLed once the join is under way and restarted two seconds later; channels stall or the generation
    fails and restarts, and the output equals the failure-free run's."""
    import threading
    import uuid

    uri = f"kafka://{kafka_cluster3.bootstrap}/bk{uuid.uuid4().hex[:8]}"
    job = jp.join_job("brokerkill", uri, "interval", "left", items=300, delay=0.01)
    box: dict = {}

    def run() -> None:
        try:
            box["result"] = job.run(channels=uri, checkpoints=str(tmp_path / "ck"), checkpoint_interval=0.2,
                                    timeout=300)
        except BaseException as e:  # noqa: BLE001 - the test thread reports it
            import traceback
            box["error"] = "".join(traceback.format_exception(e))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    latest = tmp_path / "ck" / "brokerkill" / "LATEST"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not latest.exists() and t.is_alive():
        time.sleep(0.05)
    assert latest.exists() and t.is_alive(), box
    try:
        kafka_cluster3.kill(2)
        time.sleep(2)
    finally:
        kafka_cluster3.restart(2)
    t.join(320)
    assert "error" not in box, box["error"]
    assert box["result"].status == "finished", box["result"]
    assert jp.read_joined(uri) == jp.expected("interval", "left", items=300)
