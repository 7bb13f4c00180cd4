"""Fuzzing what eventlog reads, in CI: a bounded sample of tools/fuzz_log.py (event bodies of both
encodings, whole file-log parts read and reopened, stream headers, Kafka record values).

Every input must return the events written or raise an EventLogError: no untyped exception, no wrong or
hidden event, no event lost by a reopening writer, no invalid batch, no crash, hang or runaway memory.
Set EVENTLOG_FUZZ_SEED to vary the inputs; ``python tools/fuzz_log.py --seed S --show INDEX`` reproduces
one. The long run (1M inputs) and its figures are in docs/reliability.md.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest

from tests.support.paths import TOOLS

SEED = int(os.environ.get("EVENTLOG_FUZZ_SEED", "20261123"))
COUNT = int(os.environ.get("EVENTLOG_FUZZ_COUNT", "6000"))


_TOOLS = str(TOOLS)
if _TOOLS not in sys.path:  # spawned fuzz workers import the driver by name (they inherit sys.path)
    sys.path.insert(0, _TOOLS)

import fuzz_log  # noqa: E402


@pytest.fixture(scope="module")
def run() -> tuple[Any, list]:
    return fuzz_log.fuzz(SEED, COUNT, jobs=2, chunk=COUNT // 2 + 1, targets=fuzz_log.TARGETS, mem_gib=4.0,
                         hang_seconds=60.0, progress=False)


def test_no_findings(run: tuple[Any, list]) -> None:
    outcomes, findings = run
    assert not findings, fuzz_log.report(outcomes, findings, COUNT, SEED, 0.0)


def test_every_target_reaches_both_outcomes(run: tuple[Any, list]) -> None:
    """The inputs are neither all refused (bouncing off a magic) nor all accepted (mutations that miss)."""
    outcomes, _ = run
    for target in fuzz_log.TARGETS:
        ok = outcomes.get((target, "ok"), 0)
        typed = outcomes.get((target, "typed"), 0)
        assert ok >= COUNT // 200, f"{target}: only {ok} inputs read back cleanly"
        assert typed >= COUNT // 200, f"{target}: only {typed} inputs raised a typed error"


def test_findings_are_detected() -> None:
    """The harness itself: an untyped exception, a wrong event and a hidden event are reported."""
    import random

    from eventlog.errors import CorruptLogError

    corpus_stub: list = []

    def boom(rng: random.Random, corpus: list, workdir: str) -> str:
        raise KeyError("x")

    def wrong(rng: random.Random, corpus: list, workdir: str) -> str:
        raise fuzz_log.Finding("wrong", "seq 3 differs")

    def typed(rng: random.Random, corpus: list, workdir: str) -> str:
        raise CorruptLogError("bad", stream="s", part=0)

    saved = dict(fuzz_log.RUNNERS)
    try:
        for fn, want in ((boom, "untyped"), (wrong, "wrong"), (typed, "typed:CorruptLogError")):
            fuzz_log.RUNNERS["body"] = fn
            assert fuzz_log.run_one(1, 0, corpus_stub, "/nonexistent", ("body",))[1] == want
    finally:
        fuzz_log.RUNNERS.update(saved)
