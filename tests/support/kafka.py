"""Kafka for the tests: a local Apache Kafka cluster driven through tools/kafka-broker, for tests that start, kill
and restart brokers (the ``kafka_cluster3`` fixture hands one out), and raw records of a log's topics (read and
produced with confluent_kafka, imported only when called: the kafka extra)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

from tests.support.paths import TOOLS

TOOL = str(TOOLS / "kafka-broker")


class ToolError(RuntimeError):
    """tools/kafka-broker exited with an error; the message holds its command line and what it printed."""


class KafkaCluster:
    """A cluster of ``brokers`` nodes whose first client port is ``port``; node n (1-based) listens on
    ``127.0.0.1:port+n-1``. Every method runs tools/kafka-broker and raises :class:`ToolError` (with the
    tool's own error line) when it fails."""

    def __init__(self, port: int, brokers: int, data: str | None = None, python: str = sys.executable) -> None:
        self.port = port
        self.brokers = brokers
        self.data = data
        self._python = python

    @property
    def bootstrap(self) -> str:
        """``bootstrap.servers`` of every node."""
        return ",".join(self.node_address(n) for n in range(1, self.brokers + 1))

    def node_address(self, node: int) -> str:
        """``host:port`` of one node."""
        return f"127.0.0.1:{self.port + node - 1}"

    def run(self, *args: str, check: bool = True, timeout: float = 240) -> subprocess.CompletedProcess:
        """Run ``tools/kafka-broker ARGS --port P [--data D]`` and return its completed process."""
        cmd = [self._python, TOOL, *args, "--port", str(self.port)]
        if self.data:
            cmd += ["--data", self.data]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            said = (proc.stderr.strip() or proc.stdout.strip())[-2000:]
            raise ToolError(f"{' '.join(cmd)} exited {proc.returncode}: {said}")
        return proc

    def start(self) -> None:
        """Start every node that is not running (a new cluster, or a stopped one on its kept storage)."""
        self.run("start", "--brokers", str(self.brokers))

    def stop(self, keep_data: bool = True) -> None:
        """Stop every node (SIGTERM, then SIGKILL after a bound); delete the storage unless ``keep_data``."""
        self.run("stop", *(["--keep-data"] if keep_data else []))

    def kill(self, node: int) -> None:
        """SIGKILL one node."""
        self.run("kill", "--node", str(node))

    def restart(self, node: int) -> None:
        """Start one node again on its storage; returns once it answers and the cluster lists it."""
        self.run("start", "--node", str(node))

    def status(self) -> int:
        """The tool's status exit code: 0 when every node answers, 3 when one does not."""
        return self.run("status", check=False).returncode


# -- raw records -------------------------------------------------------------------------------------------------


def raw_records(bootstrap: str, topic: str, part: int = 0, *, timeout: float = 10) -> list:
    """Every committed record of partition ``part`` of ``topic``, as confluent_kafka messages, in offset order
    (each poll waits at most ``timeout`` seconds for the next record or the partition's end)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "raw", "enable.partition.eof": True,
                  "isolation.level": "read_committed"})
    c.assign([TopicPartition(topic, part, 0)])
    out = []
    while True:
        m = c.poll(timeout)
        assert m is not None, f"no partition EOF within {timeout} s"
        if m.error():
            break
        out.append(m)
    c.close()
    return out


def numbers_records(kafka_uri: str, bootstrap: str) -> list:
    """Capture stream ``numbers`` (one part, 13 events; ``tests.support.cli.capture_numbers``) into the Kafka log
    ``kafka_uri``; return its data records in partition order."""
    from eventlog import open_log
    from tests.support.cli import capture_numbers

    capture_numbers(kafka_uri, peers=1, times=6)
    log = open_log(kafka_uri)
    data = [m for m in raw_records(bootstrap, log.target.topic("numbers"))
            if dict(m.headers()).get("eventlog.kind") != b"header"]
    assert [int(dict(m.headers())["eventlog.seq"]) for m in data] == list(range(1, 14))
    return data


def copy_with_records(kafka_uri: str, bootstrap: str, records: "list[tuple[bytes, list] | object]") -> tuple:
    """Stream ``copy`` whose partition 0 holds ``records`` after its header record: each a confluent_kafka message
    of stream ``numbers`` (produced again as it was), or a ``(value, headers)`` pair. Returns (log, topic, offsets):
    the Kafka offset each item got."""
    from confluent_kafka import Producer

    from eventlog import open_log

    log = open_log(kafka_uri)
    log.create_stream(dataclasses.replace(log.header("numbers"), stream="copy"))
    topic = log.target.topic("copy")
    p = Producer({"bootstrap.servers": bootstrap})
    for r in records:
        value, headers = r if isinstance(r, tuple) else (r.value(), r.headers())
        p.produce(topic, value=value, key=b"0", headers=headers, partition=0)
    assert p.flush(30) == 0
    offsets = list(range(1, len(records) + 1))  # offset 0 is the header record
    return open_log(kafka_uri), topic, offsets
