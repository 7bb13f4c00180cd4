"""Stream URIs: a log URI with the stream name as its last path segment.

==========================================  ===========================  ============
stream URI                                  log URI                      stream
==========================================  ===========================  ============
``file:///tmp/cap/numbers``                 ``file:///tmp/cap``          ``numbers``
``/tmp/cap/numbers``, ``cap/numbers``       ``/tmp/cap``, ``<cwd>/cap``  ``numbers``
``s3://bucket/logs/numbers``                ``s3://bucket/logs``         ``numbers``
``kafka://host:9092/prefix/numbers``        ``kafka://host:9092/prefix`` ``numbers``
``s3://bucket/logs/numbers?scheme=http``    ``s3://bucket/logs?scheme=http``  ``numbers``
==========================================  ===========================  ============

The query of a URI that is not a local path (``s3://…?endpoint_override=host:port&scheme=http``, a Kafka URI's
client settings) belongs to the log: it stays on the log URI, and the URIs made from it (the stream's, the
staging folders') carry it after their path. Relative paths are made absolute on the machine that plans the
Spark query. ``memory://`` logs live inside
one process, and Spark reads and writes in other processes (its Python workers), so Spark refuses them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlparse

from eventlog.errors import ClusterUnavailableError, InvalidURIError, StorageUnavailableError
from eventlog.header import check_stream_name
from eventlog.uri import display_uri, is_local, join_uri, local_path, scheme_of, split_query

STAGING_DIR = ".staging"
"""Folder in a file log's root where Spark tasks stage parts before they are published. It is not a stream
(stream names start with a letter or digit), so readers and ``replay ls`` never see it."""


@dataclass(frozen=True)
class StreamURI:
    """Where one stream lives: the URI of its log and its name."""

    log_uri: str
    """The log's URI, as ``eventlog.open_log`` takes it (relative paths made absolute)."""
    stream: str
    """The stream's name."""

    @property
    def uri(self) -> str:
        """The stream URI again (log URI + ``/`` + stream, before the log URI's query)."""
        return join_uri(self.log_uri, self.stream)

    @property
    def is_local(self) -> bool:
        """True for a file log on this machine's disk (``file://`` or a plain path)."""
        return is_local(self.log_uri)

    @property
    def local_root(self) -> str:
        """The root directory of a local file log (ValueError for other logs)."""
        root = local_path(self.log_uri)
        if root is None:
            raise ValueError(f"{self.log_uri} is not a local file log")
        return root


def parse_stream_uri(uri: str, stream: str | None = None) -> StreamURI:
    """Split ``uri`` into log URI and stream name (its last path segment), or, when ``stream`` is given,
    take ``uri`` as the log URI. Raises InvalidURIError for URIs Spark cannot use."""
    if not isinstance(uri, str) or not uri.strip():
        raise InvalidURIError(
            f"Spark needs the URI of a stream, e.g. file:///tmp/cap/numbers; got {uri!r}"
        )
    uri = uri.strip()
    parsed = urlparse(uri)
    scheme = parsed.scheme.lower()
    if scheme == "memory":
        raise InvalidURIError(
            f"{uri}: memory:// logs live inside one process, and Spark reads and writes in its Python worker "
            "processes; use a file log (file:///path/stream or a plain path)"
        )
    query = ""
    if scheme in ("", "file"):
        path = parsed.path if scheme == "file" else uri
        if scheme == "file" and parsed.netloc not in ("", "localhost"):
            raise InvalidURIError(f"file URIs name a local path (file:///path), got host {parsed.netloc!r}")
        path = os.path.abspath(path)
        log_uri = path if scheme == "" else f"file://{path}"
    else:
        log_uri, query = split_query(uri)
    if stream is None:
        log_uri = log_uri.rstrip("/")
        head, sep, stream = log_uri.rpartition("/")
        if not sep or not stream or not head or head.endswith("://"):
            raise InvalidURIError(
                f"{uri}: the last path segment must name the stream, e.g. file:///tmp/cap/numbers"
            )
        log_uri = head
    try:
        check_stream_name(stream)
    except ValueError as e:
        raise InvalidURIError(f"{uri}: {e}") from None
    return StreamURI(log_uri + query, stream)


def staging_uri(target: StreamURI, *names: str) -> str:
    """The URI of a folder below the log's staging area for ``target``'s stream (for staged parts)."""
    return join_uri(target.log_uri, STAGING_DIR, target.stream, *names)


def storage_error(e: "OSError | ClusterUnavailableError", log_uri: str) -> StorageUnavailableError:
    """A StorageUnavailableError for an error met reaching the log at ``log_uri`` (an OSError that is not a
    missing file, or the file log's ClusterUnavailableError)."""
    said = e.reason if isinstance(e, ClusterUnavailableError) else str(e)
    reason = " ".join(said.split())[:600]
    where = display_uri(log_uri)
    if scheme_of(log_uri) in ("s3", "s3a"):
        query = dict(p.split("=", 1) for p in split_query(log_uri)[1].lstrip("?").split("&") if "=" in p)
        endpoint = query.get("endpoint_override")
        source = "the URI's endpoint_override"
        if endpoint is None:
            endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
            source = "AWS_ENDPOINT_URL" if endpoint else "the AWS default (no AWS_ENDPOINT_URL set)"
        hint = (f"; endpoint {endpoint or 'AWS S3'} (from {source}): check that the server runs and the "
                "keys; on a cluster every executor needs the same settings (spark.executorEnv.AWS_ENDPOINT_URL, "
                "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION)")
    else:
        hint = ""
    return StorageUnavailableError(f"cannot reach the storage of log {where}: {reason}{hint}")
