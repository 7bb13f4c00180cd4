"""Sinks with exactly-once output: output is staged per checkpoint epoch and committed when it completes.

A sink writes ``parts`` output parts (default: its parallelism at the first run; fixed afterwards, kept in
checkpoints); instance ``j`` of ``P`` owns the parts ``p % P == j`` and spreads its input over them. Between two
barriers, everything a part receives (record batches and, for log sinks, frontier changes) is staged in a file of
that *epoch* under the checkpoint directory (``<checkpoints>/<job>/staging/<sink>/p<part>/``, concatenated bundles;
``runtime.checkpoints.storage``): on the local disk appended as it comes and fsynced at the barrier; on S3, which
cannot append, kept in memory and put as one object at the barrier (so a part holds one epoch's output in memory).
The barrier's snapshot lists the part's staged epochs not yet committed, with their item counts, byte sizes and
CRC-32s, and ``base``: the output position where the first of them starts. The sink *commits* an epoch — checks its
file's size and CRC, appends its items to the output, deletes the file — once the job can no longer restore from
before the epoch's checkpoint: when a later checkpoint is complete too (the job keeps the previous complete
checkpoint to fall back to if the latest one is damaged, so output waits one more checkpoint), or the checkpoint is
final, or the job stops at it (``runtime.checkpoints.store``, the commit horizon).

Commits are idempotent, so a restart simply commits again every epoch its restored state lists: the output
position (a log part's next sequence id; a callable sink's delivered-item cursor, saved after each item)
says how much of an epoch was already committed, and only the rest is written. Output after the
checkpoint a restart restores from was never committed, so it is neither lost (the restarted job produces it
again) nor duplicated. The callable sink's cursor is a checksummed JSON document (``runtime.checkpoints.formats``)
plus, on a local disk, a log of checksummed records appended after each call (``CallableSink``).

Every staged file is checked before anything is delivered from it: its size (from a stat or the object's
listing, before a byte is read) and then its CRC; each bundle's declared length is bounded by what is left of
the file before it is read. A missing or damaged file of an epoch not yet committed is a
``CheckpointCorruptError`` naming it (``file:`` the local path or ``s3://`` URI).
"""

from __future__ import annotations

import os
import re
import struct
import time as _time
import zlib
from typing import Any, Callable, Iterator

import pyarrow as pa

from capture import Capture
from eventlog import bundle
from eventlog.antichain import Antichain
from eventlog.errors import PartLockedError, ProgressError, StreamNotFoundError
from eventlog.log import open_log

from .channels.payload import decode_batch, decode_frontier, encode_batch, encode_frontier
from .checkpoints.formats import encode_document, read_document
from .checkpoints.keygroups import parts_of_instance
from .checkpoints.storage import StateFs, open_state_fs
from .checkpoints.store import StateCheck
from .errors import CheckpointCorruptError, CheckpointError, FinishedOutputError, RescaleError
from .operators import Operator, OperatorContext, check_state, int_keyed, is_int

_ITEM_DATA = bundle.MSG_DATA
_ITEM_FRONTIER = bundle.MSG_EVENT_PROGRESS
_EPOCH_FILE = re.compile(r"^g\d{6,}-after\d{10,}\.bundles$")
_CHUNK = 1 << 20
_HEADER = struct.Struct("<IQQIII")


def read_bundles(path: str, fs: StateFs, size: int | None = None) -> Iterator[tuple[int, memoryview]]:
    """``(message type, payload)`` of each single-message bundle in a staging file, reading one at a time;
    ``size``: the file's size when known (checked), which bounds every length read from it."""
    where = fs.display(path)
    left = fs.size(path) if size is None else size
    with fs.open_read(path) as f:
        while True:
            head = f.read(32)
            if not head:
                return
            if len(head) < 32:
                raise CheckpointError("torn bundle at the end of a staging file", path=where)
            raw = _HEADER.unpack(head)[5]
            if raw > left - 32:     # bounded before anything is allocated for it
                raise CheckpointError("torn bundle at the end of a staging file (it declares more bytes than the "
                                      "file has)", path=where)
            body = f.read(raw)
            if len(body) < raw:
                raise CheckpointError("torn bundle at the end of a staging file", path=where)
            left -= 32 + raw
            try:
                b = bundle.decode(head + body)
            except bundle.BundleError as e:
                raise CheckpointError(f"bad bundle in a staging file: {e}", path=where) from None
            for i in range(b.count):
                yield int(b.types[i]), b.payload(i)


