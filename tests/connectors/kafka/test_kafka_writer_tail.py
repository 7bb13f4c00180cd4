"""A reopened Kafka writer checks what it continues after as a reader does (issue 33 §2): after a foreign or
buggy producer put a record in a stream's topic — garbage, lying time or sequence headers, a replayed value —
every reader refuses the part from that record on, so a writer appending behind it would acknowledge events no
reader delivers. Opening the part's writer raises ``CorruptLogError`` naming the record instead, and writes
nothing; a part without such a record opens as before."""

from __future__ import annotations

import pytest

from capture import Capture
from eventlog import CorruptLogError
from tests.support.kafka import copy_with_records, numbers_records

pytestmark = pytest.mark.kafka


def _with(headers, **changed: bytes) -> list:
    return [(k, changed.get(k.replace("eventlog.", ""), v)) for k, v in headers]


def _cases(data: list) -> dict:
    messages = next(m for m in reversed(data[:12]) if dict(m.headers())["eventlog.kind"] == b"messages")
    return {
        "garbage": (b"not an eventlog record", None),
        "lying time": (messages.value(), _with(messages.headers(), time=b"99")),
        "lying seq (a gap)": (messages.value(), _with(messages.headers(), seq=b"100")),
        "lying seq (the next one)": (messages.value(), _with(messages.headers(), seq=b"13")),
        "a replayed record": data[4],
        "a value of another event": (data[1].value(), _with(messages.headers(), seq=b"13")),
    }


def test_a_writer_opens_after_a_whole_part(kafka_uri, kafka_bootstrap):
    data = numbers_records(kafka_uri, kafka_bootstrap)
    log, _, _ = copy_with_records(kafka_uri, kafka_bootstrap, data[:12])  # seq 12: the part is not finished
    cap = Capture(log, "copy", 0, 1)
    assert cap.next_seq == 13
    cap.close()


@pytest.mark.parametrize("case", ["garbage", "lying time", "lying seq (a gap)", "lying seq (the next one)",
                                  "a replayed record", "a value of another event"])
def test_a_writer_does_not_append_behind_a_record_its_readers_refuse(kafka_uri, kafka_bootstrap, case):
    data = numbers_records(kafka_uri, kafka_bootstrap)
    log, topic, offsets = copy_with_records(kafka_uri, kafka_bootstrap, [*data[:12], _cases(data)[case]])
    with pytest.raises(CorruptLogError) as ei:
        Capture(log, "copy", 0, 1)
    assert (ei.value.stream, ei.value.part) == ("copy", 0)
    assert ei.value.offset == offsets[-1] or "behind" in str(ei.value), str(ei.value)  # the record, or why
    lo, hi = log.watermarks(topic, 0)
    assert hi == offsets[-1] + 1  # nothing written
    with pytest.raises(CorruptLogError):  # and a second try says the same
        log.writer("copy", 0)
