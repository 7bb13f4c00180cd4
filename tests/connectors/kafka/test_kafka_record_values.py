"""The values of Kafka records of format 2.0 for arrow streams (``ArrowCodec.record_encoder``): each is one whole
Arrow IPC stream that pyarrow opens alone, byte for byte the stream writer's output cut per event, written once
into one buffer (``encode_value``, what the part writer hands to the producer), and read back in place from any
bytes-like value. No broker needed."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventlog.encoding.arrow import _EOS, ArrowCodec, _ArrowSegmentEncoder
from eventlog.errors import CorruptLogError, LimitError
from eventlog.events import Messages, Progress
from eventlog.header import StreamHeader

SCHEMA = pa.schema([("n", pa.int64()), ("s", pa.string()), ("b", pa.binary())])

_rows = st.lists(st.tuples(st.one_of(st.none(), st.integers(-(1 << 63), (1 << 63) - 1)),
                           st.one_of(st.none(), st.text(max_size=20)),
                           st.one_of(st.none(), st.binary(max_size=300))), min_size=1, max_size=60)
_events = st.one_of(
    st.builds(lambda t, rows: Messages(t, pa.record_batch([pa.array([r[i] for r in rows], f.type)
                                                          for i, f in enumerate(SCHEMA)], schema=SCHEMA)),
              st.integers(0, 1 << 40), _rows),
    st.builds(lambda ups: Progress(tuple(sorted(ups.items()))),
              st.dictionaries(st.integers(0, 1 << 40), st.integers(-5, 5).filter(bool), min_size=1, max_size=4)),
)


def _codec(compression: str) -> ArrowCodec:
    return ArrowCodec(StreamHeader("s", 1, SCHEMA, version=(2, 0), compression=compression))


@pytest.mark.parametrize("compression", ["zstd", "lz4", "none"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=st.lists(_events, min_size=1, max_size=6), first=st.integers(1, 1 << 40))
def test_a_value_is_the_stream_writers_bytes_and_reads_back_from_any_buffer(compression, events, first):
    codec = _codec(compression)
    records, segment, decoder = codec.record_encoder(), _ArrowSegmentEncoder(codec), codec.record_decoder()
    for seq, event in enumerate(events, first):
        value = records.encode(seq, event)
        buffer = records.encode_value(seq, event)
        assert isinstance(buffer, pa.Buffer) and buffer.to_pybytes() == value
        assert value == codec.prefix + segment.encode(seq, event) + _EOS  # the bytes did not change
        (batch,) = list(ipc.open_stream(value))  # one standard stream of one batch
        assert batch.num_rows == (event.records.num_rows if isinstance(event, Messages) else 0)
        for given_value in (value, buffer, memoryview(b"pad" + value)[3:]):
            got_seq, got = decoder.decode(given_value)
            assert got_seq == seq
            if isinstance(event, Messages):
                assert got.time == event.time and got.records.equals(event.records)
            else:
                assert got == event


@pytest.mark.parametrize("compression", ["zstd", "lz4", "none"])
def test_a_damaged_value_is_refused_not_read(compression):
    codec = _codec(compression)
    value = codec.record_encoder().encode(5, Messages(1, pa.record_batch(
        [pa.array([1, 2]), pa.array(["a", "b"]), pa.array([b"x", b"y"])], schema=SCHEMA)))
    decoder = codec.record_decoder()
    for bad in (value[:-1], value[:-9] + _EOS, value[: len(codec.prefix)] + _EOS, b"\x00" + value[1:]):
        with pytest.raises(CorruptLogError):
            decoder.decode(bad)


def test_an_event_over_the_limits_is_refused_before_a_value_exists(monkeypatch):
    import eventlog.encoding.arrow as arrow

    monkeypatch.setattr(arrow, "MAX_EVENT_BYTES", 64)
    codec = _codec("none")
    batch = pa.record_batch([pa.array([1]), pa.array(["a" * 500]), pa.array([b"b"])], schema=SCHEMA)
    with pytest.raises(LimitError, match="stored size"):
        codec.record_encoder().encode_value(3, Messages(0, batch))
