"""``replay export`` to CSV and with an Avro codec of choice (issue 35 §6, what avro-tools users have): CSV with
a header, ``_time``/``_part``/``_seq`` first, nested and binary values as ``cat --format csv`` writes them; Avro
files in deflate, zstandard or null blocks that fastavro reads back to the same rows."""

from __future__ import annotations

import csv

import fastavro
import pyarrow as pa
import pytest

from capture import Capture
from eventlog import open_log
from tests.support.cli import capture_numbers, replay_cli


def test_csv_export_has_a_header_and_every_record_once(tmp_path):
    capture_numbers(str(tmp_path / "log"), peers=2, times=3, rows=2)
    out = tmp_path / "n.csv"
    replay_cli("export", tmp_path / "log", "numbers", out)
    rows = list(csv.reader(out.open(newline="")))
    assert rows[0] == ["_time", "_part", "_seq", "n", "word"]
    got = sorted((int(t), int(p), int(n), w) for t, p, _, n, w in rows[1:])
    assert got == sorted((t, w, 100 * t + 10 * w + i, f"w{t}") for t in range(3) for w in range(2) for i in range(2))


def test_csv_export_writes_nested_binary_null_and_product_times_as_cat_does(tmp_path):
    schema = pa.schema([("tags", pa.list_(pa.string())), ("blob", pa.binary()), ("note", pa.string())])
    with Capture(open_log(tmp_path / "log"), "s", 0, 1, schema=schema, time="product:2") as cap:
        cap.send((1, 2), [{"tags": ["a", "b,c"], "blob": b"\x00\xff", "note": None}])
        cap.advance_to((2, 0))
    out = tmp_path / "s.csv"
    replay_cli("export", tmp_path / "log", "s", out, "--bytes", "hex")
    [head, row] = list(csv.reader(out.open(newline="")))
    assert head == ["_time", "_part", "_seq", "tags", "blob", "note"]
    assert row[0] == "1;2" and row[3] == '["a","b,c"]' and row[4] == "00ff" and row[5] == ""


@pytest.mark.parametrize("codec", ["deflate", "zstandard", "null"])
def test_avro_export_takes_a_codec(tmp_path, codec):
    capture_numbers(str(tmp_path / "log"), peers=1, times=2, rows=3)
    out = tmp_path / "n.avro"
    replay_cli("export", tmp_path / "log", "numbers", out, "--codec", codec)
    with out.open("rb") as f:
        reader = fastavro.reader(f)
        assert reader.codec == codec
        rows = list(reader)
    assert sorted(x["n"] for x in rows) == sorted(100 * t + i for t in range(2) for i in range(3))


def test_a_codec_for_another_format_is_a_usage_error(tmp_path):
    capture_numbers(str(tmp_path / "log"), peers=1, times=1)
    r = replay_cli("export", tmp_path / "log", "numbers", tmp_path / "n.parquet", "--codec", "zstandard", expect=2)
    assert "--codec" in r.stderr and not (tmp_path / "n.parquet").exists()
