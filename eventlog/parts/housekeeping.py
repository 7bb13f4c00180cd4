"""Work a writer does on its log now and then, off its own thread: the common part of the retention and the
compaction policies (``retention_policy``, ``compaction_policy``).

A policy runs its ``work`` at most once an ``interval``, in a background thread on its own log object (opened by
``log_opener``), never holding up the writer. A run that fails is logged and tried again at the next interval:
housekeeping never fails the writer, and what it would have changed is still correct to read.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from ..log import Log

_log = logging.getLogger("eventlog.housekeeping")


class Housekeeping:
    """Run ``self.work(log)`` (subclasses define it) at most once an ``interval`` seconds: ``tick()`` after
    each sync of the writer, ``close()`` when it closes. ``what`` names the work in log messages."""

    what = "housekeeping"

    def __init__(self, log_opener: "Callable[[], Log]", stream: str, interval: float) -> None:
        self.stream = stream
        self.interval = interval
        self._open = log_opener
        self._last = 0.0  # monotonic time of the last run started (0: none yet, the first tick runs)
        self._thread: threading.Thread | None = None
        self.runs = 0
        """Runs that did their work to the end."""
        self.last_error: BaseException | None = None
        """What the last failed run raised (None after one that succeeded)."""

    def work(self, log: "Log") -> bool:
        """Do the work once; False when there was nothing to do (not counted in ``runs``)."""
        raise NotImplementedError

    def tick(self) -> bool:
        """Start a run in the background if one is due and none runs; True when one was started."""
        now = time.monotonic()
        if now - self._last < self.interval or (self._thread is not None and self._thread.is_alive()):
            return False
        self._last = now
        self._thread = threading.Thread(target=self._run, name=f"eventlog-{self.what}-{self.stream}", daemon=True)
        self._thread.start()
        return True

    def _run(self) -> None:
        try:
            log = self._open()
            try:
                if self.work(log):
                    self.runs += 1
                self.last_error = None
            finally:
                log.close()
        except Exception as e:  # noqa: BLE001 - housekeeping: logged, tried again at the next interval
            self.last_error = e
            _log.warning("%s of stream %r failed, tried again in %gs: %s", self.what, self.stream, self.interval, e)

    def close(self, timeout: float = 30.0) -> None:
        """Wait for a running run to end (at most ``timeout`` seconds; a run left running stops safely wherever
        the process ends)."""
        if self._thread is not None:
            self._thread.join(timeout)


__all__ = ["Housekeeping"]