def _file_sum(fs: StateFs, path: str, limit: int) -> tuple[int, int]:
    """``(size, CRC-32)`` of a file, read in chunks, at most ``limit + 1`` bytes of it."""
    crc = size = 0
    with fs.open_read(path) as f:
        while size <= limit:
            chunk = f.read(min(_CHUNK, limit + 1 - size))
            if not chunk:
                break
            size += len(chunk)
            crc = zlib.crc32(chunk, crc)
    return size, crc


def _check_epoch_file(fs: StateFs, path: str, size: int, crc: int) -> None:
    """Raise ``CheckpointCorruptError`` unless the staged epoch file has the size and CRC its snapshot says
    (its size is compared before any of it is read)."""
    where = fs.display(path)
    try:
        got = fs.size(path)
        if got == size:
            got, got_crc = _file_sum(fs, path, size)
    except FileNotFoundError:
        raise CheckpointCorruptError("staged epoch file is missing", path=where) from None
    except CheckpointError:
        raise
    except OSError as e:
        raise CheckpointCorruptError(f"staged epoch file cannot be read: {e.strerror or e}", path=where) from None
    if got != size:
        raise CheckpointCorruptError(f"staged epoch file has {got} bytes, its checkpoint says {size}", path=where,
                                     offset=min(got, size))
    if got_crc != crc:
        raise CheckpointCorruptError("staged epoch file fails its checksum (it was damaged or edited)", path=where)


class _Part:
    """Staging state of one output part."""

    __slots__ = ("part", "dir", "base", "pending", "frontier", "out", "path", "count", "size", "crc")

    def __init__(self, part: int, directory: str, base: int, pending: list, frontier: tuple[int, ...]) -> None:
        self.part = part
        self.dir = directory
        self.base = base                     # output position where pending[0] starts
        self.pending: list[tuple[int, str, int, int, int]] = pending   # (checkpoint, file, items, size, crc)
        self.frontier = frontier             # the staged frontier (log sinks)
        self.out: Any = None                 # the open epoch file (StateFs.stage: a local file or an object's bytes)
        self.path: str | None = None
        self.count = 0                       # items in the open epoch file
        self.size = 0                        # its bytes
        self.crc = 0                         # their CRC-32


