"""One local SparkSession for the Spark tests (``local[2,3]``: 2 cores, a failed task is retried up to 3
times, so retry tests share it), with the project importable by Spark's Python workers."""

from __future__ import annotations

import contextlib
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
    """The session with the JVM tap and reader loaded: the package's prebuilt jar, else one compiled now (skips
    only when there is neither: no prebuilt jar for this Spark and no JDK)."""
    from connectors.spark import jvm as jvm_mod

    try:
        jvm_mod.prebuilt_jar(spark.version)
    except jvm_mod.JvmTapUnavailable as e:
        try:
            jvm_mod.find_javac()
        except jvm_mod.JvmTapUnavailable as no_jdk:
            pytest.skip(f"{e.reason}, and no JDK to build one: {no_jdk.reason}")
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


@contextlib.contextmanager
def workers_env(spark, env: dict[str, str]):
    """The session's Python workers get ``env`` (an S3 server's client settings, say) while the block runs: the
    local session may have started before they were set in this process, and a worker's environment is fixed
    when its function is made, so the ``eventlog`` data source is registered again to take them (and after)."""
    from connectors.spark import register

    current = spark.sparkContext.environment
    saved = {k: current.get(k) for k in env}
    current.update(env)
    register(spark)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                current.pop(k, None)
            else:
                current[k] = v
        register(spark)


def object_keys(uri: str, *, markers: bool = False) -> list[str]:
    """Every object key below ``uri`` (an ``s3://bucket/prefix``), relative to it, sorted; the empty folder-marker
    objects (``key/``) pyarrow makes only with ``markers``."""
    import pyarrow.fs as pafs

    fs, path = pafs.FileSystem.from_uri(uri)
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    return sorted(i.path[len(path) + 1:] for i in infos if markers or i.type == pafs.FileType.File)
