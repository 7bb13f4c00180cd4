"""Jobs with joins for the runtime tests, and their definitions computed directly (a module, so Spark's
workers unpickle the generators by reference).

Impressions and clicks of ads (``ad``: a small int key) arrive on two generator sources; a third source
updates a table of ad prices (each part owns some ads and updates at most one ad per time, so "the latest
price as of a time" is well defined)."""

from __future__ import annotations

import random
import time
from typing import Any, Callable, Iterator

import pyarrow as pa

from eventlog import open_log
from replay import Replayer
from runtime import Job

ADS = 7

IMPRESSIONS = pa.schema([("ad", pa.int64()), ("imp", pa.string()), ("cost", pa.int64())])
CLICKS = pa.schema([("ad", pa.int64()), ("click", pa.string())])
PRICES = pa.schema([("ad", pa.int64()), ("price", pa.int64())])

WINDOW_OUT = pa.schema([("ad", pa.int64()), ("imp", pa.string()), ("cost", pa.int64()), ("click", pa.string()),
                        ("window_start", pa.int64()), ("window_end", pa.int64())])
INTERVAL_OUT = pa.schema([("ad", pa.int64()), ("imp", pa.string()), ("cost", pa.int64()), ("click", pa.string())])
TABLE_OUT = pa.schema([("ad", pa.int64()), ("imp", pa.string()), ("cost", pa.int64()), ("price", pa.int64())])


def impressions(items: int = 120, rows: int = 3, delay: float = 0.0, per_time: int = 4, seed: int = 0):
    """Part ``p``'s item ``i``: ``rows`` impressions at time ``i // per_time``."""

    def gen(part: int, offset: int) -> Iterator[Any]:
        for i in range(offset, items):
            if delay:
                time.sleep(delay)
            rng = random.Random(seed * 7919 + part * 100003 + i)
            yield i // per_time, [{"ad": rng.randrange(ADS), "imp": f"i{part}-{i}-{j}", "cost": rng.randrange(100)}
                                  for j in range(rows)]

    return gen


def clicks(items: int = 120, rows: int = 2, delay: float = 0.0, per_time: int = 4, seed: int = 0):
    """Part ``p``'s item ``i``: ``rows`` clicks at time ``i // per_time`` (some ads more than others)."""

    def gen(part: int, offset: int) -> Iterator[Any]:
        for i in range(offset, items):
            if delay:
                time.sleep(delay)
            rng = random.Random(seed * 7919 + part * 1000003 + i + 17)
            yield i // per_time, [{"ad": min(rng.randrange(ADS), rng.randrange(ADS)), "click": f"c{part}-{i}-{j}"}
                                  for j in range(rows)]

    return gen


def prices(items: int = 60, parts: int = 2, delay: float = 0.0, per_time: int = 2, start: int = 0):
    """Part ``p`` owns ads ``a % parts == p``; item ``i`` sets one of its ads' price at time ``start + i //
    per_time`` (consecutive items, different ads: one update per ad and time)."""

    def gen(part: int, offset: int) -> Iterator[Any]:
        mine = [a for a in range(ADS) if a % parts == part]
        for i in range(offset, items):
            if delay:
                time.sleep(delay)
            yield start + i // per_time, [{"ad": mine[i % len(mine)], "price": 1000 * part + i}]

    return gen


def rows_of(gen: Callable[[int, int], Iterator[Any]], parts: int) -> list[tuple[int, dict[str, Any]]]:
    """Every ``(time, record)`` a generator source sends."""
    return [(t, r) for p in range(parts) for t, rs in gen(p, 0) for r in rs]


def norm(rows: list[tuple[int, dict[str, Any]]]) -> list[tuple]:
    """Rows comparable as a multiset: sorted ``(time, sorted items)``."""
    return sorted(((t, tuple(sorted(r.items()))) for t, r in rows), key=repr)


# -- definitions --------------------------------------------------------------------------------------


def _by_ad(rows):
    out: dict = {}
    for t, r in rows:
        out.setdefault(r["ad"], []).append((t, r))
    return out


def window_join(left, right, size: int, how: str) -> list[tuple]:
    out = []
    by_ad = _by_ad(right)
    for tl, row in left:
        w = tl - tl % size
        hits = [r for tr, r in by_ad.get(row["ad"], ()) if tr - tr % size == w]
        for r in hits:
            out.append((w + size - 1, {**row, "click": r["click"], "window_start": w, "window_end": w + size}))
        if not hits and how == "left":
            out.append((w + size - 1, {**row, "click": None, "window_start": w, "window_end": w + size}))
    return norm(out)


