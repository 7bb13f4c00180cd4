"""The options of the ``eventlog`` data source, parsed once and checked with clear errors.

============================  =======================================================================
option                        meaning
============================  =======================================================================
``path`` (``load``/``save``)  the stream URI: log URI + ``/`` + stream name (``connectors.spark.uri``)
``stream``                    the stream name; then ``path`` is the log URI
``workers``                   read: replay workers = Spark partitions (default: the stream's peers)
``mode``                      read: ``assign`` (part ``i`` to worker ``i % workers``) or ``repartition``
``key``                       read, repartition mode: key column(s), comma-separated
``since`` / ``until``         read: keep times ``t`` with ``since <= t`` and not ``until <= t`` (``7``, ``[1,2]``)
``incomplete``                batch read: also return records at times that are not complete (default false)
``maxRecordsPerTrigger``      streaming read: soft limit of records read from the log per micro-batch
``time``                      write: a time (``0``, ``[1,2]``) or a column name (default: the frame's ``_time``
                              if it was read through eventlog, else 0; streams: the batch id)
``timeType``                  write: ``int64`` or ``product:K`` (needed for ``array<bigint>`` time columns)
``encoding``                  write: ``arrow`` (default) or ``avro``
``compression``               write, a new stream: ``zstd`` (default), ``lz4`` or ``none`` (arrow); ``deflate``,
                              ``zstandard`` or ``null`` (avro) (FORMAT.md §13)
``peers``                     micro-batch writes: parts of a new stream (default: the first batch's partitions)
``batchId``                   batch write: append the DataFrame as micro-batch ``batchId`` (``tap_batches``)
============================  =======================================================================
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Mapping

from eventlog.errors import InvalidTimeError
from eventlog.header import COMPRESSIONS
from eventlog.time import Time, TimeType
from replay.replayer import MODES

from .uri import StreamURI, parse_stream_uri


def _get(options: Mapping[str, str], name: str) -> str | None:
    value = options.get(name)
    if value is None:
        value = options.get(name.lower())
    return None if value is None else str(value)


def _int(options: Mapping[str, str], name: str, minimum: int) -> int | None:
    value = _get(options, name)
    if value is None:
        return None
    try:
        n = int(value)
    except ValueError:
        raise ValueError(f"option {name!r} must be an integer, got {value!r}") from None
    if n < minimum:
        raise ValueError(f"option {name!r} must be >= {minimum}, got {n}")
    return n


def _bool(options: Mapping[str, str], name: str) -> bool:
    value = (_get(options, name) or "false").strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"option {name!r} must be true or false, got {value!r}")
    return value == "true"


def parse_time(text: str | None, name: str) -> Time | None:
    """A time option: ``7`` or a JSON list ``[1, 2]`` (returned as a tuple)."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise InvalidTimeError(f"option {name!r} must be a time like 7 or [1, 2], got {text!r}") from None
    if isinstance(value, list):
        return tuple(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTimeError(f"option {name!r} must be a time like 7 or [1, 2], got {text!r}")
    return value


def target_of(options: Mapping[str, str]) -> StreamURI:
    """The stream the options name (``path``, and ``stream`` if given)."""
    path = _get(options, "path")
    if path is None:
        raise ValueError("give the stream URI to load()/save(), e.g. load('file:///tmp/cap/numbers')")
    return parse_stream_uri(path, _get(options, "stream"))


@dataclass(frozen=True)
class ReadOptions:
    """Options of batch and streaming reads."""

    target: StreamURI
    workers: int | None
    mode: str
    key: list[str] | None
    since: Time | None
    until: Time | None
    incomplete: bool
    max_records: int | None

    @staticmethod
    def parse(options: Mapping[str, str]) -> "ReadOptions":
        """Parse and check the read options."""
        mode = (_get(options, "mode") or "assign").strip().lower()
        if mode not in MODES:
            raise ValueError(f"option 'mode' must be one of {MODES}, got {mode!r}")
        key_text = _get(options, "key")
        key = [k.strip() for k in key_text.split(",") if k.strip()] if key_text else None
        if mode == "repartition" and not key:
            raise ValueError("mode 'repartition' needs option 'key' (a column name, or names separated by commas)")
        return ReadOptions(
            target=target_of(options),
            workers=_int(options, "workers", 1),
            mode=mode,
            key=key,
            since=parse_time(_get(options, "since"), "since"),
            until=parse_time(_get(options, "until"), "until"),
            incomplete=_bool(options, "incomplete"),
            max_records=_int(options, "maxRecordsPerTrigger", 1),
        )

    def checked_times(self, time_type: TimeType) -> "ReadOptions":
        """These options with ``since``/``until`` checked against the stream's time type."""
        from dataclasses import replace

        return replace(
            self,
            since=time_type.check(self.since) if self.since is not None else None,
            until=time_type.check(self.until) if self.until is not None else None,
        )


@dataclass(frozen=True)
class WriteOptions:
    """Options of batch and streaming writes."""

    target: StreamURI
    time: str | None
    time_type: str | None
    encoding: str
    peers: int | None
    batch_id: int | None
    compression: str | None = None
    """The codec of a new stream (None: the encoding's default, or an existing stream's)."""

    @staticmethod
    def parse(options: Mapping[str, str]) -> "WriteOptions":
        """Parse and check the write options."""
        encoding = (_get(options, "encoding") or "arrow").strip().lower()
        if encoding not in ("arrow", "avro"):
            raise ValueError(f"option 'encoding' must be arrow or avro, got {encoding!r}")
        compression = _get(options, "compression")
        if compression is not None:
            compression = compression.strip().lower()
            if compression not in COMPRESSIONS[encoding]:
                raise ValueError(f"option 'compression' must be one of {', '.join(COMPRESSIONS[encoding])} for the "
                                 f"{encoding} encoding, got {compression!r}")
        return WriteOptions(
            compression=compression,
            target=target_of(options),
            time=_get(options, "time"),
            time_type=_get(options, "timeType"),
            encoding=encoding,
            peers=_int(options, "peers", 1),
            batch_id=_int(options, "batchId", 0),
        )
