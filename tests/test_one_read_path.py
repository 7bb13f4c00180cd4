"""One read path: every consumer of a log reads its parts through ``eventlog.parts.CheckedPart``, so every rule
of reading a part holds the same way in all of them, and a rule changed in one place changes all of them.

Each consumer (``Replayer``, ``replay.dataset``, ``replay cat``, the Spark batch source, the Spark streaming
source — their planners and task readers driven in this process, the code Spark runs — and a ``Capture``
reopening a part) reads the same logs; the test holds them to one outcome per log: the same records, or a
``ProgressError`` naming the same stream, part and sequence id. Then a rule is added (a capability may not be
added at time 9) and one is broken (the committed view stops voiding what a crashed writer left): every
consumer changes at once.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable

import pyarrow as pa
import pytest
from click.testing import CliRunner

from eventlog import Messages, Progress, ProgressError, StreamHeader, open_log
from eventlog.parts import committed as committed_mod
from eventlog.parts import rules as rules_mod

pytest.importorskip("pyspark")

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("n", pa.int64())])
FINISH = Progress(((9, -1),))


def _batch(n: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([{"n": n}], schema=SCHEMA)


def _write(log_dir: str, parts: list[list[list]], stream: str = "s") -> None:
    """Each part as a list of writer incarnations (a new ``log.writer`` each: a higher epoch), each a list of
    events; Messages carry the record ``1000 + 100 * part + seq``. Written raw, bypassing Capture's checks."""
    log = open_log(log_dir)
    log.create_stream(StreamHeader(stream, len(parts), SCHEMA))
    for p, incarnations in enumerate(parts):
        for events in incarnations:
            with log.writer(stream, p) as w:
                for ev in events:
                    w.append(Messages(ev.time, _batch(1000 + 100 * p + w.next_seq)) if isinstance(ev, Messages) else ev)


GOOD = [[[Progress(((0, -1), (5, 1))), Messages(5, None), Progress(((5, -1), (9, 1))), Messages(9, None), FINISH]],
        [[Messages(0, None), Progress(((0, -1), (7, 1))), Messages(7, None), Progress(((7, -1),))]]]
"""Two parts, both finished: records 1002, 1004 (part 0) and 1101, 1103 (part 1)."""

RESTARTED = [[[Progress(((0, -1), (5, 1))), Messages(5, None)],            # seq 2 void: its writer crashed
              [Messages(5, None), Messages(5, None), Progress(((5, -1),))]],  # the new incarnation re-sends 5
             [[Progress(((0, -1),))]]]
"""Part 0's first writer left record 1002 at time 5 and died; the next incarnation re-sent time 5 (1003, 1004)."""

LOGS: dict[str, tuple[list, object]] = {
    "good": (GOOD, Counter([1002, 1004, 1101, 1103])),
    "restarted writer": (RESTARTED, Counter([1003, 1004])),
    "capability behind the frontier": (
        [GOOD[0], [[Progress(((0, -1), (5, 1))), Progress(((2, 1),)), Messages(2, None), Progress(((2, -1), (5, -1)))]]],
        ("ProgressError", 1, 2)),
    "negative count": ([GOOD[0], [[Progress(((0, -2),))]]], ("ProgressError", 1, 1)),
    "progress after the part finished": ([GOOD[0], [[Progress(((0, -1),)), Progress(((7, 1),))]]],
                                         ("ProgressError", 1, 2)),
}


def _outcome(read: Callable[[], list[int]]) -> object:
    try:
        return Counter(read())
    except ProgressError as e:
        return (type(e).__name__, e.part, e.seq)


# -- the consumers -------------------------------------------------------------------------------------------

def _replayer(log_dir: str) -> list[int]:
    from replay import Replayer

    with Replayer(open_log(log_dir), "s", worker=0, peers=1) as r:
        return [n for ev in r if isinstance(ev, Messages) for n in ev.records.column("n").to_pylist()]


def _dataset(log_dir: str) -> list[int]:
    from replay import dataset

    return dataset(open_log(log_dir), "s").to_table().column("n").to_pylist()


def _cli_cat(log_dir: str) -> list[int]:
    import json

    from replay.cli import main

    result = CliRunner().invoke(main, ["--debug", "cat", log_dir, "s", "--format", "jsonl", "--kind", "messages"])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert result.exit_code == 0, result.output
    return [json.loads(line)["record"]["n"] for line in result.stdout.splitlines() if line.strip()]


