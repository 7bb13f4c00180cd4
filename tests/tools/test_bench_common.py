"""The benchmark harness (tools/bench/_common.py): per-round ratios, headlines, and how a busy machine is told."""

from __future__ import annotations

import os
import sys

import pytest

from tests.support.paths import TOOLS

sys.path.insert(0, str(TOOLS / "bench"))

import _common  # noqa: E402


def test_ratios_pair_each_round_with_its_own_baseline():
    s = _common.Samples()
    for ours, base in ((2.0, 1.0), (4.0, 2.0), (3.0, 3.0)):  # a load that doubles both leaves the ratio alone
        s.add("ours", ours)
        s.add("base", base)
    assert s.ratios("ours", "base") == [0.5, 0.5, 1.0]
    r = s.ratio("ours", "base")
    assert (r.median, r.best, round(r.spread, 3)) == (0.5, 1.0, 1.0)
    cost = s.ratio("ours", "base", higher_is_better=False)  # tapped job / job: lower is better
    assert (cost.median, cost.best) == (2.0, 1.0)


def test_headline_judges_against_the_target_in_the_right_direction(monkeypatch):
    monkeypatch.setattr(_common, "other_work", lambda window=1.0: 0.05)
    load = _common.Load()
    assert "PASS" in _common.headline("x", _common.Ratio([0.95, 0.92, 0.99]), 0.9, load)
    assert "FAIL" in _common.headline("x", _common.Ratio([0.85, 0.80, 0.99]), 0.9, load)
    assert "target <= 1.5x PASS" in _common.headline("x", _common.Ratio([1.4, 1.6, 1.3], lower_is_better=True),
                                                      1.5, load)
    with pytest.raises(ValueError):
        _common.Ratio([])


@pytest.mark.parametrize(("before", "after", "loaded"), [(0.05, 0.10, False), (0.40, 0.02, True),
                                                         (0.01, 0.60, True), (None, None, False)])
def test_a_machine_is_loaded_when_other_work_takes_over_a_quarter_of_the_cores(monkeypatch, before, after, loaded):
    shares = iter([before, after])
    monkeypatch.setattr(_common, "other_work", lambda window=1.0: next(shares))
    load = _common.Load()
    assert load.loaded is loaded
    assert ("LOADED" in str(load)) is loaded
    assert "other work" in str(load)


def test_other_work_is_a_share_of_all_cores():
    share = _common.other_work(0.2)
    if not os.path.exists("/proc/stat"):
        assert share is None
    else:
        assert share is not None and 0.0 <= share <= 1.0
