"""``replay ls``: open parts with the age of their last event, and the prefixes of a Kafka cluster named
without one (issue 15 §4)."""

from __future__ import annotations

import datetime as dt
import json
import os
import time
import uuid
from urllib.parse import urlparse

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from eventlog import open_log
from tests.support.cli import capture_numbers, replay_cli


def _row(table: str, stream: str) -> str:
    """The table line of ``stream``."""
    return next(x for x in table.splitlines() if x.strip("│ ").startswith(stream + " "))


def _age_files(part_dir, seconds: float) -> None:
    """Make every file of a part look last written ``seconds`` ago."""
    when = time.time() - seconds
    for f in part_dir.iterdir():
        os.utime(f, (when, when))


def test_age_text():
    from replay.cli.ls import age_text

    assert [age_text(s) for s in (0, 12.7, 89, 90, 300, 3 * 3600 + 5, 47 * 3600, 50 * 3600, -3)] == [
        "0 s", "12 s", "89 s", "1 min", "5 min", "3 h", "47 h", "2 d", "0 s"]


def test_ls_shows_open_parts_and_the_age_of_their_last_event_on_files(tmp_path):
    uri = str(tmp_path / "log")
    capture_numbers(uri, stream="done", peers=2, times=2)
    capture_numbers(uri, stream="stuck", peers=3, times=2, finish=False)
    stuck = tmp_path / "log" / "stuck"
    for p, hours in ((0, 5), (1, 3), (2, 7)):
        _age_files(stuck / f"part-{p:05d}", hours * 3600 + 60)
    _age_files(tmp_path / "log" / "done" / "part-00000", 9 * 3600)  # finished parts do not count
    rows = {r["stream"]: r for r in json.loads(replay_cli("ls", uri, "--json").stdout)}
    assert rows["done"]["finished"] is True and rows["done"]["open_parts"] == 0
    assert rows["done"]["last_event"] is None and rows["done"]["last_event_age_s"] is None
    row = rows["stuck"]
    assert row["finished"] is False and row["open_parts"] == 3
    assert 3 * 3600 + 60 <= row["last_event_age_s"] < 3 * 3600 + 120  # the newest among the open parts
    newest = max((stuck / "part-00001").iterdir(), key=lambda f: f.stat().st_mtime).stat().st_mtime
    assert row["last_event"].endswith("Z")
    assert abs(dt.datetime.fromisoformat(row["last_event"].replace("Z", "+00:00")).timestamp() - newest) < 0.01
    table = replay_cli("ls", uri).stdout
    assert "3 open, last event 3 h ago" in _row(table, "stuck")
    assert _row(table, "done").rstrip(" │").endswith("finished")


def test_ls_counts_only_the_parts_still_open(tmp_path):
    uri = str(tmp_path / "log")
    log = open_log(uri)
    capture_numbers(log, stream="half", peers=2, times=2)  # both finished …
    from capture import Capture
    from tests.support.cli import SCHEMA

    # … then a stream where part 0 finishes and part 1 is abandoned
    for w in range(2):
        cap = Capture(log, "mixed", w, 2, schema=SCHEMA)
        cap.send(0, [{"n": w, "word": "a"}])
        cap.advance_to(1)
        cap.close() if w == 0 else cap.abort()
    _age_files(tmp_path / "log" / "mixed" / "part-00000", 30)
    _age_files(tmp_path / "log" / "mixed" / "part-00001", 2 * 86400 + 10)
    rows = {r["stream"]: r for r in json.loads(replay_cli("ls", uri, "--json").stdout)}
    assert rows["mixed"]["open_parts"] == 1 and rows["mixed"]["last_event_age_s"] >= 2 * 86400
    assert "1 of 2 open, last event 2 d ago" in _row(replay_cli("ls", uri).stdout, "mixed")


def test_ls_on_a_memory_log_shows_open_parts_without_an_age():
    uri = f"memory://ls-{uuid.uuid4().hex[:8]}"
    capture_numbers(uri, stream="stuck", peers=2, times=2, finish=False)
    (row,) = json.loads(replay_cli("ls", uri, "--json").stdout)
    assert row["open_parts"] == 2 and row["last_event"] is None and not row["finished"]
    assert "2 open" in replay_cli("ls", uri).stdout


# -- Kafka -----------------------------------------------------------------------------------------------------


