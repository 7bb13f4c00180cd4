"""Golden Kafka logs (committed in tests/golden/kafka/<version>) read by today's code: each dump is produced as it
is into a fresh topic, then read through ``open_log``. Kafka logs of every older format stay readable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from eventlog import open_log
from replay import Replayer, copy
from tests.support.golden import EXPECTED, ROWS, as_tuples
from tests.support.paths import GOLDEN_KAFKA

pytestmark = pytest.mark.kafka

GOLDEN = str(GOLDEN_KAFKA)
STREAMS = [f"golden-{enc}{suffix}" for enc in ("arrow", "avro") for suffix in ("", "-product")]


def load(bootstrap: str, streams: list[tuple[str, str, str]]) -> None:
    """Produce the golden records of each ``(version, stream, prefix)`` into ``prefix.stream``, partition by
    partition, in order: the topics created in one request, the records through one idempotent producer (which
    keeps each partition's order), one flush."""
    topics: dict[str, list[dict]] = {}
    for version, stream, prefix in streams:
        with open(os.path.join(GOLDEN, version, f"{stream}.json")) as f:
            topics[f"{prefix}.{stream}"] = json.load(f)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, max(r["partition"] for r in records) + 1, 1)
                                   for topic, records in topics.items()])
    for future in futures.values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for topic, records in topics.items():
        for r in records:
            producer.produce(topic, partition=r["partition"], value=bytes.fromhex(r["value"]),
                             key=None if r["key"] is None else bytes.fromhex(r["key"]),
                             headers=[(k, None if v is None else bytes.fromhex(v)) for k, v in r["headers"]])
    assert producer.flush(30) == 0


@pytest.fixture(scope="module")
def golden_kafka(kafka_bootstrap):
    """A Kafka log URI per golden format version, holding that version's golden streams."""
    uris, streams = {}, []
    for version in sorted(os.listdir(GOLDEN)):
        prefix = f"g{version.replace('.', '')}{uuid.uuid4().hex[:8]}"
        names = sorted(os.listdir(os.path.join(GOLDEN, version)))
        streams += [(version, name[:-len(".json")], prefix) for name in names]
        uris[version] = f"kafka://{kafka_bootstrap}/{prefix}"
    load(kafka_bootstrap, streams)
    return uris


@pytest.mark.parametrize("version", ["1.0", "1.2", "2.0"])
@pytest.mark.parametrize("encoding", ["arrow", "avro"])
@pytest.mark.parametrize("suffix,part", list(EXPECTED))
def test_golden_kafka_logs_read_the_same(golden_kafka, version, encoding, suffix, part):
    log = open_log(golden_kafka[version])
    stream = f"golden-{encoding}{suffix}"
    h = log.header(stream)
    assert h.version == tuple(int(x) for x in version.split("."))
    assert h.encoding == encoding and h.created == "2026-11-22T00:00:00.000Z"
    assert h.peers == (1 if suffix else 2) and h.time_type.name == ("product:2" if suffix else "int64")
    assert str(h.schema.field("ts").type) == "timestamp[us, tz=UTC]"
    want = [("M", item[1], [ROWS[i] for i in item[2]]) if item[0] == "M" else item for item in EXPECTED[(suffix, part)]]
    entries = list(log.reader(stream, part))
    assert as_tuples(e.event for e in entries) == want
    assert [e.seq for e in entries] == list(range(1, len(want) + 1))
    # resuming in the middle maps a sequence id to its record in this version's framing
    assert [e.seq for e in log.reader(stream, part, start=3)] == list(range(3, len(want) + 1))
    log.close()


@pytest.mark.parametrize("version", ["1.2", "2.0"])
@pytest.mark.parametrize("encoding", ["arrow", "avro"])
def test_golden_kafka_restart_reads_committed(golden_kafka, version, encoding):
    """Formats 1.2 and 2.0: the first incarnation left a committed message at time 1 it never completed; the
    second re-sent time 1. Committed readers see only the second version; uncommitted ones see both."""
    log = open_log(golden_kafka[version])
    stream = f"golden-{encoding}-restart"
    entries = list(log.reader(stream, 0))
    assert [e.seq for e in entries] == [1, 2, 3, 4, 5, 6]
    done = {t: table.to_pylist() for t, table in Replayer(log, stream, worker=0, peers=1).completed()}
    assert done == {0: [ROWS[1]], 1: [ROWS[3], ROWS[4]]}
    seen = [(ev.time, ev.records.to_pylist()) for ev in Replayer(log, stream, worker=0, peers=1,
                                                                    isolation="uncommitted")
            if hasattr(ev, "records")]
    assert seen == [(0, [ROWS[1]]), (1, [ROWS[2]]), (1, [ROWS[3], ROWS[4]])]
    log.close()


@pytest.mark.parametrize("version", ["1.0", "1.2"])
def test_older_kafka_streams_are_read_not_appended_and_copy_upgrades_them(golden_kafka, kafka_uri, tmp_path, version):
    from capture import Capture
    from eventlog import UnsupportedVersionError

    old = open_log(golden_kafka[version])
    with pytest.raises(UnsupportedVersionError, match="replay copy") as ei:
        Capture(old, "golden-arrow", 0, 2)
    assert ei.value.stream == "golden-arrow"
    assert [e.seq for e in old.reader("golden-arrow", 0)] == [1, 2, 3, 4, 5]  # refusing wrote nothing

    result = subprocess.run([sys.executable, "-m", "replay.cli", "copy", golden_kafka[version], kafka_uri, "golden-avro"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    new = open_log(kafka_uri)
    assert new.header("golden-avro").version == (2, 0) and new.header("golden-avro").encoding == "avro"

    def completed(log):
        h = log.header("golden-avro")
        return sorted((t, r["id"]) for j in range(h.peers)
                      for t, tb in Replayer(log, "golden-avro", j, h.peers).completed() for r in tb.to_pylist())

    assert completed(new) == completed(old) == [(0, 1), (0, 2), (1, 7), (2, 3), (5, 4), (5, 5), (5, 6)]
    files = open_log(tmp_path / "files")  # a file log writes its own version, whatever the source's
    copy(new, files, "golden-avro")
    assert files.header("golden-avro").version == (2, 0) and completed(files) == completed(old)


def test_a_file_log_refuses_a_header_of_a_major_version_it_does_not_define(tmp_path):
    from eventlog import CorruptLogError, StreamHeader, UnsupportedVersionError

    log = open_log(tmp_path / "log")
    os.makedirs(tmp_path / "log" / "s")
    doc = json.loads(StreamHeader("s", 1, pa.schema([("n", pa.int64())])).to_json())
    doc["version"] = "3.0"
    doc.pop("checksum")
    from eventlog.header import header_checksum

    doc["checksum"] = header_checksum(doc)
    (tmp_path / "log" / "s" / "_header.json").write_text(json.dumps(doc))
    with pytest.raises(UnsupportedVersionError, match="format version 3.0") as ei:
        log.header("s")
    assert ei.value.stream == "s"
    # a 2.0 header in the 1.x layout's file name is no stream of either layout
    os.makedirs(tmp_path / "log" / "t")
    (tmp_path / "log" / "t" / "header.json").write_bytes(StreamHeader("t", 1, pa.schema([("n", pa.int64())]),
                                                                      version=(2, 0)).to_json())
    with pytest.raises(CorruptLogError, match="_header.json"):
        log.header("t")
