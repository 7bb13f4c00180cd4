"""Writes the golden logs of a format version into tests/golden/logs-<version> (run once per version; the files
are committed and must never change; tests/golden/logs holds format 1.0).

    python tests/golden/make_golden_logs.py 2.0

The test ``tests/test_golden.py`` states the same content literally and reads these files with today's
code, so a change to the format that would make old logs unreadable (or read differently) fails it.
"""

from __future__ import annotations

import datetime as dt
import os
import sys

import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from capture import Capture  # noqa: E402
from eventlog import Antichain, StreamHeader, open_log  # noqa: E402

SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    pa.field("name", pa.string()),
    pa.field("ts", pa.timestamp("us", tz="UTC")),
    pa.field("tags", pa.list_(pa.string())),
    pa.field("loc", pa.struct([("lat", pa.float64()), ("lon", pa.float64())])),
])
UTC = dt.timezone.utc


def rows(*ids):
    return [
        {"id": i, "name": f"n{i}" if i % 2 else None, "ts": dt.datetime(2026, 1, 1, 0, 0, i, tzinfo=UTC),
         "tags": ["a", "b"][: i % 3], "loc": {"lat": i / 2, "lon": -i / 4} if i != 3 else None}
        for i in ids
    ]


CREATED = "2026-11-22T00:00:00.000Z"


def write_golden(log, enc: str) -> list[str]:  # noqa: ANN001 - any Log
    """The golden streams of encoding ``enc`` (``golden-<enc>``, two int64 parts; ``golden-<enc>-product``, one
    product:2 part), written into ``log``; returns their names. ``make_golden_kafka.py`` writes the same."""
    name = f"golden-{enc}"
    log.create_stream(StreamHeader(name, 2, SCHEMA, "int64", enc, created=CREATED))
    with Capture(log, name, 0, 2) as cap:
        cap.send(0, rows(1, 2))
        cap.advance_to(2)
        cap.send(2, rows(3))
        cap.send(5, rows(4, 5, 6))
    with Capture(log, name, 1, 2) as cap:
        cap.send(1, rows(7))
        cap.advance_to(4)
    product = f"golden-{enc}-product"
    log.create_stream(StreamHeader(product, 1, SCHEMA, "product:2", enc, created=CREATED))
    with Capture(log, product, 0, 1) as cap:
        cap.send((0, 1), rows(8))
        cap.advance_to(Antichain([(1, 0), (0, 2)]))
        cap.send((1, 1), rows(9))
    return [name, product]


def write_trimmed(log, enc: str) -> str:  # noqa: ANN001 - a file log
    """Format 2.1: ``golden-<enc>-trimmed``, two int64 parts in small segments, trimmed to the frontier [3] (a
    retention mark, FORMAT.md §10). Part 0 sends at time 4 before it completes time 2, so its cut keeps that
    record and readers skip the records of times 0..2 left in the segment they start in."""
    from eventlog.parts.trim import trim

    name = f"golden-{enc}-trimmed"
    log.create_stream(StreamHeader(name, 2, SCHEMA, "int64", enc, created=CREATED))
    with Capture(log, name, 0, 2) as cap:
        for t in range(3):
            cap.send(t, rows(t + 1))
            if t == 1:
                cap.send(4, rows(9))
            cap.advance_to(t + 1)
        cap.send(3, rows(4))
        cap.advance_to(5)
    with Capture(log, name, 1, 2) as cap:
        for t in range(5):
            cap.send(t, rows(t + 5))
            cap.advance_to(t + 1)
    trim(log, name, since=Antichain([3]))
    return name


def write_compacted(log, enc: str) -> str:  # noqa: ANN001 - a file log
    """Format 2.1: ``golden-<enc>-compacted``, one int64 part written by six writer incarnations (a micro-batch each,
    a segment each), the third dying after it sent at time 3 (a void message), then compacted (FORMAT.md §11): the
    first five segments are one compacted segment recording five runs of writer epochs, the sixth is left alone."""
    name = f"golden-{enc}-compacted"
    log.create_stream(StreamHeader(name, 1, SCHEMA, "int64", enc, created=CREATED))
    for b in range(5):
        cap = Capture(log, name, 0, 1)
        cap.send(b, rows(b + 1))
        cap.advance_to(b + 1)
        if b == 2:
            cap.send(b + 1, rows(9))
        cap.flush()
        cap.abort()
    with Capture(log, name, 0, 1) as cap:
        cap.send(5, rows(6))
    log.compact(name, target_bytes=1 << 20)
    return name


def main(root: str, version: str) -> None:
    if version == "2.1-compacted":  # compacted segments (format 2.1, FORMAT.md §11)
        log = open_log(root, format="2.0")
        for enc in ("arrow", "avro"):
            write_compacted(log, enc)
        return
    if version == "2.1":  # the version of retention marks: trimmed streams (the streams' headers say 2.0)
        log = open_log(root, format="2.0", segment_bytes=1)
        for enc in ("arrow", "avro"):
            write_trimmed(log, enc)
        return
    log = open_log(root, format=version)
    for enc in ("arrow", "avro"):
        write_golden(log, enc)


if __name__ == "__main__":
    # tests/golden/logs holds format 1.0 (written by the 1.0 code); this writes a new version's folder, once:
    #     python tests/golden/make_golden_logs.py 2.0   ->   tests/golden/logs-2.0
    version = sys.argv[1]
    target = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"logs-{version}")
    if os.path.exists(target):
        sys.exit(f"{target} exists: golden logs never change")
    main(target, version)
