"""The replay CLI on Kafka logs (the local broker): the same commands, the same answers as on files."""

from __future__ import annotations

import json

import pytest

from tests.support.cli import capture_numbers, jsonl, replay_cli

pytestmark = pytest.mark.kafka


def test_cli_on_a_kafka_log(kafka_uri, tmp_path):
    capture_numbers(kafka_uri, peers=3, times=4)
    ls = replay_cli("ls", kafka_uri, "--json")
    (row,) = json.loads(ls.stdout)
    assert row["stream"] == "numbers" and row["peers"] == 3 and row["events"] == 3 * 9
    assert "numbers" in replay_cli("info", kafka_uri, "numbers").stdout
    records = [r for r in jsonl(replay_cli("cat", kafka_uri, "numbers", "--kind", "messages", "--format", "jsonl"))]
    assert len(records) == 3 * 4 * 2
    assert replay_cli("verify", kafka_uri).exit_code == 0
    files = str(tmp_path / "copy")
    replay_cli("copy", kafka_uri, files, "numbers", "--workers", "2")
    assert replay_cli("diff", kafka_uri, files, "numbers").exit_code == 0
    back = kafka_uri + "back"
    replay_cli("copy", files, back, "numbers", "--workers", "4", "--encoding", "avro")
    assert replay_cli("diff", files, back, "numbers").exit_code == 0
    capture_numbers(tmp_path / "other", peers=1, times=4, rows=1)
    assert replay_cli("diff", kafka_uri, tmp_path / "other", "numbers", expect=1).exit_code == 1
