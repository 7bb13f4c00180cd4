"""``replay dump`` (issue 35 §5, kcat's raw output): the bytes an event is stored as — a file log's event body
at its offset in the segment, a Kafka record's value and headers — as a hex dump, raw into a file or a pipe,
or JSON; the bytes are exactly those in storage (a damaged event is dumped as it is, for a bug report)."""

from __future__ import annotations

import base64
import json
import subprocess

import click
import pytest
from click.testing import CliRunner

from eventlog import open_log
from replay.cli._common import ReplayGroup
from replay.cli.dump import dump
from tests.support.cli import ENV, MODULE, capture_numbers


@click.group(cls=ReplayGroup)
def _cli() -> None:
    pass


_cli.add_command(dump)


def run(*args: object, expect: int = 0):
    r = CliRunner().invoke(_cli, ["dump", *(str(a) for a in args)])
    assert r.exit_code == expect, r.output + r.stderr
    return r


def _segment_bytes(log_dir, part: int) -> bytes:
    [seg] = sorted((log_dir / "numbers" / f"part={part}").glob("*.arrow"))
    return seg.read_bytes()


def test_the_json_names_the_file_and_offset_and_the_bytes_are_the_files(tmp_path):
    capture_numbers(str(tmp_path / "log"), peers=2, times=3)
    doc = json.loads(run(tmp_path / "log", "numbers", 1, 3, "--json").stdout)
    assert doc["part"] == 1 and doc["seq"] == 3 and doc["path"].endswith(".arrow")
    data = base64.b64decode(doc["base64"])
    assert doc["length"] == len(data) > 0
    assert _segment_bytes(tmp_path / "log", 1)[doc["offset"]:doc["offset"] + len(data)] == data


def test_output_file_and_raw_pipe_hold_the_same_bytes_and_the_hex_dump_reads_like_xxd(tmp_path):
    capture_numbers(str(tmp_path / "log"), peers=1, times=2)
    out = tmp_path / "event.bin"
    r = run(tmp_path / "log", "numbers", 0, 1, "-o", out)
    assert "seq 1" in r.stderr and "bytes at" in r.stderr
    piped = subprocess.run([*MODULE, "dump", str(tmp_path / "log"), "numbers", "0", "1", "--raw"],
                           capture_output=True, env=ENV, timeout=120)
    assert piped.returncode == 0 and piped.stdout == out.read_bytes()
    hexdump = run(tmp_path / "log", "numbers", 0, 1).stdout.splitlines()
    assert hexdump[0].startswith("00000000: ") and len(hexdump) == (len(out.read_bytes()) + 15) // 16
    run(tmp_path / "log", "numbers", 0, 1, "-o", out, expect=2)  # exists: --force overwrites
    run(tmp_path / "log", "numbers", 0, 1, "-o", out, "--force")


def test_a_damaged_event_is_dumped_as_stored_and_a_missing_one_is_one_line(tmp_path):
    capture_numbers(str(tmp_path / "log"), peers=1, times=2)
    doc = json.loads(run(tmp_path / "log", "numbers", 0, 3, "--json").stdout)
    [seg] = sorted((tmp_path / "log" / "numbers" / "part=0").glob("*.arrow"))
    raw = bytearray(seg.read_bytes())
    raw[doc["offset"] + doc["length"] - 1] ^= 0xFF  # the event's last byte flipped: readers refuse it
    seg.write_bytes(bytes(raw))
    again = json.loads(run(tmp_path / "log", "numbers", 0, 3, "--json").stdout)
    assert base64.b64decode(again["base64"]) == bytes(raw[doc["offset"]:doc["offset"] + doc["length"]])
    r = run(tmp_path / "log", "numbers", 0, 99, expect=3)  # a log error, as a missing stream is
    assert "no whole event 99 is stored" in r.stderr and f"replay verify {tmp_path / 'log'} numbers" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_memory_logs_dump_too():
    uri = "memory://dump-test"
    capture_numbers(uri, peers=1, times=1)
    doc = json.loads(run(uri, "numbers", 0, 1, "--json").stdout)
    assert doc["length"] > 0 and "path" in doc


@pytest.mark.kafka
def test_kafka_dumps_the_record_value_and_headers(kafka_bootstrap):
    import uuid

    uri = f"kafka://{kafka_bootstrap}/dump{uuid.uuid4().hex[:8]}"
    capture_numbers(uri, peers=2, times=2)
    doc = json.loads(run(uri, "numbers", 1, 2, "--json").stdout)
    assert doc["record"].startswith(uri.rsplit("/", 1)[1] + ".numbers[1]@") and doc["headers"]
    log = open_log(uri)
    [entry] = [e for e in log.reader("numbers", 1) if e.seq == 2]
    assert doc["length"] > 0 and entry.seq == 2
