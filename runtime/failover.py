"""Running a job, and restarting it after failures (the driver's failover loop).

``run_job`` (what ``Job.run`` calls) runs the plan of a job graph as a sequence of *generations*. Before each
generation the driver chooses the checkpoint to restore (``CheckpointStore.select``): the newest complete
one that verifies — every file decodes, passes its checksum and is accepted by its operator, nothing run
from it — falling back to the previous complete checkpoint when the newest is damaged (each skipped one is
logged and listed in ``JobResult.fallbacks``); with no usable checkpoint the run raises
``CheckpointCorruptError`` (or starts from scratch if no output was ever committed). Every task restores
from it with the job's current parallelisms — keyed state moves by key group and source/sink parts by
``part % parallelism`` when they changed — and gets fresh channels (``runtime.channels``). While it runs,
the driver ticks the job master: checkpoints are triggered and completed, and what they made obsolete is
deleted (checkpoints no restore can use, earlier generations' channels). When any task fails — an
exception, a SIGKILLed Spark worker, a lost heartbeat — the master fails the generation: every other task
aborts at its next heartbeat (on Spark the job group is also cancelled), and after a back-off delay
(``RestartBackoff``: exponential, bounded; it starts over after a generation that completed a checkpoint)
the driver starts the next generation, at most ``max_restarts`` times, then raises ``JobFailedError``
with the last failure. State a checkpoint cannot store (``UnstorableStateError``) and a task that does not
see the driver's folders (``UnreachableLocationError``) fail the job at once: every retry would fail the
same way. The run ends when the sources finished and the sinks committed the final checkpoint (or
``stop_after_checkpoints``).

The driver's own checkpoint-store work — counters, manifests, pruning, choosing where to restore — is not
retried: when it fails (on S3: ``StoreUnavailableError``, the store did not answer after its client's retries;
``CheckpointError`` when another driver of the job changed its counters, ``runtime.checkpoints.store``) the driver fails
the generation, lets its tasks end (Spark's job group cancelled, tasks aborted at their next heartbeat) and
raises that error. A task's failure to reach the store only fails its generation: the restart reads the
counters first, so a store that stays down ends the run with ``StoreUnavailableError`` within a few of the
client's retry rounds, and one that came back is used again.

Before anything is created, every location is checked (``runtime.locations.check_locations``: a relative
path or ``memory://`` on Spark, an unsupported scheme raise ``LocationError``; checkpoints may be on S3). Before each generation the
driver leaves a run mark in the checkpoint store and the generation's file channels, which every task checks
before it starts; on Spark it then waits up to ``slot_timeout`` seconds for a task slot per operator
instance (``runtime.executors.spark``) — after a lost executor, until its replacement registered.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from .channels.factory import open_channel_store
from .channels.writer import WriterSettings
from .checkpoints.marks import new_token, write_mark
from .checkpoints.store import CheckpointStore
from .errors import FinishedOutputError, JobFailedError, RescaleError, UnreachableLocationError, UnstorableStateError
from .executors.local import LocalExecutor
from .executors.spark import SparkExecutor
from .faults import FaultPlan
from .graph import Plan
from .locations import check_locations
from .master import JobMaster
from .status import StatusPublisher

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
    """Statistics of each task of the last generation (records, rows out, writer peak bytes, …; what
    checkpoints cost it: ``state_bytes_max`` its largest snapshot, ``snapshot_s`` seconds encoding snapshots at
    barriers, ``align_s`` seconds from a checkpoint's first barrier on an input channel to its last; ``cpu_s``
    the CPU seconds of the task's threads)."""
    failure_times: list[float] = field(default_factory=list)
    """Wall-clock time (``time.time()``) at which each failed generation was failed."""
    generation_starts: list[float] = field(default_factory=list)
    """Wall-clock time at which each generation started."""
    restart_delays: list[float] = field(default_factory=list)
    """Seconds the driver waited before each restart (``RestartBackoff``)."""
    fallbacks: list[str] = field(default_factory=list)
    """Damaged checkpoints passed over when choosing where to restore (each error names its file)."""
    restored_from: list[int | None] = field(default_factory=list)
    """The checkpoint each generation restored (None: a fresh start)."""
    slot_waits: list[float] = field(default_factory=list)
    """Seconds the driver waited for Spark task slots before each generation (on a cluster: for executors to
    register, or for a lost one's replacement; empty for ``spark=None`` runs)."""


@dataclass(frozen=True)
class RestartBackoff:
    """How long the driver waits before restarting a failed job: ``initial`` seconds before the first restart,
    ``factor`` times longer before each next one, at most ``maximum``; the delay starts over at ``initial``
    after a generation that completed a checkpoint (it made progress, so its failure is not a loop)."""

    initial: float = 0.05
    maximum: float = 2.0
    factor: float = 2.0

    def __post_init__(self) -> None:
        if not (self.initial >= 0 and self.maximum >= self.initial and self.factor >= 1):
            raise ValueError("RestartBackoff needs 0 <= initial <= maximum and factor >= 1")

    def delay(self, streak: int) -> float:
        """The delay before the restart that follows ``streak`` failures in a row without progress (>= 1)."""
        return min(self.maximum, self.initial * self.factor ** min(max(streak - 1, 0), 64))


_FATAL = (UnstorableStateError, UnreachableLocationError, FinishedOutputError)
"""Failures no restart can cure: the job fails at once with the error."""


def _fatal(reason: str) -> BaseException | None:
    for cls in _FATAL:
        i = reason.find(f"{cls.__name__}: ")
        if i >= 0:
            return cls(f"job failed without a restart: {reason}")
    if "ModuleNotFoundError: " in reason:  # every restart would import the same way
        return JobFailedError(f"job failed without a restart: a task could not import a module ({reason}); on a "
                              f"cluster, ship the job's environment to the executors (docs/deploy.md)")
    return None


def _check_restore(manifest: dict[str, Any] | None, plan: Plan) -> None:
    if manifest is None:
        return
    if manifest["key_groups"] != plan.key_groups:
        raise RescaleError(f"the checkpoint of job {plan.name!r} has {manifest['key_groups']} key groups; the job "
                           f"now has {plan.key_groups} (key groups are fixed for the life of a job's checkpoints)")


def _end_generation(master: JobMaster, handle: Any, reason: str, wait: float = 30.0) -> None:
    """Fail the generation and let its tasks end (they abort at their next heartbeat; Spark's job group is
    cancelled) before the driver raises an error of its own: no task goes on writing after the run ended."""
    master.fail(reason)
    handle.cancel()
    end = time.monotonic() + wait
    while not handle.done() and time.monotonic() < end:
        handle.wait(0.05)


def run_job(plan: Plan, spark: Any, *, channels: str, checkpoints: str, checkpoint_interval: float | None,
            max_restarts: int, faults: FaultPlan | None, writer: WriterSettings | None,
            stop_after_checkpoints: int | None, timeout: float | None, heartbeat_interval: float,
            restart_backoff: RestartBackoff | None = None, slot_timeout: float = 60.0) -> JobResult:
    """Run the job of ``plan`` (``Job.plan``; see ``Job.run`` and the module doc)."""
    job = plan.name
    check_locations(plan, channels=channels, checkpoints=checkpoints, on_spark=spark is not None)
    backoff = restart_backoff or RestartBackoff()
    operators = {name: node.make() for name, node in plan.nodes.items()}   # only to verify restored state
    store = CheckpointStore(checkpoints, job)
    chan = open_channel_store(channels, job)
    settings = writer or WriterSettings()
    faults = faults or FaultPlan()
    master = JobMaster(plan, store, checkpoint_interval=checkpoint_interval,
                       stop_after_checkpoints=stop_after_checkpoints)
    executor: LocalExecutor | SparkExecutor = (LocalExecutor(master) if spark is None else
                                               SparkExecutor(spark, master, slot_timeout=slot_timeout))
    started = time.monotonic()
    deadline = None if timeout is None else started + timeout
    failures: list[str] = []
    failure_times: list[float] = []
    gen_starts: list[float] = []
    delays: list[float] = []
    fallbacks: list[str] = []
    restored: list[int | None] = []
    streak = 0
    attempt = 0
    status = StatusPublisher(plan, master, store, failures, failure_times)   # <checkpoints>/<job>/_STATUS.json
    try:
        while True:
            generation = store.next_generation()
            manifest, skipped = store.select(operators)
            for e in skipped:
                _log.warning("job %s: checkpoint passed over: %s", job, e)
                fallbacks.append(str(e))
            _check_restore(manifest, plan)
            restored.append(manifest["checkpoint"] if manifest else None)
            chan.prepare(generation, [c.name for c in plan.channels])
            token = new_token()
            write_mark(store.location, generation, token)
            chan.mark(generation, token)
            master.begin(generation, manifest)
            gen_starts.append(time.time())
            _log.info("job %s generation %d starts from checkpoint %s", job, generation,
                      manifest["checkpoint"] if manifest else None)
            handle = executor.start(plan, generation, manifest, attempt=attempt, channels=channels,
                                    checkpoints=checkpoints, settings=settings, faults=faults,
                                    heartbeat_interval=heartbeat_interval, token=token, deadline=deadline)
            dropped = False
            try:
                while not handle.done():
                    for c in master.tick():
                        store.prune(c, master.coordinator.horizon)
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
                    store.prune(c, master.coordinator.horizon)
            except BaseException as e:
                _end_generation(master, handle, f"the driver failed: {type(e).__name__}: {e}")
                raise
            if master.driver_error is not None:   # completing a checkpoint failed on the driver: no restart
                raise master.driver_error
            errors = handle.errors()
            if master.status in ("finished", "stopped") and not errors:
                break
            reason = master.failure or (errors[0] if errors else "the tasks ended before the job finished")
            master.fail(reason)
            failures.append(reason)
            failure_times.append(master.first_failure_at or time.time())
            master.first_failure_at = None
            fatal = _fatal(reason)
            if fatal is not None:
                raise fatal
            if deadline is not None and time.monotonic() > deadline:
                raise JobFailedError(f"job {job!r} did not finish within {timeout} s: {reason}")
            if len(failures) > max_restarts:
                raise JobFailedError(f"job {job!r} failed {len(failures)} times (max_restarts="
                                     f"{max_restarts}); last failure: {reason}")
            streak = 1 if master.coordinator.completed_in_generation else streak + 1
            delay = backoff.delay(streak)
            if deadline is not None:
                delay = max(0.0, min(delay, deadline - time.monotonic()))
            delays.append(delay)
            _log.info("job %s generation %d failed (%s); restarting in %.3f s", job, generation, reason, delay)
            time.sleep(delay)
            attempt += 1
        if master.status == "finished":
            chan.drop_generations(generation + 1)
        tasks = dict(master.task_stats)
        tasks.update(handle.stats())
        c = master.coordinator
        return JobResult(job, master.status, attempt + 1, len(failures), failures, c.completed_in_run,
                         c.completed_id, time.monotonic() - started, list(c.durations), tasks, failure_times,
                         gen_starts, delays, fallbacks, restored, list(getattr(executor, "slot_waits", [])))
    finally:
        status.close()
        executor.close()
        chan.close()
