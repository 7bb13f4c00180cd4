"""Shared fixtures."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import uuid

import pyarrow as pa
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # the tests import the project whether or not it is installed
    sys.path.insert(0, ROOT)

_memory_names = itertools.count()


@pytest.fixture
def schema() -> pa.Schema:
    """A small schema used by many tests."""
    return pa.schema([("x", pa.int64()), ("s", pa.string())])


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    """``host:port`` of a real Kafka-protocol broker: $EVENTLOG_KAFKA (``make test`` starts one), else a
    local broker this test session starts with tools/kafka-broker and stops at its end."""
    env = os.environ.get("EVENTLOG_KAFKA")
    if env:
        yield env
        return
    port = "19192"
    tool = [sys.executable, os.path.join(ROOT, "tools", "kafka-broker")]
    subprocess.run([*tool, "start", "--port", port], check=True)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        subprocess.run([*tool, "stop", "--port", port], check=False)


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


@pytest.fixture(params=["arrow", "avro"])
def encoding(request) -> str:
    """Each event encoding."""
    return request.param
