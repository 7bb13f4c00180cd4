"""Hosting a generation on Spark: every operator instance is a task of one barrier-mode Spark job.

The driver submits ``sc.parallelize(range(n), n).barrier().mapPartitions(run_task).collect()`` with one
partition per operator instance; barrier execution mode gang-schedules the ``n`` tasks (all start
together, or none), so the job needs ``n`` free task slots: ``local[N]`` with ``N >=`` the job's total
parallelism (``Plan.total_slots``), or as many executor cores on a cluster. Each task (a Python worker
process) builds its ``TaskRunner`` from the pickled plan and talks to the job master on the driver over
TCP (``runtime.master``). When any task fails — an exception, or its worker is SIGKILLed — Spark fails the
barrier stage (a barrier result stage is never retried by Spark) and cancels the other tasks; the master
also aborts them through their heartbeats, and the driver's failover loop (``runtime.failover``) submits
the next generation from the last complete checkpoint.
"""

from __future__ import annotations

import json
import os
import re
import threading
from typing import Any

from .errors import JobAbortedError, NotEnoughSlotsError
from .faults import FaultPlan
from .graph import Plan
from .master import JobMaster, MasterServer, TcpClient
from .task import TaskRunner
from .writer import WriterSettings

_LOCAL = re.compile(r"^local(?:\[(\*|\d+)(?:,\s*\d+)?\])?$")


def spark_slots(spark: Any) -> int:
    """Task slots of the session: ``N`` of ``local[N]`` (cores for ``local[*]``), else the default
    parallelism (total executor cores), divided by ``spark.task.cpus``."""
    sc = spark.sparkContext
    m = _LOCAL.match(sc.master)
    if m:
        n = m.group(1)
        slots = 1 if n is None else (os.cpu_count() or 1) if n == "*" else int(n)
    else:
        slots = sc.defaultParallelism
    cpus = int(sc.getConf().get("spark.task.cpus", "1"))
    return slots // max(cpus, 1)


def _task_main(plan: Plan, generation: int, manifest: dict[str, Any] | None, attempt: int, channels: str,
               checkpoints: str, address: tuple[str, int], settings: WriterSettings, faults: FaultPlan,
               heartbeat_interval: float):  # noqa: ANN202 - a mapPartitions function
    def run(_rows):  # noqa: ANN001, ANN202
        from pyspark import BarrierTaskContext

        ctx = BarrierTaskContext.get()
        spec = plan.tasks[ctx.partitionId()]
        client = TcpClient(address)
        try:
            runner = TaskRunner(plan, spec, generation=generation, manifest=manifest, channels_uri=channels,
                                checkpoints_uri=checkpoints, client=client, writer_settings=settings,
                                faults=faults.for_task(attempt, spec.chain or spec.node, spec.index),
                                heartbeat_interval=heartbeat_interval)
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
            self._errors.append(_spark_reason(e))

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


def _spark_reason(e: BaseException) -> str:
    text = str(e)
    for marker in ("InjectedFailure", "Python worker exited unexpectedly", "TaskFailedError", "Error:"):
        i = text.find(marker)
        if i >= 0:
            return text[i:i + 300].splitlines()[0]
    return text.splitlines()[0][:300] if text else repr(e)


class SparkExecutor:
    """Runs each generation as one barrier-mode Spark job (see the module doc)."""

    def __init__(self, spark: Any, master: JobMaster) -> None:
        self.spark = spark
        self.master = master
        self._server = MasterServer(master)

    def start(self, plan: Plan, generation: int, manifest: dict[str, Any] | None, *, attempt: int, channels: str,
              checkpoints: str, settings: WriterSettings, faults: FaultPlan,
              heartbeat_interval: float) -> _SparkHandle:
        """Submit the generation's Spark job; the handle tells when it ended."""
        slots = spark_slots(self.spark)
        if plan.total_slots > slots:
            raise NotEnoughSlotsError(
                f"job {plan.name!r} has {plan.total_slots} operator instances, but Spark has {slots} task slots; "
                f"barrier mode runs all instances at once: use local[{plan.total_slots}] or more (or lower "
                f"parallelisms)")
        fn = _task_main(plan, generation, manifest, attempt, channels, checkpoints, self._server.address, settings,
                        faults, heartbeat_interval)
        return _SparkHandle(self.spark, plan, fn, f"eventlog-{plan.name}-g{generation}")

    def close(self) -> None:
        """Stop the master's TCP server."""
        self._server.close()


__all__ = ["JobAbortedError", "SparkExecutor", "spark_slots"]