class StagedSink(Operator):
    """Base of the exactly-once sinks (see the module doc); subclasses say how output is committed."""

    stages_frontier = False

    def __init__(self, parts: int | None = None) -> None:
        self.parts = parts

    # -- subclass hooks -----------------------------------------------------------------------------

    def _position(self, part: int) -> int:
        """The part's output position: items already committed to it, in whatever unit it counts."""
        raise NotImplementedError

    def _deliver(self, part: int, kind: int, payload: Any) -> None:
        """Commit one staged item."""
        raise NotImplementedError

    def _end_epoch(self, part: int) -> None:
        """Make a committed epoch durable."""

    def _check_fresh(self, part: int) -> None:
        """Raise when output part ``part``, which no checkpoint of this job lists, cannot take a new run's
        output."""

    # -- life cycle ---------------------------------------------------------------------------------

    def open(self, ctx: OperatorContext, state: dict[str, Any] | None) -> None:
        super().open(ctx, state)
        inst = (state or {}).get("instance") or {}
        self.n_parts = inst.get("parts") or self.parts or ctx.parallelism
        if ctx.parallelism > self.n_parts:
            raise RescaleError(f"sink {ctx.node!r} writes {self.n_parts} parts; its parallelism "
                               f"{ctx.parallelism} may not exceed that (set parts= when building the job)")
        self._last_barrier = (state or {}).get("checkpoint", 0)
        self._gen = ctx.generation
        self._rr = 0
        saved = (state or {}).get("parts", {})
        self._fs, self._root = open_state_fs(ctx.checkpoint_dir)
        self._open_parts(parts_of_instance(ctx.index, self.n_parts, ctx.parallelism))
        self._parts: dict[int, _Part] = {}
        for p in parts_of_instance(ctx.index, self.n_parts, ctx.parallelism):
            d = self._staging_dir(self._fs, self._root, ctx.node, p)
            self._fs.make_dirs(d)
            s = saved.get(p)
            if s is None:
                self._check_fresh(p)
                part = _Part(p, d, self._position(p), [], (0,))
            else:
                part = _Part(p, d, s["base"], [tuple(x) for x in s["pending"]], tuple(s["frontier"]))
            self._parts[p] = part
            self._commit(part, ctx.commit_horizon)   # what the restored checkpoint lists, up to the horizon
            self._clean(part)
        self._owned = sorted(self._parts)

    @staticmethod
    def _staging_dir(fs: StateFs, root: str, node: str, part: int) -> str:
        return fs.join(root, "staging", node, f"p{part:05d}")

    def verify_state(self, state: dict[str, Any] | None, check: StateCheck) -> None:
        """Check the restored parts and every staged epoch file they list that still exists (size and CRC);
        a missing file of an epoch after the commit horizon (never committed, so never deleted) is damage."""
        super().verify_state(state, check)
        where = check.where
        st = state or {}
        inst = st.get("instance") or {}
        fs, root = open_state_fs(check.checkpoint_dir)
        check_state(isinstance(inst, dict) and (inst.get("parts") is None or is_int(inst.get("parts"), 1)),
                    "'instance' is not {parts: int >= 1}", where)
        check_state(st.get("checkpoint") is None or is_int(st.get("checkpoint")), "'checkpoint' is not an int", where)
        for p, s in int_keyed(st.get("parts", {}), where, "'parts'").items():
            check_state(isinstance(s, dict) and is_int(s.get("base")) and isinstance(s.get("pending"), (list, tuple))
                        and isinstance(s.get("frontier"), (list, tuple)) and all(is_int(t) for t in s["frontier"]),
                        f"part {p} is not {{base: int, pending: [...], frontier: [int...]}}", where)
            d = self._staging_dir(fs, root, check.node, p)
            for e in s["pending"]:
                check_state(isinstance(e, (list, tuple)) and len(e) == 5 and is_int(e[0], 1)
                            and isinstance(e[1], str) and _EPOCH_FILE.match(e[1]) is not None
                            and is_int(e[2]) and is_int(e[3]) and is_int(e[4]) and e[4] < 1 << 32,
                            f"part {p} lists a staged epoch that is not (checkpoint, file name, items, size, crc32): "
                            f"{str(e)[:100]}", where)
                path = fs.join(d, e[1])
                if fs.exists(path):
                    _check_epoch_file(fs, path, e[3], e[4])
                elif e[0] > check.horizon:
                    raise CheckpointCorruptError(f"staged epoch of checkpoint {e[0]} (never committed) is missing",
                                                 path=fs.display(path))
            self._verify_part(fs, d, p)

    def _verify_part(self, fs: StateFs, directory: str, part: int) -> None:
        """Check what else a part keeps in its staging directory (a callable sink's cursor)."""

    def _open_parts(self, parts: list[int]) -> None:
        """Prepare the output parts this instance owns (before positions are read)."""

    def _clean(self, part: _Part) -> None:
        """Delete staging files no pending epoch refers to (a failed generation's uncommitted output)."""
        keep = {e[1] for e in part.pending}
        for name in self._fs.list(part.dir):
            if name.endswith(".bundles") and name not in keep:
                self._fs.remove(self._fs.join(part.dir, name))

    # -- staging ------------------------------------------------------------------------------------

    def _stage(self, part: _Part, kind: int, payload: Any, ts: int) -> None:
        if part.out is None:
            part.path = f"g{self._gen:06d}-after{self._last_barrier:010d}.bundles"
            part.out = self._fs.stage(self._fs.join(part.dir, part.path))
            part.count = part.size = part.crc = 0
        part.count += 1
        data = bundle.encode([payload], part.count, kind, bundle_ts=min(ts, (1 << 63)))
        view = memoryview(data)
        part.size += view.nbytes
        part.crc = zlib.crc32(view, part.crc)
        part.out.write(view)

    def process(self, time: int, batch: pa.RecordBatch) -> None:
        part = self._parts[self._owned[self._rr % len(self._owned)]]
        self._rr += 1
        self._stage(part, _ITEM_DATA, encode_batch(time, batch), time)

    def on_frontier(self, frontier: Antichain) -> None:
        if not self.stages_frontier:
            return
        elements = frontier.elements
        for part in self._parts.values():
            if part.frontier and elements != part.frontier and (not elements or elements[0] > part.frontier[0]):
                part.frontier = elements
                self._stage(part, _ITEM_FRONTIER, encode_frontier(list(elements)), elements[0] if elements else 0)

    def snapshot(self, checkpoint: int) -> dict[str, Any]:
        out = {}
        for part in self._parts.values():
            if part.out is not None:
                part.out.finish()       # local: fsync; S3: the epoch's one PUT
                part.out = None
                part.pending.append((checkpoint, part.path, part.count, part.size, part.crc))
            out[part.part] = {"base": part.base, "pending": list(part.pending), "frontier": list(part.frontier)}
        self._last_barrier = checkpoint
        return {"parts": out, "instance": {"parts": self.n_parts}, "checkpoint": checkpoint}

    # -- committing ---------------------------------------------------------------------------------

    def notify_complete(self, checkpoint: int) -> None:
        for part in self._parts.values():
            self._commit(part, checkpoint)

    def _commit(self, part: _Part, upto: int | None) -> None:
        while part.pending and part.pending[0][0] <= upto:
            ckpt, name, n, size, crc = part.pending[0]
            done = self._position(part.part) - part.base
            if done < 0:
                raise CheckpointError(f"output part {part.part} of sink {self.ctx.node!r} is at {done + part.base}, "
                                      f"before its checkpointed position {part.base}", part=part.part)
            path = self._fs.join(part.dir, name)
            if done < n:
                _check_epoch_file(self._fs, path, size, crc)     # nothing is delivered from a damaged file
                for i, (kind, payload) in enumerate(read_bundles(path, self._fs, size)):
                    if i >= done:
                        self._deliver(part.part, kind, payload)
                self._end_epoch(part.part)
            part.base += n
            part.pending.pop(0)
            self._fs.remove(path)

    def close(self) -> None:
        for part in getattr(self, "_parts", {}).values():
            if part.out is not None:
                part.out.abort()
                part.out = None


