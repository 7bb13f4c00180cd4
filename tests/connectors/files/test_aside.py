"""Files beside the streams (``FileLog.list_aside``/``read_aside``: the plan documents of capture by
configuration): read and listed by name, bounded, and never outside the log's folder."""

from __future__ import annotations

import os

import pytest

from eventlog import open_log


def test_files_beside_the_streams_are_listed_and_read_bounded(tmp_path) -> None:
    os.makedirs(tmp_path / "_plans")
    (tmp_path / "_plans" / "q1.json").write_bytes(b"0123456789")
    log = open_log(str(tmp_path))
    assert log.list_aside("_plans") == ["q1.json"]
    assert log.read_aside("_plans", "q1.json", 4) == b"0123"
    with pytest.raises(FileNotFoundError):
        log.read_aside("_plans", "q2.json", 4)
    assert log.list_aside("_nothing") == []


@pytest.mark.parametrize("folder, name", [("..", "x"), ("_plans", "../secret"), ("a/b", "x"), ("_plans", ""),
                                          ("_plans", "."), ("_plans", "x\0y")])
def test_a_name_that_leaves_its_folder_is_refused(tmp_path, folder, name) -> None:
    (tmp_path / "secret").write_bytes(b"no")
    with pytest.raises(ValueError, match="is not a file or folder name"):
        open_log(str(tmp_path / "log")).read_aside(folder, name, 10)
