"""Staged parts: how a Spark task attempt writes one part so that a retried or speculative attempt never
leaves duplicates visible to replay.

Each task attempt captures its part into a *staging log* of its own, a folder below the target log's
staging area (``<log>/.staging/<stream>/<job>/<partition>-<attempt>-<nonce>``, on the same storage as the log:
the local disk, or the object store, so a task on any executor and the driver see it), as part 0 of a one-part
stream with the target stream's name and schema. Nothing there is visible to readers of the target stream.
A finished staged part is then **published** as part ``p`` of the target stream, all at once, or not at all.
How depends on where the log lives:

* **local file logs**: one ``rename`` of the staged part folder to the target's part folder. The rename fails
  when the target part exists, so exactly one attempt publishes each part; the others discard their staging.
  Atomic: a crash leaves the part published or absent.
* **object stores** (S3: file logs whose storage has no rename, ``Storage.objects``): the staged part's
  segment objects are copied as they are (their bytes: nothing is decoded or re-encoded; a part holds no
  part number, so the bytes of part 0 are those of part ``p``), in sequence order, each followed by its index.
  The first segment is put with the store's exclusive create (S3: a conditional ``PutObject`` with
  ``If-None-Match: *``): that is the fence — of attempts racing to publish part ``p`` exactly one creates it;
  the others find it taken and keep nothing (``publish`` returns False). A staged part up to the log's
  segment size (64 MiB of encoded events: the common case) is one segment, so its publish is one put: all or
  nothing (its index follows; readers read around a missing index, the next writer rebuilds it). A larger
  part is several segments, and a crash between their puts leaves a published *prefix*: readers see its events,
  but the part's last event — the Progress that finishes it — is in its last segment, so the part stays
  unfinished and its times never become complete. Never wrong, but stuck: the retried attempt finds part ``p``
  taken and keeps nothing, so rewrite the stream (``mode("overwrite")``, ``tap(…, replace=True)``).
* **any other log** (Kafka, or a target of another format version than the staging log): the events are
  copied, in order and with their sequence ids, through the log's part writer. A Kafka log's staging logs are
  Kafka logs too, topics below its prefix (``prefix..staging.<stream>.<job>.<attempt>.<stream>``), which the
  driver and every executor reach; removing a staging folder deletes the topics below it. A part that already has
  events, is locked, or whose writer is fenced at its first event belongs to another attempt. A copy cut short
  by a crash leaves the part unfinished, as above.

Who publishes: the batch writer's driver-side ``commit()`` publishes exactly the attempts Spark committed
(one per partition) and removes the whole job's staging folder, including what failed or speculative
attempts left; ``abort()`` removes it too. The tap has no driver-side commit, so the first attempt that
reaches the end of its partition publishes it (see ``capture.tap``). An attempt whose process dies before it
discards its staging leaves its folder behind, below ``.staging``, which readers never see: a batch write's
commit removes it with the job's folder; for a tap, each attempt that ends removes the folders left for
partitions published already (``sweep_job``), so the one that publishes the last partition removes what dead
attempts left, folder by folder (never the job's folder as a whole, which another attempt may be writing in).
"""

from __future__ import annotations

import errno
import os
import shutil
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Iterator

import pyarrow as pa
import pyarrow.fs as pafs
from pyspark.sql.datasource import WriterCommitMessage

from connectors.files.layout import layout_for
from connectors.files.log import FILE_FORMAT_VERSION
from connectors.files.storage import quiet_checksums
from eventlog.errors import (
    ClusterUnavailableError,
    EventLogError,
    PartLockedError,
    StreamNotFoundError,
    WriterFencedError,
)
from eventlog.header import StreamHeader
from eventlog.log import Log, open_log
from eventlog.parts import Capture, CheckedPart
from eventlog.time import Time
from eventlog.uri import display_uri, parent_uri, scheme_of

from .schema import conform
from .times import TimeSpec
from .uri import STAGING_DIR, StreamURI, staging_uri, storage_error

if TYPE_CHECKING:
    from connectors.kafka import KafkaLog


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
        return parent_uri(self.uri)


