"""A compaction policy a writer applies as it goes: ``Capture(…, compact=N)`` merges its part's small sealed
segments once the part holds ``N`` segments or more, now and then, off the writer's thread (``housekeeping``).

What a log can compact it does through its own ``compact(stream, part)`` (file logs, FORMAT.md §11); a log without
one (Kafka keeps its own segments) is left alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from .housekeeping import Housekeeping

if TYPE_CHECKING:
    from ..log import Log

DEFAULT_INTERVAL_S = 60.0


class CompactionPolicy(Housekeeping):
    """Compact ``part`` of ``stream`` when it holds at least ``min_segments`` segments, at most once an
    ``interval`` seconds; ``tick()`` after each sync, ``close()`` when the writer closes."""

    what = "compaction"

    def __init__(self, log_opener: "Callable[[], Log]", stream: str, part: int, min_segments: int, *,
                 interval: float = DEFAULT_INTERVAL_S) -> None:
        if isinstance(min_segments, bool) or not isinstance(min_segments, int) or min_segments < 2:
            raise ValueError(f"compact= is the number of segments a part may hold before it is compacted (>= 2), "
                             f"got {min_segments!r}")
        super().__init__(log_opener, stream, interval)
        self.part = part
        self.min_segments = min_segments

    def work(self, log: "Log") -> bool:
        run = getattr(log, "compact", None)
        if run is None or log.part_stats(self.stream, self.part).segments < self.min_segments:
            return False
        run(self.stream, self.part)
        return True


__all__ = ["DEFAULT_INTERVAL_S", "CompactionPolicy"]
