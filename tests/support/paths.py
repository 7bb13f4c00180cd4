"""Where things are, for every test and support module: the repository root and the folders tests read or run.

Test modules sit one to three folders deep under ``tests/``; they take these paths instead of counting
``dirname``\\ s up from their own ``__file__``."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The repository root (the checkout): the project's packages import from here."""

TESTS = ROOT / "tests"
SUPPORT = TESTS / "support"
"""This package: shared helpers, and the child scripts tests run as processes (``crash_child.py``, …)."""

GOLDEN = TESTS / "golden"
"""Committed golden data: never rewritten (``tests/golden/make_golden_*.py`` write a new version's folder once)."""
GOLDEN_LOGS = GOLDEN / "logs"
"""Format 1.0 file logs."""
GOLDEN_LOGS_2 = GOLDEN / "logs-2.0"
"""Format 2.0 file logs."""
GOLDEN_LOGS_2_1 = GOLDEN / "logs-2.1"
"""Format 2.1 file logs: trimmed streams (retention marks, FORMAT.md §10)."""
GOLDEN_KAFKA = GOLDEN / "kafka"
"""Records of Kafka logs, one folder per format version."""
GOLDEN_BUNDLES = GOLDEN / "bundles"
"""Runtime channel bundle vectors (``*.hex`` with the expected decode in ``*.json``)."""

TOOLS = ROOT / "tools"
EXAMPLES = ROOT / "examples"
SCHEMAS = ROOT / "schemas"

