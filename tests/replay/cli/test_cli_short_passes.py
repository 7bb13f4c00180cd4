"""The CLI reads every event up to where a part ends even when a reader's pass stops short. A Kafka part
reader returns once its consumer's queue is empty (so that a live part is not held back), and under load that
happens long before the part's end: ``replay export`` then wrote a file without the later times' records (CI:
``test_exactly_once[kafka]``, a time missing from the export that every replayer saw complete), and ``ls``,
``cat``, ``stats`` and ``frontier`` read as little. Here every reader of a file log yields one event per pass."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from connectors.files.log import FileLog
from tests.support.cli import capture_numbers, jsonl, replay_cli


class _OneEventAPass:
    """A part reader whose every pass yields at most one event, as a Kafka reader's pass under load may; the
    reader underneath goes on where its last pass stopped."""

    def __init__(self, reader) -> None:  # noqa: ANN001
        self._reader = reader
        self._events = None
        self.passes = 0

    def __iter__(self):  # noqa: ANN204
        self.passes += 1
        if self._events is None:
            self._events = iter(self._reader)
        entry = next(self._events, None)
        if entry is None:
            self._events = None  # the next pass polls the reader again
            return
        yield entry

    def __getattr__(self, name: str):  # noqa: ANN204 - next_seq, epoch, tail_problem, close...
        return getattr(self._reader, name)


@pytest.fixture
def short_passes(monkeypatch):
    real = FileLog.reader
    monkeypatch.setattr(FileLog, "reader", lambda self, *a, **k: _OneEventAPass(real(self, *a, **k)))


@pytest.fixture
def log_uri(tmp_path) -> str:
    uri = str(tmp_path / "log")
    capture_numbers(uri, peers=3, times=6, rows=2)
    return uri


def _outputs(uri: str, tmp_path, tag: str) -> dict:
    out = tmp_path / f"{tag}.parquet"
    replay_cli("export", uri, "numbers", out)
    return {
        "export": sorted(tuple(sorted(r.items())) for r in pq.read_table(out).to_pylist()),
        "cat": jsonl(replay_cli("cat", uri, "numbers", "--format", "jsonl")),
        "ls": replay_cli("ls", uri, "--json").stdout,
        "stats": replay_cli("stats", uri, "numbers", "--json").stdout,
        "frontier": replay_cli("frontier", uri, "numbers", "--json").stdout,
    }


def test_every_command_reads_to_the_end_when_passes_stop_short(log_uri, tmp_path, monkeypatch):
    whole = _outputs(log_uri, tmp_path, "whole")
    assert len(whole["export"]) == 3 * 6 * 2
    real = FileLog.reader
    made: list[_OneEventAPass] = []

    def reader(self, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
        made.append(_OneEventAPass(real(self, *a, **k)))
        return made[-1]

    monkeypatch.setattr(FileLog, "reader", reader)
    short = _outputs(log_uri, tmp_path, "short")
    for command in whole:
        assert short[command] == whole[command], command
    assert any(r.passes > 2 for r in made)  # the readers did stop short
