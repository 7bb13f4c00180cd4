"""Rescale: stop at a checkpoint, resume with other parallelisms; keyed state moves by key group, source
and sink parts by ``part % parallelism``; the output equals an unscaled run's."""

from __future__ import annotations

import json
import os

import pytest

from runtime import Job, RescaleError
from tests.support.pipelines import expected_counts, read_counts, wordcount_job


def _rescaled_run(tmp_path, spark, steps: list[int], name: str, chaining: bool = False, **kw) -> list:
    """Each step but the last stops after 2 checkpoints: its sources hold at a point of their own (the gate file:
    step i at i+1 parts of len(steps) of the items) so that it cannot finish first on a slow machine."""
    out = str(tmp_path / "out")
    channels, checkpoints = str(tmp_path / "ch"), str(tmp_path / "ck")
    gate = tmp_path / "gate"
    items = kw.get("items", 300)
    for i, p in enumerate(steps):
        last = i == len(steps) - 1
        gate.write_text(str(items if last else items * (i + 1) // len(steps)))
        job = wordcount_job(name, out, source=min(p, 4), mapper=p, counter=p, sink=min(p, 3), sink_parts=3,
                            gate=str(gate), **kw)
        result = job.run(spark, channels=channels, checkpoints=checkpoints, checkpoint_interval=0.05,
                         stop_after_checkpoints=None if last else 2, timeout=180, chaining=chaining and i == 1)
        assert result.status == ("finished" if last else "stopped")
        if not last:  # stopped mid-stream: the state restored by the next step is not the final one
            latest = json.loads((tmp_path / "ck" / name / "LATEST").read_text())["body"]
            assert not latest["final"] and latest["parallelism"]["count"] == p
    return read_counts(out)


@pytest.mark.parametrize("chaining", [False, True])
def test_rescale_2_3_1_equals_unscaled_run(tmp_path, chaining):
    """With ``chaining``, the middle step chains operators (each keeps its own state files, so a restore
    does not depend on how operators were grouped into tasks)."""
    got = _rescaled_run(tmp_path, None, [2, 3, 1], "rescale", chaining, items=300, delay=0.001)
    assert got == expected_counts()


def test_rescaled_run_resumed_from_checkpoints(tmp_path):
    """Each step really resumes: the second run restores the first run's last checkpoint (its state
    files are read with the old parallelism) and does not start over."""
    out, ch, ck = str(tmp_path / "out"), str(tmp_path / "ch"), str(tmp_path / "ck")
    # the first run's source is paced to last ~6 s, so that it is still running when its second checkpoint
    # completes even on a busy machine (paced at 0.3 s, it sometimes finished first: status "finished")
    first = wordcount_job("resume", out, counter=2, items=300, delay=0.02).run(
        channels=ch, checkpoints=ck, checkpoint_interval=0.05, stop_after_checkpoints=2, timeout=60)
    assert first.status == "stopped"
    done_before = first.tasks["source.0"]["records_in"]
    second = wordcount_job("resume", out, counter=3, items=300, delay=0.001).run(
        channels=ch, checkpoints=ck, checkpoint_interval=0.05, timeout=60)
    assert second.status == "finished"
    assert 0 < done_before and second.tasks["source.0"]["records_in"] < 600  # resumed, not restarted
    assert read_counts(out) == expected_counts()
    assert [d for d in os.listdir(os.path.join(ck, "resume")) if d.startswith("chk-")]


def test_sink_parallelism_above_its_parts_is_refused(tmp_path):
    out, ch, ck = str(tmp_path / "out"), str(tmp_path / "ch"), str(tmp_path / "ck")
    wordcount_job("parts", out, sink=1, sink_parts=2, items=100, delay=0.002).run(
        channels=ch, checkpoints=ck, checkpoint_interval=0.05, stop_after_checkpoints=1, timeout=60)
    job = wordcount_job("parts", out, sink=3, sink_parts=2, items=100)
    with pytest.raises(Exception, match="parallelism 3 may not exceed"):
        job.run(channels=ch, checkpoints=ck, checkpoint_interval=0.05, max_restarts=0, timeout=60)


def test_key_groups_cannot_change(tmp_path):
    out, ch, ck = str(tmp_path / "out"), str(tmp_path / "ch"), str(tmp_path / "ck")
    wordcount_job("kg", out, items=100, delay=0.002).run(channels=ch, checkpoints=ck, checkpoint_interval=0.05,
                                                          stop_after_checkpoints=1, timeout=60)
    job = wordcount_job("kg", out, items=100)
    job.key_groups = 64
    with pytest.raises(RescaleError, match="key groups"):
        job.run(channels=ch, checkpoints=ck, timeout=60)


@pytest.mark.spark
def test_rescale_on_spark(tmp_path, runtime_spark):
    """2 -> 3 -> 1 on Spark (at most 3+3+3+3 > 8 slots would not fit: sources and sinks stay small)."""
    out = str(tmp_path / "out")
    channels, checkpoints = str(tmp_path / "ch"), str(tmp_path / "ck")
    for i, p in enumerate([2, 3, 1]):
        job = wordcount_job("rescale_spark", out, source=min(p, 2), mapper=1, counter=p, sink=1, sink_parts=3,
                            items=200, delay=0.005)
        last = i == 2
        result = job.run(runtime_spark, channels=channels, checkpoints=checkpoints, checkpoint_interval=0.1,
                         stop_after_checkpoints=None if last else 1, timeout=180)
        assert result.status == ("finished" if last else "stopped")
    assert read_counts(out) == expected_counts(items=200)


def test_chaining_plan():
    job = wordcount_job("chains", "/nowhere", source=2, mapper=2, counter=3, sink=3)
    assert {t.key: t.chain for t in job.plan(chaining=True).tasks if t.index == 0} == {
        "source.0": ["source", "upper", "keep"], "count.0": ["count", "out"]}
    plain = job.plan()
    assert plain.total_slots == 2 + 2 + 2 + 3 + 3 and job.plan(chaining=True).total_slots == 2 + 3
    assert [c.name for c in job.plan(chaining=True).channels][:3] == ["keep.0-count.0", "keep.0-count.1",
                                                                      "keep.0-count.2"]


def test_job_graph_errors():
    from runtime import JobGraphError

    job = Job("g")
    with pytest.raises(JobGraphError, match="no source"):
        job.plan()
    job.from_generator(lambda p, o: iter(()), parts=1, name="s").map(lambda r: r, name="m")
    with pytest.raises(JobGraphError, match="leads to no sink"):
        job.plan()
    with pytest.raises(JobGraphError, match="used twice"):
        job.from_generator(lambda p, o: iter(()), parts=1, name="s")
    with pytest.raises(JobGraphError, match="positive int"):
        job.set_parallelism("m", 0)
