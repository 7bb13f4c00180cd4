"""Polling a ``LogWatch`` (and the jobs) on a thread, only while someone watches.

A view costs nothing when nobody looks: the ``Pump`` thread polls while a page is connected (a server-sent
events stream, ``watching()``) or within ``idle_after`` seconds of a request (``/metrics``, ``/api/state``:
``latest()``), and otherwise sleeps without reading the log. While it polls, it does so every ``interval``
seconds, or less often on a log where a look takes long (at most ``BUSY`` of a core); each poll makes a new
snapshot with a higher version, which ``wait_newer`` hands to the page.
"""

from __future__ import annotations

import contextlib
import threading
import time as _time
from typing import Any, Iterator

from .jobs import JobsWatch
from .watch import LogWatch

BUSY = 0.1
"""The largest share of a core the pump's looks take: after a look of ``d`` seconds it rests at least ``9 d``."""
JOBS_EVERY = 2.0
"""Seconds between two reads of the jobs' status files (they are rewritten about once a second)."""


class Pump:
    """Polls ``watch`` (and ``jobs``) every ``interval`` seconds while there is demand (module doc)."""

    def __init__(self, watch: LogWatch, jobs: JobsWatch | None = None, *, interval: float = 0.5,
                 idle_after: float = 10.0) -> None:
        self.watch = watch
        self.jobs = jobs
        self.interval = interval
        self.idle_after = idle_after
        self.lock = threading.Lock()
        """Held while the watch polls: hold it to read the watch from another thread."""
        self._cond = threading.Condition()
        self._version = 0
        self._snapshot: dict[str, Any] = {**watch.snapshot(), "jobs": [], "version": 0}
        self._watchers = 0
        self._demand_at = -1e18
        self._jobs_at = -1e18
        self._stop = False
        self._halt = threading.Event()
        self.polls = 0
        self._thread = threading.Thread(target=self._run, name="replay-ui-poll", daemon=True)

    def start(self) -> "Pump":
        """Start the thread (it sleeps until there is demand)."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._halt.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    @property
    def stopped(self) -> bool:
        """True once ``stop`` was called."""
        return self._stop

    def _wanted(self) -> bool:
        return self._watchers > 0 or _time.monotonic() - self._demand_at < self.idle_after

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stop and not self._wanted():
                    self._cond.wait(timeout=1.0)
                if self._stop:
                    return
            started = _time.monotonic()
            self.poll()
            took = _time.monotonic() - started
            # a look that takes long (a log of many parts) is followed by a longer rest: at most BUSY of a core
            self._halt.wait(timeout=max(self.interval - took, took * (1 - BUSY) / BUSY))

    def poll(self) -> dict[str, Any]:
        """Poll once now (the thread does this; a caller without the thread may too); returns the snapshot."""
        with self.lock:
            snap = dict(self.watch.poll())
            if self.jobs is not None:
                mono = _time.monotonic()
                if mono - self._jobs_at >= JOBS_EVERY:
                    self._jobs_at = mono
                    self.jobs.poll()
                snap["jobs"] = self.jobs.jobs()
                snap["errors"] = [*snap.get("errors", []), *self.jobs.errors]
            else:
                snap["jobs"] = []
        with self._cond:
            self.polls += 1
            self._version += 1
            snap["version"] = self._version
            self._snapshot = snap
            self._cond.notify_all()
        return snap

    def demand(self) -> None:
        """Someone asked: keep polling for ``idle_after`` seconds more."""
        with self._cond:
            self._demand_at = _time.monotonic()
            self._cond.notify_all()

    def latest(self, max_age: float = 1.0, timeout: float = 30.0) -> dict[str, Any]:
        """The newest snapshot, waiting (up to ``timeout`` s) for a new poll when it is older than ``max_age`` s."""
        self.demand()
        with self._cond:
            snap = self._snapshot
            fresh = snap.get("version", 0) > 0 and \
                (_time.time() * 1000 - snap.get("now_ms", 0)) / 1000 <= max_age
            if fresh:
                return snap
            version = self._version
            self._cond.wait_for(lambda: self._version > version or self._stop, timeout=timeout)
            return self._snapshot

    def wait_newer(self, version: int, timeout: float) -> dict[str, Any] | None:
        """The first snapshot newer than ``version``, or None after ``timeout`` seconds without one."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._version > version or self._stop, timeout=timeout):
                return None
            return None if self._stop else self._snapshot

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        """While inside, the pump polls (a connected page)."""
        with self._cond:
            self._watchers += 1
            self._cond.notify_all()
        try:
            yield
        finally:
            with self._cond:
                self._watchers -= 1
                self._demand_at = _time.monotonic()
