"""Channel logs on files: one append-only file of concatenated bundles per channel segment.

Layout::

    <root>/<job>/g<generation:06d>/<channel>/<segment:08d>.bundles

``<channel>`` is ``<from op>.<instance>-<to op>.<instance>``. A segment is a plain concatenation of
bundles (``eventlog.bundle.iter_bundles`` reads one back whole); the writer ends a segment right after
each BARRIER bundle and starts the next segment number, so the data of one checkpoint epoch lives in one
file, and a reader that consumed a checkpoint's barrier deletes the segments up to it once the checkpoint
is complete. A reader tails the current segment (bytes after the last whole bundle wait for the rest) and
moves to the next one after reading its barrier. Channel files are not fsynced: they only need to outlive
the tasks of their generation, not the machine (a restart makes a new generation).
"""

from __future__ import annotations

import os
import shutil
import struct
from typing import Any, Sequence

import pyarrow as pa

from eventlog import bundle
from eventlog.errors import InvalidURIError

from ..checkpoints.marks import check_mark, write_mark
from ..checkpoints.storage import local_path
from ..errors import ChannelError
from .barrier import decode_barrier
from .base import ChannelAppender, ChannelStore, ChannelTail

_HEADER = struct.Struct("<IQQIII")

CHANNEL_READ_CHUNK = 4 << 20
"""The most bytes a file reader takes from one channel file per poll."""


def _segment_path(directory: str, segment: int) -> str:
    return os.path.join(directory, f"{segment:08d}.bundles")


