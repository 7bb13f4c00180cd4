"""Typed errors of eventlog.

Every error names where it happened: the stream, the part and the sequence id (or byte offset) when known,
so a user can find the event in the log with ``replay cat``.
"""

from __future__ import annotations

from typing import Any


class EventLogError(Exception):
    """Base class of every error raised by eventlog; carries the location of the problem."""

    def __init__(
        self,
        message: str,
        *,
        stream: str | None = None,
        part: int | None = None,
        seq: int | None = None,
        offset: int | None = None,
        path: str | None = None,
    ) -> None:
        self.reason = message
        self.stream = stream
        self.part = part
        self.seq = seq
        self.offset = offset
        self.path = path
        super().__init__(self._render())

    def __reduce__(self):  # noqa: ANN204 - keep the location when pickled (Spark ships errors between processes)
        return (_rebuild, (type(self), self.reason, self.location()))

    def _render(self) -> str:
        where: list[str] = []
        for label, value in (
            ("stream", self.stream),
            ("part", self.part),
            ("seq", self.seq),
            ("offset", self.offset),
            ("file", self.path),
        ):
            if value is not None:
                where.append(f"{label} {value!r}" if isinstance(value, str) else f"{label} {value}")
        return f"{self.reason} ({', '.join(where)})" if where else self.reason

    def location(self) -> dict[str, Any]:
        """The location fields as a dict (for JSON output of the CLI)."""
        return {
            k: v
            for k, v in (
                ("stream", self.stream),
                ("part", self.part),
                ("seq", self.seq),
                ("offset", self.offset),
                ("path", self.path),
            )
            if v is not None
        }


class InvalidTimeError(EventLogError, ValueError):
    """A value is not a time of the stream's time type (wrong arity, negative, out of int64 range)."""


class ProgressError(EventLogError):
    """A capture broke timely's progress rules: a time behind the frontier, a frontier moving backwards,
    a negative capability count, or activity on a part that is already finished."""


class SchemaMismatchError(EventLogError, ValueError):
    """Records do not match the stream's schema, or a schema cannot be represented in an encoding."""


class HeaderMismatchError(EventLogError):
    """A stream was reopened with another peers count, time type, schema or encoding than its header."""


class UnsupportedVersionError(EventLogError):
    """The log was written by a format version this code cannot read (a newer major version)."""


class StreamNotFoundError(EventLogError, KeyError):
    """The named stream does not exist in the log."""

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return self.args[0] if self.args else self.reason


class CorruptLogError(EventLogError):
    """Bytes of the log fail their checksum or do not parse: a damaged segment, index or header."""


class LimitError(EventLogError, ValueError):
    """A size is over the format's limits (schemas/FORMAT.md, "Limits"): too many peers, records or bytes in
    an event, too deep a schema, ... Raised on write, before anything is written."""


class LogLimitError(LimitError, CorruptLogError):
    """A log declares a size over the format's limits (a damaged or hostile header or event); readers
    refuse it before allocating anything for it."""


class SequenceError(EventLogError):
    """Sequence ids of a part are not contiguous (a gap), or a writer would reuse an id."""


class PartLockedError(EventLogError):
    """Another writer holds this part open; a part has exactly one writer at a time."""


class InvalidURIError(EventLogError, ValueError):
    """A log URI that eventlog cannot open."""


class ClusterUnavailableError(EventLogError):
    """The cluster a log lives on did not answer within the log's timeout (every broker unreachable, or too
    slow); the message names the servers, the timeout and the client's last error."""


class StorageUnavailableError(ClusterUnavailableError, OSError):
    """The object store a log (or the runtime's checkpoints) lives on does not answer, refuses the request or
    times out, after its client's own retries; the message names the log or object and the endpoint."""


class ConditionalWritesError(EventLogError):
    """The object store ignores or refuses conditional writes (``If-None-Match``/``If-Match``), so two writers
    of one part, or two drivers of one job, could not be told apart there: eventlog refuses to write to it
    (``EVENTLOG_S3_FENCING=off`` writes anyway, for a deployment that guarantees one writer per part)."""


class DeliveryError(EventLogError):
    """A log did not acknowledge appended events (a Kafka delivery failure or timeout); nothing after the
    last successful sync may be assumed durable."""


class WriterFencedError(PartLockedError):
    """Another writer opened this part after this one, and Kafka fenced this writer (its transactional id
    was taken over). It can append nothing more; what it synced before stays in the log, what it appended
    since its last sync was aborted."""


class InterleavedWritersError(CorruptLogError):
    """A part holds the records of two writers mixed together: a record of an older writer epoch after a
    newer one, two writers with one epoch, or a new writer reusing sequence ids already written. Readers
    raise it instead of dropping one history as duplicates."""


class LostDataError(SequenceError):
    """Events the log had acknowledged are gone: the partition was emptied or truncated (a broker that
    restarted empty, retention, ``delete_records``), the topic was recreated or has fewer partitions than
    the stream's peers, or a reader resumes past the part's end."""


class MissingExtraError(EventLogError, ImportError):
    """A feature needs an optional package that is not installed; the message names the feature, the package
    and the extra that installs it (``pip install 'eventlog[kafka]'``). Also an ``ImportError``."""


def _rebuild(cls: type, reason: str, location: dict[str, Any]) -> EventLogError:
    return cls(reason, **location)