@pytest.mark.kafka
def test_ls_on_kafka_shows_the_record_time_of_the_last_event(kafka_uri):
    before = time.time()
    capture_numbers(kafka_uri, stream="stuck", peers=2, times=3, finish=False)
    capture_numbers(kafka_uri, stream="done", peers=1, times=2)
    after = time.time()
    rows = {r["stream"]: r for r in json.loads(replay_cli("ls", kafka_uri, "--json").stdout)}
    assert rows["done"]["finished"] and rows["done"]["last_event"] is None
    row = rows["stuck"]
    assert row["open_parts"] == 2 and not row["finished"]
    log = open_log(kafka_uri)
    writes = [log.last_write("stuck", p) for p in range(2)]
    assert all(before - 1 <= w <= after + 1 for w in writes)
    assert 0 <= row["last_event_age_s"] <= time.time() - before + 1
    assert "2 open, last event" in replay_cli("ls", kafka_uri).stdout


def _raw_topic(bootstrap: str, topic: str, value: bytes) -> None:
    """A topic that is not an eventlog stream: one plain record."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1)])[topic].result(30)
    errors = []
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, value=value, on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(30) == 0 and errors == [None]


@pytest.mark.kafka
def test_ls_of_a_cluster_without_prefix_lists_the_prefixes_holding_streams(kafka_bootstrap, kafka_uri):
    other = kafka_uri + "b"
    capture_numbers(kafka_uri, stream="numbers", peers=2, times=2)
    capture_numbers(kafka_uri, stream="words", peers=1, times=2, finish=False)
    capture_numbers(other, stream="numbers", peers=1, times=1)
    tag = uuid.uuid4().hex[:8]
    top = f"top{tag}"  # a stream without a prefix
    capture_numbers(f"kafka://{kafka_bootstrap}", stream=top, peers=1, times=2)
    _raw_topic(kafka_bootstrap, f"raw{tag}.events", b"not an eventlog record")
    _raw_topic(kafka_bootstrap, f"raw{tag}.job.g000001", b"a channel")
    _raw_topic(kafka_bootstrap, f"raw{tag}.x.numbers", b"")  # a value that is no bundle
    prefix, prefix_b = urlparse(kafka_uri).path.strip("/"), urlparse(other).path.strip("/")

    log = open_log(f"kafka://{kafka_bootstrap}")
    found = log.prefixes()
    assert found[prefix] == ["numbers", "words"] and found[prefix_b] == ["numbers"]
    assert top in found[""] and not any(p.startswith(f"raw{tag}") for p in found)

    doc = json.loads(replay_cli("ls", f"kafka://{kafka_bootstrap}", "--json").stdout)
    by_prefix = {p["prefix"]: p for p in doc["prefixes"]}
    assert by_prefix[prefix] == {"prefix": prefix, "streams": ["numbers", "words"], "uri": kafka_uri}
    assert by_prefix[prefix_b]["uri"] == other and "" not in by_prefix
    assert top in [s["stream"] for s in doc["streams"]]  # listed like any log's streams
    row = next(s for s in doc["streams"] if s["stream"] == top)
    assert row["peers"] == 1 and row["finished"] is True

    table = replay_cli("ls", f"kafka://{kafka_bootstrap}").stdout
    line = next(x for x in table.splitlines() if prefix + " " in x and kafka_uri in x)
    assert [c.strip() for c in line.strip().strip("│").split("│")] == [prefix, "2", "numbers, words", kafka_uri]
    assert "streams without a prefix" in table and top in table
    # the URI it names lists the streams
    assert [r["stream"] for r in json.loads(replay_cli("ls", by_prefix[prefix]["uri"], "--json").stdout)] == [
        "numbers", "words"]


@pytest.mark.kafka
def test_prefix_uri_keeps_the_settings(kafka_bootstrap, kafka_uri):
    capture_numbers(kafka_uri, stream="numbers", peers=1, times=1)
    prefix = urlparse(kafka_uri).path.strip("/")
    doc = json.loads(replay_cli("ls", f"kafka://{kafka_bootstrap}?eventlog.timeout=20", "--json").stdout)
    (entry,) = [p for p in doc["prefixes"] if p["prefix"] == prefix]
    assert entry["uri"] == f"{kafka_uri}?eventlog.timeout=20"


# these tests poke at the files of the 1.x layout (format 2.0 files: test_file_format2.py)
pytestmark = pytest.mark.usefixtures("file_format_1")
