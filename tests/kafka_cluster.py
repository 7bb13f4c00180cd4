"""A local Apache Kafka cluster driven through tools/kafka-broker, for tests that start, kill and restart
brokers (the ``kafka_cluster3`` fixture hands one out)."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "tools", "kafka-broker")


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
