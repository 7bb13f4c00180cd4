"""An idle source part does not stall windows: its writer's EMPTY bundles carry its frontier downstream."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from capture import Capture
from runtime import Job
from tests.support.pipelines import idle_part_events

IDLE = 60.0
"""How long the idle part stays idle at most: it ends as soon as the sink has every window (the ``until`` file),
so windows that fire on its frontier arrive while it is idle however slow the machine; windows that waited for
it to finish would arrive after this."""
WINDOWS = 18  # 6 windows of 10 times x 3 words


def _job(name: str, sink, marker: str, until: str) -> Job:
    job = Job(name)
    src = job.from_generator(idle_part_events(data_items=60, item_delay=0.005, idle_seconds=IDLE, marker=marker,
                                              until=until),
                             parts=2, parallelism=2, name="source")
    src.key_by("word").window(10).count(parallelism=1, name="count").sink(sink, name="out")
    return job


def _check(result, deliveries: list[tuple[float, int, str, int]], marker) -> None:
    assert result.status == "finished"
    rows = sorted((ws, w, c) for _t, ws, w, c in deliveries)
    assert rows == sorted((ws, w, sum(1 for i in range(ws, ws + 10) if i % 3 == k))
                          for ws in range(0, 60, 10) for k, w in enumerate(["spark", "kafka", "flink"]))
    # every window was delivered while part 1 was still idle (its generator had not returned): windows
    # fired on the frontier that part 1's empty bundles carried, not on its end
    last = max(t for t, *_ in deliveries)
    idle_end = float(marker.read_text())
    assert last < idle_end, f"windows waited for the idle part to finish ({last - idle_end:.2f} s after)"
    idle = result.tasks["source.1"]
    assert idle["messages_out"] == 0 and idle["bundles"] > 10, idle   # only empty (and barrier) bundles


def test_idle_source_part_does_not_stall_windows(tmp_path):
    deliveries: list = []

    until = tmp_path / "all_windows"

    def sink(t: int, table: pa.Table) -> None:
        now = time.time()
        deliveries.extend((now, r["window_start"], r["word"], r["count"]) for r in table.to_pylist())
        if len(deliveries) >= WINDOWS:
            until.touch()

    marker = tmp_path / "idle_end"
    result = _job("idle", sink, str(marker), str(until)).run(channels=str(tmp_path / "ch"),
                                                             checkpoints=str(tmp_path / "ck"),
                                                             checkpoint_interval=0.05, timeout=180)
    _check(result, deliveries, marker)


def test_progress_only_log_part_moves_frontier(tmp_path):
    """A captured stream whose part 1 has only Progress events (no data) replayed by a log source: its
    frontier moves, so windows over part 0's data fire."""
    log = str(tmp_path / "in")
    schema = pa.schema([("word", pa.string())])
    with Capture(log, "words", worker=0, peers=2, schema=schema) as c0, \
            Capture(log, "words", worker=1, peers=2, schema=schema) as c1:
        for t in range(40):
            c0.send(t, [{"word": "a"}, {"word": "b" if t % 2 else "a"}])
            c0.advance_to(t + 1)
            c1.advance_to(t + 1)       # progress only
    out: list = []
    job = Job("idle_log")
    src = job.from_log(log, "words", parallelism=2, name="source")
    src.key_by("word").window(10).count(name="count").sink(lambda t, tb: out.extend(tb.to_pylist()), name="out")
    result = job.run(channels=str(tmp_path / "ch"), checkpoints=str(tmp_path / "ck"), checkpoint_interval=0.05,
                     timeout=60)
    assert result.status == "finished"
    assert result.tasks["source.1"]["messages_out"] == 0
    got = sorted((r["window_start"], r["word"], r["count"]) for r in out)
    assert got == sorted([(w, "a", 15) for w in range(0, 40, 10)] + [(w, "b", 5) for w in range(0, 40, 10)])


@pytest.mark.spark
def test_idle_source_part_on_spark(tmp_path, runtime_spark):
    stamps = tmp_path / "deliveries"

    until = tmp_path / "all_windows"

    def sink(t: int, table: pa.Table) -> None:   # in a Spark worker: append to a file
        now = time.time()
        with open(stamps, "a") as f:
            for r in table.to_pylist():
                f.write(f"{now} {r['window_start']} {r['word']} {r['count']}\n")
        if len(stamps.read_text().splitlines()) >= WINDOWS:
            until.touch()

    marker = tmp_path / "idle_end"
    result = _job("idle_spark", sink, str(marker), str(until)).run(
        runtime_spark, channels=str(tmp_path / "ch"), checkpoints=str(tmp_path / "ck"), checkpoint_interval=0.1,
        timeout=240)
    deliveries = []
    for line in stamps.read_text().splitlines():
        t, ws, w, c = line.split()
        deliveries.append((float(t), int(ws), w, int(c)))
    _check(result, deliveries, marker)
