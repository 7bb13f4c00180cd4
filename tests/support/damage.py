"""Damage for the trust tests: copies of logs with bytes changed or cut, bodies mutated as hypothesis draws, and
what every outcome must be (the events as written, or a typed error naming its place).

The file-log helpers read stream ``s`` part 0 (as ``make_part`` of ``tests/connectors/files/test_file_trust.py``
writes it); :func:`part_files` and :func:`index_entries` find the bytes of a 1.x part to damage."""

from __future__ import annotations

import os
import random
import shutil
import signal
from contextlib import contextmanager
from typing import Any, Iterator

import pyarrow as pa
from hypothesis import strategies as st

from connectors.files import FileLog
from connectors.files import index as ix
from eventlog import EventLogError, Messages, Progress, SchemaMismatchError, StreamHeader
from eventlog.encoding import codec_for

# -- outcomes ----------------------------------------------------------------------------------------------------


def same(a: Any, b: Any) -> bool:
    """Whether two entries are the same event with the same sequence id."""
    if a.seq != b.seq or type(a.event) is not type(b.event):
        return False
    if isinstance(a.event, Messages):
        return a.event.time == b.event.time and a.event.records.equals(b.event.records)
    return a.event == b.event


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Fail instead of hanging."""

    def alarm(*_: Any) -> None:
        raise TimeoutError(f"no answer within {seconds} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def read_outcome(root: str, original: list[Any], *, may_be_short: bool) -> int | None:
    """Read part 0: the events must be the original ones (a prefix when ``may_be_short``), else the reader
    raises an EventLogError naming the file and offset. Returns the events read, None after an error."""
    got: list[Any] = []
    try:
        with deadline(20):
            for e in FileLog(root).reader("s", 0):
                got.append(e)
    except EventLogError as e:
        assert e.path is not None and e.stream == "s" and e.part == 0, repr(e)
        assert e.offset is not None or e.seq is not None, repr(e)
        for a, b in zip(got, original):
            assert same(a, b), f"seq {a.seq} differs from the event written"
        return None
    assert len(got) <= len(original)
    for a, b in zip(got, original):
        assert same(a, b), f"seq {a.seq} differs from the event written"
    if not may_be_short:
        assert len(got) == len(original), f"{len(got)} of {len(original)} events, no error"
    return len(got)


class Crash(BaseException):
    """The writer process dies here (BaseException: nothing catches it on the way out)."""


# -- damaged files --------------------------------------------------------------------------------------------


def sample_offsets(n: int, rng: random.Random, must: list[int], budget: int) -> list[int]:
    """Offsets to damage in a file of ``n`` bytes: those of ``must`` inside it, and random others up to
    ``budget`` in all, sorted."""
    picks = set(o for o in must if 0 <= o < n)
    picks.update(rng.sample(range(n), min(n, max(0, budget - len(picks)))))
    return sorted(picks)


def damaged_copy(base: str, root: str, name: str, data: bytes, mode: str, off: int, rng: random.Random) -> None:
    """Make ``root`` a fresh copy of the log ``base`` whose file ``name`` (holding ``data``) has the byte at
    ``off`` changed (``mode`` "flip", by a bit pattern drawn from ``rng``) or is cut there ("truncate")."""
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(base, root)
    target = os.path.join(root, name)
    if mode == "flip":
        changed = bytearray(data)
        changed[off] ^= rng.choice((0x01, 0x80, 0xFF, 0x10))
        open(target, "wb").write(bytes(changed))
    else:
        open(target, "wb").write(data[:off])


def part_files(root, ext, stream="numbers", part=0) -> list[str]:
    """The files of a 1.x file-log part whose names end with ``ext``, sorted."""
    d = os.path.join(root, stream, f"part-{part:05d}")
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(ext))


def index_entries(index_path) -> list[ix.IndexEntry]:
    """The entries of a 1.x index file."""
    with open(index_path, "rb") as f:
        raw = f.read()
    return [ix.unpack_entry(raw, ix.HEADER_SIZE + i * ix.ENTRY_SIZE)
            for i in range((len(raw) - ix.HEADER_SIZE) // ix.ENTRY_SIZE)]


# -- damaged event bodies -----------------------------------------------------------------------------------------


def storable(schema: pa.Schema, encoding: str) -> bool:
    """Whether ``encoding`` can store ``schema`` (``codec_for`` takes it)."""
    try:
        codec_for(StreamHeader("s", 1, schema, "int64", encoding))
    except SchemaMismatchError:
        return False
    return True


def mutate(data: st.DataObject, body: bytes, others: list[bytes]) -> bytes:
    """``body`` changed one to three times as hypothesis draws: bits flipped, bytes and integers overwritten,
    bytes cut or inserted, truncated, or its tail replaced by the tail of one of ``others``."""
    raw = bytearray(body)
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        op = data.draw(st.sampled_from(["flip", "byte", "int", "cut", "insert", "truncate", "splice"]))
        i = data.draw(st.integers(0, max(len(raw) - 1, 0)))
        if op == "flip" and raw:
            raw[i] ^= 1 << data.draw(st.integers(0, 7))
        elif op == "byte" and raw:
            raw[i] = data.draw(st.sampled_from([0, 1, 0x7F, 0x80, 0xFF]))
        elif op == "int":
            width = data.draw(st.sampled_from([4, 8]))
            v = data.draw(st.sampled_from([0, 1, -1, 2**31 - 1, 2**31, 2**40, 2**62, -(2**62)]))
            raw[i : i + width] = v.to_bytes(16, "little", signed=True)[:width]
        elif op == "cut":
            del raw[i : i + data.draw(st.integers(1, 16))]
        elif op == "insert":
            raw[i:i] = data.draw(st.binary(min_size=1, max_size=8))
        elif op == "truncate":
            del raw[i:]
        elif others:
            other = data.draw(st.sampled_from(others))
            j = data.draw(st.integers(0, len(other)))
            raw[i:] = other[j:]
    return bytes(raw)


def check_valid(header: StreamHeader, event: object) -> None:
    """What every event a decoder returns satisfies, whatever bytes it came from."""
    t = header.time_type
    if isinstance(event, Messages):
        t.check(event.time)
        assert event.records.schema.equals(header.schema, check_metadata=False)
        assert event.records.num_rows >= 1
        event.records.validate(full=True)  # every offset, length and UTF-8 sequence within its buffers
    else:
        assert isinstance(event, Progress)
        for time, delta in event.updates:
            t.check(time)
            assert isinstance(delta, int) and -(2**63) <= delta < 2**63
