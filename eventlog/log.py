"""The Log interface every connector implements, and ``open_log(uri)``.

A log holds streams; a stream has a header and ``peers`` parts; each part is an append-only sequence of
events numbered 1, 2, 3, … (its sequence ids). A part has one writer at a time and any number of readers.
"""

from __future__ import annotations

import abc
import os
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence, TypeVar

from .errors import EventLogError, InvalidURIError
from .events import Entry, Event
from .header import FORMAT_VERSION, StreamHeader
from .retention import Retention
from .schema_history import SchemaHistory
from .uri import scheme_of

SYNC_MODES = ("fsync", "flush", "none")
"""Durability of appends at ``sync()`` (``Capture.advance_to``/``close``): ``fsync`` (default) makes them
durable on disk; ``flush`` hands them to the operating system (visible to other processes, lost only if the
machine fails); ``none`` does nothing at ``sync()`` — bytes reach the OS when the writer's buffers fill, a
segment rotates or the writer closes."""


def check_sync_mode(mode: object) -> str:
    """``mode`` if it is one of ``SYNC_MODES``, else ValueError."""
    if mode not in SYNC_MODES:
        raise ValueError(f"sync must be one of {SYNC_MODES}, got {mode!r}")
    return mode  # type: ignore[return-value]


PROBLEM_KINDS = ("header", "corrupt", "gap", "progress", "messages", "torn-tail", "layout", "duplicate", "leftover")
"""Classes of problems a check of a log reports (``replay.verify``): an unreadable or disagreeing stream header;
bytes (or a Kafka record) that fail a checksum or do not decode, or say another thing than they hold; missing
sequence ids; a broken progress rule; a malformed Messages event; a torn tail (what a crashed writer leaves; the
next writer of the part cuts it); a problem of the storage layout (a missing index, a stray part folder, …); a
Kafka record repeating sequence ids already read with other content (readers keep the first); and ``leftover``,
which is no problem: files an interrupted compaction left that readers pass over (``replay verify`` notes them)."""

_E = TypeVar("_E", bound=EventLogError)


def with_kind(error: _E, kind: str) -> _E:
    """``error``, marked as a problem of class ``kind`` (one of ``PROBLEM_KINDS``): what a log's own checks
    (``Log.check_part``, ``Log.check_layout``) return when the error's type does not say it."""
    if kind not in PROBLEM_KINDS:
        raise ValueError(f"problem kind must be one of {PROBLEM_KINDS}, got {kind!r}")
    error.kind = kind  # type: ignore[attr-defined]
    return error


@dataclass(frozen=True)
class PartStats:
    """What a log knows about one part without decoding it."""

    first_seq: int
    """The first sequence id still in the log (1 unless old events were removed)."""
    next_seq: int
    """One past the last whole event: ``next_seq - first_seq`` events are readable."""
    bytes: int | None
    """Bytes the part occupies in the log (None where the log cannot tell cheaply, as on Kafka)."""
    segments: int = 0
    """Storage units (segments, Kafka records…) holding the part, where the log has them."""

    @property
    def events(self) -> int:
        """The number of readable events."""
        return self.next_seq - self.first_seq


