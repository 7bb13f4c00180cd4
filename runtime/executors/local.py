"""Running a generation in-process: every operator instance is a thread of the driver's process.

Useful for tests and small jobs (the GIL limits throughput; Spark runs instances as processes). Tasks
talk to the job master by direct calls (``runtime.master.LocalClient``).
"""

from __future__ import annotations

import threading
from typing import Any

from ..channels.writer import WriterSettings
from ..errors import JobAbortedError
from ..faults import FaultPlan
from ..graph import Plan
from ..master import JobMaster, LocalClient
from ..task import TaskRunner


class _LocalHandle:
    def __init__(self, runners: list[TaskRunner]) -> None:
        self._runners = runners
        self._errors: list[str] = []
        self._stats: dict[str, dict[str, Any]] = {}
        self._threads = [threading.Thread(target=self._run, args=(r,), name=f"task-{r.key}", daemon=True)
                         for r in runners]
        for t in self._threads:
            t.start()

    def _run(self, runner: TaskRunner) -> None:
        try:
            self._stats[runner.key] = runner.run()
        except JobAbortedError:
            pass
        except BaseException as e:  # noqa: BLE001 - reported to the driver loop
            self._errors.append(f"task {runner.key} failed: {type(e).__name__}: {e}")

    def done(self) -> bool:
        return not any(t.is_alive() for t in self._threads)

    def wait(self, seconds: float) -> None:
        for t in self._threads:
            if t.is_alive():
                t.join(seconds)
                return

    def cancel(self) -> None:
        """Tasks abort by themselves at their next heartbeat."""

    def errors(self) -> list[str]:
        return list(self._errors)

    def stats(self) -> dict[str, dict[str, Any]]:
        return dict(self._stats)


class LocalExecutor:
    """Runs each generation's tasks as threads of this process (see the module doc)."""

    def __init__(self, master: JobMaster) -> None:
        self.master = master

    def start(self, plan: Plan, generation: int, manifest: dict[str, Any] | None, *, attempt: int, channels: str,
              checkpoints: str, settings: WriterSettings, faults: FaultPlan, heartbeat_interval: float,
              token: str, deadline: float | None = None) -> _LocalHandle:
        """Start the generation's tasks; the handle tells when they all ended."""
        client = LocalClient(self.master)
        runners = []
        for spec in plan.tasks:
            tf = faults.for_task(attempt, spec.chain or spec.node, spec.index)
            if any(f.kind == "kill" for f in tf._faults):
                raise ValueError("kill faults need tasks in their own processes (run on Spark)")
            runners.append(TaskRunner(plan, spec, generation=generation, manifest=manifest, channels_uri=channels,
                                      checkpoints_uri=checkpoints, client=client, writer_settings=settings,
                                      faults=tf, heartbeat_interval=heartbeat_interval, run_token=token))
        return _LocalHandle(runners)

    def close(self) -> None:
        """Nothing to release."""
