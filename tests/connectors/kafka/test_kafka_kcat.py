"""Format 2.0 Kafka logs read by a tool that knows nothing of eventlog: Debian's kcat (librdkafka's CLI).

One record per event: kcat shows the part as key, the event's kind, sequence id, time and writer in headers,
and the raw value it dumps opens in pyarrow (arrow streams) or decodes with fastavro and the schema the header
record carries (avro streams)."""

from __future__ import annotations

import io
import json
import subprocess

import fastavro
import pyarrow as pa
import pytest

from capture import Capture
from eventlog import open_log

pytestmark = pytest.mark.kafka
SCHEMA = pa.schema([("word", pa.string()), ("count", pa.int64())])


def kcat_json(kcat, bootstrap, topic, part):
    """Every committed record of one partition, as ``kcat -C -J`` prints it."""
    out = subprocess.run([kcat, "-C", "-J", "-b", bootstrap, "-t", topic, "-p", str(part), "-o", "beginning", "-e",
                          "-q", "-X", "isolation.level=read_committed"], capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr
    # kcat writes binary payloads into its JSON unescaped: the values are checked through kcat_value instead
    text = out.stdout.decode("utf-8", errors="replace")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def kcat_value(kcat, bootstrap, topic, part, offset):
    """The raw value of one record, as ``kcat -f %s`` writes it."""
    out = subprocess.run([kcat, "-C", "-b", bootstrap, "-t", topic, "-p", str(part), "-o", str(offset), "-c", "1",
                          "-e", "-q", "-f", "%s", "-X", "isolation.level=read_committed"], capture_output=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def headers_of(rec):
    """kcat -J prints headers as a flat list: name, value, name, value, ..."""
    h = rec.get("headers") or []
    return dict(zip(h[0::2], h[1::2]))


@pytest.mark.parametrize("encoding", ["arrow", "avro"])
def test_kcat_reads_a_captured_topic(kafka_uri, kafka_bootstrap, kcat, encoding):
    log = open_log(kafka_uri)
    with Capture(log, "words", 1, 2, schema=SCHEMA, encoding=encoding) as cap:
        cap.send(3, [{"word": "spark", "count": 2}, {"word": "kafka", "count": 5}])
        cap.advance_to(4)
        cap.send(4, [{"word": "arrow", "count": 1}])
    topic = log.target.topic("words")
    records = kcat_json(kcat, kafka_bootstrap, topic, 1)
    header, *data = records
    assert header["key"] == "1" and headers_of(header)["eventlog.kind"] == "header"
    assert json.loads(header["payload"])["version"] == "2.0"
    hs = [headers_of(r) for r in data]
    assert [r["key"] for r in data] == ["1"] * 4
    assert [h["eventlog.kind"] for h in hs] == ["messages", "progress", "messages", "progress"]
    assert [h["eventlog.seq"] for h in hs] == ["1", "2", "3", "4"]
    assert [h.get("eventlog.time") for h in hs] == ["3", None, "4", None]
    assert {h["eventlog.epoch"] for h in hs} == {"1"} and len({h["eventlog.writer"] for h in hs}) == 1
    assert all(r["tstype"] == "create" and r["ts"] > 0 for r in data)

    value = kcat_value(kcat, kafka_bootstrap, topic, 1, data[0]["offset"])
    if encoding == "arrow":
        table = pa.ipc.open_stream(value).read_all()
        assert table.schema.equals(SCHEMA) and table.to_pylist() == [{"word": "spark", "count": 2},
                                                                     {"word": "kafka", "count": 5}]
    else:
        schema = fastavro.parse_schema(json.loads(headers_of(header)["eventlog.avro.schema"]))
        assert value[:2] == b"\xc3\x01"
        datum = fastavro.schemaless_reader(io.BytesIO(value[10:]), schema, None)
        assert (datum["seq"], datum["kind"], datum["time"]) == (1, "MESSAGES", 3)
        assert datum["records"] == [{"word": "spark", "count": 2}, {"word": "kafka", "count": 5}]
