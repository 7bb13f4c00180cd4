"""One bad folder never hides a whole log (issue 33 §6): a folder holding a stream header under a name no stream
may have (copied in by hand, another tool's) is listed by ``replay ls`` and reported by ``replay verify`` as a
problem beside the healthy streams, as a damaged header is, with a typed error naming the folder."""

from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pytest
from click.testing import CliRunner

from capture import Capture
from eventlog import CorruptLogError, open_log
from replay.cli import main

SCHEMA = pa.schema([("n", pa.int64())])


@pytest.fixture
def log_dir(tmp_path):
    path = tmp_path / "log"
    with Capture(open_log(str(path)), "numbers", 0, 1, schema=SCHEMA) as cap:
        cap.send(0, [{"n": 1}])
        cap.advance_to(1)
    return path


@pytest.mark.parametrize("name", ["bad name!", ".hidden", "-dash", "x" * 201, "ünï"])
def test_ls_and_verify_list_a_stray_folder_beside_the_healthy_streams(log_dir, name):
    shutil.copytree(log_dir / "numbers", log_dir / name)
    damaged = log_dir / "damaged"
    shutil.copytree(log_dir / "numbers", damaged)
    (damaged / "_header.json").write_bytes(b"{not json")
    ls = CliRunner().invoke(main, ["ls", str(log_dir), "--json"])
    rows = {row["stream"]: row for row in json.loads(ls.stdout)}
    assert set(rows) == {name, "numbers", "damaged"}, ls.output
    assert rows["numbers"]["finished"] and "error" in rows["damaged"]
    assert "not a valid stream name" in rows[name]["error"] and "Traceback" not in ls.output
    table = CliRunner().invoke(main, ["ls", str(log_dir)])
    assert "numbers" in table.stdout and "not a valid stream name" in table.stdout
    shutil.rmtree(log_dir / name)
    assert ls.exit_code == CliRunner().invoke(main, ["ls", str(log_dir)]).exit_code  # as for a damaged header
    shutil.copytree(log_dir / "numbers", log_dir / name)
    verify = CliRunner().invoke(main, ["verify", str(log_dir)])
    assert verify.exit_code == 1 and "not a valid stream name" in verify.stdout
    assert len([line for line in verify.stdout.splitlines() if line.startswith("PROBLEM")]) == 2


def test_the_header_of_a_stray_folder_is_a_typed_error_naming_it(log_dir):
    shutil.copytree(log_dir / "numbers", log_dir / "bad name!")
    log = open_log(str(log_dir))
    with pytest.raises(CorruptLogError, match="not a valid stream name") as ei:
        log.header("bad name!")
    assert ei.value.stream == "bad name!" and ei.value.path.endswith("bad name!")
    assert log.header("numbers").stream == "numbers"
    with pytest.raises(ValueError, match="invalid stream name"):  # a name asked for, not found in the log
        log.header("no such/name")
