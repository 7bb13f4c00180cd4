"""``Capture.flush()`` makes what was sent durable and visible at once whatever the writer's ``sync`` mode: a
``sync="none"`` file log keeps events in its buffers (on an object store: in its unsealed segment) until then;
after it, a reader opened anew sees every event, and the writer goes on appending."""

from __future__ import annotations

import pyarrow as pa
import pytest

from capture import Capture
from connectors.files.log import FileLog
from connectors.files.storage import MemoryStorage
from eventlog import EventLogError, Messages, StreamHeader, open_log

SCHEMA = pa.schema([("x", pa.int64())])


def _batch(start: int, n: int) -> pa.RecordBatch:
    return pa.record_batch([pa.array(range(start, start + n), pa.int64())], schema=SCHEMA)


@pytest.fixture(params=["disk", "objects"])
def logs(request, tmp_path):
    """``(writer's log, a function opening the same log anew as another client would)``."""
    if request.param == "disk":
        uri = str(tmp_path / "log")
        return open_log(uri, sync="none"), lambda: open_log(uri)
    store = MemoryStorage(objects=True)
    return FileLog("logs", storage=store, sync="none"), lambda: FileLog("logs", storage=store)


def _seen(log) -> list[int]:
    with log.reader("s", 0) as r:
        return [x for e in r if isinstance(e.event, Messages) for x in e.event.records.column("x").to_pylist()]


def test_flush_makes_a_sync_none_writers_events_visible(logs):
    log, reopen = logs
    log.create_stream(StreamHeader("s", 1, SCHEMA, "int64", "arrow"))
    cap = Capture(log, "s", 0, 1)
    cap.send(0, _batch(0, 3))
    cap.advance_to(1)                      # sync="none": advance_to promises nothing durable
    assert _seen(reopen()) == []
    cap.flush()
    assert _seen(reopen()) == [0, 1, 2]
    cap.send(1, _batch(3, 2))              # the writer goes on after a flush
    cap.flush()
    assert _seen(reopen()) == [0, 1, 2, 3, 4]
    cap.close()
    assert _seen(reopen()) == [0, 1, 2, 3, 4]


def test_flush_of_a_closed_capture_is_refused(tmp_path):
    log = open_log(str(tmp_path / "log"))
    log.create_stream(StreamHeader("s", 1, SCHEMA, "int64", "arrow"))
    cap = Capture(log, "s", 0, 1)
    cap.close()
    with pytest.raises(EventLogError, match="closed"):
        cap.flush()
