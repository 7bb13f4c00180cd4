"""Fixtures shared by the tests of every folder (a folder's own fixtures are in its conftest.py), and the run's
scheduling: which tests pytest-xdist keeps on one worker, which run alone after the parallel phase.

* ``schema``, ``encoding``, ``log_uri``, ``file_format_1``: logs and their settings.
* ``kafka_bootstrap``, ``kafka_uri``, ``kafka_cluster3``: Kafka (``tests/support/kafka.py``).
* ``s3_server``, ``s3_bucket``: a real S3-protocol server (``tests/support/s3.py``); ``s3proxy_server``: a second
  one, S3Proxy, which ignores conditional writes (its tests are marked ``s3proxy``).
* ``spark_cluster``, ``cluster_spark``: a Spark standalone cluster and a session on it
  (``tests/support/spark_cluster.py``).
* ``kcat``, ``avrocat``: Debian's command-line readers, installed when missing.

Helpers that are not fixtures live in ``tests/support/``."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
import uuid

import pyarrow as pa
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests.support.paths.ROOT, before it imports
if ROOT not in sys.path:  # the tests import the project whether or not it is installed
    sys.path.insert(0, ROOT)

from tests.support import spark_cluster as _spark_cluster  # noqa: E402
from tests.support.kafka import KafkaCluster  # noqa: E402
from tests.support.s3 import running_s3_server  # noqa: E402

_memory_names = itertools.count()

_XDIST_GROUPS = {
    # keyed by file name (item.path.name), wherever under tests/ the file sits: keep each name one file's
    # files whose tests start servers on fixed ports, or one shared cluster: one pytest-xdist worker runs each group
    "test_kafka_broker_tool.py": "kafka-clusters",
    "test_kafka_unreachable.py": "kafka-clusters",
    "test_cluster_spark.py": "spark-cluster",
    "test_cluster_runtime.py": "spark-cluster",
    # README blocks run in the README's order and build on each other's files (/tmp/cap)
    "test_readme.py": "readme",
}


_SERIAL = {
    # failure tests whose timing needs the machine to themselves: make test runs them after the parallel phase,
    # in one process. The handoff test (a broker SIGKILLed under two jobs) fails when Spark tests load the other
    # core at the same time (job B's output then differs from the failure-free run's: under investigation)
    "test_kafka_failures.py",
}


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups to schedule by
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (``make test`` runs two workers, ``--dist loadgroup``), keep the tests of each group in
    ``_XDIST_GROUPS`` on one worker, in order: they share a three-broker Kafka cluster on fixed ports, a Spark
    standalone cluster, or the README's files."""
    for item in items:
        if "s3proxy_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.s3proxy)
        if item.path.name in _SERIAL:
            item.add_marker(pytest.mark.serial)
        group = _XDIST_GROUPS.get(item.path.name)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


def pytest_configure(config):
    """Register the ``s3proxy`` marker; refuse a pytest/pytest-xdist pair whose ``--dist loadgroup`` ignores the
    xdist_group marks (pytest 9.2 keeps node ids where xdist 3.8 no longer suffixes them): the grouped tests would
    run on any worker and fail obscurely."""
    config.addinivalue_line("markers", "s3proxy: needs S3Proxy (tools/s3-server --impl s3proxy: Java 17+, and Maven "
                                       "once to fetch its jars); given to every test using the s3proxy_server fixture")
    if hasattr(config, "workerinput") or config.getoption("dist", "no") != "loadgroup":
        return
    import xdist

    if pytest.version_tuple[:2] >= (9, 2) and tuple(int(p) for p in xdist.__version__.split(".")[:2]) <= (3, 8):
        pytest.exit(f"pytest {pytest.__version__} with pytest-xdist {xdist.__version__}: --dist loadgroup would "
                    f"ignore the xdist_group marks; install the versions pyproject.toml pins (make venv)", 4)


