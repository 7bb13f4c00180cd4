"""A retention policy a writer applies as it goes: ``Capture(…, retention="7d")`` drops the times of its stream
that were complete longer ago than the age, now and then, off the writer's thread.

A trim reads every part's progress, so it runs at most once an ``interval`` (default: a tenth of the age, between
one minute and one hour), and not at all while the stream's mark is younger than that (another part's writer
trimmed it: writers of one stream share the work without talking to each other). It runs in a background
thread on its own log object, never holding up ``advance_to``; a trim that fails is logged and tried again at
the next interval — retention is housekeeping, and the events it would drop are still correct to read.
"""

from __future__ import annotations

import datetime as _dt
import logging
import threading
import time
from typing import TYPE_CHECKING, Callable

from ..retention import parse_age

if TYPE_CHECKING:
    from ..log import Log

_log = logging.getLogger("eventlog.retention")

MIN_INTERVAL_S = 60.0
MAX_INTERVAL_S = 3600.0


class RetentionPolicy:
    """Drop the times of ``stream`` complete longer than ``age`` ago (``parse_age``: ``"7d"``, seconds), at most
    once an ``interval`` seconds; ``tick()`` after each sync, ``close()`` when the writer closes."""

    def __init__(self, log_opener: "Callable[[], Log]", stream: str, age: "str | float", *,
                 interval: float | None = None) -> None:
        self.age = parse_age(age)
        self.interval = interval if interval is not None else min(max(self.age / 10, MIN_INTERVAL_S), MAX_INTERVAL_S)
        self.stream = stream
        self._open = log_opener
        self._last = 0.0  # monotonic time of the last trim started (0: none yet, the first tick trims)
        self._thread: threading.Thread | None = None
        self.runs = 0
        """Trims this policy ran to the end."""
        self.last_error: BaseException | None = None
        """What the last failed trim raised (None after one that succeeded)."""

    def tick(self) -> bool:
        """Start a trim in the background if one is due and none runs; True when one was started."""
        now = time.monotonic()
        if now - self._last < self.interval or (self._thread is not None and self._thread.is_alive()):
            return False
        self._last = now
        self._thread = threading.Thread(target=self._run, name=f"eventlog-retention-{self.stream}", daemon=True)
        self._thread.start()
        return True

    def _run(self) -> None:
        from .trim import trim  # the module that needs the part reader, loaded with the first trim

        try:
            log = self._open()
            try:
                mark = log.retention(self.stream)
                if mark is not None and _age_s(mark.trimmed) < self.interval:
                    return  # another writer of the stream trimmed it lately
                trim(log, self.stream, older_than=self.age)
                self.runs += 1
                self.last_error = None
            finally:
                log.close()
        except Exception as e:  # noqa: BLE001 - housekeeping: logged, tried again at the next interval
            self.last_error = e
            _log.warning("retention of stream %r (older than %gs) failed, tried again in %gs: %s", self.stream,
                         self.age, self.interval, e)

    def close(self, timeout: float = 30.0) -> None:
        """Wait for a running trim to end (at most ``timeout`` seconds; a trim left running stops safely
        wherever the process ends, FORMAT.md §10)."""
        if self._thread is not None:
            self._thread.join(timeout)


def _age_s(iso: str) -> float:
    """Seconds since an ISO-8601 UTC instant (infinity when it does not parse)."""
    try:
        when = _dt.datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return float("inf")
    return (_dt.datetime.now(_dt.timezone.utc) - when).total_seconds()


__all__ = ["MAX_INTERVAL_S", "MIN_INTERVAL_S", "RetentionPolicy"]
