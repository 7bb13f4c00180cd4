"""Pipelines shared by the runtime tests (a module, so Spark's workers unpickle them by reference)."""

from __future__ import annotations

import os
import time
from typing import Any, Iterator

import pyarrow as pa

from eventlog import open_log
from replay import Replayer
from runtime import Advance, Job

WORDS = ["spark", "kafka", "flink", "ray", "timely", "arrow", "avro", "bundle", "frontier", "barrier", "log"]

COUNT_SCHEMA = pa.schema([("word", pa.string()), ("count", pa.int64()), ("window_start", pa.int64()),
                          ("window_end", pa.int64())])


def events(items: int = 300, rows: int = 4, delay: float = 0.0, gate: str | None = None):
    """A generator source function: ``items`` items per part, time ``i // 10``, ``rows`` words each. With
    ``gate`` (a file holding a number N), a part holds before item N, idle (yielding None), until the file says
    more: a run meant to stop at a checkpoint cannot finish first, however fast or slow the machine."""

    def held(i: int) -> bool:
        try:
            with open(gate) as f:  # type: ignore[arg-type]
                return i >= int(f.read().strip() or items)
        except (OSError, ValueError):
            return False

    def gen(part: int, offset: int) -> Iterator[Any]:
        for i in range(offset, items):
            while gate and held(i):
                yield None
                time.sleep(0.005)
            if delay:
                time.sleep(delay)
            yield i // 10, [{"word": WORDS[(i * 7 + part * 3 + j) % len(WORDS)], "n": i + j} for j in range(rows)]

    return gen


def wordcount_job(name: str, out: str, *, parts: int = 4, source: int = 2, mapper: int = 2, counter: int = 2,
                  sink: int = 1, sink_parts: int = 3, items: int = 300, delay: float = 0.0,
                  gate: str | None = None) -> Job:
    """source -> map -> key_by(word).window(5).count -> log sink (stream ``counts``); ``gate`` as ``events``."""
    job = Job(name)
    src = job.from_generator(events(items, delay=delay, gate=gate), parts=parts, parallelism=source, name="source")
    words = src.map(lambda r: {"word": r["word"].upper(), "n": r["n"]}, parallelism=mapper, name="upper")
    counts = words.filter(lambda r: r["n"] % 5 != 0, name="keep").key_by("word").window(5).count(
        parallelism=counter, name="count")
    counts.to_log(out, "counts", schema=COUNT_SCHEMA, parallelism=sink, parts=sink_parts, name="out")
    return job


def read_counts(uri: str, stream: str = "counts") -> list[tuple]:
    """Every committed output row ``(time, word, window_start, count)``, sorted; asserts the stream is
    finished and has no duplicated rows."""
    log = open_log(uri)
    rows = []
    with Replayer(log, stream) as r:
        for t, table in r.completed():
            rows += [(t, x["word"], x["window_start"], x["count"]) for x in table.to_pylist()]
        assert r.frontier.is_empty(), "the output stream is not finished"
    assert len(rows) == len(set(rows)), "duplicated output rows"
    return sorted(rows)


def expected_counts(parts: int = 4, items: int = 300, rows: int = 4, window: int = 5) -> list[tuple]:
    """What ``wordcount_job`` must output, computed directly."""
    acc: dict[tuple[str, int], int] = {}
    gen = events(items, rows)
    for p in range(parts):
        for t, recs in gen(p, 0):
            for r in recs:
                if r["n"] % 5 != 0:
                    w = t - t % window
                    acc[(r["word"].upper(), w)] = acc.get((r["word"].upper(), w), 0) + 1
    return sorted((w + window - 1, word, w, c) for (word, w), c in acc.items())


def idle_part_events(data_items: int = 60, item_delay: float = 0.01, idle_seconds: float = 3.0,
                     marker: str | None = None, until: str | None = None):
    """Part 0 sends data at times 0…data_items-1; part 1 sends no data: it only advances its time
    (``Advance``) along with part 0, then stays idle (no data, no progress) for ``idle_seconds`` — or, with
    ``until``, until that file exists (``idle_seconds`` at most) — then writes the wall-clock time it ended to
    the file ``marker``."""

    def gen(part: int, offset: int) -> Iterator[Any]:
        if part == 0:
            for i in range(offset, data_items):
                time.sleep(item_delay)
                yield i, [{"word": WORDS[i % 3], "n": i}]
            return
        for i in range(offset, data_items + 1):
            time.sleep(item_delay)
            yield Advance(i)
        end = time.monotonic() + idle_seconds
        while time.monotonic() < end and not (until and os.path.exists(until)):
            yield None
            time.sleep(0.005)
        if marker:
            with open(marker, "w") as f:
                f.write(repr(time.time()))

    return gen