_CURSOR_RECORD = struct.Struct("<IQI")
"""A cursor log record: magic, calls made, CRC-32 of the 12 bytes before it."""
_CURSOR_MAGIC = 0x52435345   # b"ESCR"
_CURSOR_LOG_LIMIT = 64 << 20


def _read_cursor_log(fs: StateFs, path: str) -> int | None:
    """The calls count of the last record of a callable sink's cursor log (None: no log, or no record). A
    trailing partial record is an append cut short (the machine stopped during it; the call it would have
    counted is made again) and is ignored; any other record that is not a well-formed, checksummed count
    above the one before it is damage: ``CheckpointCorruptError`` naming the file and offset."""
    if not fs.exists(path):
        return None
    data = fs.read(path, _CURSOR_LOG_LIMIT)
    size = _CURSOR_RECORD.size
    last = None
    for off in range(0, len(data) - len(data) % size, size):
        magic, calls, crc = _CURSOR_RECORD.unpack_from(data, off)
        if magic != _CURSOR_MAGIC or zlib.crc32(data[off:off + 12]) != crc:
            raise CheckpointCorruptError("sink cursor log record fails its checksum (it was damaged or edited)",
                                         path=fs.display(path), offset=off)
        if last is not None and calls <= last:
            raise CheckpointCorruptError(f"sink cursor log goes back from {last} to {calls} calls",
                                         path=fs.display(path), offset=off)
        last = calls
    return last


