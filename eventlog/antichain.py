"""Antichains (frontiers) and counted frontiers, as in timely's progress tracking.

A frontier is an antichain: a set of mutually incomparable times. A time ``t`` is *in advance of* the
frontier when some element is ``<= t``; a time is *complete* when no element is ``<= t`` any more.
"""

from __future__ import annotations

from typing import Iterable, Iterator

from .errors import ProgressError
from .time import Time, less_equal, less_than


def _minimal(times: Iterable[Time]) -> tuple[Time, ...]:
    """The minimal elements of ``times``, sorted, without duplicates."""
    distinct = set(times)
    if not distinct:
        return ()
    if isinstance(next(iter(distinct)), int):  # int64 times: one minimum (a set holds one time type)
        return (min(distinct),)
    unique = sorted(distinct)
    out: list[Time] = []
    for t in unique:  # sorted order: anything <= t comes before t
        if not any(less_equal(m, t) for m in out):
            out.append(t)
    return tuple(out)


class Antichain:
    """An immutable frontier: the minimal elements of the times given (an empty antichain = finished)."""

    __slots__ = ("_elements",)

    def __init__(self, elements: Iterable[Time] = ()) -> None:
        self._elements = _minimal(elements)

    @property
    def elements(self) -> tuple[Time, ...]:
        """The elements, sorted."""
        return self._elements

    def less_equal(self, t: Time) -> bool:
        """True when some element is ``<= t`` (``t`` is in advance of the frontier, not complete)."""
        return any(less_equal(e, t) for e in self._elements)

    def less_than(self, t: Time) -> bool:
        """True when some element is strictly less than ``t``."""
        return any(less_than(e, t) for e in self._elements)

    def dominates(self, other: "Antichain") -> bool:
        """True when every element of ``other`` is in advance of this frontier (``self <= other``)."""
        return all(self.less_equal(t) for t in other._elements)

    def is_empty(self) -> bool:
        """True when the frontier is empty: every time is complete."""
        return not self._elements

    def __iter__(self) -> Iterator[Time]:
        return iter(self._elements)

    def __len__(self) -> int:
        return len(self._elements)

    def __bool__(self) -> bool:
        return bool(self._elements)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Antichain):
            return self._elements == other._elements
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._elements)

    def __repr__(self) -> str:
        return f"Antichain({list(self._elements)!r})"


class MutableAntichain:
    """A counted frontier: counts per time, and the antichain of minimal times with positive count.

    ``update_iter`` applies ``(time, delta)`` changes and returns the resulting changes to the frontier.
    A count that would go negative raises ProgressError (nothing is applied).
    """

    __slots__ = ("_counts", "_frontier")

    def __init__(self, initial: Iterable[tuple[Time, int]] = ()) -> None:
        self._counts: dict[Time, int] = {}
        self._frontier = Antichain()
        self.update_iter(initial)

    @property
    def frontier(self) -> Antichain:
        """The current frontier."""
        return self._frontier

    def counts(self) -> tuple[tuple[Time, int], ...]:
        """The positive counts per time, sorted."""
        return tuple(sorted(self._counts.items()))

    def less_equal(self, t: Time) -> bool:
        """True when ``t`` is in advance of the frontier (not complete)."""
        return self._frontier.less_equal(t)

    def count(self, t: Time) -> int:
        """The capability count of time ``t`` (0 when none is held)."""
        return self._counts.get(t, 0)

    def is_empty(self) -> bool:
        """True when no capability is held."""
        return not self._counts

    def update_iter(self, updates: Iterable[tuple[Time, int]]) -> tuple[tuple[Time, int], ...]:
        """Apply updates; return the frontier's consolidated changes (``+1`` new element, ``-1`` gone)."""
        pending: dict[Time, int] = {}
        for t, d in updates:
            if d:
                pending[t] = pending.get(t, 0) + d
        changed = sorted((t, d) for t, d in pending.items() if d)
        if not changed:
            return ()
        counts = self._counts
        for t, d in changed:  # every count checked before any is applied
            c = counts.get(t, 0) + d
            if c < 0:
                raise ProgressError(f"capability count of time {t!r} would become {c}")
        times_changed = False  # the frontier depends only on which times hold a count
        for t, d in changed:
            c = counts.get(t, 0) + d
            if c:
                times_changed = times_changed or t not in counts
                counts[t] = c
            else:
                del counts[t]
                times_changed = True
        if not times_changed:
            return ()
        old, new = self._frontier, Antichain(counts)
        self._frontier = new
        if old == new:
            return ()
        diff: dict[Time, int] = dict.fromkeys(old, -1)
        for t in new:
            if diff.pop(t, None) is None:
                diff[t] = 1
        return tuple(sorted(diff.items()))

    def __repr__(self) -> str:
        return f"MutableAntichain(frontier={list(self._frontier)!r}, counts={list(self.counts())!r})"
