"""ChangeBatch: a consolidating collection of ``(time, delta)`` updates."""

from __future__ import annotations

from typing import Iterable, Iterator

from .time import Time


class ChangeBatch:
    """Accumulates ``(time, delta)`` updates; ``consolidated()`` sums deltas per time, drops zeros, sorts."""

    __slots__ = ("_counts",)

    def __init__(self, updates: Iterable[tuple[Time, int]] = ()) -> None:
        self._counts: dict[Time, int] = {}
        self.extend(updates)

    def update(self, time: Time, delta: int) -> None:
        """Add ``delta`` to ``time``'s count."""
        if delta:
            c = self._counts.get(time, 0) + delta
            if c:
                self._counts[time] = c
            else:
                del self._counts[time]

    def extend(self, updates: Iterable[tuple[Time, int]]) -> None:
        """Add every update of ``updates``."""
        for t, d in updates:
            self.update(t, d)

    def consolidated(self) -> tuple[tuple[Time, int], ...]:
        """The non-zero updates, one per time, sorted by time."""
        return tuple(sorted(self._counts.items()))

    def drain(self) -> tuple[tuple[Time, int], ...]:
        """Return the consolidated updates and empty the batch."""
        out = self.consolidated()
        self._counts.clear()
        return out

    def is_empty(self) -> bool:
        """True when every time's delta sums to zero."""
        return not self._counts

    def __iter__(self) -> Iterator[tuple[Time, int]]:
        return iter(self.consolidated())

    def __len__(self) -> int:
        return len(self._counts)

    def __repr__(self) -> str:
        return f"ChangeBatch({list(self.consolidated())!r})"
