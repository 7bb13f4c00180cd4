"""Committed reads of one part: the events a reader may deliver, after FORMAT.md §1.1.

A writer that crashes may leave Messages events at times its part had not completed; the next incarnation of
the writer (a higher epoch) re-sends those times, possibly with other records. A Messages event is
*committed* once a later Progress event of its part passes its time; it is *void* when an event of a higher
epoch arrives while it is still uncommitted.

``CommittedPart`` takes a part's entries in sequence order, with the epoch of each. It releases Messages
events in sequence order, each once it is committed, holding back the queue that starts at the first
uncommitted one; a Progress event goes out at once unless it passes the time of a held message (a committed
message blocked behind an uncommitted one), in which case it waits in the queue behind that message — a
released message always precedes the Progress event that passes its time, so the view is a valid stream,
and frontiers do not wait for blocked messages they do not pass. When an event of a higher epoch arrives,
the queue is released without its void Messages events (its Progress events stay: the new incarnation
recovered its frontier from them). ``first_held`` is where a resuming reader must start: no Messages event
from there on was released (Progress events after it are read again, which changes nothing once the
frontier is rebuilt from the events before it). Raw events are checked against timely's rules
(``replay.rules``) as they arrive, so a broken writer is reported at the event that broke a rule, held or not.
"""

from __future__ import annotations

import collections
from typing import Iterable

from ..events import Entry, Messages
from ..time import Time
from .rules import PartProgress, time_text

ISOLATIONS = ("committed", "uncommitted")
"""Reader isolation levels: ``committed`` (the default: FORMAT.md §1.1) delivers each time of a part in one
writer incarnation's version; ``uncommitted`` delivers every event as read, void ones included."""


def check_isolation(isolation: str) -> str:
    """``isolation`` if it is one of ISOLATIONS, else ValueError."""
    if isolation not in ISOLATIONS:
        raise ValueError(f"isolation must be one of {ISOLATIONS}, got {isolation!r}")
    return isolation


class CommittedPart:
    """The committed view of one part (module doc). ``push`` one entry at a time; it returns the entries
    released by it, in sequence order."""

    __slots__ = ("stream", "part", "_raw", "_held", "_times", "_queued_progress", "_epoch", "voided", "voided_times",
                 "voided_seqs")

    def __init__(self, minimum: Time, *, stream: str | None = None, part: int | None = None,
                 initial: Iterable[tuple[Time, int]] | None = None) -> None:
        self.stream, self.part = stream, part
        self._raw = PartProgress(minimum, stream=stream, part=part, initial=initial)
        self._held: collections.deque[Entry] = collections.deque()
        self._times: collections.Counter = collections.Counter()  # held Messages events per time
        self._queued_progress = 0  # Progress events in the held queue (they wait behind a message they pass)
        self._epoch: int | None = None
        self.voided = 0
        """Messages events dropped as void (their incarnation ended before their time was complete)."""
        self.voided_times: set[Time] = set()
        """The times of the void Messages events."""
        self.voided_seqs: list[int] = []
        """The sequence ids of the void Messages events, in order (a planner hands them to range reads)."""

    def restore(self, updates: Iterable[tuple[Time, int]], seq: int | None = None) -> None:
        """Apply a Progress event read before the position a reader resumes from (nothing is held there)."""
        self._raw.progress(seq, updates)

    @property
    def frontier(self):  # noqa: ANN201 - Antichain
        """The part's frontier after every event pushed (held ones included)."""
        return self._raw.frontier

    @property
    def held(self) -> int:
        """Events held back (the uncommitted suffix)."""
        return len(self._held)

    @property
    def first_held(self) -> int | None:
        """The sequence id of the first held event (where a resuming reader must start), or None."""
        return self._held[0].seq if self._held else None

    def held_times(self) -> list[Time]:
        """The times of the uncommitted Messages events held back, sorted."""
        return sorted(t for t in self._times if self._raw.less_equal(t))

    def held_committed_times(self) -> list[Time]:
        """The times of committed Messages events held back behind an uncommitted one, sorted."""
        return sorted(t for t in self._times if not self._raw.less_equal(t))

    def push(self, entry: Entry, epoch: int) -> list[Entry]:
        """Take the part's next entry (``epoch``: its writer epoch); return the entries released now."""
        out: list[Entry] = []
        if self._epoch is not None and epoch > self._epoch and self._held:
            out = self._end_incarnation()
        if self._epoch is None or epoch > self._epoch:
            self._epoch = epoch
        ev = entry.event
        if isinstance(ev, Messages):
            self._raw.messages(entry.seq, ev.time)
            self._held.append(entry)
            self._times[ev.time] += 1
            return out
        self._raw.progress(entry.seq, ev.updates)
        if not self._held:
            out.append(entry)
            return out
        self._held.append(entry)
        self._queued_progress += 1
        self._release(out)
        return out

    def _committed(self, ev) -> bool:  # noqa: ANN001 - a Messages event
        return not self._raw.less_equal(ev.time)

    def _release(self, out: list[Entry]) -> None:
        """Release the held events up to the first uncommitted Messages event; then, if the frontier passes
        none of the messages still held, the Progress events queued among them (they pass none of them)."""
        held = self._held
        while held:
            ev = held[0].event
            if isinstance(ev, Messages):
                if not self._committed(ev):
                    break
                self._untime(ev.time)
            else:
                self._queued_progress -= 1
            out.append(held.popleft())
        # a check per distinct held time, not per held message
        if self._queued_progress and all(self._raw.less_equal(t) for t in self._times):
            out.extend(e for e in held if not isinstance(e.event, Messages))
            kept = [e for e in held if isinstance(e.event, Messages)]
            held.clear()
            held.extend(kept)
            self._queued_progress = 0

    def _untime(self, t: Time) -> None:
        left = self._times[t] - 1
        if left:
            self._times[t] = left
        else:
            del self._times[t]

    def _end_incarnation(self) -> list[Entry]:
        """A higher epoch arrived: release the held suffix without its void (uncommitted) Messages."""
        out: list[Entry] = []
        for e in self._held:
            ev = e.event
            if isinstance(ev, Messages) and not self._committed(ev):
                self.voided += 1
                self.voided_times.add(ev.time)
                self.voided_seqs.append(e.seq)
                continue
            out.append(e)
        self._held.clear()
        self._times.clear()
        self._queued_progress = 0
        return out

    def describe_held(self, limit: int = 5) -> str:
        """One line on what is held back: how many events, at which times."""
        times = self.held_times()
        shown = ", ".join(time_text(t) for t in times[:limit]) + (", …" if len(times) > limit else "")
        return f"{len(self._held)} event(s) held back from seq {self.first_held} (times not complete: {shown or '-'})"


__all__ = ["ISOLATIONS", "CommittedPart", "check_isolation"]