@contextmanager
def reaching(log_uri: str) -> Iterator[None]:
    """Turn an object store that does not answer (the file log's ClusterUnavailableError, or an OSError that is
    not a missing file) into a StorageUnavailableError naming the log, the endpoint and its setting."""
    try:
        yield
    except ClusterUnavailableError as e:  # the file log's StorageUnavailableError included: add log and endpoint
        if e.reason.startswith("cannot reach the storage of log"):
            raise  # an inner reaching() said it already
        raise storage_error(e, log_uri) from None
    except (EventLogError, FileNotFoundError):
        raise
    except OSError as e:
        raise storage_error(e, log_uri) from None


def stream_exists(log: Log, stream: str) -> bool:
    """True if ``log`` holds a stream named ``stream``."""
    with reaching(log.uri):
        try:
            log.header(stream)
            return True
        except StreamNotFoundError:
            return False


def read_header(target: StreamURI) -> StreamHeader:
    """The header of ``target``'s stream (StreamNotFoundError, or StorageUnavailableError when its storage
    cannot be reached)."""
    with reaching(target.log_uri):
        return open_log(target.log_uri).header(target.stream)


def _local_path(uri: str) -> str | None:
    """The local path of a ``file://`` URI or a plain path; None for any other scheme."""
    target = uri[len("file://"):] if uri.startswith("file://") else uri
    return None if "://" in target else target


def _fs_path(uri: str) -> tuple[pafs.FileSystem, str]:
    if uri.lower().startswith("s3://"):
        quiet_checksums()
    return pafs.FileSystem.from_uri(uri)


def remove_tree(uri: str) -> None:
    """Delete a folder of a file log (local or ``pyarrow.fs``) and everything in it; missing is fine.
    Staging folders left empty above it are removed too, up to the log's ``.staging`` (on S3: the empty
    folder marker objects pyarrow makes, one by one, never anything below them). On Kafka, only a staging
    folder: the topics below its prefix (``prefix..staging.stream.job…``) are deleted."""
    if scheme_of(uri) == "kafka":
        if f"/{STAGING_DIR}/" not in display_uri(uri):
            raise ValueError(f"not a staging folder of a Kafka log: {display_uri(uri)}")
        with _kafka_log(uri) as log:
            log.delete_topics_below()
        return
    target = _local_path(uri)
    if target is not None:
        shutil.rmtree(target, ignore_errors=True)
        parent = os.path.dirname(target)
        while STAGING_DIR in parent.split(os.sep)[:-1] or os.path.basename(parent) == STAGING_DIR:
            try:
                os.rmdir(parent)  # only when empty: concurrent attempts keep their folders
            except OSError:
                break
            parent = os.path.dirname(parent)
        return
    if scheme_of(uri) == "memory":  # in-process logs (tests of the copy path)
        from connectors.memory import drop

        drop(uri[len("memory://"):].strip("/"))
        return
    fs, path = _fs_path(uri)
    try:
        fs.delete_dir(path)
    except FileNotFoundError:
        pass
    if isinstance(fs, pafs.S3FileSystem):
        _drop_staging_markers(uri, path)


def _drop_staging_markers(uri: str, path: str) -> None:
    """Delete the folder marker objects (``key/``, empty) of the staging folders above ``path``, up to the
    log's ``.staging``: pyarrow makes them for every folder a writer creates and keeps a parent's after deleting
    what is below it. Deleting a marker removes no other object, so a concurrent attempt's staging is safe."""
    parts = path.split("/")
    if STAGING_DIR not in parts[:-1]:
        return
    bucket, top = parts[0], parts.index(STAGING_DIR)
    keys = ["/".join(parts[1:i]) + "/" for i in range(len(parts), top, -1) if i > 1]
    from eventlog.log import open_log as _open

    log = _open(uri)
    client = getattr(getattr(log, "_st", None), "_s3", None)  # S3Storage's boto3 client (the s3 extra)
    if client is None:
        return
    try:
        client().delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys], "Quiet": True})
    except Exception:  # noqa: BLE001 - tidying only: a marker left behind is an empty object below .staging
        pass


