"""One local SparkSession for the Spark tests (``local[2,3]``: 2 cores, a failed task is retried up to 3
times, so retry tests share it), with the project importable by Spark's Python workers."""

from __future__ import annotations

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="session")
def spark():
    """The session, with the ``eventlog`` data source registered."""
    pyspark = pytest.importorskip("pyspark")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    # Spark's Python workers inherit this environment (local mode): make the project importable there too
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if ROOT not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([ROOT, *paths])
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2,3]")
        .appName("eventlog-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    from connectors.spark import register

    register(session)
    assert pyspark.__version__ >= "4"
    yield session
    session.stop()


@pytest.fixture(scope="session")
def jvm(spark):
    """The session with the JVM tap and reader built and loaded (skips only when there is no JDK)."""
    from connectors.spark import jvm as jvm_mod

    try:
        jvm_mod.find_javac()
    except jvm_mod.JvmTapUnavailable as e:
        pytest.skip(f"no JDK on this machine, the JVM tap and reader cannot be built: {e.reason}")
    return jvm_mod.prepare(spark)


@pytest.fixture
def log_dir(tmp_path) -> str:
    """A fresh file log directory."""
    return str(tmp_path / "log")


def by_time(rows, time_col: str, cols: list[str]) -> dict:
    """Rows as multisets per time: ``{time: Counter((col values…))}`` (times as tuples when arrays)."""
    from collections import Counter, defaultdict

    out: dict = defaultdict(Counter)
    for r in rows:
        t = r[time_col]
        out[tuple(t) if isinstance(t, list) else t][tuple(r[c] for c in cols)] += 1
    return dict(out)
