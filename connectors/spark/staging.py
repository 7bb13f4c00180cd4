"""Staged parts: how a Spark task attempt writes one part so that a retried or speculative attempt never
leaves duplicates visible to replay.

Each task attempt captures its part into a *staging log* of its own, a folder below the target log's
staging area (``<log>/.staging/<stream>/<job>/<partition>-<attempt>-<nonce>``), as part 0 of a one-part
stream with the target stream's name and schema. Nothing there is visible to readers of the target stream.
A finished staged part is then **published** as part ``p`` of the target stream, all at once, or not at all:

* local file logs: one ``rename`` of the staged part folder to ``<stream>/part-<p>``. The rename fails when
  the target part exists, so exactly one attempt publishes each part; the others discard their staging.
* any other log (a ``pyarrow.fs`` filesystem today, Kafka later): the events are copied, in order and with
  their sequence ids, through the log's part writer, which holds the part's writer lock; a part that
  already has events belongs to another attempt. A copy cut short by a crash leaves the part unfinished,
  so its times never become complete (never wrong, but stuck: rewrite the stream).

Who publishes: the batch writer's driver-side ``commit()`` publishes exactly the attempts Spark committed
(one per partition) and removes the whole job's staging folder, including what failed or speculative
attempts left; ``abort()`` removes it too. The tap has no driver-side commit, so the first attempt that
reaches the end of its partition publishes it (see ``capture.tap``).
"""

from __future__ import annotations

import errno
import os
import shutil
import uuid
from dataclasses import dataclass
from typing import Iterable

import pyarrow as pa
import pyarrow.fs as pafs
from pyspark.sql.datasource import WriterCommitMessage

from capture import Capture
from eventlog.errors import EventLogError, PartLockedError, StreamNotFoundError
from eventlog.header import StreamHeader
from eventlog.log import Log, open_log
from eventlog.time import Time

from .schema import conform
from .times import TimeSpec
from .uri import STAGING_DIR, StreamURI, staging_uri


class StreamExistsError(EventLogError, FileExistsError):
    """A write would create a stream that already exists (a finished stream cannot take more parts)."""


@dataclass(frozen=True)
class StagedPart(WriterCommitMessage):
    """What one task attempt reports after staging its part (the writer's commit message)."""

    partition: int
    """The Spark partition, which becomes part ``partition`` of the target stream."""
    attempt: int
    """The task attempt number."""
    uri: str
    """The staging log holding the part as part 0 of a stream with the target's name."""
    rows: int
    """Records staged."""

    @property
    def job_uri(self) -> str:
        """The staging folder of the whole write job (all its attempts)."""
        return self.uri.rstrip("/").rpartition("/")[0]


def stream_exists(log: Log, stream: str) -> bool:
    """True if ``log`` holds a stream named ``stream``."""
    try:
        log.header(stream)
        return True
    except StreamNotFoundError:
        return False


def _fs_path(uri: str) -> tuple[pafs.FileSystem, str]:
    return pafs.FileSystem.from_uri(uri)


def remove_tree(uri: str) -> None:
    """Delete a folder of a file log (local or ``pyarrow.fs``) and everything in it; missing is fine.
    Local staging folders left empty above it are removed too, up to the log's ``.staging``."""
    target = uri[len("file://"):] if uri.startswith("file://") else uri
    if "://" not in target:
        shutil.rmtree(target, ignore_errors=True)
        parent = os.path.dirname(target)
        while STAGING_DIR in parent.split(os.sep)[:-1] or os.path.basename(parent) == STAGING_DIR:
            try:
                os.rmdir(parent)  # only when empty: concurrent attempts keep their folders
            except OSError:
                break
            parent = os.path.dirname(parent)
        return
    if uri.startswith("memory://"):  # in-process logs (tests of the copy path)
        from connectors.memory import drop

        drop(uri[len("memory://"):].strip("/"))
        return
    fs, path = _fs_path(uri)
    try:
        fs.delete_dir(path)
    except FileNotFoundError:
        pass


def remove_stream(target: StreamURI) -> None:
    """Delete a stream of a file log (for overwrites). Readers that have it open fail or see it vanish:
    only replace streams nobody reads. Its staging area is left to the jobs that use it."""
    if target.log_uri.startswith("kafka://"):
        raise StreamExistsError("deleting a Kafka stream is not supported; write to a new stream name",
                                stream=target.stream)
    remove_tree(target.uri)


