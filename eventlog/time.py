"""Time domains of a stream: 64-bit integer times, or product times (fixed-length tuples of int64).

Integer times are non-negative (0 .. 2**63-1), so the minimum time is 0, as for timely's ``u64``.
A product time of arity k is a tuple of k such integers, ordered component-wise; its minimum is all zeros.
Python's tuple order (lexicographic) extends the product order, so sorting times gives a topological order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Union

from .errors import InvalidTimeError, LimitError
from .limits import MAX_TIME_ARITY

Time = Union[int, tuple[int, ...]]
"""A time: an ``int`` for ``int64`` streams, a tuple of ints for ``product:K`` streams."""

_INT64_MAX = (1 << 63) - 1
_PRODUCT_RE = re.compile(r"^product:([1-9][0-9]*)$")


@dataclass(frozen=True)
class TimeType:
    """The time domain of a stream: ``TimeType(0)`` is int64, ``TimeType(k)`` is a product of k int64s."""

    arity: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.arity, bool) or not isinstance(self.arity, int) or self.arity < 0:
            raise InvalidTimeError(f"time type arity must be an int >= 0 (0 for int64), got {self.arity!r}")
        if self.arity > MAX_TIME_ARITY:
            raise LimitError(f"product time arity is {self.arity}, over the format's limit of {MAX_TIME_ARITY}")

    @staticmethod
    def parse(spec: "str | TimeType") -> "TimeType":
        """Parse ``"int64"`` or ``"product:K"`` (1 ≤ K ≤ ``limits.MAX_TIME_ARITY``); a larger K raises
        LimitError, anything else InvalidTimeError."""
        if isinstance(spec, TimeType):
            return spec
        if spec == "int64":
            return INT64
        m = _PRODUCT_RE.fullmatch(spec) if isinstance(spec, str) else None
        if not m:
            shown = spec if not isinstance(spec, str) or len(spec) <= 40 else spec[:40] + "..."
            raise InvalidTimeError(f"unknown time type {shown!r}: expected 'int64' or 'product:K'")
        digits = m.group(1)
        if len(digits) > len(str(MAX_TIME_ARITY)):  # no int() of a huge digit string
            shown = digits if len(digits) <= 20 else digits[:20] + "..."
            raise LimitError(f"product time arity {shown} is over the format's limit of {MAX_TIME_ARITY}")
        return TimeType(int(digits))

    @property
    def name(self) -> str:
        """The spec string stored in stream headers."""
        return "int64" if self.arity == 0 else f"product:{self.arity}"

    @property
    def minimum(self) -> Time:
        """The least time of the domain; every part starts holding a capability for it."""
        return 0 if self.arity == 0 else (0,) * self.arity

    def check(self, t: object) -> Time:
        """Return ``t`` as a time of this domain (lists become tuples) or raise InvalidTimeError."""
        if self.arity == 0:
            if isinstance(t, bool) or not isinstance(t, int):
                raise InvalidTimeError(f"time {t!r} is not an int (stream time type int64)")
            if not 0 <= t <= _INT64_MAX:
                raise InvalidTimeError(f"time {t} is outside 0..2**63-1")
            return t
        if not isinstance(t, (tuple, list)) or len(t) != self.arity:
            raise InvalidTimeError(f"time {t!r} is not a tuple of {self.arity} ints (time type {self.name})")
        for c in t:
            if isinstance(c, bool) or not isinstance(c, int) or not 0 <= c <= _INT64_MAX:
                raise InvalidTimeError(f"time {t!r}: component {c!r} is not an int in 0..2**63-1")
        return tuple(t)

    def __str__(self) -> str:
        return self.name


INT64 = TimeType(0)


def less_equal(a: Time, b: Time) -> bool:
    """The partial order of times: integer order, or component-wise order for product times."""
    if isinstance(a, int):
        return a <= b  # type: ignore[operator]
    return all(x <= y for x, y in zip(a, b))  # type: ignore[arg-type]


def less_than(a: Time, b: Time) -> bool:
    """``a <= b`` and ``a != b``."""
    return a != b and less_equal(a, b)


def sort_times(times: Iterable[Time]) -> list[Time]:
    """Sort times in an order that extends the partial order (a topological order)."""
    return sorted(times)
