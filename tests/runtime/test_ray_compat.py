"""Runtime channel bundles Ray Streaming's reader accepts (schemas/BUNDLE.md, "Ray Streaming compatibility"):
at most 2048 messages a bundle, barrier payloads in Ray's layout (u32 barrier type, u64 barrier id, data)."""

from __future__ import annotations

import os
import struct

import pyarrow as pa
import pytest

from eventlog import bundle
from runtime import ChannelError, WriterSettings
from runtime.channels.barrier import GLOBAL_BARRIER, HEADER_SIZE, MAX_BUNDLE_MESSAGES, decode_barrier, encode_barrier
from runtime.channels.factory import open_channel_store
from runtime.channels.payload import encode_batch
from tests.support.channels import channel_pair
from tests.support.golden import bundle_vector


def test_barrier_payload_is_rays_layout():
    assert HEADER_SIZE == 12 and GLOBAL_BARRIER == 0
    payload = encode_barrier(7)
    assert payload == struct.pack("<IQ", 0, 7) == bytes.fromhex("00000000" "0700000000000000")
    assert decode_barrier(payload) == 7
    assert decode_barrier(encode_barrier(2**64 - 1, b"carried")) == 2**64 - 1   # Ray's carried data after it
    assert decode_barrier((9).to_bytes(8, "little")) == 9                      # channels written before
    with pytest.raises(ChannelError, match="type 1"):
        decode_barrier(struct.pack("<IQ", 1, 7), channel="a.0-b.0")              # Ray's partial barrier
    for short in (b"", b"\x00" * 7, b"\x00" * 11):
        with pytest.raises(ChannelError, match="barrier payload"):
            decode_barrier(short)


def test_a_runtime_barrier_bundle_matches_the_golden_vector(tmp_path):
    """The barrier bundle a channel writer produces, byte for byte but its timestamp, against a vector
    written by hand from Ray's layout (tests/golden/bundles/ray_barrier.hex)."""
    store = open_channel_store(f"file://{tmp_path}/ch", "job")
    transfer, (w,), reader = channel_pair(store, ["a.0-b.0"])
    w.write(encode_batch(0, pa.record_batch({"x": [1]})))
    w.barrier(5)
    transfer.drain(5)
    d = tmp_path / "ch" / "job" / "g000001" / "a.0-b.0"
    (barrier,) = [b for b in bundle.iter_bundles((d / "00000000.bundles").read_bytes()) if b.type == bundle.BARRIER]
    want, _ = bundle_vector("ray_barrier")
    # the same bundle with the golden's timestamp (0): every other byte is the runtime's
    assert bundle.encode([bytes(barrier.payload(0))], bundle_ts=0, bundle_type=bundle.BARRIER,
                         last_id=barrier.last_id) == want
    assert bytes(barrier.payload(0)) == encode_barrier(5) and barrier.last_id == 1
    store.close()


def test_no_runtime_bundle_holds_more_than_2048_messages(tmp_path):
    with pytest.raises(ValueError, match="2048"):
        WriterSettings(bundle_messages=MAX_BUNDLE_MESSAGES + 1)
    store = open_channel_store(f"file://{tmp_path}/ch", "job")
    transfer, (w,), reader = channel_pair(store, ["a.0-b.0"], WriterSettings(bundle_messages=MAX_BUNDLE_MESSAGES,
                                                                       bundle_bytes=1 << 30, bundle_delay=0.5))
    small = encode_batch(0, pa.record_batch({"x": [1]}))
    for _ in range(10_000):
        w.write(small)
    transfer.drain(30)
    d = tmp_path / "ch" / "job" / "g000001" / "a.0-b.0"
    counts = [b.count for f in sorted(os.listdir(d)) for b in bundle.iter_bundles((d / f).read_bytes())
              if b.type == bundle.BUNDLE]
    assert sum(counts) == 10_000 and max(counts) <= MAX_BUNDLE_MESSAGES
    store.close()