class PartStager:
    """Captures one task attempt's records into its own staging log, as part 0 of a one-part stream with
    the target's name, schema, time type and encoding; ``finish`` closes the part, ``discard`` drops it.

    Records are buffered per time until a time has ``EVENT_ROWS`` of them (a Spark batch of that size goes
    out at once, uncopied), so small per-time groups do not each pay for an event; at most
    ``BUFFER_ROWS`` records wait in memory."""

    EVENT_ROWS = 8192
    BUFFER_ROWS = 1 << 18

    def __init__(self, target: StreamURI, job: str, partition: int, attempt: int, schema: pa.Schema,
                 time: TimeSpec, encoding: str) -> None:
        self.target, self.partition, self.attempt = target, partition, attempt
        self.uri = staging_uri(target, job, f"{partition}-{attempt}-{uuid.uuid4().hex[:8]}")
        self.schema, self.time = schema, time
        self.rows = 0
        self._pending: dict[Time, list[pa.RecordBatch]] = {}
        self._pending_rows: dict[Time, int] = {}
        self._buffered = 0
        self._cap = Capture(open_log(self.uri), target.stream, 0, 1, schema=schema, encoding=encoding,
                            time=time.time_type)

    def add(self, batch: pa.RecordBatch) -> None:
        """Capture ``batch`` (one Messages event per distinct time, possibly merged with later records)."""
        if not self.time.strip:
            batch = conform(batch, self.schema)
        for t, records in self.time.split(batch):
            if self.time.strip:  # the batch had the stripped columns too: conform what is kept
                records = conform(records, self.schema)
            if t not in self._pending and records.num_rows >= self.EVENT_ROWS:
                self._cap.send(t, records)
                continue
            self._pending.setdefault(t, []).append(records)
            self._pending_rows[t] = self._pending_rows.get(t, 0) + records.num_rows
            self._buffered += records.num_rows
            if self._pending_rows[t] >= self.EVENT_ROWS:
                self._flush(t)
        self.rows += batch.num_rows
        if self._buffered >= self.BUFFER_ROWS:
            for t in list(self._pending):
                self._flush(t)

    def _flush(self, t: Time) -> None:
        batches = self._pending.pop(t)
        self._buffered -= self._pending_rows.pop(t)
        self._cap.send(t, batches[0] if len(batches) == 1 else pa.Table.from_batches(batches, schema=self.schema))

    def finish(self) -> StagedPart:
        """Finish the staged part (its frontier empties; durable when this returns)."""
        for t in sorted(self._pending):
            self._flush(t)
        self._cap.close()
        return StagedPart(self.partition, self.attempt, self.uri, self.rows)

    def discard(self) -> None:
        """Drop the staged part."""
        self._cap.abort()
        remove_tree(self.uri)


def stage_all(stager: PartStager, batches: Iterable[pa.RecordBatch]) -> StagedPart:
    """Stage every batch and finish; on any failure the staging is discarded and the error re-raised."""
    try:
        for b in batches:
            stager.add(b)
        return stager.finish()
    except BaseException:
        stager.discard()
        raise


def publish(staged_uri: str, target: StreamURI, part: int) -> bool:
    """Make the staged part (part 0 of the stream in ``staged_uri``) part ``part`` of ``target``, at once.
    Returns False, changing nothing in the target, if that part already exists (another attempt won)."""
    if target.is_local:
        return _publish_by_rename(staged_uri, target, part)
    return _publish_by_copy(staged_uri, target, part)


def _publish_by_rename(staged_uri: str, target: StreamURI, part: int) -> bool:
    staged, dest = open_log(staged_uri), open_log(target.log_uri)
    if staged.header(target.stream).version[0] != dest.header(target.stream).version[0]:
        return _publish_by_copy(staged_uri, target, part)  # another layout (a 1.x target): copy the events
    src = staged.part_path(target.stream, 0)  # type: ignore[attr-defined]
    stream_dir = os.path.join(target.local_root, target.stream)
    dst = dest.part_path(target.stream, part)  # type: ignore[attr-defined]
    if not os.path.isdir(src):  # an empty staged part still has its folder (Capture.close wrote progress)
        raise EventLogError(f"staged part {src} is missing", stream=target.stream, part=part)
    try:
        os.rename(src, dst)  # atomic; fails if dst is a non-empty folder
    except OSError as e:
        if e.errno in (errno.ENOTEMPTY, errno.EEXIST):
            return False
        raise
    fd = os.open(stream_dir, os.O_RDONLY)
    try:
        os.fsync(fd)  # the rename itself survives a crash
    finally:
        os.close(fd)
    return True


def _publish_by_copy(staged_uri: str, target: StreamURI, part: int) -> bool:
    src = open_log(staged_uri)
    dst = open_log(target.log_uri)
    try:
        writer = dst.writer(target.stream, part)
    except PartLockedError:
        return False
    with writer:
        if writer.next_seq > 1:
            return False
        with src.reader(target.stream, 0) as reader:
            for entry in reader:
                if writer.append(entry.event) != entry.seq:
                    raise EventLogError("copy of a staged part lost its sequence ids", stream=target.stream,
                                        part=part, seq=entry.seq)
        writer.sync()
    return True


def publish_job(target: StreamURI, header: StreamHeader, staged: list[StagedPart], job: str) -> None:
    """Driver side of a batch write: create the stream with one part per staged partition and publish
    each; then remove the job's staging folder (with whatever failed or speculative attempts left)."""
    log = open_log(target.log_uri)
    log.create_stream(header)
    for s in staged:
        if not publish(s.uri, target, s.partition):
            raise StreamExistsError(
                "part already exists: another job wrote this stream at the same time",
                stream=target.stream, part=s.partition,
            )
    remove_tree(staging_uri(target, job))
