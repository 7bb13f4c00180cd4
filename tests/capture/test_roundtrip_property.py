"""Random schemas and random valid capture schedules round-trip through both encodings and both logs,
event for event."""

from __future__ import annotations

import itertools
import shutil
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connectors import memory
from eventlog import open_log
from eventlog.time import TimeType
from tests.support.strategies import expected_events, run_capture, schedules, schemas

_names = itertools.count()


@st.composite
def captures(draw):
    schema = draw(schemas())
    time_type = TimeType.parse(draw(st.sampled_from(["int64", "product:2"])))
    peers = draw(st.integers(1, 3))
    plans = [draw(schedules(schema, time_type)) for _ in range(peers)]
    return schema, time_type, plans


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(captures(), st.sampled_from(["arrow", "avro"]), st.sampled_from(["file", "memory"]))
def test_capture_roundtrip(cap, encoding, kind):
    schema, time_type, plans = cap
    if kind == "file":
        root = tempfile.mkdtemp()
        uri = root
    else:
        root, uri = None, f"memory://prop-{next(_names)}"
    try:
        run_capture(open_log(uri, segment_bytes=2048), schema, time_type, plans, encoding)
        log = open_log(uri)  # a fresh log object reads what the first one wrote
        assert log.header("s").schema.equals(schema)
        for part, steps in enumerate(plans):
            got = [e.event for e in log.reader("s", part)]
            want = expected_events(steps, time_type)
            assert got == want
            seqs = [e.seq for e in log.reader("s", part)]
            assert seqs == list(range(1, len(want) + 1))
            # reading from any sequence id gives the suffix
            if want:
                k = len(want) // 2 + 1
                assert [e.event for e in log.reader("s", part, start=k)] == want[k - 1 :]
    finally:
        if root:
            shutil.rmtree(root, ignore_errors=True)
        else:
            memory.drop(uri[len("memory://"):])
