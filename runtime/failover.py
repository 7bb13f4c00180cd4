"""Running a job, and restarting it after failures (the driver's failover loop).

``run_job`` (what ``Job.run`` calls) runs the job graph as a sequence of *generations*. Each generation
restores every task from the last complete checkpoint (if any), with the job's current parallelisms —
keyed state moves by key group and source/sink parts by ``part % parallelism`` when they changed — and
gets fresh channels (``runtime.channels``). While it runs, the driver ticks the job master: checkpoints are
triggered and completed, and what they made obsolete is deleted (older checkpoints, earlier generations'
channels). When any task fails — an exception, a SIGKILLed Spark worker, a lost heartbeat — the master
fails the generation: every other task aborts at its next heartbeat (on Spark the job group is also
cancelled), and the driver starts the next generation, at most ``max_restarts`` times. The run ends when
the sources finished and the sinks committed the final checkpoint (or ``stop_after_checkpoints``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .channels import open_channel_store
from .errors import JobFailedError, RescaleError
from .faults import FaultPlan
from .master import JobMaster
from .state import CheckpointStore
from .writer import WriterSettings

if TYPE_CHECKING:
    from .graph import Job

_log = logging.getLogger("runtime")


@dataclass
class JobResult:
    """What a run did."""

    job: str
    status: str
    """``finished`` (sources done, output committed) or ``stopped`` (``stop_after_checkpoints``)."""
    generations: int
    """Generations run (1 + restarts)."""
    restarts: int
    """Restarts after failures."""
    failures: list[str]
    """The failure that ended each failed generation."""
    checkpoints: int
    """Checkpoints completed in this run."""
    last_checkpoint: int
    """The id of the last complete checkpoint."""
    seconds: float
    """Wall time of the run."""
    checkpoint_seconds: list[float] = field(default_factory=list)
    """Trigger-to-complete time of each checkpoint."""
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Statistics of each task of the last generation (records, rows out, writer peak bytes, …)."""
    failure_times: list[float] = field(default_factory=list)
    """Wall-clock time (``time.time()``) at which each failed generation was failed."""
    generation_starts: list[float] = field(default_factory=list)
    """Wall-clock time at which each generation started."""


def _check_restore(manifest: dict[str, Any] | None, job: "Job") -> None:
    if manifest is None:
        return
    if manifest["key_groups"] != job.key_groups:
        raise RescaleError(f"the checkpoint of job {job.name!r} has {manifest['key_groups']} key groups; the job "
                           f"now has {job.key_groups} (key groups are fixed for the life of a job's checkpoints)")


def run_job(job: "Job", spark: Any, *, channels: str, checkpoints: str, checkpoint_interval: float | None,
            max_restarts: int, faults: FaultPlan | None, writer: WriterSettings | None,
            stop_after_checkpoints: int | None, timeout: float | None, heartbeat_interval: float,
            chaining: bool = False) -> JobResult:
    """Run ``job`` (see ``Job.run`` and the module doc)."""
    plan = job.plan(chaining)
    store = CheckpointStore(checkpoints, job.name)
    chan = open_channel_store(channels, job.name)
    settings = writer or WriterSettings()
    faults = faults or FaultPlan()
    master = JobMaster(plan, store, checkpoint_interval=checkpoint_interval,
                       stop_after_checkpoints=stop_after_checkpoints)
    if spark is None:
        from .local import LocalExecutor

        executor: Any = LocalExecutor(master)
    else:
        from .spark import SparkExecutor

        executor = SparkExecutor(spark, master)
    started = time.monotonic()
    deadline = None if timeout is None else started + timeout
    failures: list[str] = []
    failure_times: list[float] = []
    gen_starts: list[float] = []
    attempt = 0
    try:
        while True:
            generation = store.next_generation()
            manifest = store.latest()
            _check_restore(manifest, job)
            chan.prepare(generation, [c.name for c in plan.channels])
            master.begin(generation, manifest)
            gen_starts.append(time.time())
            _log.info("job %s generation %d starts from checkpoint %s", job.name, generation,
                      manifest["checkpoint"] if manifest else None)
            handle = executor.start(plan, generation, manifest, attempt=attempt, channels=channels,
                                    checkpoints=checkpoints, settings=settings, faults=faults,
                                    heartbeat_interval=heartbeat_interval)
            dropped = False
            while not handle.done():
                for c in master.tick():
                    store.remove_before(c)
                    if not dropped:
                        chan.drop_generations(generation)
                        dropped = True
                if master.status == "failed":
                    handle.cancel()
                if deadline is not None and time.monotonic() > deadline and master.status == "running":
                    master.fail(f"the run took longer than its timeout of {timeout} s")
                    handle.cancel()
                handle.wait(0.005)
            for c in master.tick():
                store.remove_before(c)
            errors = handle.errors()
            if master.status in ("finished", "stopped") and not errors:
                break
            reason = master.failure or (errors[0] if errors else "the tasks ended before the job finished")
            master.fail(reason)
            failures.append(reason)
            failure_times.append(master.first_failure_at or time.time())
            master.first_failure_at = None
            if deadline is not None and time.monotonic() > deadline:
                raise JobFailedError(f"job {job.name!r} did not finish within {timeout} s: {reason}")
            if len(failures) > max_restarts:
                raise JobFailedError(f"job {job.name!r} failed {len(failures)} times (max_restarts="
                                     f"{max_restarts}); last failure: {reason}")
            _log.info("job %s generation %d failed (%s); restarting", job.name, generation, reason)
            attempt += 1
        if master.status == "finished":
            chan.drop_generations(generation + 1)
        tasks = dict(master.task_stats)
        tasks.update(handle.stats())
        c = master.coordinator
        return JobResult(job.name, master.status, attempt + 1, len(failures), failures, c.completed_in_run,
                         c.completed_id, time.monotonic() - started, list(c.durations), tasks, failure_times,
                         gen_starts)
    finally:
        executor.close()
        chan.close()