class PartWriter(abc.ABC):
    """Appends events to one part; sequence ids continue after the last event already in the part."""

    stream: str
    part: int

    @property
    @abc.abstractmethod
    def next_seq(self) -> int:
        """The sequence id the next appended event gets."""

    @abc.abstractmethod
    def append(self, event: Event) -> int:
        """Append one event; returns its sequence id. Not durable until ``sync()``."""

    @abc.abstractmethod
    def sync(self) -> None:
        """Make every appended event as durable as the log's sync mode promises."""

    @abc.abstractmethod
    def close(self) -> None:
        """Sync, then release the part (another writer may open it)."""

    def __enter__(self) -> "PartWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PartReader(abc.ABC):
    """Reads one part from a sequence id. Iterating yields what is there now and stops at the current end
    (or at a torn tail); iterating again continues with events appended since (to follow a live part)."""

    stream: str
    part: int

    tail_problem: str | None = None
    """Set when the last iteration stopped before bytes that are there but not whole (a torn tail):
    what and where. None when it stopped at the clean end of the part."""

    duplicates: int = 0
    """Events this reader dropped because their sequence id had been read already (what a retried Kafka write
    leaves); 0 where a log never holds duplicates."""

    duplicate_records: Sequence[tuple[int, int]] = ()
    """``(seq, offset)`` of the first duplicates dropped, ``offset`` as ``Log.locate`` takes it (Kafka: the
    record's offset)."""

    epoch: int = 0
    """The writer epoch of the last event yielded: each incarnation of a part's writer (each open) writes
    with an epoch higher than every earlier one (FORMAT.md §1.1). 0 where the log records no epochs (format
    file logs before format 1.2). Readers use a change of epoch to void the messages a crashed writer left at times its part
    had not completed (``eventlog.parts.committed``)."""

    @property
    @abc.abstractmethod
    def next_seq(self) -> int:
        """The sequence id of the next event this reader yields."""

    @abc.abstractmethod
    def __iter__(self) -> Iterator[Entry]:
        """The events from ``next_seq`` to the current end."""

    def close(self) -> None:
        """Release open files."""

    def prefetch(self) -> None:
        """A hint that iterating begins now: a reader may start reading its first events on other threads, so
        that a replayer opening several parts does not read each part's first event one after the other.
        Changes nothing a reader yields or raises (errors surface when the events are read); a no-op by
        default."""

    def __enter__(self) -> "PartReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class StoredEvent:
    """The bytes one event is stored as, for a bug report or a look with other tools: ``data`` (a file log's
    event body — an Arrow IPC message or an Avro block — or a Kafka record's value), ``where`` as
    :meth:`Log.locate` says it, and a Kafka record's ``headers``."""

    data: bytes
    where: dict
    headers: tuple = ()


