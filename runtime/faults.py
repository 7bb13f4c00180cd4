"""Failure injection for tests and benchmarks: make a chosen task fail at a chosen point.

A ``Fault`` names the *attempt* of the run it fires in (0 = the first, 1 = the first restart…), the task
(operator and instance), the point (``record``: after the task handled ``after`` record batches or source
items; ``barrier``: at its ``after``-th checkpoint barrier, after saving its state and before forwarding
the barrier; ``commit``: in a sink, before its ``after``-th committed item) and how (``raise`` an
``InjectedFailure``, or ``kill``: SIGKILL the task's own process — only where tasks are processes, i.e. on
Spark). ``FaultPlan.random`` draws one fault per attempt, so a run with ``count`` faults restarts ``count``
times if every fault's point is reached.
"""

from __future__ import annotations

import os
import random
import signal
from dataclasses import dataclass
from typing import Iterable

from .errors import InjectedFailure

POINTS = ("record", "barrier", "commit")
KINDS = ("raise", "kill")


@dataclass(frozen=True)
class Fault:
    """One injected failure (see the module doc)."""

    attempt: int
    node: str
    index: int
    point: str = "record"
    after: int = 1
    kind: str = "raise"

    def __post_init__(self) -> None:
        if self.point not in POINTS:
            raise ValueError(f"fault point must be one of {POINTS}")
        if self.kind not in KINDS:
            raise ValueError(f"fault kind must be one of {KINDS}")
        if self.after < 1:
            raise ValueError("a fault fires after at least 1 event")


class FaultPlan:
    """The faults of a run (at most one per attempt is used)."""

    def __init__(self, faults: Iterable[Fault] = ()) -> None:
        self.faults = list(faults)

    @classmethod
    def random(cls, count: int, seed: int, tasks: dict[str, int], *, max_after: "int | dict[str, int]" = 50,
               points: tuple[str, ...] = ("record", "record", "barrier"), kind: str = "raise",
               sinks: Iterable[str] = ()) -> "FaultPlan":
        """``count`` faults, one per attempt, at random tasks (``{node: parallelism}``) and points; the
        ``commit`` point is used only for operators listed in ``sinks``. ``max_after`` bounds a ``record``
        fault's count (per operator when a dict); barrier and commit faults fire at their 1st to 3rd."""
        rng = random.Random(seed)
        names = sorted(tasks)
        sinks = set(sinks)
        out = []
        for attempt in range(count):
            node = rng.choice(names)
            pts = [p for p in points if p != "commit" or node in sinks] or ["record"]
            point = rng.choice(pts)
            most = max_after.get(node, 50) if isinstance(max_after, dict) else max_after
            after = rng.randint(1, most if point == "record" else 3)
            out.append(Fault(attempt, node, rng.randrange(tasks[node]), point, after, kind))
        return cls(out)

    def for_task(self, attempt: int, node: "str | list[str]", index: int) -> "TaskFaults":
        """The faults task ``node[index]`` (or the chain of operators ``node``) injects in ``attempt``."""
        nodes = {node} if isinstance(node, str) else set(node)
        return TaskFaults([f for f in self.faults if f.attempt == attempt and f.node in nodes and f.index == index])

    def __len__(self) -> int:
        return len(self.faults)


class TaskFaults:
    """One task's faults of one attempt, with its counters."""

    def __init__(self, faults: list[Fault]) -> None:
        self._faults = faults
        self._counts = {p: 0 for p in POINTS}

    def __bool__(self) -> bool:
        return bool(self._faults)

    def tick(self, point: str) -> None:
        """Count one event at ``point``; fail if a fault is due."""
        if not self._faults:
            return
        self._counts[point] += 1
        for f in self._faults:
            if f.point == point and self._counts[point] == f.after:
                if f.kind == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                raise InjectedFailure(f"injected failure at {point} #{f.after} of task {f.node}[{f.index}] "
                                      f"(attempt {f.attempt})")