class _FileAppender(ChannelAppender):
    def __init__(self, directory: str, channel: str) -> None:
        self._dir = directory
        self._channel = channel
        self._segment = 0
        self._fd: int | None = None
        os.makedirs(directory, exist_ok=True)

    def append(self, data: Any, *, barrier: bool = False) -> None:
        if self._fd is None:
            self._fd = os.open(_segment_path(self._dir, self._segment), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        view = memoryview(data)
        while view.nbytes:
            n = os.write(self._fd, view)
            view = view[n:]
        if barrier:
            os.close(self._fd)
            self._fd = None
            self._segment += 1

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class _FileChannel:
    __slots__ = ("position", "name", "dir", "segment", "fd", "offset", "need", "done_segments")

    def __init__(self, position: int, name: str, directory: str) -> None:
        self.position = position
        self.name = name
        self.dir = directory
        self.segment = 0
        self.fd: int | None = None
        self.offset = 0                # bytes of the current segment consumed (whole bundles)
        self.need = 0                  # bytes of the next bundle, once its header was seen
        self.done_segments: list[tuple[int, int]] = []  # (segment, checkpoint id of its closing barrier)


class _FileTail(ChannelTail):
    """Tails channel segments: each poll reads what the file holds beyond the whole bundles consumed (at most
    ``CHANNEL_READ_CHUNK``, or the next bundle when it is larger) into a new buffer of Arrow's memory pool, in
    one ``preadv`` at the channel's offset; the bundles (and the batches decoded from them) are views of that
    buffer. A bundle cut by the end of the read is read again, whole, by the next poll: no partial bundle is
    kept and nothing is copied but by the read itself."""

    def __init__(self, channels: list[_FileChannel]) -> None:
        self._channels = {c.position: c for c in channels}

    def poll(self, wanted: Sequence[int]) -> list[tuple[int, bundle.Bundle]]:
        out: list[tuple[int, bundle.Bundle]] = []
        for pos in wanted:
            self._read(self._channels[pos], out)
        return out

    def _read(self, ch: _FileChannel, out: list[tuple[int, bundle.Bundle]]) -> None:
        while True:
            if ch.fd is None:
                try:
                    ch.fd = os.open(_segment_path(ch.dir, ch.segment), os.O_RDONLY)
                except FileNotFoundError:
                    return
                ch.offset = ch.need = 0
            avail = os.fstat(ch.fd).st_size - ch.offset
            if avail < max(ch.need, 32):
                return
            buf = pa.allocate_buffer(min(avail, max(CHANNEL_READ_CHUNK, ch.need)))
            total = os.preadv(ch.fd, [memoryview(buf)], ch.offset)
            view = memoryview(buf)[:total]
            pos = 0
            switched = False
            while total - pos >= 32:
                magic, _ts, _last, _count, btype, raw = _HEADER.unpack_from(view, pos)
                if magic != bundle.MAGIC:
                    raise ChannelError(f"bad bundle magic 0x{magic:08x} in channel {ch.name!r}",
                                       path=_segment_path(ch.dir, ch.segment), offset=ch.offset + pos)
                end = pos + 32 + raw
                if end > total:
                    break
                try:
                    b = bundle.decode(view[pos:end])
                except bundle.BundleError as e:
                    raise ChannelError(f"bad bundle in channel {ch.name!r}: {e}",
                                       path=_segment_path(ch.dir, ch.segment), offset=ch.offset + pos) from None
                out.append((ch.position, b))
                pos = end
                if btype == bundle.BARRIER:
                    if pos != total or avail != total:
                        raise ChannelError(f"bytes after a barrier in channel {ch.name!r}",
                                           path=_segment_path(ch.dir, ch.segment), offset=ch.offset + pos)
                    ckpt = decode_barrier(b.payload(0), channel=ch.name)
                    ch.done_segments.append((ch.segment, ckpt))
                    os.close(ch.fd)
                    ch.fd = None
                    ch.segment += 1
                    switched = True
                    break
            if switched:
                continue
            ch.offset += pos
            ch.need = 32 + _HEADER.unpack_from(view, pos)[5] if total - pos >= 32 else 0
            if pos == 0 and avail > total:
                continue            # the next bundle is larger than one read: read it whole
            return

    def trim(self, position: int, checkpoint: int) -> None:
        ch = self._channels[position]
        keep = []
        for segment, ckpt in ch.done_segments:
            if ckpt <= checkpoint:
                try:
                    os.unlink(_segment_path(ch.dir, segment))
                except FileNotFoundError:
                    pass
            else:
                keep.append((segment, ckpt))
        ch.done_segments = keep

    def close(self) -> None:
        for ch in self._channels.values():
            if ch.fd is not None:
                os.close(ch.fd)
                ch.fd = None


class FileChannelStore(ChannelStore):
    """Channel logs under a local directory (see the module doc for the layout)."""

    def __init__(self, uri: str, job: str) -> None:
        self.uri = uri
        self.job = job
        path = local_path(uri)
        if path is None:
            raise InvalidURIError(f"file channels need a local path or file:/// URI, not {uri!r}")
        self.root = os.path.join(os.path.abspath(path), job)

    def _gen_dir(self, generation: int) -> str:
        return os.path.join(self.root, f"g{generation:06d}")

    def prepare(self, generation: int, channels: Sequence[str]) -> None:
        for name in channels:
            os.makedirs(os.path.join(self._gen_dir(generation), name), exist_ok=True)

    def mark(self, generation: int, token: str) -> None:
        write_mark(self._gen_dir(generation), generation, token)

    def check_mark(self, generation: int, token: str, *, task: str) -> None:
        check_mark(self._gen_dir(generation), generation, token, what="channels", uri=self.uri, task=task)

    def appender(self, generation: int, position: int, channel: str) -> ChannelAppender:
        return _FileAppender(os.path.join(self._gen_dir(generation), channel), channel)

    def tail(self, generation: int, channels: Sequence[tuple[int, str]]) -> ChannelTail:
        return _FileTail([_FileChannel(p, n, os.path.join(self._gen_dir(generation), n)) for p, n in channels])

    def drop_generations(self, below: int) -> None:
        if not os.path.isdir(self.root):
            return
        for entry in os.listdir(self.root):
            if entry.startswith("g") and entry[1:].isdigit() and int(entry[1:]) < below:
                shutil.rmtree(os.path.join(self.root, entry), ignore_errors=True)

    def __repr__(self) -> str:
        return f"FileChannelStore({self.root!r})"
