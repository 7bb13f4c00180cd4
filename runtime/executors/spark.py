"""Hosting a generation on Spark: every operator instance is a task of one barrier-mode Spark job.

The driver submits ``sc.parallelize(range(n), n).barrier().mapPartitions(run_task).collect()`` with one
partition per operator instance; barrier execution mode gang-schedules the ``n`` tasks (all start
together, or none), so the job needs ``n`` free task slots: ``local[N]`` with ``N >=`` the job's total
parallelism (``Plan.total_slots``), or as many cores of live executors on a cluster (``spark_slots`` asks
Spark's scheduler, which counts the executors registered now — not ``spark.default.parallelism``). On a
cluster, executors register some seconds after the session starts and a lost executor is replaced after
a while, so before each generation the driver waits up to ``slot_timeout`` seconds for enough slots, then
raises ``NotEnoughSlotsError``; in local mode the slots never change and it raises at once. Each task (a
Python worker process) builds its ``TaskRunner`` from the pickled plan and talks to the job master on the
driver over TCP (``runtime.master``: the driver's bind address, the job's secret). When any task fails —
an exception, its worker is SIGKILLed, its executor is lost — Spark fails the barrier stage (a barrier
result stage is never retried by Spark) and cancels the other tasks; the master also aborts them through
their heartbeats, and the driver's failover loop (``runtime.failover``) submits the next generation from
the last complete checkpoint. The failure recorded is Spark's own reason (``spark_failure_reason``: the
task's Python exception, or the executor loss), not py4j's "An error occurred while calling …".
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from typing import Any

from ..channels.writer import WriterSettings
from ..errors import JobAbortedError, NotEnoughSlotsError
from ..faults import FaultPlan
from ..graph import Plan
from ..master import JobMaster, MasterServer, TcpClient, new_secret
from ..task import TaskRunner

_log = logging.getLogger("runtime.executors.spark")

DAEMON_MODULE = "runtime.executors.spark_daemon"
"""The ``spark.python.daemon.module`` that imports the runtime before PySpark forks its workers (optional)."""

_LOCAL = re.compile(r"^local(?:\[(\*|\d+)(?:,\s*\d+)?\])?$")


def is_local(spark: Any) -> bool:
    """True when the session runs in Spark local mode (every task in the driver's machine, fixed slots)."""
    return _LOCAL.match(spark.sparkContext.master) is not None


def spark_slots(spark: Any) -> int:
    """Task slots of the session now: ``N`` of ``local[N]`` (cores for ``local[*]``) divided by
    ``spark.task.cpus``; on a cluster, the tasks the live executors can run at once, as Spark's scheduler
    counts them for barrier stages (their cores, divided by ``spark.task.cpus``; 0 before any executor
    registered)."""
    sc = spark.sparkContext
    m = _LOCAL.match(sc.master)
    cpus = max(int(sc.getConf().get("spark.task.cpus", "1")), 1)
    if m:
        n = m.group(1)
        return (1 if n is None else (os.cpu_count() or 1) if n == "*" else int(n)) // cpus
    jsc = sc._jsc.sc()
    try:   # what the DAGScheduler's barrier check uses (Scala private[spark], public in the bytecode)
        return int(jsc.maxNumConcurrentTasks(jsc.resourceProfileManager().defaultResourceProfile()))
    except Exception:  # noqa: BLE001 - another Spark version: count live executors x spark.executor.cores
        executors = max(len(sc._jsc.sc().statusTracker().getExecutorInfos()) - 1, 0)   # minus the driver
        cores = sc.getConf().get("spark.executor.cores")
        if cores is None:
            raise NotEnoughSlotsError("cannot count the live executors' task slots on this Spark version; set "
                                      "spark.executor.cores") from None
        return executors * int(cores) // cpus


def driver_addresses(spark: Any) -> tuple[str, str]:
    """``(bind, advertise)`` of the job master's control port: on a cluster ``spark.driver.bindAddress``
    (else ``spark.driver.host``) and ``spark.driver.host``, the addresses Spark's own driver endpoints use;
    in local mode 127.0.0.1 for both (every task runs on this machine)."""
    if is_local(spark):
        return "127.0.0.1", "127.0.0.1"
    conf = spark.sparkContext.getConf()
    host = conf.get("spark.driver.host") or "127.0.0.1"
    return conf.get("spark.driver.bindAddress") or host, host


def _task_main(plan: Plan, generation: int, manifest: dict[str, Any] | None, attempt: int, channels: str,
               checkpoints: str, address: tuple[str, int], secret: str, token: str, settings: WriterSettings,
               faults: FaultPlan, heartbeat_interval: float):  # noqa: ANN202 - a mapPartitions function
    def run(_rows):  # noqa: ANN001, ANN202
        from pyspark import BarrierTaskContext

        ctx = BarrierTaskContext.get()
        spec = plan.tasks[ctx.partitionId()]
        client = TcpClient(address, secret)
        try:
            runner = TaskRunner(plan, spec, generation=generation, manifest=manifest, channels_uri=channels,
                                checkpoints_uri=checkpoints, client=client, writer_settings=settings,
                                faults=faults.for_task(attempt, spec.chain or spec.node, spec.index),
                                heartbeat_interval=heartbeat_interval, run_token=token)
            stats = runner.run()
        except JobAbortedError:
            return  # another task failed; the stage fails because of that task, not this one
        finally:
            client.close()
        yield json.dumps(stats)

    return run


class _SparkHandle:
    def __init__(self, spark: Any, plan: Plan, fn: Any, group: str) -> None:
        self._spark = spark
        self._group = group
        self._errors: list[str] = []
        self._stats: dict[str, dict[str, Any]] = {}
        self._thread = threading.Thread(target=self._run, args=(plan, fn), name=f"spark-{group}", daemon=True)
        self._thread.start()

    def _run(self, plan: Plan, fn: Any) -> None:
        sc = self._spark.sparkContext
        try:
            sc.setJobGroup(self._group, f"eventlog runtime {plan.name}", interruptOnCancel=True)
            n = plan.total_slots
            rows = sc.parallelize(list(range(n)), n).barrier().mapPartitions(fn).collect()
            for row in rows:
                s = json.loads(row)
                self._stats[s["task"]] = s
        except Exception as e:  # noqa: BLE001 - a failed stage is a failed generation
            self._errors.append(spark_failure_reason(e))

    def done(self) -> bool:
        return not self._thread.is_alive()

    def wait(self, seconds: float) -> None:
        self._thread.join(seconds)

    def cancel(self) -> None:
        try:
            self._spark.sparkContext.cancelJobGroup(self._group)
        except Exception:  # noqa: BLE001 - the job may be gone already
            pass

    def errors(self) -> list[str]:
        return list(self._errors)

    def stats(self) -> dict[str, dict[str, Any]]:
        return dict(self._stats)


_FRAME = re.compile(r"^\s*(at |\.\.\. \d+ (more|common frames omitted))")
_MARKERS = ("InjectedFailure", "UnreachableLocationError", "TaskFailedError")


def _exception_text(e: BaseException) -> str:
    java = getattr(e, "java_exception", None)
    if java is not None:
        try:
            return str(java.toString())   # the Java exception itself, without py4j's "An error occurred while…"
        except Exception:  # noqa: BLE001 - the gateway may be gone
            pass
    return str(e)


def spark_failure_reason(e: BaseException) -> str:
    """One line (at most 600 characters) saying why a Spark job failed: the failed task's Python exception
    (the last line of its traceback) or Spark's task failure (an executor lost, a Python worker that exited,
    a barrier slot check), followed by Spark's stage failure in brackets — instead of py4j's "An error
    occurred while calling z:…collectAndServe"."""
    text = _exception_text(e)
    lines: list[str] = []
    python: str | None = None
    in_traceback = False
    for raw in text.splitlines():
        if raw.startswith("Driver stacktrace"):
            break
        if "Traceback (most recent call last)" in raw:
            in_traceback = True
            continue
        if in_traceback:
            if raw and not raw[0].isspace():
                python = raw.strip()      # the exception line ends a traceback (a later one wins: it was raised last)
                in_traceback = False
            continue
        if raw.strip() and not _FRAME.match(raw):
            lines.append(raw.strip())
    stage = None
    rest = []
    for line in lines:
        i = line.find("Job aborted due to stage failure:")
        if i >= 0 and stage is None:
            stage = line[i + len("Job aborted due to stage failure:"):].strip()
        elif not line.startswith(("During handling of", "The above exception", "Caused by: py4j")):
            rest.append(line)
    for marker in _MARKERS:       # the runtime's own errors, whatever wraps them
        hit = next((x for x in ([python] if python else []) + rest if marker in x), None)
        if hit is not None:
            python = hit[hit.find(marker):]
            break
    cause = python or (rest[0] if rest else None)
    if cause is None:
        reason = stage or (lines[0] if lines else repr(e))
    else:
        reason = cause if stage is None else f"{cause} (Spark: {stage})"
    return reason[:600]


class SparkExecutor:
    """Runs each generation as one barrier-mode Spark job (see the module doc): the job master's control
    port on the driver's bind address with a new secret, and before each generation a wait of at most
    ``slot_timeout`` seconds for the live executors to offer a slot per operator instance."""

    def __init__(self, spark: Any, master: JobMaster, *, slot_timeout: float = 60.0) -> None:
        self.spark = spark
        self.master = master
        self.slot_timeout = slot_timeout
        self.slot_waits: list[float] = []
        """Seconds waited for task slots before each generation."""
        if spark.sparkContext.getConf().get("spark.python.daemon.module") != DAEMON_MODULE:
            _log.info("job %s: spark.python.daemon.module is not %s, so each new Python worker imports PySpark's "
                      "worker (from pyspark.zip, uncompiled), pyarrow, pandas and the runtime itself (about a second "
                      "of CPU) while its barrier job's other tasks run", master.plan.name, DAEMON_MODULE)
        bind, advertise = driver_addresses(spark)
        self._secret = new_secret()
        self._server = MasterServer(master, bind, secret=self._secret, advertise=advertise)
        _log.info("job %s: job master listening on %s:%d, tasks connect to %s:%d", master.plan.name,
                  *self._server.bound, *self._server.address)

    @property
    def address(self) -> tuple[str, int]:
        """``(host, port)`` of the job master's control port, as tasks connect to it."""
        return self._server.address

    @property
    def refused(self) -> int:
        """Connections the control port refused (no or a wrong secret)."""
        return self._server.refused

    def _wait_for_slots(self, plan: Plan, deadline: float | None) -> float:
        need = plan.total_slots
        slots = spark_slots(self.spark)
        if slots >= need:
            return 0.0
        local = is_local(self.spark)
        started = time.monotonic()
        until = started + (0.0 if local else self.slot_timeout)
        if deadline is not None:
            until = min(until, deadline)
        if not local:
            _log.info("job %s: waiting up to %.0f s for %d task slots (the live executors offer %d)", plan.name,
                      until - started, need, slots)
        while slots < need:
            if time.monotonic() >= until:
                if local:
                    raise NotEnoughSlotsError(
                        f"job {plan.name!r} has {need} operator instances, but Spark has {slots} task slots; barrier "
                        f"mode runs all instances at once: use local[{need}] or more (or lower parallelisms)")
                raise NotEnoughSlotsError(
                    f"job {plan.name!r} has {need} operator instances, but after {time.monotonic() - started:.1f} s "
                    f"the live executors offer {slots} task slots (barrier mode runs all instances at once): add "
                    f"executors or cores, lower the parallelisms, or raise slot_timeout (now {self.slot_timeout} s)")
            time.sleep(0.1)
            slots = spark_slots(self.spark)
        waited = time.monotonic() - started
        _log.info("job %s: %d task slots after %.1f s", plan.name, slots, waited)
        return waited

    def start(self, plan: Plan, generation: int, manifest: dict[str, Any] | None, *, attempt: int, channels: str,
              checkpoints: str, settings: WriterSettings, faults: FaultPlan, heartbeat_interval: float,
              token: str, deadline: float | None = None) -> _SparkHandle:
        """Wait for task slots, then submit the generation's Spark job; the handle tells when it ended."""
        self.slot_waits.append(self._wait_for_slots(plan, deadline))
        fn = _task_main(plan, generation, manifest, attempt, channels, checkpoints, self._server.address,
                        self._secret, token, settings, faults, heartbeat_interval)
        return _SparkHandle(self.spark, plan, fn, f"eventlog-{plan.name}-g{generation}")

    def close(self) -> None:
        """Stop the master's TCP server."""
        self._server.close()


__all__ = ["JobAbortedError", "SparkExecutor", "driver_addresses", "is_local", "spark_failure_reason", "spark_slots"]