class CallableSink(StagedSink):
    """Calls ``fn(time, table)`` for the sink's records, only once they belong to a complete checkpoint.

    Each call is one batch the sink received, in the order received per part. A cursor per part counts the
    calls made; it is saved after each call, so after a restart only the calls not yet made are made —
    unless the process died between a call returning and its cursor being saved, in which case that one
    call is made again (the only window; a sink whose effect must be exactly-once even then should write to
    a log with ``to_log``).

    The cursor is two files in the part's staging folder: ``cursor``, a checksummed document rewritten
    (temporary file and rename) after each committed epoch, and on a local disk ``cursor.log``, to which each
    call appends one 16-byte checksummed record of the calls made so far (one ``write``, where a document
    rewrite per call cost several file operations) and which is emptied once the document holds its count.
    The position is the larger of the two. On object stores (no append) the document is rewritten after
    each call instead."""

    def __init__(self, fn: Callable[[int, pa.Table], None], parts: int | None = None) -> None:
        super().__init__(parts)
        self.fn = fn

    def _cursor_path(self, part: int) -> str:
        return self._fs.join(self._staging_dir(self._fs, self._root, self.ctx.node, part), "cursor")

    @staticmethod
    def _read_cursor(fs: StateFs, path: str) -> int:
        calls = 0
        if fs.exists(path):
            body = read_document(path, "cursor", limit=4096, fs=fs)
            calls = body.get("calls")
            if not is_int(calls):
                raise CheckpointCorruptError("sink cursor's 'calls' is not an int >= 0", path=fs.display(path))
        if not fs.objects:
            logged = _read_cursor_log(fs, path + ".log")
            if logged is not None and logged > calls:
                calls = logged
        return calls

    def _verify_part(self, fs: StateFs, directory: str, part: int) -> None:
        self._read_cursor(fs, fs.join(directory, "cursor"))

    def _position(self, part: int) -> int:
        cursors = self.__dict__.setdefault("_cursors", {})
        if part not in cursors:
            cursors[part] = self._read_cursor(self._fs, self._cursor_path(part))
        return cursors[part]

    def _log_fd(self, part: int) -> int:
        """The cursor log of ``part``, open for appending (a partial record left at its end is cut off first)."""
        fds = self.__dict__.setdefault("_log_fds", {})
        fd = fds.get(part)
        if fd is None:
            fd = os.open(self._cursor_path(part) + ".log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            size = os.fstat(fd).st_size
            if size % _CURSOR_RECORD.size:
                os.ftruncate(fd, size - size % _CURSOR_RECORD.size)
            fds[part] = fd
        return fd

    def _deliver(self, part: int, kind: int, payload: Any) -> None:
        if kind == _ITEM_DATA:
            t, batch = decode_batch(payload)
            self.fn(t, pa.Table.from_batches([batch]))
        calls = self._position(part) + 1
        if self._fs.objects:
            self._fs.write(self._cursor_path(part), encode_document("cursor", {"calls": calls}), sync=False)
        else:
            head = _CURSOR_RECORD.pack(_CURSOR_MAGIC, calls, 0)[:12]
            record = head + struct.pack("<I", zlib.crc32(head))
            if os.write(self._log_fd(part), record) != len(record):
                raise CheckpointError(f"sink {self.ctx.node!r} could not append to its cursor log (disk full?)",
                                      part=part)
        self._cursors[part] = calls

    def _end_epoch(self, part: int) -> None:
        if self._fs.objects:
            return
        fd = self.__dict__.get("_log_fds", {}).get(part)
        if fd is None:
            return
        # the document takes the count, then the log is emptied (a crash in between: the log's records are
        # not above the document's count, and the position is the larger)
        self._fs.write(self._cursor_path(part), encode_document("cursor", {"calls": self._cursors[part]}), sync=False)
        os.ftruncate(fd, 0)

    def close(self) -> None:
        super().close()
        for fd in self.__dict__.pop("_log_fds", {}).values():
            try:
                os.close(fd)
            except OSError:
                pass


class LogSink(StagedSink):
    """Captures the sink's input as stream ``stream`` of the log at ``uri``, one stream part per sink part.

    The stream is created with ``schema`` (required unless the stream exists). Each committed item is one
    event of its part (records are ``Messages``, frontier changes ``Progress``), so a part's next sequence
    id is its output position; a commit ends with a sync (``Capture.advance_to``). The parts finish when
    the sink's input frontier is empty."""

    stages_frontier = True

    def __init__(self, uri: str, stream: str, *, schema: pa.Schema | None = None, parts: int | None = None,
                 encoding: str | None = None, lock_timeout: float = 30.0) -> None:
        super().__init__(parts)
        self.uri = uri
        self.stream = stream
        self.schema = schema
        self.encoding = encoding
        self.lock_timeout = lock_timeout

    def _open_parts(self, parts: list[int]) -> None:
        self._log = open_log(self.uri)
        if self.schema is None:
            try:
                self._log.header(self.stream)
            except StreamNotFoundError:
                raise CheckpointError(f"sink {self.ctx.node!r} needs schema= to create stream {self.stream!r}",
                                      stream=self.stream) from None
        self._caps: dict[int, Any] = {}
        self._finished: set[int] = set()
        for p in parts:
            deadline = _time.monotonic() + self.lock_timeout
            while True:
                try:
                    # the sink resumes after the part's last event and never re-sends (its position is the part's
                    # next_seq): the same writer history goes on, nothing it wrote is void (FORMAT.md §1.1)
                    self._caps[p] = Capture(self._log, self.stream, worker=p, peers=self.n_parts, schema=self.schema,
                                            encoding=self.encoding, continues=True)
                    break
                except PartLockedError:
                    if _time.monotonic() > deadline:  # a task of a failed generation still holds it
                        raise
                    _time.sleep(0.05)
                except ProgressError:          # the part is finished: everything was committed
                    self._finished.add(p)
                    break

    def _position(self, part: int) -> int:
        cap = self._caps.get(part)
        if cap is None:
            return 1 << 62 if part in self._finished else 1
        return cap.next_seq

    def _check_fresh(self, part: int) -> None:
        if part in self._finished:
            raise FinishedOutputError(
                f"sink {self.ctx.node!r}: part {part} of stream {self.stream!r} in {self.uri} is finished (a run "
                f"wrote it to the end) and this job's checkpoints do not list it: write a new stream, or run the "
                f"job that wrote it from its checkpoint folder", stream=self.stream, part=part)

    def _deliver(self, part: int, kind: int, payload: Any) -> None:
        cap = self._caps[part]
        if kind == _ITEM_DATA:
            t, batch = decode_batch(payload)
            if not batch.schema.equals(cap.header.schema):
                batch = batch.select(cap.header.schema.names).cast(cap.header.schema)
            cap.send(t, batch)
        else:
            cap.advance_to(Antichain(decode_frontier(payload)))

    def _end_epoch(self, part: int) -> None:
        cap = self._caps[part]
        if cap.frontier.is_empty():
            cap.close()
            del self._caps[part]
            self._finished.add(part)
        else:
            cap.advance_to(cap.frontier)      # no event; makes the epoch durable

    def close(self) -> None:
        super().close()
        for cap in getattr(self, "_caps", {}).values():
            cap.abort()
        if hasattr(self, "_log"):
            self._log.close()