def _spark_batch(log_dir: str) -> list[int]:
    from connectors.spark.batch_read import BatchReader
    from connectors.spark.options import ReadOptions
    from connectors.spark.schema import read_schema

    reader = BatchReader(ReadOptions.parse({"path": f"{log_dir}/s"}), read_schema(open_log(log_dir).header("s")))
    return [n for part in reader.partitions() for b in reader.read(part) for n in b.column("n").to_pylist()]


def _spark_stream(log_dir: str) -> list[int]:
    from connectors.spark.options import ReadOptions
    from connectors.spark.schema import read_schema
    from connectors.spark.stream_read import StreamReader

    reader = StreamReader(ReadOptions.parse({"path": f"{log_dir}/s"}), read_schema(open_log(log_dir).header("s")))
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, None)
        return [n for part in reader.partitions(start, end) for b in reader.read(part)
                for n in b.column("n").to_pylist()]
    finally:
        reader.stop()


CONSUMERS = {"Replayer": _replayer, "replay.dataset": _dataset, "replay cat": _cli_cat,
             "Spark batch source": _spark_batch, "Spark streaming source": _spark_stream}


def _capture_reopens(log_dir: str, part: int) -> object:
    """A Capture reopening ``part`` (its recovery reads the part's Progress events): None, or the error."""
    from capture import Capture

    log = open_log(log_dir)
    try:
        cap = Capture(log, "s", worker=part, peers=log.header("s").peers)
    except ProgressError as e:
        return (type(e).__name__, e.part, e.seq)
    cap.abort()
    return None


# -- the tests -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(LOGS))
def test_every_consumer_reads_each_log_the_same_way(tmp_path, name):
    parts, expected = LOGS[name]
    log_dir = str(tmp_path / "log")
    _write(log_dir, parts)
    outcomes = {consumer: _outcome(lambda: read(log_dir)) for consumer, read in CONSUMERS.items()}
    assert outcomes == dict.fromkeys(CONSUMERS, expected)


def test_capture_recovery_refuses_the_progress_readers_refuse(tmp_path):
    for name in ("capability behind the frontier", "negative count", "progress after the part finished"):
        parts, expected = LOGS[name]
        log_dir = str(tmp_path / name.replace(" ", "-"))
        _write(log_dir, parts)
        assert _capture_reopens(log_dir, 1) == expected, name


def test_a_rule_added_in_one_place_changes_every_consumer(tmp_path, monkeypatch):
    """A new progress rule (no capability may be added at time 9), written once in ``PartProgress``: every
    consumer, Capture's recovery included, now refuses part 0's seq 3 of the good log."""
    log_dir = str(tmp_path / "log")
    _write(log_dir, GOOD)
    original = rules_mod.PartProgress.progress_problems

    def with_new_rule(self, seq, updates, *, apply=True):
        updates = tuple(updates)
        if any(t == 9 and d > 0 for t, d in updates):
            return [self._error("a capability at time 9 (the new rule)", seq)]
        return original(self, seq, updates, apply=apply)

    monkeypatch.setattr(rules_mod.PartProgress, "progress_problems", with_new_rule)
    outcomes = {consumer: _outcome(lambda: read(log_dir)) for consumer, read in CONSUMERS.items()}
    assert outcomes == dict.fromkeys(CONSUMERS, ("ProgressError", 0, 3))
    assert _capture_reopens(log_dir, 0) == ("ProgressError", 0, 3)


def test_a_rule_broken_in_one_place_breaks_every_consumer(tmp_path, monkeypatch):
    """The committed view made to keep what a crashed writer left (a deliberately broken rule): every consumer
    now delivers the void record 1002 beside the re-sent time — so none of them has a copy of the rule."""
    log_dir = str(tmp_path / "log")
    _write(log_dir, RESTARTED)
    monkeypatch.setattr(committed_mod.CommittedPart, "_committed", lambda self, ev: True)
    outcomes = {consumer: _outcome(lambda: read(log_dir)) for consumer, read in CONSUMERS.items()}
    assert outcomes == dict.fromkeys(CONSUMERS, Counter([1002, 1003, 1004]))