def sweep_job(target: StreamURI, job: str) -> bool:
    """Remove what attempts of the tap's job left in its staging folder for partitions that are published
    already: the folders (``<partition>-<attempt>-<nonce>``) of attempts whose process died before they
    discarded their staging, and of attempts that lost the race for their partition and are still running (they
    cannot publish any more: a published part stays; when their writes fail they find the part published and
    pass their rows on). Returns True if it removed any folder.

    Each folder is removed on its own, never the job's folder as a whole: an attempt of a partition not yet
    published may create its folder at any moment, after this listed the job's folder (removing the whole
    folder would remove that attempt's files under it, and it could publish a part missing some). Empty
    folders above are removed with the last folder in them. On an object store, a part is published by
    several puts (or, for a log of another format version, by copying the events), read from the winning
    attempt's staging: a folder is removed only once the published part holds as many events as it (the winner
    has put every segment; what is left of its work is at most the last segment's index, which readers read
    around and a later writer rebuilds). On a local disk a part is published by one rename (all or nothing), so
    any folder of a published partition goes.

    The tap has no driver-side commit, so each attempt calls this after it published its part and removed its
    own staging: the last partition to publish removes what dead attempts left."""
    job_uri = staging_uri(target, job)
    with reaching(target.log_uri):
        log = open_log(target.log_uri)
        try:
            names = _list_folder(job_uri)
        except FileNotFoundError:
            return False
        # a part published by one rename is whole once it shows; by puts or copies, only once all are done
        renamed = target.is_local and log.header(target.stream).version[0] == FILE_FORMAT_VERSION[0]
        published: dict[int, int] = {}
        removed = False
        for name in names:
            head = name.split("-", 1)[0]
            if not head.isdigit():
                continue  # not ours: leave it alone
            p = int(head)
            if p not in published:
                published[p] = log.part_stats(target.stream, p).next_seq
            if published[p] <= 1:
                continue  # an attempt of an unpublished partition may still publish it
            folder = staging_uri(target, job, name)
            if not renamed and _staged_next_seq(folder, target.stream) > published[p]:
                continue  # the winner may still be copying its events from here
            remove_tree(folder)
            removed = True
        return removed


def _staged_next_seq(folder: str, stream: str) -> int:
    """One past the last event an attempt's staging folder holds: 1 when it holds none (or no stream yet), and
    more than any part holds when it cannot be read (the folder is then kept: it stays below ``.staging``,
    which readers never see, rather than being removed under a winner still reading it)."""
    try:
        with open_log(folder) as staged:
            return staged.part_stats(stream, 0).next_seq
    except (StreamNotFoundError, FileNotFoundError):
        return 1
    except (EventLogError, OSError):
        return 1 << 62


def _list_folder(uri: str) -> list[str]:
    """Names of the entries of a folder of a file log (local or ``pyarrow.fs``); FileNotFoundError if missing."""
    if scheme_of(uri) == "kafka":  # a staging folder on Kafka: the next name of the topics below its prefix
        with _kafka_log(uri) as log:
            head = len(log.target.prefix) + 1
            names = sorted({t[head:].split(".", 1)[0] for t in log.topics_below()})
        if not names:
            raise FileNotFoundError(uri)
        return names
    target = _local_path(uri)
    if target is not None:
        return os.listdir(target)
    if scheme_of(uri) == "memory":
        raise FileNotFoundError(uri)  # in-process logs have no folders to sweep
    fs, path = _fs_path(uri)
    infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    return [i.base_name for i in infos]


def _kafka_log(uri: str) -> "KafkaLog":
    """The Kafka log at ``uri`` (a staging folder's); a ``Log`` closes when its ``with`` ends."""
    from connectors.kafka import KafkaLog

    return KafkaLog(uri)


