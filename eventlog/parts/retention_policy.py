"""A retention policy a writer applies as it goes: ``Capture(…, retention="7d")`` drops the times of its stream
that were complete longer ago than the age, now and then, off the writer's thread (``housekeeping``).

A trim reads every part's progress, so it runs at most once an ``interval`` (default: a tenth of the age, between
one minute and one hour), and not at all while the stream's mark is younger than that (another part's writer
trimmed it: writers of one stream share the work without talking to each other).
"""

from __future__ import annotations

import datetime as _dt
from typing import TYPE_CHECKING, Callable

from ..retention import parse_age
from .housekeeping import Housekeeping

if TYPE_CHECKING:
    from ..log import Log

MIN_INTERVAL_S = 60.0
MAX_INTERVAL_S = 3600.0


class RetentionPolicy(Housekeeping):
    """Drop the times of ``stream`` complete longer than ``age`` ago (``parse_age``: ``"7d"``, seconds), at most
    once an ``interval`` seconds; ``tick()`` after each sync, ``close()`` when the writer closes."""

    what = "retention"

    def __init__(self, log_opener: "Callable[[], Log]", stream: str, age: "str | float", *,
                 interval: float | None = None) -> None:
        self.age = parse_age(age)
        super().__init__(log_opener, stream,
                         interval if interval is not None else min(max(self.age / 10, MIN_INTERVAL_S), MAX_INTERVAL_S))

    def work(self, log: "Log") -> bool:
        from .trim import trim  # the module that needs the part reader, loaded with the first trim

        mark = log.retention(self.stream)
        if mark is not None and _age_s(mark.trimmed) < self.interval:
            return False  # another writer of the stream trimmed it lately
        trim(log, self.stream, older_than=self.age)
        return True


def _age_s(iso: str) -> float:
    """Seconds since an ISO-8601 UTC instant (infinity when it does not parse)."""
    try:
        when = _dt.datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return float("inf")
    return (_dt.datetime.now(_dt.timezone.utc) - when).total_seconds()


__all__ = ["MAX_INTERVAL_S", "MIN_INTERVAL_S", "RetentionPolicy"]
