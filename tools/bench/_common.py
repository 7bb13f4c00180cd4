"""Small timing helpers shared by the benchmarks in tools/bench: best-of-N samples, rate formatting, a table.

The machine is shared and noisy, so benchmarks interleave the cases they compare within each repetition and
keep the best time of each case (best-of-N is the least disturbed run; the spread is reported beside it).
"""

from __future__ import annotations

import gc
import time
from collections import defaultdict
from typing import Any, Callable, Iterable, Sequence


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """``(seconds, result)`` of one call; collects garbage first so earlier work's cycles are not charged."""
    gc.collect()
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


class Samples:
    """Wall-clock samples per case name, filled one repetition at a time (so cases can be interleaved)."""

    def __init__(self) -> None:
        self._times: dict[str, list[float]] = defaultdict(list)

    def run(self, name: str, fn: Callable[[], Any]) -> Any:
        """Time ``fn()`` once, record it under ``name``, return its result."""
        secs, result = timed(fn)
        self._times[name].append(secs)
        return result

    def add(self, name: str, secs: float) -> None:
        self._times[name].append(secs)

    def best(self, name: str) -> float:
        return min(self._times[name])

    def median(self, name: str) -> float:
        ts = sorted(self._times[name])
        mid = len(ts) // 2
        return ts[mid] if len(ts) % 2 else (ts[mid - 1] + ts[mid]) / 2

    def spread(self, name: str) -> float:
        """(worst - best) / best: how noisy the case was."""
        ts = self._times[name]
        return (max(ts) - min(ts)) / min(ts)

    def count(self, name: str) -> int:
        return len(self._times[name])

    def names(self) -> list[str]:
        return list(self._times)


def best_of(n: int, fn: Callable[[], Any]) -> float:
    """The best of ``n`` timed calls of ``fn`` (for a case that needs no interleaving)."""
    return min(timed(fn)[0] for _ in range(n))


def fmt_count_rate(count: float, secs: float) -> str:
    """``count / secs`` with an SI suffix, e.g. ``4.21M``."""
    r = count / secs
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if r >= div:
            return f"{r / div:.2f}{suffix}"
    return f"{r:.1f}"


def fmt_mb_rate(nbytes: float, secs: float) -> str:
    """``nbytes / secs`` in MB/s (10^6 bytes)."""
    return f"{nbytes / secs / 1e6:.1f}"


def fmt_bytes(nbytes: float) -> str:
    """A size with a binary suffix, e.g. ``254.3 MiB``."""
    for div, suffix in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if nbytes >= div:
            return f"{nbytes / div:.1f} {suffix}"
    return f"{nbytes:.0f} B"


def verdict(ratio: float | None, target: float) -> str:
    """``PASS``/``FAIL`` of ``ratio >= target``; empty when there is no ratio to judge."""
    if ratio is None:
        return ""
    return "PASS" if ratio >= target else "FAIL"


def format_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, markdown: bool = False) -> str:
    """Rows as an aligned text table (numbers right-aligned), or as a Markdown table."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    right = [all(_numeric(r[i]) for r in cells[1:] if r[i]) for i in range(len(headers))]

    def line(r: list[str]) -> str:
        parts = [c.rjust(w) if ra else c.ljust(w) for c, w, ra in zip(r, widths, right)]
        return ("| " + " | ".join(parts) + " |") if markdown else "  ".join(parts).rstrip()

    out = [line(cells[0])]
    if markdown:
        out.append("|" + "|".join(("-" * (w + 1) + ":") if ra else ("-" * (w + 2)) for w, ra in zip(widths, right)) + "|")
    else:
        out.append("  ".join("-" * w for w in widths))
    out.extend(line(r) for r in cells[1:])
    return "\n".join(out)


def _numeric(s: str) -> bool:
    """A number, possibly with a rate/size suffix or unit: ``12.3``, ``4.2M``, ``0.81x``, ``56%``, ``1.2 GiB``."""
    s = s.split(" ")[0].rstrip("x%kMGB").replace(",", "").lstrip("+-")
    try:
        float(s)
        return True
    except ValueError:
        return False
