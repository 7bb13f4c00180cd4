"""Failures no restart cures fail the job at once with a clear error: a log sink's finished output stream met
by a new run with fresh checkpoints (the output is kept; the run that wrote it, resumed from its own checkpoints,
writes nothing twice), and a task that cannot import a module."""

from __future__ import annotations

import os

import pytest

from eventlog import open_log
from runtime import FinishedOutputError
from tests.support.pipelines import expected_counts, read_counts, wordcount_job


def _run(job, tmp_path, ck: str, **kw):
    return job.run(channels=str(tmp_path / f"ch-{ck}"), checkpoints=str(tmp_path / ck), checkpoint_interval=0.1,
                   timeout=120, **kw)


def _events(out: str) -> list[int]:
    log = open_log(out)
    return [log.part_stats("counts", p).next_seq for p in range(log.header("counts").peers)]


def test_a_new_run_over_a_finished_output_stream_fails_at_once_and_keeps_it(tmp_path):
    out = str(tmp_path / "out")
    assert _run(wordcount_job("first", out, items=60), tmp_path, "ck1").status == "finished"
    before, rows = _events(out), read_counts(out)
    with pytest.raises(FinishedOutputError, match=r"part \d of stream 'counts' .* is finished") as e:
        _run(wordcount_job("second", out, items=60), tmp_path, "ck2", max_restarts=5)
    assert "without a restart" in str(e.value)  # one generation: no restart could cure it
    assert _events(out) == before and read_counts(out) == rows


def test_the_run_that_wrote_it_resumed_from_its_checkpoints_writes_nothing_twice(tmp_path):
    out = str(tmp_path / "out")
    assert _run(wordcount_job("again", out, items=60), tmp_path, "ck").status == "finished"
    before = _events(out)
    result = _run(wordcount_job("again", out, items=60), tmp_path, "ck")
    assert result.status == "finished"
    assert _events(out) == before
    assert read_counts(out) == expected_counts(items=60)
    assert os.path.isdir(tmp_path / "ck")


def _needs_a_missing_module(row):
    import eventlog_no_such_module  # noqa: F401 - what an executor without the job's environment meets

    return row


def test_a_task_that_cannot_import_a_module_fails_the_job_without_restarts(tmp_path):
    from runtime import Job, JobFailedError
    from tests.support.pipelines import events

    job = Job("imports")
    job.from_generator(events(20), parts=1, name="source").map(_needs_a_missing_module, name="map").sink(
        lambda t, table: None, name="sink")
    with pytest.raises(JobFailedError, match="could not import a module.*eventlog_no_such_module") as e:
        _run(job, tmp_path, "ck", max_restarts=50)
    assert "without a restart" in str(e.value)
