"""Issue 34: what ``LogWatch`` knows about a live log — frontiers, the part holding a stream back, stalls, lag,
rates, streams appearing and finishing, trimmed parts — read cheaply (a part's tail, not the whole part)."""

from __future__ import annotations

import pytest

from capture import Capture
from eventlog import open_log
from replay.cli._web.watch import LogWatch

from .conftest import SCHEMA, records, stream_of


class Clock:
    """A wall clock the test moves (milliseconds)."""

    def __init__(self) -> None:
        import time

        self.now = time.time_ns() // 1_000_000

    def __call__(self) -> int:
        return self.now


def test_frontiers_holding_part_lag_and_rates(tmp_path, writers):
    uri = str(tmp_path / "log")
    w = writers(uri, "live", 2)
    clock = Clock()
    watch = LogWatch(open_log(uri), stall_after=30, stats_every=0, discover_every=0, clock=clock)
    s = stream_of(watch.poll(), "live")
    assert s is not None and s["frontier"] == [0] and not s["finished"]
    for t in range(3):
        w.write(0, t)
        w.write(1, t)
    s = stream_of(watch.poll(), "live")
    assert s["frontier"] == [3] and s["frontier_int"] == 3
    assert [p["frontier"] for p in s["parts"]] == [[3], [3]]
    assert s["holding"] == [] and s["lag_s"] == 0  # every record written is at a complete time
    assert s["records"] == 18 and [p["records"] for p in s["parts"]] == [9, 9]
    w.write(0, 3)
    w.write(0, 4)
    clock.now += 90_000  # 90 s later, part 1 still has not completed time 3
    s = stream_of(watch.poll(), "live")
    assert s["frontier"] == [3] and s["parts"][0]["frontier"] == [5]
    assert s["holding"] == [1] and s["parts"][1]["holding"] and not s["parts"][0]["holding"]
    assert s["lag_s"] >= 80 and s["parts"][1]["lag_s"] >= 80
    assert s["parts"][0]["lag_s"] == 0  # part 0 has completed every time with records
    assert s["parts"][1]["stalled"] and s["stalled_parts"] == 2  # nothing written for 90 s (by the test's clock)
    assert [t["time"] for t in s["recent_times"]][:2] == [4, 3]
    assert not s["recent_times"][0]["complete"] and s["recent_times"][-1]["complete"]
    w.write(1, 3)
    w.write(1, 4)
    s = stream_of(watch.poll(), "live")
    assert s["frontier"] == [5] and s["holding"] == [] and s["lag_s"] == 0
    assert s["completed_lag_s"] is not None and s["completed_lag_s"] >= 0
    watch.close()


def test_rates_count_what_was_written_between_polls(tmp_path, writers):
    uri = str(tmp_path / "log")
    w = writers(uri, "live", 1)
    watch = LogWatch(open_log(uri))
    watch.poll()
    import time

    for t in range(5):
        w.write(0, t, n=10)
        time.sleep(0.05)
        watch.poll()
    s = stream_of(watch.snapshot(), "live")
    assert s["records_per_s"] > 0 and s["bytes_per_s"] > 0
    assert s["parts"][0]["records"] == 50
    time.sleep(1.05)  # history keeps a sample a second
    s = stream_of(watch.poll(), "live")
    assert s["sample"] is not None and s["sample"]["frontier"] == 5
    assert watch.history_of("live") and watch.history_of("nope") == []
    watch.close()


def test_streams_appear_finish_and_go_without_a_restart(tmp_path):
    uri = str(tmp_path / "log")
    log = open_log(uri)
    watch = LogWatch(log, stats_every=0, discover_every=0)
    assert watch.poll()["streams"] == []
    with Capture(log, "later", 0, 1, schema=SCHEMA) as cap:
        cap.send(0, records(0, 0))
        cap.advance_to(1)
        s = stream_of(watch.poll(), "later")
        assert s is not None and s["frontier"] == [1] and not s["finished"]
    s = stream_of(watch.poll(), "later")
    assert s["finished"] and s["frontier"] == [] and s["parts"][0]["finished"]
    assert not s["parts"][0]["stalled"]  # a finished part is never stalled
    import shutil

    shutil.rmtree(tmp_path / "log" / "later")
    assert watch.poll()["streams"] == []
    watch.close()