def interval_join(left, right, lower: int, upper: int, how: str) -> list[tuple]:
    out = []
    by_ad = _by_ad(right)
    for tl, row in left:
        hits = [(tr, r) for tr, r in by_ad.get(row["ad"], ()) if tl + lower <= tr <= tl + upper]
        for tr, r in hits:
            out.append((max(tl, tr), {**row, "click": r["click"]}))
        if not hits and how == "left":
            out.append((tl, {**row, "click": None}))
    return norm(out)


def table_join(left, table, how: str) -> list[tuple]:
    out = []
    by_ad = _by_ad(table)
    for tl, row in left:
        versions = [(tv, r) for tv, r in by_ad.get(row["ad"], ()) if tv <= tl]
        if versions:
            out.append((tl, {**row, "price": max(versions, key=lambda v: v[0])[1]["price"]}))
        elif how == "left":
            out.append((tl, {**row, "price": None}))
    return norm(out)


# -- jobs with a log output (failure tests) ------------------------------------------------------------


def join_job(name: str, out: str, kind: str = "window", how: str = "inner", *, items: int = 120,
             delay: float = 0.0, imp_par: int = 2, click_par: int = 1, join_par: int = 2, sink_par: int = 1,
             gate: str | None = None) -> Job:
    """impressions (2 parts) ⋈ clicks (3 parts) by ``ad`` → log ``out`` stream ``joined``: ``kind`` is
    ``window`` (size 5), ``interval`` ([-2, 3]) or ``table`` (impressions with the ``prices`` table)."""
    job = Job(name)
    imps = job.from_generator(_gated(impressions(items, delay=delay), gate), parts=2, parallelism=imp_par,
                              name="imps")
    if kind == "table":
        table = job.from_generator(_gated(prices(items // 2, delay=delay, start=1), gate), parts=2,
                                   parallelism=click_par, name="prices")
        joined = imps.key_by("ad").join_table(table.key_by("ad"), how=how, parallelism=join_par, name="join",
                                              schema=TABLE_OUT)
        schema = TABLE_OUT
    else:
        cl = job.from_generator(_gated(clicks(items, delay=delay), gate), parts=3, parallelism=click_par,
                                name="clicks")
        pair = imps.map(lambda r: r, name="upper").key_by("ad").join(cl.key_by("ad"), how=how)
        if kind == "window":
            joined, schema = pair.window(5, parallelism=join_par, name="join", schema=WINDOW_OUT), WINDOW_OUT
        else:
            joined, schema = pair.interval(-2, 3, parallelism=join_par, name="join", schema=INTERVAL_OUT), \
                INTERVAL_OUT
    joined.to_log(out, "joined", schema=schema, parallelism=sink_par, parts=2, name="out")
    return job


def expected(kind: str, how: str, items: int = 120) -> list[tuple]:
    """What ``join_job`` must output."""
    left = rows_of(impressions(items), 2)
    if kind == "table":
        return table_join(left, [(t, r) for t, r in rows_of(prices(items // 2, start=1), 2)], how)
    right = rows_of(clicks(items), 3)
    if kind == "window":
        return window_join(left, right, 5, how)
    return interval_join(left, right, -2, 3, how)


def read_joined(uri: str, stream: str = "joined") -> list[tuple]:
    """Every committed output row, normalised (``norm``); asserts the stream finished."""
    rows = []
    with Replayer(open_log(uri), stream) as r:
        for t, table in r.completed():
            rows += [(t, x) for x in table.to_pylist()]
        assert r.frontier.is_empty(), "the output stream is not finished"
    return norm(rows)


def _gated(gen, gate: str | None):
    """``gen`` holding (idle) before item N while the file ``gate`` says N (see tests.support.pipelines)."""
    if gate is None:
        return gen

    def held(i: int) -> bool:
        try:
            with open(gate) as f:
                return i >= int(f.read().strip())
        except (OSError, ValueError):
            return False

    def gated(part: int, offset: int) -> Iterator[Any]:
        i = offset
        for item in gen(part, offset):
            while held(i):
                yield None
                time.sleep(0.005)
            yield item
            i += 1

    return gated