@pytest.fixture
def schema() -> pa.Schema:
    """A small schema used by many tests."""
    return pa.schema([("x", pa.int64()), ("s", pa.string())])


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    """``host:port`` of a real Kafka cluster: $EVENTLOG_KAFKA (``make test`` starts one), else a one-broker
    Apache Kafka cluster this test session starts with tools/kafka-broker and stops (deleting its data) at its
    end."""
    env = os.environ.get("EVENTLOG_KAFKA")
    if env:
        yield env
        return
    cluster = KafkaCluster(port=19192, brokers=1)
    cluster.start()
    try:
        yield cluster.bootstrap
    finally:
        _discard(cluster)


@pytest.fixture(scope="session")
def _kafka_cluster3_session() -> KafkaCluster:
    cluster = KafkaCluster(port=int(os.environ.get("EVENTLOG_KAFKA3_PORT", "19292")), brokers=3)
    cluster.start()
    try:
        yield cluster
    finally:
        _discard(cluster)


@pytest.fixture
def kafka_cluster3(_kafka_cluster3_session) -> KafkaCluster:
    """A three-broker Apache Kafka cluster (KRaft, replication factor 3, ``min.insync.replicas=2``) for failure
    tests, on ports 19292-19294 (quorum 19295-19297; $EVENTLOG_KAFKA3_PORT moves them, for parallel runs):
    started the first time a test asks for it, stopped and deleted at the end of the session. It has
    ``bootstrap`` and ``kill(n)``/``restart(n)`` of node n (1..3). A test that kills a node restarts it before it
    ends; each test starts with every node running (a node a failed test left down is started again first), so
    one failure does not fail the tests after it."""
    _kafka_cluster3_session.start()
    return _kafka_cluster3_session


def _discard(cluster: KafkaCluster) -> None:
    """Stop a session's cluster whose data is deleted anyway: SIGKILL at once (``--timeout 0``) instead of
    waiting out a graceful shutdown (up to 30 s for three nodes that lose their quorum as they stop). The
    graceful ``stop``/``start`` is what test_kafka_broker_tool and test_kafka_failures test."""
    cluster.run("stop", "--timeout", "0", check=False)


@pytest.fixture
def kafka_uri(kafka_bootstrap) -> str:
    """A fresh Kafka log URI (a unique topic prefix on the shared broker)."""
    return f"kafka://{kafka_bootstrap}/t{uuid.uuid4().hex[:10]}"


@pytest.fixture(params=["file", "memory", pytest.param("kafka", marks=pytest.mark.kafka)])
def log_uri(request, tmp_path) -> str:
    """A fresh log URI of each kind: a file log in a temp dir, a memory log with a unique name, and a
    Kafka log with a unique topic prefix on the real local broker."""
    if request.param == "file":
        return str(tmp_path / "log")
    if request.param == "kafka":
        return request.getfixturevalue("kafka_uri")
    return f"memory://test-{os.getpid()}-{next(_memory_names)}"


@pytest.fixture
def file_format_1(monkeypatch):
    """File logs created in this test (and in the processes it starts) write format 1.2 streams: the 1.x
    layout (``header.json``, ``part-00000/``, ``.arrows`` streams, ``.index`` files) that byte-level tests of
    1.x files poke at. Format 2.0 files have their own tests (test_file_format2.py)."""
    monkeypatch.setenv("EVENTLOG_FILE_FORMAT", "1.2")


@pytest.fixture(params=["arrow", "avro"])
def encoding(request) -> str:
    """Each event encoding."""
    return request.param


def debian_tool(command: str, package: str) -> str:
    """The path of ``command``, installed from Debian's ``package`` with apt-get when missing (Debian, as root);
    the test is skipped with the reason otherwise."""
    path = shutil.which(command)
    if path is None and os.path.exists("/etc/debian_version") and os.geteuid() == 0:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for cmd in (["apt-get", "install", "-y", "-q", package], ["apt-get", "update", "-q"],
                    ["apt-get", "install", "-y", "-q", package]):
            subprocess.run(cmd, capture_output=True, env=env, timeout=300)
            if (path := shutil.which(command)) is not None:
                break
    if path is None:
        reason = (f"{command} is not installed and could not be (needs Debian's apt-get as root): "
                  f"apt-get install -y {package}")
        print(f"SKIP: {reason}", file=sys.stderr)
        pytest.skip(reason)
    return path


