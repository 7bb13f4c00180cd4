"""Exactly-once output under failures: a keyed windowed count whose sink output, after many injected
failures at random points (records, checkpoint barriers, sink commits), equals the failure-free run."""

from __future__ import annotations

import pytest

from runtime import Fault, FaultPlan, RestartBackoff
from tests.support.pipelines import expected_counts, read_counts, wordcount_job


def _tasks(job):
    return {n: node.parallelism for n, node in job.nodes.items()}


def test_failure_free_run_is_correct(tmp_path):
    out = str(tmp_path / "out")
    result = wordcount_job("clean", out).run(channels=str(tmp_path / "ch"), checkpoints=str(tmp_path / "ck"),
                                             checkpoint_interval=0.05, timeout=120)
    assert result.status == "finished" and result.restarts == 0
    assert result.checkpoints >= 1  # at least the final one
    assert read_counts(out) == expected_counts()
    # a finished job leaves its last checkpoint and no channel data
    assert not any((tmp_path / "ch" / "clean").glob("g*/*/*.bundles"))


def test_exactly_once_with_20_random_failures_in_process(tmp_path):
    """24 planned failures at random tasks and points (at least 20 fire: a fault planned after more
    records than its attempt still has to process does not); the output equals the expected counts
    (which equal the failure-free run's, see above)."""
    out = str(tmp_path / "out")
    job = wordcount_job("faults", out, items=600, delay=0.001)   # enough input for 20+ attempts, even loaded
    faults = FaultPlan.random(24, 7, _tasks(job), max_after={"source": 40, "upper": 40, "keep": 40, "count": 8, "out": 2},
                              points=("record", "record", "barrier", "commit"), sinks=["out"])
    result = job.run(channels=str(tmp_path / "ch"), checkpoints=str(tmp_path / "ck"), checkpoint_interval=0.05,
                     faults=faults, timeout=150, restart_backoff=RestartBackoff(initial=0.005, maximum=0.05))
    assert result.status == "finished"
    assert result.restarts >= 20, result.failures
    assert all("InjectedFailure" in f for f in result.failures)
    points = {p for f in result.failures for p in ("record", "barrier", "commit") if f"at {p} #" in f}
    assert points == {"record", "barrier", "commit"}
    assert read_counts(out) == expected_counts(items=600)


@pytest.mark.kafka
def test_exactly_once_with_kafka_channels_and_kafka_output(tmp_path, kafka_uri):
    """Channels on Kafka (a topic per generation) and the output captured into a Kafka log."""
    job = wordcount_job("kafkafaults", kafka_uri, items=200)
    faults = FaultPlan([Fault(0, "count", 1, "record", 15), Fault(1, "out", 0, "commit", 2),
                        Fault(2, "upper", 0, "barrier", 1)])
    result = job.run(channels=kafka_uri, checkpoints=str(tmp_path / "ck"), checkpoint_interval=0.1, faults=faults,
                     timeout=150)
    assert result.status == "finished" and result.restarts == 3, result.failures
    assert read_counts(kafka_uri) == expected_counts(items=200)


@pytest.mark.spark
def test_exactly_once_on_spark_with_sigkill(tmp_path, runtime_spark):
    """On Spark: a task's Python worker is SIGKILLed while handling records, then the sink's worker is
    SIGKILLed in the middle of a commit; each time the barrier stage fails and the job restarts from the
    last complete checkpoint (raised failures at barriers and commits are covered in-process above)."""
    out = str(tmp_path / "out")
    job = wordcount_job("sparkfaults", out, mapper=1, items=200, delay=0.002)   # 7 instances: 7 slots
    faults = FaultPlan([Fault(0, "count", 0, "record", 40, kind="kill"), Fault(1, "out", 0, "commit", 2, kind="kill")])
    result = job.run(runtime_spark, channels=str(tmp_path / "ch"), checkpoints=str(tmp_path / "ck"),
                     checkpoint_interval=0.2, faults=faults, timeout=240)
    assert result.status == "finished" and result.restarts == 2, result.failures
    assert "Python worker exited unexpectedly" in result.failures[0]
    assert read_counts(out) == expected_counts(items=200)
