"""Encoding ahead (``sync="none"`` file logs, ``FilePartWriter._ahead``): the writer encodes a Messages event's
columns on a pool thread while the caller goes on, and writes the events in order later. The log it leaves must
be exactly the log of a writer that encodes in the call, for any schedule, schema and segment size; the errors
a caller is owed at once (the record limit, an event near a limit) still come from the call that appends; a
failure met later is raised by a later call (``advance_to``, ``flush``, ``close``) and the writer takes
nothing more; ``flush`` and ``close`` write everything; memory logs never encode ahead."""

from __future__ import annotations

import errno
import os

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capture import Capture
from connectors.files import storage as storage_mod
from eventlog import EventLogError, LimitError, Messages, open_log, workers
from eventlog.encoding import arrow_file, ipc_message
from eventlog.time import TimeType
from tests.support.strategies import expected_events, schedules

SCHEMA = pa.schema([("id", pa.int64()), ("s", pa.string()), ("f", pa.float64())])


def _batch(start: int, n: int) -> pa.RecordBatch:
    ids = np.arange(start, start + n)
    return pa.record_batch([pa.array(ids), pa.array([f"r{i:06d}" for i in ids]), pa.array(np.arange(n) / 7.0)],
                           schema=SCHEMA)


def _events(uri: str, stream: str, part: int = 0) -> list:
    return [(e.seq, e.event) for e in open_log(uri).reader(stream, part)]


def _writer(cap: Capture):  # noqa: ANN202 - the capture's FilePartWriter
    return cap._writer


@given(data=st.data(), segment_bytes=st.sampled_from([300, 5_000, 1 << 20]))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_schedule_leaves_the_log_a_writer_encoding_in_the_call_leaves(tmp_path_factory, data, segment_bytes):
    schema = pa.schema([("x", pa.int64()), ("s", pa.string())])
    steps = data.draw(schedules(schema, TimeType.parse("int64"), max_steps=16))
    flush_at = data.draw(st.sets(st.integers(0, 16), max_size=3))
    uris = {}
    for sync in ("none", "fsync"):
        uri = uris[sync] = str(tmp_path_factory.mktemp(f"ahead-{sync}"))
        log = open_log(uri, sync=sync, segment_bytes=segment_bytes)
        cap = Capture(log, "s", 0, 1, schema=schema)
        assert _writer(cap)._ahead == (sync == "none")
        for i, step in enumerate(steps):
            step.apply(cap)
            if i in flush_at and step.op != "close":
                cap.flush()
        if not steps or steps[-1].op != "close":
            cap.close()
    ahead, in_call = _events(uris["none"], "s"), _events(uris["fsync"], "s")
    assert ahead == in_call
    want = expected_events(steps, TimeType.parse("int64"))
    assert [e for _, e in ahead][: len(want)] == want
    assert [s for s, _ in ahead] == list(range(1, len(ahead) + 1))


def test_messages_are_encoded_on_the_pool_and_at_most_a_few_wait(tmp_path, monkeypatch):
    """Flat schemas are encoded ahead; the writer never holds more than ``_AHEAD`` events being encoded."""
    from connectors.files import writer as writer_mod

    started = []
    real = arrow_file.ArrowFileCodec.start

    def start(self, event, seq):  # noqa: ANN001, ANN202
        s = real(self, event, seq)
        if isinstance(event, Messages):
            started.append(s is not None)
        return s

    monkeypatch.setattr(arrow_file.ArrowFileCodec, "start", start)
    log = open_log(str(tmp_path), sync="none")
    cap = Capture(log, "s", 0, 1, schema=SCHEMA)
    most = 0
    for t in range(30):
        cap.send(t, _batch(t * 20_000, 20_000))
        most = max(most, sum(1 for _, _, s in _writer(cap)._pending if s is not None))
    cap.advance_to(30)
    cap.close()
    assert started and all(started)
    assert most <= writer_mod._AHEAD + 1
    got = [e for _, e in _events(str(tmp_path), "s")]
    assert [e.records for e in got if isinstance(e, Messages)] == [_batch(t * 20_000, 20_000) for t in range(30)]