@pytest.fixture(scope="session")
def kcat():
    """Debian's kcat, installed with apt-get when missing (Debian, as root); skipped with the reason otherwise."""
    return debian_tool("kcat", "kcat")


@pytest.fixture(scope="session")
def avrocat():
    """``avrocat`` of the Avro C tools (Debian's avro-bin), installed with apt-get when missing (Debian, as
    root); skipped with the reason otherwise."""
    return debian_tool("avrocat", "avro-bin")


# -- S3 (tests/support/s3.py) ------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """One moto S3 server for the session, started when a test first asks for it (``tests/support/s3.py``)."""
    pytest.importorskip("moto.server", reason="moto[server] (the test extra) runs the S3 server")
    with running_s3_server(str(tmp_path_factory.mktemp("s3-server"))) as server:
        yield server


@pytest.fixture
def s3_bucket(s3_server) -> str:
    """A fresh, empty bucket on the session's server: its ``s3://name`` URI."""
    return f"s3://{s3_server.new_bucket()}"


@pytest.fixture(scope="session")
def s3proxy_server(tmp_path_factory):
    """One S3Proxy server for the session (``tools/s3-server --impl s3proxy``), started when a test first asks
    for it, on its own ports (from 18900); the same interface as ``s3_server`` (``.port``, ``.endpoint``, ``.env``,
    ``.new_bucket()``, ``.stop()``) but its settings stay out of ``os.environ``: pass ``.endpoint``/``.env``
    explicitly (``tests.support.s3.boto3_client(server.env)`` makes a client). Without Java 17 (or, before the
    jars are cached, Maven) it fails with the tool's one-line reason: it is never skipped silently."""
    with running_s3_server(str(tmp_path_factory.mktemp("s3proxy-server")), impl="s3proxy") as server:
        yield server


# -- a Spark standalone cluster (tests/support/spark_cluster.py) ----------------------------------------------------


@pytest.fixture(scope="session")
def spark_cluster() -> _spark_cluster.SparkCluster:
    """The session's standalone cluster: a master and two workers, started when a test first asks for it,
    stopped at the end of the session (``tests/support/spark_cluster.py``)."""
    shared = _spark_cluster.shared
    if "cluster" not in shared:
        shared["cluster"] = _spark_cluster.start_cluster()
    yield shared["cluster"]
    cluster = shared.pop("cluster", None)
    if cluster is not None:
        _spark_cluster.stop_session()
        cluster.stop()


@pytest.fixture(scope="module")
def _cluster_session(request, spark_cluster, s3_server):
    """The SparkSession on ``spark_cluster``, kept while consecutive test modules use it, stopped after the last
    (so the local sessions of other modules can start: one SparkContext a process)."""
    session = _spark_cluster.shared.get("session")
    if session is None or session.sparkContext._jsc is None:
        session = _spark_cluster.shared["session"] = _spark_cluster.new_session(spark_cluster, s3_server.env)
    yield session
    if not _spark_cluster.next_item_uses_session(request):
        _spark_cluster.stop_session()


@pytest.fixture
def cluster_spark(_cluster_session):
    """A SparkSession on ``spark_cluster`` (see ``tests/support/spark_cluster.py``), once its executors offer
    every slot again (a test before may have killed one)."""
    _spark_cluster.wait_for_slots(_cluster_session)
    return _cluster_session


# -- a headless browser (replay ui, tests/replay/cli/web) ----------------------------------------------------------


@pytest.fixture(scope="session")
def chromium():
    """Debian's headless Chromium driven by Selenium (``chromium`` and ``chromium-driver``, installed with apt-get
    when missing, as ``debian_tool`` does); skipped with the reason otherwise. A light-scheme 1280x900 window."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium (the test extra) drives the browser")
    from selenium.webdriver.chrome.service import Service

    browser = debian_tool("chromium", "chromium")
    driver_path = debian_tool("chromedriver", "chromium-driver")
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,900", "--force-color-profile=srgb", "--hide-scrollbars"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()
