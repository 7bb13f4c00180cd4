"""Rewrite a stream with another part count or encoding, preserving times, records and completion."""

from __future__ import annotations

from eventlog.events import Messages
from eventlog.header import StreamHeader
from eventlog.log import Log, open_log
from eventlog.parts import Capture

from .keyhash import Key
from .replayer import Replayer


def copy(
    src_log: "Log | str",
    dst_log: "Log | str",
    stream: str,
    peers: int | None = None,
    key: Key | None = None,
    encoding: str | None = None,
    *,
    dst_stream: str | None = None,
    compression: str | None = None,
) -> StreamHeader:
    """Copy ``stream`` from ``src_log`` into ``dst_log`` (as ``dst_stream``, default the same name) with
    ``peers`` parts (default: the source's): source parts are assigned to destination parts (``i % peers``),
    or, with ``key``, records are repartitioned by key. ``encoding`` defaults to the source's. Each
    destination part is written by one replay worker: its records, and its merged frontier as progress.
    A destination part is finished only if every source part it reads is. ``compression`` (FORMAT.md §13) defaults
    to the source's for an Arrow copy of an Arrow stream, else to the destination log's default. Returns the
    destination header."""
    src = src_log if isinstance(src_log, Log) else open_log(src_log)
    dst = dst_log if isinstance(dst_log, Log) else open_log(dst_log)
    header = src.header(stream)
    peers = peers or header.peers
    name = dst_stream or stream
    encoding = encoding or header.encoding
    if compression is None and encoding == header.encoding == "arrow":
        compression = header.compression
    out = dst.create_stream(
        StreamHeader(name, peers, header.schema, header.time_type, encoding, compression=compression)
    )
    mode = "repartition" if key is not None else "assign"
    for j in range(peers):
        with Replayer(src, stream, j, peers, mode=mode, key=key) as r:
            cap = Capture(dst, name, j, peers)
            try:
                for ev in r:
                    if isinstance(ev, Messages):
                        cap.send(ev.time, ev.records)
                    else:
                        cap.advance_to(r.frontier)
            except BaseException:
                cap.abort()
                raise
            if cap.frontier.is_empty():
                cap.close()
            else:
                cap.abort()  # the source is not finished: neither is the copy
    return out
