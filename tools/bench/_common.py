"""Small timing helpers shared by the benchmarks in tools/bench: interleaved samples, ratios, the load average,
rate formatting, a table, and the one-line headline every benchmark prints.

The machine is shared and noisy, so benchmarks run the cases they compare *interleaved*, one round at a time
(at least ``ROUNDS`` rounds), and judge a case by the **median of its per-round ratios** to the baseline measured
in the same round: a load that comes and goes slows both sides of a round alike. Best and spread are reported
beside it, and the load average before and after (``Load``), so a figure taken on a loaded machine says so.
Each benchmark ends with ``HEADLINE`` lines (``headline``) that ``tools/bench/quick.py`` collects.
"""

from __future__ import annotations

import gc
import os
import statistics
import time
from collections import defaultdict
from typing import Any, Callable, Iterable, Sequence


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """``(seconds, result)`` of one call; collects garbage first so earlier work's cycles are not charged."""
    gc.collect()
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


def rotated(cases: "list[Any]", rnd: int) -> "list[Any]":
    """``cases`` in round ``rnd``'s order: each round starts one case later, so no case always runs first (or
    always right after a baseline that leaves work behind, such as a Spark query's cleanup)."""
    k = rnd % len(cases) if cases else 0
    return list(cases[k:]) + list(cases[:k])


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

    def last(self, name: str) -> float:
        """The latest sample of ``name`` (a round's own time)."""
        return self._times[name][-1]

    def median(self, name: str) -> float:
        ts = sorted(self._times[name])
        mid = len(ts) // 2
        return ts[mid] if len(ts) % 2 else (ts[mid - 1] + ts[mid]) / 2

    def spread(self, name: str) -> float:
        """(worst - best) / best: how noisy the case was."""
        ts = self._times[name]
        return (max(ts) - min(ts)) / min(ts)

    def ratios(self, name: str, base: str, *, higher_is_better: bool = True) -> list[float]:
        """Per round, ``base``'s time ÷ ``name``'s (how many times faster ``name`` ran; the inverse with
        ``higher_is_better=False``): the rounds ran both cases back to back, so a load slows both alike."""
        pairs = zip(self._times[base], self._times[name])
        return [b / c if higher_is_better else c / b for b, c in pairs]

    def ratio(self, name: str, base: str, *, higher_is_better: bool = True) -> "Ratio":
        """The per-round ratios of ``name`` to ``base`` summed up (median, best, spread, rounds)."""
        return Ratio(self.ratios(name, base, higher_is_better=higher_is_better), lower_is_better=not higher_is_better)

    def count(self, name: str) -> int:
        return len(self._times[name])

    def names(self) -> list[str]:
        return list(self._times)


ROUNDS = 5
"""Interleaved rounds a benchmark runs by default (``--rounds``): enough for a median that holds on a re-run."""


class Ratio:
    """Per-round ratios of a case to its baseline: the median is the headline; best and spread say how noisy."""

    def __init__(self, values: list[float], *, lower_is_better: bool = False) -> None:
        if not values:
            raise ValueError("no rounds to take a ratio of")
        self.values, self.lower_is_better = list(values), lower_is_better

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def best(self) -> float:
        return min(self.values) if self.lower_is_better else max(self.values)

    @property
    def spread(self) -> float:
        """(best - worst) / median: how far apart the rounds were."""
        return (max(self.values) - min(self.values)) / self.median

    def __str__(self) -> str:
        return (f"{self.median:.2f}x (best {self.best:.2f}x, spread {self.spread * 100:.0f}%, "
                f"{len(self.values)} rounds)")


def _cpu_ticks() -> tuple[int, int] | None:
    """(busy, total) CPU ticks of the whole machine since boot (``/proc/stat``), None where unavailable."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def other_work(window: float = 1.0) -> float | None:
    """The fraction of all cores busy over ``window`` seconds while the caller sleeps: the other work on the
    machine (None without ``/proc/stat``)."""
    a = _cpu_ticks()
    time.sleep(window)
    b = _cpu_ticks()
    if a is None or b is None or b[1] == a[1]:
        return None
    return (b[0] - a[0]) / (b[1] - a[1])


class Load:
    """What else the machine was doing: the share of all cores busy during a second in which the benchmark
    itself sleeps, when it started and when asked (``str``: ``other work 3% -> 41% of 2 cores, load 0.4 ->
    1.1``). ``loaded`` is True when either share exceeded 25% (the figures were taken on a busy machine).

    The load average is printed too but not judged: on a VM it can stay high with the cores idle (it counts
    tasks blocked in the kernel), and it lags by a minute."""

    LOADED_SHARE = 0.25

    def __init__(self) -> None:
        self.before = other_work()
        self.load_before = os.getloadavg()[0]
        self._now: tuple[float, float | None] | None = None

    @property
    def now(self) -> float | None:
        """The other work's share now (measured at most every 10 s)."""
        if self._now is None or time.monotonic() - self._now[0] > 10:
            self._now = (time.monotonic(), other_work())
        return self._now[1]

    @property
    def loaded(self) -> bool:
        return any(x is not None and x > self.LOADED_SHARE for x in (self.before, self.now))

    def __str__(self) -> str:
        def pct(x: float | None) -> str:
            return "?" if x is None else f"{100 * x:.0f}%"
        note = " (LOADED: figures slowed by other work)" if self.loaded else ""
        return (f"other work {pct(self.before)} -> {pct(self.now)} of {os.cpu_count()} cores, load "
                f"{self.load_before:.1f} -> {os.getloadavg()[0]:.1f}{note}")


def headline(name: str, ratio: Ratio, target: float | None, load: Load) -> str:
    """The one line a benchmark prints per headline figure (collected by ``tools/bench/quick.py``), e.g.
    ``HEADLINE file write / plain pyarrow: 0.93x (best 0.97x, spread 8%, 5 rounds) target >= 0.9x PASS; load
    0.40 -> 0.61 on 2 cores``. For a cost ratio (``lower_is_better``: tapped job ÷ job) the target is an upper
    bound."""
    if target is None:
        judged = ""
    elif ratio.lower_is_better:
        judged = f" target <= {target}x {'PASS' if ratio.median <= target else 'FAIL'}"
    else:
        judged = f" target >= {target}x {'PASS' if ratio.median >= target else 'FAIL'}"
    return f"HEADLINE {name}: {ratio}{judged}; {load}"


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
