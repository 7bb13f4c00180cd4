"""A Kafka cluster that does not answer gives one clear, typed error within the log's timeout
(``eventlog.timeout``), never a flood of librdkafka lines, whether it was never there or dies mid-run."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
import uuid

import pyarrow as pa
import pytest

from capture import Capture
from eventlog import ClusterUnavailableError, DeliveryError, InvalidURIError, open_log
from replay import Replayer
from tests.support.cli import ENV, MODULE
from tests.support.kafka import KafkaCluster

pytestmark = pytest.mark.xdist_group("kafka-clusters")  # one xdist worker, in order (tests/conftest.py)

SCHEMA = pa.schema([("a", pa.int64())])


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_cli_says_one_line_within_the_timeout():
    """A real process: librdkafka writes its own lines straight to the process's stderr unless told not to."""
    uri = f"kafka://127.0.0.1:{closed_port()}/x?eventlog.timeout=2"
    started = time.monotonic()
    r = subprocess.run([*MODULE, "ls", uri], capture_output=True, text=True, env=ENV, timeout=60)
    took = time.monotonic() - started
    assert r.returncode != 0 and took < 10, (r.returncode, took)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "did not answer within 2 s" in lines[0] and "127.0.0.1" in lines[0], r.stderr


@pytest.mark.parametrize("call", ["streams", "capture", "replay", "follow"])
def test_every_entry_point_raises_the_typed_error_quietly(call, capfd):
    uri = f"kafka://127.0.0.1:{closed_port()}/x?eventlog.timeout=1.5"
    calls = {
        "streams": lambda: open_log(uri).streams(),
        "capture": lambda: Capture(uri, "s", 0, 1, schema=SCHEMA),
        "replay": lambda: list(Replayer(uri, "s")),
        "follow": lambda: list(Replayer(uri, "s", follow=True, timeout=30)),
    }
    started = time.monotonic()
    with pytest.raises(ClusterUnavailableError, match=r"did not answer within 1.5 s"):
        calls[call]()
    assert time.monotonic() - started < 6
    assert "rdkafka" not in capfd.readouterr().err


def test_the_timeout_setting_is_checked():
    for bad in ("0", "-1", "x", "1e9"):
        with pytest.raises(InvalidURIError, match="eventlog.timeout"):
            open_log(f"kafka://127.0.0.1:9/x?eventlog.timeout={bad}")
    assert open_log("kafka://127.0.0.1:9/x?eventlog.timeout=7").timeout == 7.0
    assert open_log("kafka://127.0.0.1:9/x?eventlog.timeout=7", timeout=3).timeout == 3.0
    assert open_log("kafka://127.0.0.1:9/x").timeout == 30.0


def test_a_broker_killed_mid_run_fails_the_writer_and_the_follower_within_the_timeout(tmp_path, capfd):
    cluster = KafkaCluster(port=19392, brokers=1, data=str(tmp_path / "kafka"))
    cluster.start()
    try:
        uri = f"kafka://{cluster.bootstrap}/mr{uuid.uuid4().hex[:6]}?eventlog.timeout=3"
        cap = Capture(uri, "s", 0, 1, schema=SCHEMA)
        cap.send(0, [{"a": 1}])
        cap.advance_to(1)
        outcome: dict = {}

        def follow() -> None:
            started = time.monotonic()
            try:
                for _ in Replayer(uri, "s", follow=True, timeout=120):
                    pass
            except Exception as e:  # noqa: BLE001 - checked below
                outcome["error"], outcome["seconds"] = e, time.monotonic() - started

        follower = threading.Thread(target=follow, daemon=True)
        follower.start()
        time.sleep(1.0)
        cluster.kill(1)
        killed = time.monotonic()
        cap.send(1, [{"a": 2}])
        with pytest.raises(DeliveryError, match="not committed"):
            cap.advance_to(2)
        assert time.monotonic() - killed < 3 + 5
        follower.join(30)
        assert not follower.is_alive(), "the follower waits on a dead cluster"
        assert isinstance(outcome.get("error"), ClusterUnavailableError), outcome
        assert "stream 's' part 0" in str(outcome["error"])
        assert "rdkafka" not in capfd.readouterr().err
    finally:
        cluster.stop(keep_data=False)


def test_the_replication_factor_setting_reaches_every_topic_eventlog_creates(kafka_cluster3):
    """``eventlog.replication.factor`` in the URI: stream topics and runtime channel topics alike."""
    from confluent_kafka.admin import AdminClient

    from runtime.channels.kafka import KafkaChannelStore

    bs = kafka_cluster3.bootstrap
    prefix = f"rf{uuid.uuid4().hex[:6]}"
    uri = f"kafka://{bs}/{prefix}?eventlog.replication.factor=2"
    Capture(uri, "s", 0, 2, schema=SCHEMA).close()
    store = KafkaChannelStore(uri, "job")
    store.prepare(1, ["a.0-b.0"])
    store.close()
    admin = AdminClient({"bootstrap.servers": bs})
    deadline = time.monotonic() + 30
    while True:  # this client may ask a broker whose metadata has not caught up with the new topics yet
        md = admin.list_topics(timeout=30)
        mine = {t: m for t, m in md.topics.items() if t.startswith(prefix)}
        if len(mine) == 2 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert len(mine) == 2, sorted(mine)
    assert all(len(p.replicas) == 2 for m in mine.values() for p in m.partitions.values())
    with pytest.raises(InvalidURIError, match="replication.factor"):
        open_log(f"kafka://{bs}/x?eventlog.replication.factor=0")
