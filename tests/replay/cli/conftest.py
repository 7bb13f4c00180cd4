"""Fixtures of the CLI tests."""

from __future__ import annotations

import os

import pytest

from tests.support.cli import LOG_KINDS


@pytest.fixture(params=LOG_KINDS)
def cli_uri(request, tmp_path) -> str:
    """A fresh log URI of each kind in ``tests.support.cli.LOG_KINDS``."""
    if request.param == "kafka":
        return request.getfixturevalue("kafka_uri")
    if request.param == "memory":
        return f"memory://cli-{os.getpid()}-{tmp_path.name}"
    return str(tmp_path / "log")
