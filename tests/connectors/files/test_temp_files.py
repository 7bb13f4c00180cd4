"""Temporary files are created safely wherever the project writes one (issue 33 §5): exclusively (``O_EXCL``),
under an unpredictable name beside the target, with the mode a plain ``open`` gives. A file or symlink planted
at a temporary name — the name the writer used to pick, ``.<name>.<pid>.tmp`` for ``replay export`` and
``<path>.<pid>.<thread>.tmp`` for the storage layer, or whichever name comes up — is never written through.

Covered: ``replay export`` in every format, and the storage layer's atomic writes (``write_file``,
``create_exclusive``) that file-log headers and indexes and the runtime's checkpoints use."""

from __future__ import annotations

import os
import tempfile
import threading

import pyarrow as pa
import pytest
from click.testing import CliRunner

from capture import Capture
from connectors.files.storage import LocalStorage, temp_beside
from eventlog import open_log
from replay.cli import main

SCHEMA = pa.schema([("n", pa.int64())])
VICTIM = b"a file the user can write, which export must not touch\n"


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@pytest.fixture
def victim(tmp_path):
    path = tmp_path / "victim.txt"
    path.write_bytes(VICTIM)
    return path


@pytest.fixture
def log_dir(tmp_path):
    path = str(tmp_path / "log")
    with Capture(open_log(path), "s", 0, 1, schema=SCHEMA) as cap:
        cap.send(0, [{"n": 1}, {"n": 2}])
        cap.advance_to(1)
    return path


@pytest.mark.parametrize("fmt", ["parquet", "arrow", "avro", "jsonl"])
def test_export_does_not_follow_a_link_planted_at_its_old_temp_name(tmp_path, log_dir, victim, fmt):
    out = tmp_path / f"out.{fmt}"
    os.symlink(victim, tmp_path / f".out.{fmt}.{os.getpid()}.tmp")  # the name export used to write through
    result = CliRunner().invoke(main, ["export", log_dir, "s", str(out)])
    assert result.exit_code == 0, result.output
    assert victim.read_bytes() == VICTIM
    assert out.is_file() and not out.is_symlink() and out.stat().st_size > 0
    assert out.stat().st_mode & 0o777 == 0o666 & ~_umask()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp") and not p.is_symlink()) == []


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_export_takes_another_name_when_one_is_taken(tmp_path, log_dir, victim, fmt, monkeypatch):
    """Whatever temporary name comes up, a link already there is not opened: creation is exclusive, and the next
    name is tried."""
    out = tmp_path / f"out.{fmt}"
    os.symlink(victim, tmp_path / f".out.{fmt}.PLANTED.tmp")
    names = iter(["PLANTED", "second"])
    monkeypatch.setattr(tempfile, "_get_candidate_names", lambda: names)
    result = CliRunner().invoke(main, ["export", log_dir, "s", str(out)])
    assert result.exit_code == 0, result.output
    assert victim.read_bytes() == VICTIM and out.stat().st_size > 0


def test_storage_writes_do_not_follow_links_at_their_old_temp_names(tmp_path, victim):
    st = LocalStorage()
    target = tmp_path / "doc.json"
    old = f"{target}.{os.getpid()}.{threading.get_ident()}.tmp"
    os.symlink(victim, old)
    st.write_file(str(target), b"new contents")
    assert target.read_bytes() == b"new contents" and victim.read_bytes() == VICTIM
    assert target.stat().st_mode & 0o777 == 0o666 & ~_umask()
    created = tmp_path / "once.json"
    os.symlink(victim, f"{created}.{os.getpid()}.{threading.get_ident()}.tmp")
    assert st.create_exclusive(str(created), b"first") is True
    assert st.create_exclusive(str(created), b"second") is False
    assert created.read_bytes() == b"first" and victim.read_bytes() == VICTIM


def test_temp_names_are_exclusive_and_unpredictable(tmp_path, victim, monkeypatch):
    target = str(tmp_path / "x.bin")
    fd1, a = temp_beside(target)
    fd2, b = temp_beside(target)
    os.close(fd1)
    os.close(fd2)
    assert a != b and os.path.dirname(a) == str(tmp_path) and a.endswith(".tmp")
    os.symlink(victim, tmp_path / ".x.bin.PLANTED.tmp")
    names = iter(["PLANTED", "free"])
    monkeypatch.setattr(tempfile, "_get_candidate_names", lambda: names)
    fd, name = temp_beside(target)
    os.close(fd)
    assert name.endswith(".x.bin.free.tmp") and victim.read_bytes() == VICTIM
