"""A failed write says it was a write and names the file or object (issue 33 §7): creating a stream, appending to
a segment (a full disk: an OSError of ``write`` names no file) and putting a sealed segment on an object store.
Reads keep saying they were reads."""

from __future__ import annotations

import errno
import os

import pyarrow as pa
import pytest

from capture import Capture
from connectors.files import storage as storage_mod
from connectors.files.log import FileLog
from connectors.files.storage import LocalStorage, MemoryStorage
from eventlog import EventLogError, StreamHeader, open_log

SCHEMA = pa.schema([("n", pa.int64())])
FULL = OSError(errno.ENOSPC, "No space left on device")


def _batch(n: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([{"n": i} for i in range(n)], schema=SCHEMA)


def test_a_stream_that_cannot_be_created_says_write_and_names_its_folder(tmp_path):
    class Full(LocalStorage):
        def create_exclusive(self, path: str, data: bytes) -> bool:
            raise OSError(errno.ENOSPC, "No space left on device")

    root = str(tmp_path / "log")
    with pytest.raises(EventLogError) as ei:
        FileLog(root, storage=Full()).create_stream(StreamHeader("s", 1, SCHEMA))
    assert str(ei.value).startswith("cannot write the log's files: No space left on device")
    assert ei.value.path == os.path.join(root, "s") and ei.value.stream == "s"


def test_a_segment_that_cannot_be_appended_to_says_write_and_names_the_segment(tmp_path, monkeypatch):
    def full(self, data):  # noqa: ANN001, ANN202 - a full disk: the OSError names no file
        raise OSError(errno.ENOSPC, "No space left on device")

    log = open_log(str(tmp_path))
    cap = Capture(log, "s", 0, 1, schema=SCHEMA)
    monkeypatch.setattr(storage_mod._LocalAppend, "write", full)
    with pytest.raises(EventLogError) as ei:
        cap.send(0, _batch(3))
        cap.advance_to(1)
    assert str(ei.value).startswith("cannot write the log's files: No space left on device"), str(ei.value)
    assert ei.value.path is not None and os.path.dirname(ei.value.path).endswith("part=0")
    assert (ei.value.stream, ei.value.part) == ("s", 0)


def test_a_sealed_segment_the_store_refuses_says_write_and_names_the_object(tmp_path):
    class Refusing(MemoryStorage):
        def create_exclusive(self, path: str, data: bytes) -> bool:
            if path.endswith(".arrow"):
                raise OSError(errno.EACCES, "AccessDenied: the store refused the put")
            return super().create_exclusive(path, data)

    store = Refusing(objects=True)  # as on an object store: each sync puts the sealed segment whole
    log = FileLog("", uri="memory://refusing", storage=store)
    with pytest.raises(EventLogError) as ei:
        with Capture(log, "s", 0, 1, schema=SCHEMA) as cap:
            cap.send(0, _batch(2))
            cap.advance_to(1)
    assert str(ei.value).startswith("cannot write the log's files"), str(ei.value)
    assert ei.value.path and ei.value.path.endswith(".arrow")


def test_reads_still_say_read(tmp_path, monkeypatch):
    log = open_log(str(tmp_path))
    with Capture(log, "s", 0, 1, schema=SCHEMA) as cap:
        cap.send(0, _batch(2))

    def unreadable(self, path):  # noqa: ANN001, ANN202
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(LocalStorage, "open_read", unreadable)
    with pytest.raises(EventLogError) as ei:
        list(open_log(str(tmp_path)).reader("s", 0))
    assert str(ei.value).startswith("cannot read the log's files: Input/output error"), str(ei.value)