@pytest.mark.parametrize("bound", ["count", "bytes"])
def test_events_being_encoded_are_bounded_by_count_and_by_bytes(tmp_path, monkeypatch, bound):
    """With slow encoding the caller runs ahead until ``_AHEAD`` events are in flight; when their records hold
    more than ``_AHEAD_BYTES``, only two are (large events). The log is whole either way."""
    import time

    from connectors.files import writer as writer_mod

    real = arrow_file._record_message

    def slow(*args):  # noqa: ANN002, ANN202
        time.sleep(0.02)
        return real(*args)

    monkeypatch.setattr(arrow_file, "_record_message", slow)
    if bound == "bytes":
        monkeypatch.setattr(writer_mod, "_AHEAD_BYTES", int(2.5 * _batch(0, 5_000).get_total_buffer_size()))
    log = open_log(str(tmp_path), sync="none")
    cap = Capture(log, "s", 0, 1, schema=SCHEMA)
    most = 0
    for t in range(3 * writer_mod._AHEAD):
        cap.send(t, _batch(t * 5_000, 5_000))
        flight = [s for _, _, s in _writer(cap)._pending if s is not None]
        most = max(most, len(flight))
        assert len(flight) <= 2 or sum(s.nbytes for s in flight) <= writer_mod._AHEAD_BYTES
    cap.close()
    assert most == (writer_mod._AHEAD if bound == "count" else 2)
    got = [e.records for _, e in _events(str(tmp_path), "s") if isinstance(e, Messages)]
    assert got == [_batch(t * 5_000, 5_000) for t in range(3 * writer_mod._AHEAD)]


def test_the_record_limit_is_raised_by_send_and_the_writer_goes_on(tmp_path, monkeypatch):
    monkeypatch.setattr(arrow_file, "MAX_EVENT_RECORDS", 5)
    log = open_log(str(tmp_path), sync="none")
    cap = Capture(log, "s", 0, 1, schema=SCHEMA)
    cap.send(0, _batch(0, 5))
    before = cap.next_seq
    with pytest.raises(LimitError, match="records in one event"):
        cap.send(1, _batch(5, 6))
    assert cap.next_seq == before
    cap.send(1, _batch(11, 2))
    cap.close()
    got = [e for _, e in _events(str(tmp_path), "s")]
    assert [e.records.num_rows for e in got if isinstance(e, Messages)] == [5, 2]


@pytest.mark.parametrize("limit", ["MAX_EVENT_VALUES", "_SAFE_BYTES"])
def test_events_near_a_limit_are_encoded_in_the_call(tmp_path, monkeypatch, limit):
    """An event the writer cannot prove far inside the limits is encoded by ``send`` itself (after the events
    queued before it): a LimitError comes from that ``send``, and the writer goes on."""
    if limit == "MAX_EVENT_VALUES":
        for mod in (arrow_file, ipc_message):
            monkeypatch.setattr(mod, "MAX_EVENT_VALUES", 40)
        big = _batch(0, 20)  # 20 rows x (3 + 2) columns = 100 values
    else:
        monkeypatch.setattr(arrow_file, "_SAFE_BYTES", 1_000)
        big = _batch(0, 400)
    log = open_log(str(tmp_path), sync="none")
    cap = Capture(log, "s", 0, 1, schema=SCHEMA)
    cap.send(0, _batch(0, 1))
    if limit == "MAX_EVENT_VALUES":
        with pytest.raises(LimitError, match="values"):
            cap.send(1, big)
    else:
        cap.send(1, big)  # within every real limit: written, in the call
        assert not _writer(cap)._pending
    cap.send(2, _batch(1, 1))
    cap.close()
    rows = [e.records.num_rows for _, e in _events(str(tmp_path), "s") if isinstance(e, Messages)]
    assert rows == ([1, 1] if limit == "MAX_EVENT_VALUES" else [1, 400, 1])


def test_a_write_failure_is_raised_by_a_later_call_and_the_writer_takes_nothing_more(tmp_path, monkeypatch):
    real = storage_mod._LocalAppend.write
    big_writes = []

    def write(self, data):  # noqa: ANN001, ANN202
        if len(data) > 10_000:
            big_writes.append(len(data))
            if len(big_writes) == 3:
                raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, data)

    monkeypatch.setattr(storage_mod._LocalAppend, "write", write)
    log = open_log(str(tmp_path), sync="none")
    cap = Capture(log, "s", 0, 1, schema=SCHEMA)
    with pytest.raises(EventLogError) as err:
        for t in range(10):
            cap.send(t, _batch(t * 2_000, 2_000))
            cap.advance_to(t + 1)
        cap.flush()
    assert "No space left" in str(err.value) and err.value.stream == "s" and err.value.part == 0
    with pytest.raises(EventLogError, match="failed earlier"):
        cap.send(99, _batch(0, 1))
    with pytest.raises(EventLogError, match="failed earlier"):
        _writer(cap).flush()
    cap.abort()
    monkeypatch.setattr(storage_mod._LocalAppend, "write", real)
    got = _events(str(tmp_path), "s")  # what was written before the failure, nothing after it
    msgs = [e for _, e in got if isinstance(e, Messages)]
    assert [m.records for m in msgs] == [_batch(t * 2_000, 2_000) for t in range(2)]
    assert [s for s, _ in got] == list(range(1, len(got) + 1))