def remove_stream(target: StreamURI) -> None:
    """Delete a stream of a file log (for overwrites). Readers that have it open fail or see it vanish:
    only replace streams nobody reads. Its staging area is left to the jobs that use it."""
    if scheme_of(target.log_uri) == "kafka":
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
                 time: TimeSpec, encoding: str, compression: str | None = None) -> None:
        self.target, self.partition, self.attempt = target, partition, attempt
        self.uri = staging_uri(target, job, f"{partition}-{attempt}-{uuid.uuid4().hex[:8]}")
        self.schema, self.time = schema, time
        self.rows = 0
        self._pending: dict[Time, list[pa.RecordBatch]] = {}
        self._pending_rows: dict[Time, int] = {}
        self._buffered = 0
        self._cap = Capture(open_log(self.uri), target.stream, 0, 1, schema=schema, encoding=encoding,
                            time=time.time_type, compression=compression)

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
        """Drop the staged part (never raises for a staging folder that is gone already: the error being handled
        when an attempt discards is the one to report)."""
        try:
            self._cap.abort()
        except Exception:  # noqa: BLE001 - what it would have synced is removed next
            pass
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
    """Make the staged part (part 0 of the stream in ``staged_uri``) part ``part`` of ``target``, at once
    (see the module doc for what each storage promises). Returns False, changing nothing in the target, if that
    part already exists (another attempt won)."""
    with reaching(target.log_uri):
        if target.is_local:
            return _publish_by_rename(staged_uri, target, part)
        staged, dest = open_log(staged_uri), open_log(target.log_uri)
        if _objects(staged) and _objects(dest) and \
                staged.header(target.stream).version[0] == dest.header(target.stream).version[0]:
            return _publish_objects(staged, dest, target, part)
        return _publish_by_copy(staged_uri, target, part)


def _objects(log: Log) -> bool:
    """Whether ``log`` is a file log on an object store (segments are whole objects; no rename)."""
    return bool(getattr(getattr(log, "_st", None), "objects", False))


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


def _publish_objects(staged: Log, dest: Log, target: StreamURI, part: int) -> bool:
    """Copy the staged part's segment objects, as they are, to part ``part`` of ``dest`` (both file logs on
    object stores, one format version): the first segment by an exclusive create, which exactly one of racing
    attempts wins; the rest after it. False when the part's first segment exists (another attempt won)."""
    stream = target.stream
    header = staged.header(stream)
    layout = layout_for(header.version)
    src_st, dst_st = staged._st, dest._st  # type: ignore[attr-defined]
    src_dir = staged.part_path(stream, 0)  # type: ignore[attr-defined]
    dst_dir = dest.part_path(stream, part)  # type: ignore[attr-defined]
    names = set(src_st.list_dir(src_dir))
    segments = []
    for name in names:
        got = layout.segment_first(name, header.encoding)
        if got is not None:
            if not got[1]:
                raise EventLogError(f"staged part has a segment its writer did not seal: {name}", stream=stream,
                                    part=part, path=src_st.join(src_dir, name))
            segments.append(got[0])
    if not segments:  # a finished staged part has at least its closing Progress
        raise EventLogError(f"staged part {display_uri(staged.uri)} holds no segment", stream=stream, part=part)
    for i, first in enumerate(sorted(segments)):
        name = layout.sealed_name(first, header.encoding)
        if not dst_st.create_exclusive(dst_st.join(dst_dir, name), src_st.read_file(src_st.join(src_dir, name))):
            if i == 0:
                return False  # another attempt published this part
            raise EventLogError(f"segment {name} of the part appeared while this attempt published it (a writer "
                                "outside Spark?)", stream=stream, part=part, seq=first)
        index = layout.index_name(first)
        if index in names:  # readers read around a missing index; a later writer rebuilds it
            dst_st.write_file(dst_st.join(dst_dir, index), src_st.read_file(src_st.join(src_dir, index)))
    return True


def _publish_by_copy(staged_uri: str, target: StreamURI, part: int) -> bool:
    src = open_log(staged_uri)
    dst = open_log(target.log_uri)
    try:
        writer = dst.writer(target.stream, part)
    except PartLockedError:  # WriterFencedError included: another attempt holds the part
        return False
    try:
        with writer:
            if writer.next_seq > 1:
                return False
            with CheckedPart(src, src.header(target.stream), 0, isolation="uncommitted") as reader:
                for entry in reader.read():
                    if writer.append(entry.event) != entry.seq:
                        raise EventLogError("copy of a staged part lost its sequence ids", stream=target.stream,
                                            part=part, seq=entry.seq)
            writer.sync()
    except WriterFencedError as e:
        # on object stores there is no part lock: two attempts may both find the part empty, and the one whose
        # first segment put comes second is fenced; it wrote nothing (a fence later on is not a lost race)
        if e.seq == 1:
            return False
        raise
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
