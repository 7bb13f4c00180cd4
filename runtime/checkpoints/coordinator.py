"""The checkpoint coordinator (on the driver, part of the job master).

Protocol, for checkpoint ``n``:

1. The coordinator *triggers* ``n`` (every ``interval`` seconds once every task registered and the previous
   checkpoint completed; at once when every task has finished, for the final checkpoint). Ids only grow,
   across restarts too (``master.json``).
2. Each source task, between two items, snapshots its offsets, then puts barrier ``n`` into every output
   channel after what it wrote before.
3. Every other task aligns the barrier over its inputs (``ChannelReader``); at the aligned barrier it
   writes its snapshot — input offsets (last message id per input channel), output offsets (its writers'
   last ids), operator state — atomically, then forwards the barrier to its outputs and reports ``n``.
   (Both encode the snapshot at the barrier and forward it; the file is written from another thread and
   ``n`` reported once it is durable: ``TaskRunner._checkpoint``.)
4. When every task of the generation reported ``n``, the coordinator writes the checkpoint's manifest
   (``_COMPLETE``, then ``LATEST``): ``n`` is complete. It then moves the commit horizon
   (``runtime.checkpoints.store``) to the complete checkpoint before ``n`` — to ``n`` itself when ``n`` is final —
   and saves it. Tasks learn both from their next heartbeat: readers delete their channel segments up to
   ``n``'s barrier, sinks commit the output staged up to the horizon. The driver deletes the checkpoints
   no restore can use (``CheckpointStore.prune``) and earlier generations' channels.
"""

from __future__ import annotations

import time
from typing import Any

from .store import CheckpointStore


class CheckpointCoordinator:
    """Triggers checkpoints and completes them when every task reported (see the module doc)."""

    def __init__(self, store: CheckpointStore, parallelism: dict[str, int], key_groups: int,
                 interval: float | None) -> None:
        self.store = store
        self.parallelism = parallelism
        self.key_groups = key_groups
        self.interval = interval
        self.tasks: set[str] = set()
        self.generation = 0
        self.trigger_id = 0
        """The last checkpoint triggered in this generation (0: none)."""
        self.completed_id = 0
        """The last complete checkpoint (of any generation)."""
        self.completed_in_run = 0
        """Checkpoints completed since the run started."""
        self.completed_in_generation = 0
        """Checkpoints completed since the generation started (0: it made no progress)."""
        self.horizon = 0
        """The commit horizon: sinks may commit output of checkpoints up to this id."""
        self.final_id: int | None = None
        """The checkpoint triggered after every task finished (None: not yet)."""
        self.durations: list[float] = []
        """Seconds from trigger to completion of each checkpoint of the run."""
        self._reports: dict[int, set[str]] = {}
        self._triggered_at = 0.0
        self._last_trigger = 0.0
        self._in_flight: int | None = None
        self._just_completed: list[int] = []

    def begin(self, generation: int, tasks: set[str], restored: dict[str, Any] | None) -> None:
        """Start a generation: nothing in flight; the restored checkpoint counts as the last complete one."""
        self.generation = generation
        self.tasks = set(tasks)
        self.trigger_id = 0
        self.final_id = None
        self._reports = {}
        self._in_flight = None
        self.completed_id = restored["checkpoint"] if restored else 0
        self.completed_in_generation = 0
        self.horizon = self.store.commit_horizon()
        self._last_trigger = time.monotonic()

    def commit_through(self, checkpoint: int) -> None:
        """Let sinks commit output up to complete checkpoint ``checkpoint`` (saved before tasks hear it); the
        job can then no longer fall back to an earlier checkpoint."""
        if checkpoint > self.horizon:
            self.horizon = self.store.advance_horizon(checkpoint)

    def maybe_trigger(self, all_finished: bool) -> int | None:
        """Trigger a checkpoint if one is due; returns its id."""
        if self._in_flight is not None:
            return None
        now = time.monotonic()
        if all_finished:
            if self.final_id is not None:
                return None
        elif self.interval is None or now - self._last_trigger < self.interval:
            return None
        n = max(self.store.last_checkpoint_id(), self.completed_id) + 1
        self.store.reserve_checkpoint(n)
        self.trigger_id = n
        self._in_flight = n
        self._reports[n] = set()
        self._triggered_at = self._last_trigger = now
        if all_finished:
            self.final_id = n
        return n

    def report(self, task: str, checkpoint: int) -> bool:
        """Task ``task`` saved checkpoint ``checkpoint``; True when that completed it."""
        reported = self._reports.get(checkpoint)
        if reported is None or task not in self.tasks:
            return False
        reported.add(task)
        if reported != self.tasks:
            return False
        self.store.complete({
            "checkpoint": checkpoint,
            "generation": self.generation,
            "parallelism": self.parallelism,
            "key_groups": self.key_groups,
            "final": checkpoint == self.final_id,
            "time_ms": int(time.time() * 1000),
            "tasks": len(self.tasks),
        })
        del self._reports[checkpoint]
        self._in_flight = None
        self.commit_through(checkpoint if checkpoint == self.final_id else self.completed_id)
        self.completed_id = checkpoint
        self.completed_in_run += 1
        self.completed_in_generation += 1
        self.durations.append(time.monotonic() - self._triggered_at)
        self._just_completed.append(checkpoint)
        return True

    def take_completed(self) -> list[int]:
        """Checkpoints completed since the last call (for housekeeping outside the master's lock)."""
        out, self._just_completed = self._just_completed, []
        return out
