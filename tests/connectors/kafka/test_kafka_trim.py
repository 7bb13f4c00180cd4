"""Retention on Kafka logs (FORMAT.md §10): a trim records its mark in the stream's meta topic, then deletes the
partitions' record prefixes with the admin API (``delete_records``); partition 0's header record goes too, and
readers find the header copy the trim put beside the mark."""

from __future__ import annotations

import pyarrow as pa
import pytest

from eventlog import open_log
from eventlog.antichain import Antichain
from eventlog.parts import CheckedPart
from eventlog.parts.capture import Capture
from eventlog.parts.trim import trim
from eventlog.retention import TrimmedError
from replay.replayer import Replayer
from replay.verify import verify

pytestmark = pytest.mark.kafka

SCHEMA = pa.schema([("x", pa.int64())])


def _replay(uri: str) -> dict[int, list[int]]:
    with Replayer(uri, "s") as r:
        return {t: sorted(table.column("x").to_pylist()) for t, table in r.completed()}


def test_a_trimmed_kafka_stream_starts_at_its_cut_and_keeps_its_header(kafka_uri):
    caps = [Capture(kafka_uri, "s", p, 2, schema=SCHEMA) for p in range(2)]
    for p, upto in ((0, 30), (1, 20)):
        for t in range(upto):
            caps[p].send(t, pa.table({"x": [t * 10 + p]}))
            caps[p].advance_to(t + 1)
    log = open_log(kafka_uri)
    result = trim(log, "s", since=Antichain([25]))
    assert result.clamped and result.since == Antichain([20])
    assert result.events_removed > 0
    prefix = kafka_uri.rsplit("/", 1)[1]
    assert log.watermarks(f"{prefix}.s", 0)[0] > 0  # the header record (offset 0) went with the dropped events
    fresh = open_log(kafka_uri)  # a new reader finds the header in the meta topic
    assert fresh.header("s").peers == 2 and fresh.streams() == ["s"]
    cut = fresh.retention("s").cut(0)
    assert fresh.part_stats("s", 0).first_seq == cut.start
    with pytest.raises(TrimmedError) as e:
        CheckedPart(fresh, fresh.header("s"), 0, start=2)
    assert e.value.earliest == cut.start
    for p in range(2):  # writers go on after the trim
        for t in range(30 if p == 0 else 20, 35):
            caps[p].send(t, pa.table({"x": [t * 10 + p]}))
            caps[p].advance_to(t + 1)
    caps[1].close()
    caps[0].flush()
    caps[0].abort()
    with Capture(kafka_uri, "s", 0, 2) as again:  # a writer reopened after the trim continues after its tail
        assert again.frontier == Antichain([35])
        again.send(35, pa.table({"x": [350]}))
    assert _replay(kafka_uri) == {**{t: [t * 10, t * 10 + 1] for t in range(20, 35)}, 35: [350]}
    assert verify(open_log(kafka_uri)).ok
    assert open_log(kafka_uri).prefixes()[prefix] == ["s"]  # the meta topic is no prefix of its own
    assert not any("__meta" in p for p in open_log(kafka_uri).prefixes())
