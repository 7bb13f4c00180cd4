"""Fixtures of the runtime tests: a local SparkSession with enough task slots for barrier mode."""

from __future__ import annotations

import os
import re
import sys

import pytest

from tests.support.paths import ROOT

SPARK_SLOTS = 8
"""Task slots of the test session: barrier mode runs every operator instance of a job at once."""


@pytest.fixture(scope="session")
def runtime_spark():
    """A ``local[8,3]`` SparkSession (8 slots for gang-scheduled operator instances; otherwise the settings
    of tests/spark's session, which reuses this one when it runs later in the same pytest process).

    An active session with fewer slots (tests/spark's ``local[2,3]`` when those tests ran first) is
    stopped and replaced: barrier mode cannot run a job on fewer slots than it has instances."""
    pytest.importorskip("pyspark")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(ROOT) not in paths:  # Spark's Python workers import the tests' pipeline helpers
        os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *paths])
    from pyspark.sql import SparkSession

    from runtime.executors.spark import spark_slots

    active = SparkSession.getActiveSession()
    if active is not None and spark_slots(active) < SPARK_SLOTS:
        active.stop()
    session = (
        SparkSession.builder.master(f"local[{SPARK_SLOTS},3]")
        .appName("eventlog-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.execution.pyspark.udf.faulthandler.enabled", "true")
        .config("spark.python.worker.reuse", "true")
        .config("spark.python.daemon.module", "runtime.executors.spark_daemon")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("FATAL")
    assert re.match(r"local\[\d+", session.sparkContext.master)
    yield session
    session.stop()
