"""File channel tails read whole bundles into fresh Arrow buffers at the channel's offset (no partial bundle
kept and copied): every bundle comes out once, in order, byte for byte — across read-size boundaries, when
a bundle is larger than one read, when its bytes arrive in pieces — segments still end at their barrier, and
batches decoded from earlier reads stay valid."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest

from eventlog import bundle
from runtime.channels import file as channels_file
from runtime.channels.barrier import encode_barrier
from runtime.channels.file import FileChannelStore
from runtime.channels.payload import decode_batch, encode_batch
from runtime.errors import ChannelError


def _store(tmp_path) -> FileChannelStore:
    store = FileChannelStore(str(tmp_path / "ch"), "job")
    store.prepare(1, ["a.0-b.0"])
    return store


def _segment(tmp_path, n: int = 0) -> str:
    return str(tmp_path / "ch" / "job" / "g000001" / "a.0-b.0" / f"{n:08d}.bundles")


def _bundle(i: int, rows: int) -> bytes:
    payload = encode_batch(i, pa.record_batch({"v": np.arange(i, i + rows, dtype=np.int64)}))
    return bundle.encode([payload, payload], 2 * i + 1, bundle_ts=i)


def _drain(tail) -> list:
    got = []
    while True:
        more = tail.poll([0])
        if not more:
            return got
        got += [b for _, b in more]


@pytest.mark.parametrize("chunk", [64, 1000, 4096, 1 << 22])
def test_every_bundle_once_in_order_whatever_the_read_size(tmp_path, monkeypatch, chunk):
    monkeypatch.setattr(channels_file, "CHANNEL_READ_CHUNK", chunk)
    store = _store(tmp_path)
    app = store.appender(1, 0, "a.0-b.0")
    sent = [_bundle(i, rows) for i, rows in enumerate([1, 300, 5, 2000, 17, 1, 900, 3] * 3)]
    for data in sent:
        app.append(data)
    app.close()
    tail = store.tail(1, [(0, "a.0-b.0")])
    got = _drain(tail)
    assert [(b.ts, b.last_id, b.count) for b in got] == [(i, 2 * i + 2, 2) for i in range(len(sent))]
    batches = [decode_batch(b.payload(1)) for b in got]        # views of buffers read long ago: still valid
    for i, (t, batch) in enumerate(batches):
        assert t == i and batch.column(0).to_pylist()[:1] == [i]
    tail.close()


def test_a_bundle_arriving_in_pieces_comes_out_once_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(channels_file, "CHANNEL_READ_CHUNK", 256)
    store = _store(tmp_path)
    os.makedirs(os.path.dirname(_segment(tmp_path)), exist_ok=True)
    first, second = _bundle(0, 10), _bundle(1, 500)
    tail = store.tail(1, [(0, "a.0-b.0")])
    with open(_segment(tmp_path), "ab", buffering=0) as f:
        f.write(first + second[:20])                     # not even the second one's header
        assert [b.ts for b in _drain(tail)] == [0]
        f.write(second[20:1000])                         # its header, not its body
        assert _drain(tail) == []
        f.write(second[1000:])
        got = _drain(tail)
        assert [b.ts for b in got] == [1]
        assert decode_batch(got[0].payload(0))[1].num_rows == 500
        assert _drain(tail) == []
    tail.close()


def test_segments_end_at_their_barrier_and_bytes_after_one_are_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(channels_file, "CHANNEL_READ_CHUNK", 128)
    store = _store(tmp_path)
    app = store.appender(1, 0, "a.0-b.0")
    app.append(_bundle(0, 50))
    app.append(bundle.encode([encode_barrier(1)], bundle_ts=0, bundle_type=bundle.BARRIER, last_id=2), barrier=True)
    app.append(_bundle(1, 50))
    app.close()
    tail = store.tail(1, [(0, "a.0-b.0")])
    assert [b.type for b in _drain(tail)] == [bundle.BUNDLE, bundle.BARRIER, bundle.BUNDLE]
    tail.trim(0, 1)
    assert not os.path.exists(_segment(tmp_path, 0)) and os.path.exists(_segment(tmp_path, 1))
    tail.close()

    with open(_segment(tmp_path, 1), "ab") as f:         # a barrier, then more bytes in the same segment
        f.write(bundle.encode([encode_barrier(2)], bundle_ts=1, bundle_type=bundle.BARRIER, last_id=4) + _bundle(2, 3))
    tail = store.tail(1, [(0, "a.0-b.0")])
    tail._channels[0].segment = 1
    with pytest.raises(ChannelError, match="bytes after a barrier"):
        _drain(tail)
    tail.close()


def test_bad_magic_is_named_with_its_offset(tmp_path):
    store = _store(tmp_path)
    os.makedirs(os.path.dirname(_segment(tmp_path)), exist_ok=True)
    good = _bundle(0, 4)
    with open(_segment(tmp_path), "wb") as f:
        f.write(good + b"\x00" * 40)
    tail = store.tail(1, [(0, "a.0-b.0")])
    with pytest.raises(ChannelError, match="bad bundle magic") as e:
        _drain(tail)
    assert e.value.offset == len(good)
    tail.close()
