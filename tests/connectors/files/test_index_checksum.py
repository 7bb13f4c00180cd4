"""The event checksum is zlib's CRC-32 of the event's bytes, whatever their size and the object holding them, and
is summed in pieces small enough that ISA-L and zlib keep the GIL (a pool thread decoding ahead that lets it go
waits behind the replaying thread to get it back)."""

from __future__ import annotations

import zlib

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.files import index as ix

_SIZES = st.one_of(st.integers(0, 64), st.sampled_from([ix._PIECE - 1, ix._PIECE, ix._PIECE + 1, 2 * ix._PIECE,
                                                        3 * ix._PIECE + 7]), st.integers(0, 5 * ix._PIECE))


@settings(max_examples=60, deadline=None)
@given(size=_SIZES, seed=st.integers(0, 2**32 - 1), start=st.integers(0, 9),
       holder=st.sampled_from(["bytes", "memoryview", "arrow"]))
def test_checksum_is_zlibs_crc32_of_the_bytes(size: int, seed: int, start: int, holder: str) -> None:
    data = (seed.to_bytes(4, "little") * (size // 4 + 4))[start : start + size]
    assert len(data) == size
    obj = {"bytes": data, "memoryview": memoryview(b"!" + data)[1:],
           "arrow": pa.py_buffer(b"ab" + data + b"cd").slice(2, size)}[holder]
    assert ix.checksum(obj) == zlib.crc32(data)


def test_checksum_sums_pieces_no_larger_than_the_gil_keeping_size(monkeypatch) -> None:  # noqa: ANN001
    seen: list[int] = []
    real = ix._crc32

    def spy(view, value=0):  # noqa: ANN001, ANN202
        seen.append(len(view))
        return real(view, value)

    monkeypatch.setattr(ix, "_crc32", spy)
    data = bytes(range(256)) * 1200  # 307,200 bytes: a 10k-row event of the benchmark's stream
    assert ix.checksum(data) == zlib.crc32(data)
    assert sum(seen) == len(data)
    assert max(seen) <= ix._PIECE <= 5 * 1024  # ISA-L and CPython's zlib let the GIL go above 5 KiB
