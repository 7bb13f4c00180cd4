"""Timely's progress rules for one part of a stream, checked by every reader of a log.

A part starts holding one capability at the minimum time (count 1). Read in sequence order, its events must
keep these rules (FORMAT.md §1; timely dataflow's capture/replay protocol):

* a Progress event may add a capability (a positive delta) only at a time in advance of (``>=``) an element
  of the part's frontier before the event: a worker mints a capability only from one it holds, so a part's
  frontier never moves backwards (timely's rule 1);
* Progress updates are sorted by time, one per time, without zero deltas;
* no capability count becomes negative;
* a Messages event's time is in advance of the part's frontier;
* nothing follows the event that emptied the part's frontier (the part is finished).

A reader that accepted a broken rule could report a time complete and then deliver a record at it, or drop
that record; ``PartProgress`` raises ``ProgressError`` naming the stream, part and sequence id instead.
``replay verify`` uses the non-raising forms to report every broken rule and go on.
"""

from __future__ import annotations

import json
from typing import Iterable

from ..antichain import Antichain, MutableAntichain
from ..errors import ProgressError
from ..time import Time


def time_text(t: Time) -> str:
    """A time as text: ``7`` or ``[1,2]`` (as the CLI prints times)."""
    return json.dumps(list(t) if isinstance(t, tuple) else t, separators=(",", ":"))


def frontier_text(f: Antichain) -> str:
    """A frontier as text: ``[5]`` or ``[[1,2],[2,0]]`` (``[]`` when finished)."""
    return json.dumps([list(t) if isinstance(t, tuple) else t for t in f], separators=(",", ":"))


class PartProgress:
    """The capabilities one part holds, following its events and checking timely's rules.

    ``progress`` and ``messages`` raise ``ProgressError`` for the first rule an event breaks (and change
    nothing); ``progress_problems`` and ``messages_problems`` list every broken rule instead, and
    ``progress_problems`` applies the updates anyway unless a count would become negative (what
    ``replay verify`` needs to go on checking the rest of the part).
    """

    __slots__ = ("stream", "part", "_counts")

    def __init__(self, minimum: Time, *, stream: str | None = None, part: int | None = None,
                 initial: Iterable[tuple[Time, int]] | None = None) -> None:
        self.stream = stream
        self.part = part
        self._counts = MutableAntichain([(minimum, 1)] if initial is None else initial)

    @property
    def frontier(self) -> Antichain:
        """The part's frontier after the events applied so far (empty: the part finished)."""
        return self._counts.frontier

    def counts(self) -> tuple[tuple[Time, int], ...]:
        """The capability counts the part holds, by time (the minimum's 1 before any event)."""
        return self._counts.counts()

    @property
    def finished(self) -> bool:
        """True once the part's frontier is empty: it may write nothing more."""
        return self._counts.frontier.is_empty()

    def less_equal(self, t: Time) -> bool:
        """True when ``t`` is in advance of the part's frontier (the part may still send at ``t``)."""
        return self._counts.less_equal(t)

    def _error(self, message: str, seq: int | None) -> ProgressError:
        return ProgressError(message, stream=self.stream, part=self.part, seq=seq)

    # -- checks ------------------------------------------------------------------------------------------

    def progress_problems(self, seq: int | None, updates: Iterable[tuple[Time, int]], *,
                          apply: bool = True) -> list[ProgressError]:
        """Every rule the Progress event ``updates`` (at ``seq``) breaks; with ``apply``, the updates are
        applied unless a count would become negative (then nothing is)."""
        updates = tuple(updates)
        frontier = self._counts.frontier
        if frontier and self._obeys(updates, frontier):  # the common case, decided without building the reports
            if apply:
                self._counts.update_iter(updates)
            return []
        out: list[ProgressError] = []
        if frontier.is_empty():
            out.append(self._error("progress after the part finished (its frontier is empty)", seq))
        times = [t for t, _ in updates]
        if times != sorted(set(times)) or any(d == 0 for _, d in updates):
            out.append(self._error("progress updates are not sorted by time, unique and non-zero", seq))
        if not frontier.is_empty():
            behind = sorted({t for t, d in updates if d > 0 and not frontier.less_equal(t)})
            if behind:
                out.append(self._error(
                    f"progress adds a capability at time {time_text(behind[0])} behind the part's frontier "
                    f"{frontier_text(frontier)}: the frontier would move backwards (a capability may only be "
                    "added at a time the part holds or later)", seq))
        counts = dict(self._counts.counts())
        for t, d in updates:
            counts[t] = counts.get(t, 0) + d
        negative = sorted(t for t, c in counts.items() if c < 0)
        if negative:
            out.append(self._error(
                f"negative capability count: the count of time {time_text(negative[0])} would become "
                f"{counts[negative[0]]}", seq))
        elif apply:
            self._counts.update_iter(updates)
        return out

    def _obeys(self, updates: tuple[tuple[Time, int], ...], frontier: Antichain) -> bool:
        """True when ``updates`` break none of ``progress_problems``' rules (a non-empty ``frontier``): times sorted
        and unique, deltas non-zero, every added time in advance of the frontier, no count below zero."""
        prev = None
        for t, d in updates:
            if d == 0 or (prev is not None and not prev < t):  # type: ignore[operator] # a stream has one time type
                return False
            if (d > 0 and not frontier.less_equal(t)) or (d < 0 and self._counts.count(t) + d < 0):
                return False
            prev = t
        return True

    def messages_problems(self, seq: int | None, time: Time) -> list[ProgressError]:
        """The rule a Messages event at ``time`` (at ``seq``) breaks, if any."""
        frontier = self._counts.frontier
        if frontier.is_empty():
            return [self._error(f"messages at time {time_text(time)} after the part finished", seq)]
        if not frontier.less_equal(time):
            return [self._error(f"messages at time {time_text(time)} behind the part's frontier "
                                f"{frontier_text(frontier)}", seq)]
        return []

    # -- strict forms --------------------------------------------------------------------------------------

    def progress(self, seq: int | None, updates: Iterable[tuple[Time, int]]) -> tuple[tuple[Time, int], ...]:
        """Check and apply a Progress event; return the changes of the part's frontier. Raises the first
        ``ProgressError`` (nothing applied) when the event breaks a rule."""
        updates = tuple(updates)
        problems = self.progress_problems(seq, updates, apply=False)
        if problems:
            raise problems[0]
        return self._counts.update_iter(updates)

    def messages(self, seq: int | None, time: Time) -> None:
        """Check a Messages event at ``time``; raises ``ProgressError`` when it breaks a rule."""
        problems = self.messages_problems(seq, time)
        if problems:
            raise problems[0]

    def __repr__(self) -> str:
        return f"PartProgress(stream={self.stream!r}, part={self.part}, frontier={frontier_text(self.frontier)})"


__all__ = ["PartProgress", "frontier_text", "time_text"]