class Log(abc.ABC):
    """A place where streams live (a directory, a Kafka cluster, process memory)."""

    uri: str
    format_version: tuple[int, int] = FORMAT_VERSION
    """The format version this log writes: new streams get it, and writers append only to streams it may
    append to (``StreamHeader.check_writable``). FORMAT.md "Version rules"."""

    @abc.abstractmethod
    def streams(self) -> list[str]:
        """The names of the streams in the log, sorted."""

    @abc.abstractmethod
    def header(self, stream: str) -> StreamHeader:
        """The stored header of ``stream``; StreamNotFoundError when there is none."""

    @abc.abstractmethod
    def create_stream(self, header: StreamHeader) -> StreamHeader:
        """Create ``stream`` with ``header`` (stored with this log's ``format_version``), or check that the
        stored header matches (HeaderMismatchError); returns the stored header."""

    @abc.abstractmethod
    def writer(self, stream: str, part: int, *, sync: str | None = None, continues: bool = False) -> PartWriter:
        """The writer of one part (PartLockedError if another writer holds it): a new incarnation with a higher
        writer epoch, so readers void the messages the last one left at times its part had not completed
        (FORMAT.md §1.1). ``continues=True`` keeps the last incarnation's epoch and id instead, for an
        application that resumes exactly after the part's last event and never re-sends (nothing is void)."""

    @abc.abstractmethod
    def reader(self, stream: str, part: int, start: int = 1, *, progress_only: bool = False) -> PartReader:
        """A reader of one part from sequence id ``start``; ``progress_only`` skips Messages events
        without decoding them."""

    @abc.abstractmethod
    def part_stats(self, stream: str, part: int) -> PartStats:
        """Sequence range and size of one part, without decoding events."""

    def last_write(self, stream: str, part: int) -> float | None:
        """When the part was last written (seconds since the epoch, wall clock), found cheaply (no scan):
        how long a part that is not finished has been silent. None where the log cannot tell (the default)."""
        return None

    # -- checks (``replay.verify`` asks the log, which knows its storage) ----------------------------------

    def check_part(self, stream: str, part: int) -> Sequence[EventLogError]:
        """What the log's own look at how it stores one part finds wrong, without raising: every problem, where
        reading stops at the first (file logs: segments, indexes, footers and checksums; Kafka logs: every
        record of the partition). Each is an error naming stream, part, seq and offset where known, marked
        with a ``kind`` (``with_kind``) when its type does not say its class. An empty list when the storage
        is whole; the default checks nothing beyond what reading checks."""
        return []

    def check_layout(self, headers: Mapping[str, StreamHeader], *,
                     stream: str | None = None) -> Sequence[EventLogError]:
        """Problems of where the log keeps its streams, outside any part's events (file logs: folders and files
        against the format's layout; a stream folder whose header is missing), each marked with its ``kind``.
        ``headers``: the streams whose header could be read. With ``stream``, only that stream's (which may lack
        its header); else the whole log. The default finds none."""
        return []

    def locate(self, stream: str, part: int | None = None, seq: int | None = None,
               offset: int | None = None) -> dict[str, Any]:
        """Where the log stores something, for reports: the stream header (``part`` None), the event ``seq`` of
        ``part``, or what lies at ``offset`` in ``part`` (Kafka: the record at that offset). A dict of
        ``path`` (a file or object) or ``record`` (a Kafka record, ``topic[partition]@offset``) and ``offset``
        (a byte offset in the file, or the Kafka offset), as far as known; ``{}`` when the log cannot tell
        (the default). Never raises for a damaged log."""
        return {}

    def resume_after(self, stream: str, part: int, error: EventLogError) -> int | None:
        """The sequence id where reading ``part`` may go on after ``error``, past the storage unit its damage is
        in (file logs: the next segment), or None where the log cannot tell (the default). A checker that
        reports damage and reads on uses it."""
        return None

    def stored(self, stream: str, part: int, seq: int) -> StoredEvent | None:
        """The bytes event ``seq`` of ``part`` is stored as, unchecked and undecoded (they may be the damage a
        reader reported); None when no whole event ``seq`` is stored or the log cannot tell (the default)."""
        return None

    def schema_history(self, stream: str) -> SchemaHistory | None:
        """The stream's schema versions and where each part switched (FORMAT.md §12); None while it has had one
        schema (the header's), and on logs without schema evolution (the default). ``header()`` gives the
        current schema."""
        return None

    # -- retention (FORMAT.md §10; ``eventlog.parts.trim`` decides what to drop) ------------------------------

    def retention(self, stream: str) -> Retention | None:
        """The stream's retention mark: which times were dropped and where each part's retained events start
        (None: nothing was ever dropped, or the log cannot drop; the default)."""
        return None

    def record_retention(self, stream: str, mark: Retention) -> Retention:
        """Store ``mark`` unless the mark stored already drops as much (a trim never moves a mark back), and
        return the mark in force. Raises ``EventLogError`` when the log cannot drop anything (the default)
        and when a concurrent trim stored a mark that neither covers nor is covered by ``mark``."""
        raise EventLogError(f"{type(self).__name__} logs cannot drop old events", stream=stream)

    def drop_before(self, stream: str, part: int, seq: int) -> tuple[int, int | None]:
        """Remove the storage that holds only events of ``part`` before ``seq`` — never the part's last event,
        which a reopening writer continues after — once a retention mark says readers start at ``seq`` or
        later. Returns the events and bytes removed (bytes None where the log cannot tell)."""
        raise EventLogError(f"{type(self).__name__} logs cannot drop old events", stream=stream, part=part)

    def close(self) -> None:
        """Release resources held by the log."""

    def __enter__(self) -> "Log":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.uri!r})"


PRELOAD_ENV = "EVENTLOG_PRELOAD"
"""Set to ``0`` to keep ``open_log`` from calling :func:`preload` (a process that never converts Python or
numpy values to Arrow, and wants pandas left unimported)."""
_preloaded = False


