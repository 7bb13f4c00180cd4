"""Shared fixtures."""

from __future__ import annotations

import itertools
import os
import sys

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


@pytest.fixture(params=["file", "memory"])
def log_uri(request, tmp_path) -> str:
    """A fresh log URI of each kind: a file log in a temp dir and a memory log with a unique name."""
    if request.param == "file":
        return str(tmp_path / "log")
    return f"memory://test-{os.getpid()}-{next(_memory_names)}"


@pytest.fixture(params=["arrow", "avro"])
def encoding(request) -> str:
    """Each event encoding."""
    return request.param
