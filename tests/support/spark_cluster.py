"""A Spark standalone cluster for the tests, and a SparkSession on it.

The fixtures are in ``tests/conftest.py`` (built of what this module holds):

* ``spark_cluster`` — a master and two workers (4 cores, 1 GB each: 8 task slots) of the pyspark
  installation, on 127.0.0.1, started with ``tools/spark-cluster`` the first time a test asks for it and
  stopped (its folder deleted) at the end of the pytest session. Its ports are the first free block from
  17077 (master; web UI 18080; workers 17078/17079, web UIs 18081/18082) in steps of 10, or the block at
  ``$EVENTLOG_SPARK_PORT``; its folder is a fresh temporary one, so parallel test runs do not share a cluster.
* ``cluster_spark`` — (once every executor is registered: ``SLOTS`` task slots) a SparkSession whose master is that cluster (driver on 127.0.0.1, executors 512 MB,
  ``spark.default.parallelism`` 32 — far above the real cores, as on clusters where it is tuned for
  shuffles), with the ``eventlog`` data source registered and the project on the executors' PYTHONPATH
  (the shared disk), and the executors given the client settings of the session's S3 server (``s3_server``, ``tests/support/s3.py``:
  ``spark.executorEnv.AWS_ENDPOINT_URL`` and keys), so ``s3://`` logs work on them. It is made once and shared by consecutive test modules that use it; after the last
  of them it is stopped, so the local sessions of other modules (``tests/spark``, ``tests/runtime``) can
  start — a Python process has one SparkContext at a time, and an active one is stopped before this one.

The commands are the ones ``docs/deploy.md`` shows: ``.venv/bin/python tools/spark-cluster start --port P
--data D`` (``--workers 2 --cores 4 --memory 1g``), ``… stop``, and ``… kill-executor --app APP --worker N``
to SIGKILL an executor JVM mid-job.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

from tests.support.paths import ROOT, TOOLS
from tests.support.ports import port_free, worker_index

TOOL = str(TOOLS / "spark-cluster")

WORKERS = 2
CORES = 4
"""Cores each worker offers: 2 x 4 = 8 task slots (declared, not reserved)."""
SLOTS = WORKERS * CORES


class ClusterToolError(RuntimeError):
    """tools/spark-cluster exited with an error; the message holds its command line and what it printed."""


def _ports(port: int) -> list[int]:
    return [port, port + 1003] + [p for n in range(1, WORKERS + 1) for p in (port + n, port + 1003 + n)]


class SparkCluster:
    """A standalone cluster driven through tools/spark-cluster: ``master_url``, ``run(...)``, ``kill_executor``."""

    slots = SLOTS
    """Task slots of the cluster's executors (2 workers x 4 cores)."""

    def __init__(self, port: int, data: str, *, distinct_hosts: bool = False) -> None:
        self.port = port
        self.data = data
        self.distinct_hosts = distinct_hosts
        """Worker n on 127.0.0.(n+1): Spark sees two hosts (``tools/spark-cluster --distinct-hosts``)."""
        self.master_url = f"spark://127.0.0.1:{port}"

    def run(self, *args: str, check: bool = True, timeout: float = 180) -> subprocess.CompletedProcess:
        """Run ``tools/spark-cluster ARGS --port P --data D`` with this interpreter."""
        cmd = [sys.executable, TOOL, *args, "--port", str(self.port), "--data", self.data]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            said = (proc.stderr.strip() or proc.stdout.strip())[-2000:]
            raise ClusterToolError(f"{' '.join(cmd)} exited {proc.returncode}: {said}")
        return proc

    def start(self) -> None:
        """Start the master and the workers; returns once the master lists every worker alive."""
        extra = ["--distinct-hosts"] if self.distinct_hosts else []
        self.run("start", "--workers", str(WORKERS), "--cores", str(CORES), "--memory", "1g", *extra)

    def stop(self) -> None:
        """Stop every daemon (and their executors) and delete the cluster's folder."""
        self.run("stop", check=False)
        shutil.rmtree(self.data, ignore_errors=True)

    def kill_executor(self, app_id: str, worker: int = 1) -> str:
        """SIGKILL the executor JVM application ``app_id`` has on ``worker``; returns what the tool said."""
        return self.run("kill-executor", "--app", app_id, "--worker", str(worker)).stdout.strip()


shared: dict[str, object] = {}
"""The session's cluster (``"cluster"``) and the SparkSession on it (``"session"``), while they run."""


def start_cluster(*, distinct_hosts: bool = False) -> SparkCluster:
    """A new cluster on the first free port block of this pytest process (or ``$EVENTLOG_SPARK_PORT``); with
    ``distinct_hosts``, its workers on 127.0.0.2 and 127.0.0.3."""
    env = os.environ.get("EVENTLOG_SPARK_PORT")
    candidates = [int(env)] if env else [17077 + 10 * k for k in range(10 * worker_index(), 10 * worker_index() + 20)]
    port = next((p for p in candidates if all(port_free(q) for q in _ports(p))), None)
    if port is None:
        raise ClusterToolError(f"no free port block for a Spark cluster among {candidates} (set $EVENTLOG_SPARK_PORT)")
    cluster = SparkCluster(port, tempfile.mkdtemp(prefix=f"eventlog-spark-{port}-"), distinct_hosts=distinct_hosts)
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    return cluster


def stop_session() -> None:
    """Stop the SparkSession on the cluster, if one runs."""
    session = shared.pop("session", None)
    if session is not None:
        session.stop()


def new_session(cluster: SparkCluster, s3_env: dict[str, str]):
    """A SparkSession on ``cluster`` (see the module doc), once every executor offers its slots."""
    pytest.importorskip("pyspark")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    if SparkContext._active_spark_context is not None:   # a session of another test module: one context at a time
        SparkContext._active_spark_context.stop()
    builder = SparkSession.builder
    for k, v in s3_env.items():      # executors reach the S3 server as the driver does
        builder = builder.config(f"spark.executorEnv.{k}", v)
    session = (
        builder.master(cluster.master_url)
        .appName("eventlog-cluster-tests")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.executor.memory", "512m")
        .config("spark.executorEnv.PYTHONPATH", str(ROOT))      # the shared disk: executors import the project and tests
        .config("spark.default.parallelism", "32")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.python.daemon.module", "runtime.executors.spark_daemon")
        .config("spark.scheduler.barrier.maxConcurrentTasksCheck.interval", "1s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("FATAL")
    from connectors.spark import register

    register(session)
    wait_for_slots(session, SLOTS)
    return session


def wait_for_slots(session, slots: int = SLOTS, timeout: float = 90.0) -> None:
    """Return once the session's live executors offer ``slots`` task slots (both executors registered)."""
    from runtime.executors.spark import spark_slots

    deadline = time.monotonic() + timeout
    while spark_slots(session) < slots:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the cluster's executors offer {spark_slots(session)} of {slots} slots after "
                               f"{timeout} s")
        time.sleep(0.1)


def next_item_uses_session(request) -> bool:
    """Whether the test after the last one of ``request``'s module uses the cluster's session too (then it is
    kept for it)."""
    items = request.session.items
    last = max((i for i, it in enumerate(items) if it.module is request.module), default=len(items))
    return last + 1 < len(items) and "_cluster_session" in items[last + 1].fixturenames