def test_an_encoding_failure_on_the_pool_is_raised_by_a_later_call(tmp_path, monkeypatch):
    real = arrow_file._record_message
    calls = []

    def record_message(*args):  # noqa: ANN002, ANN202
        calls.append(1)
        if len(calls) == 2:
            raise pa.ArrowInvalid("simulated encoder failure")
        return real(*args)

    monkeypatch.setattr(arrow_file, "_record_message", record_message)
    log = open_log(str(tmp_path), sync="none")
    cap = Capture(log, "s", 0, 1, schema=SCHEMA)
    cap.send(0, _batch(0, 10))
    with pytest.raises(EventLogError, match="ArrowInvalid: simulated encoder failure") as err:
        cap.send(1, _batch(10, 10))  # its encoding fails on the pool: raised here if it failed already, else by
        cap.close()  # the call that writes it
    cap.abort()
    assert err.value.seq == 2
    got = [e for _, e in _events(str(tmp_path), "s")]
    assert [e.records for e in got if isinstance(e, Messages)] == [_batch(0, 10)]


def test_flush_writes_every_event_encoded_ahead(tmp_path):
    log = open_log(str(tmp_path), sync="none")
    cap = Capture(log, "s", 0, 1, schema=SCHEMA)
    for t in range(5):
        cap.send(t, _batch(t * 3_000, 3_000))
        cap.advance_to(t + 1)
    cap.flush()
    assert not _writer(cap)._pending
    got = [e for _, e in _events(str(tmp_path), "s")]  # another log object: reads the files
    assert [e.records for e in got if isinstance(e, Messages)] == [_batch(t * 3_000, 3_000) for t in range(5)]
    assert len(got) == 10
    cap.close()


def test_memory_logs_write_each_event_in_the_call(schema=SCHEMA):
    uri = f"memory://ahead-{os.getpid()}"
    log = open_log(uri)
    cap = Capture(log, "s", 0, 1, schema=SCHEMA)
    assert not _writer(cap)._ahead
    cap.send(0, _batch(0, 3))
    cap.advance_to(1)
    assert len(list(log.reader("s", 0))) == 2
    cap.close()


def test_other_schemas_and_encodings_are_encoded_in_the_call(tmp_path):
    nested = pa.schema([("l", pa.list_(pa.int64()))])
    cases = [(nested, "arrow", "int64"), (SCHEMA, "arrow", "product:2"), (SCHEMA, "avro", "int64")]
    for i, (schema, encoding, time) in enumerate(cases):
        log = open_log(str(tmp_path / str(i)), sync="none")
        cap = Capture(log, "s", 0, 1, schema=schema, encoding=encoding, time=time)
        t = (0, 0) if time != "int64" else 0
        rows = [{"l": [1, 2]}] if schema is nested else _batch(0, 3)
        cap.send(t, rows)
        assert not _writer(cap)._pending
        cap.close()
        assert len(_events(str(tmp_path / str(i)), "s")) == 2


def test_records_changed_by_the_caller_after_send_are_logged_as_sent(tmp_path):
    """A batch may share memory with the caller's numpy arrays (``pa.array(ndarray)`` copies nothing), which
    the caller may fill again once ``send`` returns: what is logged is what was sent. The pool is kept busy so
    that the event's encoding starts only after the caller changed its array."""
    import threading

    gate = threading.Event()
    blockers = [workers.pool().submit(gate.wait, 30) for _ in range(workers.size())]
    try:
        log = open_log(str(tmp_path), sync="none")
        cap = Capture(log, "s", 0, 1, schema=SCHEMA)
        ids = np.arange(1_000, dtype=np.int64)
        floats = np.arange(1_000) / 7.0
        batch = pa.record_batch([pa.array(ids), pa.array([f"r{i:06d}" for i in ids]), pa.array(floats)],
                                schema=SCHEMA)
        want = pa.record_batch([pa.array(ids.copy()), batch.column(1), pa.array(floats.copy())], schema=SCHEMA)
        cap.send(0, batch)
        assert _writer(cap)._pending  # queued behind the busy pool
        ids[:] = -1  # the caller reuses its arrays for the next batch
        floats[:] = 0.0
    finally:
        gate.set()
        for b in blockers:
            b.result()
    cap.close()
    got = [e for _, e in _events(str(tmp_path), "s") if isinstance(e, Messages)]
    assert [e.records for e in got] == [want]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX fork")
def test_a_forked_child_starts_its_own_pool(tmp_path):
    log = open_log(str(tmp_path), sync="none")
    with Capture(log, "s", 0, 1, schema=SCHEMA) as cap:
        cap.send(0, _batch(0, 3))
    assert workers.started()
    pid = os.fork()
    if pid == 0:  # the child: no pool inherited, and encoding ahead works
        code = 1
        try:
            if not workers.started():
                child = open_log(str(tmp_path / "child"), sync="none")
                with Capture(child, "s", 0, 1, schema=SCHEMA) as c:
                    c.send(0, _batch(0, 3))
                code = 0 if len(_events(str(tmp_path / "child"), "s")) == 2 else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