def test_a_part_with_no_write_for_a_while_is_stalled_and_finished_parts_are_not(tmp_path, writers):
    uri = str(tmp_path / "log")
    w = writers(uri, "s", 2)
    w.write(0, 0)
    w.write(1, 0)
    w.finish(1)
    clock = Clock()
    watch = LogWatch(open_log(uri), stall_after=5, clock=clock)
    s = stream_of(watch.poll(), "s")
    assert [p["stalled"] for p in s["parts"]] == [False, False]
    clock.now += 6_000
    s = stream_of(watch.poll(), "s")
    assert [p["stalled"] for p in s["parts"]] == [True, False]
    assert s["parts"][1]["finished"] and s["stalled_parts"] == 1
    watch.close()


def test_a_new_watch_decodes_only_the_tail_of_a_long_part(tmp_path):
    """Opening on a long part: the frontier is rebuilt from Progress events, and only the last ``lookback``
    events are decoded (records counted)."""
    uri = str(tmp_path / "log")
    log = open_log(uri)
    with Capture(log, "long", 0, 1, schema=SCHEMA) as cap:
        for t in range(300):
            cap.send(t, records(t, 0, 2))
            cap.advance_to(t + 1)
    watch = LogWatch(open_log(uri), lookback=10)
    s = stream_of(watch.poll(), "long")
    assert s["finished"] and s["parts"][0]["next_seq"] == 602
    assert s["parts"][0]["events"] == 10  # the tail alone was read
    assert s["parts"][0]["records"] <= 10
    watch.close()


def test_a_trimmed_part_moves_its_first_sequence_id(tmp_path):
    """Old segments removed (a retention job): the watch follows the part's new first event."""
    import os

    uri = str(tmp_path / "log")
    log = open_log(uri, segment_bytes=1)  # a segment per event
    with Capture(log, "trim", 0, 1, schema=SCHEMA) as cap:
        for t in range(6):
            cap.send(t, records(t, 0))
            cap.advance_to(t + 1)
    watch = LogWatch(open_log(uri), stats_every=0, discover_every=0)
    s = stream_of(watch.poll(), "trim")
    assert s["parts"][0]["first_seq"] == 1
    part = tmp_path / "log" / "trim" / "part=0"
    if not part.is_dir():
        part = next(p for p in (tmp_path / "log" / "trim").iterdir() if p.is_dir())
    segments = sorted(n for n in os.listdir(part) if not n.startswith("."))
    firsts = sorted({int(n.split(".")[0]) for n in segments if n.split(".")[0].isdigit()})
    assert len(firsts) > 3, segments
    for n in segments:
        if n.split(".")[0].isdigit() and int(n.split(".")[0]) < firsts[3]:
            os.remove(part / n)
    s = stream_of(watch.poll(), "trim")
    assert s["parts"][0]["first_seq"] == firsts[3] and s["finished"]
    watch.close()


def test_product_times(tmp_path):
    uri = str(tmp_path / "log")
    log = open_log(uri)
    cap = Capture(log, "grid", 0, 1, schema=SCHEMA, time="product:2")
    cap.send((0, 0), records(0, 0))
    cap.advance_to((0, 1))
    watch = LogWatch(open_log(uri))
    s = stream_of(watch.poll(), "grid")
    assert s["frontier"] == [[0, 1]] and s["frontier_int"] is None and s["time_type"] == "product:2"
    assert s["recent_times"][0]["time"] == [0, 0] and s["recent_times"][0]["complete"]
    cap.close()
    watch.close()


@pytest.mark.parametrize("kind", ["s3", pytest.param("kafka", marks=pytest.mark.kafka)])
def test_object_storage_and_kafka_logs(kind, request, writers):
    uri = f"{request.getfixturevalue('s3_bucket')}/cap" if kind == "s3" else request.getfixturevalue("kafka_uri")
    w = writers(uri, "remote", 2)
    w.write(0, 0)
    w.write(1, 0)
    w.write(0, 1)
    watch = LogWatch(open_log(uri), stats_every=0, discover_every=0)
    s = stream_of(watch.poll(), "remote")
    assert s["frontier"] == [1] and [p["frontier"] for p in s["parts"]] == [[2], [1]]
    assert s["holding"] == [1] and s["records"] == 9
    w.write(1, 1)
    s = stream_of(watch.poll(), "remote")
    assert s["frontier"] == [2] and s["records"] == 12
    watch.close()