def preload() -> None:
    """Do once, now, what the first event of a capture or replay would otherwise pay for on its hot path:
    pyarrow imports pandas (0.2–0.8 s) the first time it converts Python or numpy values (``pa.array``,
    ``from_pylist``, ``pa.record_batch(dict)``), and sets up its zstd codec, IPC reader and compute kernels on
    first use (~10–30 ms). ``open_log`` calls it once per process (unless ``EVENTLOG_PRELOAD=0``); a worker
    daemon that forks workers may call it before forking, so that no worker pays it."""
    global _preloaded
    if _preloaded:
        return
    _preloaded = True
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.ipc as ipc

    from eventlog.encoding.validate import validate_full

    values = pa.array(np.arange(4, dtype=np.int64))  # pyarrow's pandas shim (imports pandas when installed)
    batch = pa.RecordBatch.from_arrays([values, pa.array(["a", "b", "c", "d"])], names=["x", "s"])
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, batch.schema, options=ipc.IpcWriteOptions(compression="zstd")) as w:
        w.write_batch(batch)
    back = ipc.open_stream(sink.getvalue()).read_next_batch()
    validate_full(back)  # numpy's paths too
    back.filter(pc.greater(back.column(0), 1)).take(pa.array([0]))
    pc.min_max(back.column(0))


LOG_SCHEMES = "eventlog.logs"
"""The entry-point group (``pyproject.toml``) where log backends say which URI schemes they open: each entry's
name is a scheme (``*``: any scheme no entry names), its value a function ``(uri, **options) -> Log``. The
registry lives here, below the backends, and imports none of them: ``open_log`` loads the one a URI names."""

_openers: dict[str, Callable[..., Log]] = {}


def register_scheme(scheme: str, opener: Callable[..., Log]) -> None:
    """Make ``open_log`` open ``scheme://…`` URIs with ``opener(uri, **options)`` in this process (ahead of any
    installed backend for the scheme)."""
    _openers[scheme.lower()] = opener


def _opener(scheme: str, uri: str) -> Callable[..., Log]:
    """The function that opens ``scheme`` URIs: registered in this process, else the installed backend."""
    opener = _openers.get(scheme)
    if opener is not None:
        return opener
    found = {ep.name: ep for ep in entry_points(group=LOG_SCHEMES)}
    ep = found.get(scheme) or found.get("*")
    if ep is None:
        names = ", ".join(sorted(found)) or "none: is eventlog installed (pip install -e .)?"
        raise InvalidURIError(f"no log backend opens {scheme}:// URIs ({uri!r}); installed schemes: {names}")
    opener = ep.load()
    _openers[scheme] = opener
    return opener


def open_log(uri: "str | os.PathLike[str]", **options: Any) -> Log:
    """Open the log at ``uri``: ``file:///path`` or a plain path, ``memory://name``,
    ``kafka://host:port/prefix``, or a ``pyarrow.fs`` URI (``s3://bucket/path``, …). File options: ``sync``
    (``fsync``/``flush``/``none``), ``segment_bytes``, ``filesystem`` (a ``pyarrow.fs.FileSystem``), ``format``
    (``"2.0"``, or ``"1.2"`` for older readers) and ``avro_codec`` (``deflate``; ``zstandard``, ``null``). Kafka
    options: ``config`` (librdkafka settings), ``timeout``,
    ``replication_factor`` (see ``connectors.kafka``). The backend is the one registered for the URI's scheme
    (``LOG_SCHEMES``). The first call in a process also calls :func:`preload`."""
    if isinstance(uri, Path) or (isinstance(uri, os.PathLike)):
        uri = os.fspath(uri)
    if not isinstance(uri, str) or not uri:
        raise InvalidURIError(f"not a log URI: {uri!r}")
    if not _preloaded and os.environ.get(PRELOAD_ENV, "1") != "0":
        preload()
    return _opener(scheme_of(uri), uri)(uri, **options)
