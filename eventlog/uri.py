"""Log URIs, parsed in one place: ``file:///path`` or a plain path, ``memory://name``,
``kafka://host:port/prefix?settings`` and ``pyarrow.fs`` URIs (``s3://bucket/path?endpoint_override=…``).

Every layer asks this module what a URI names — its scheme, a local folder, a memory log's name — and joins
names onto URIs with it; a backend parses only what is its own (the Kafka backend its bootstrap servers and
settings, ``connectors.kafka.config``).
"""

from __future__ import annotations

import os
from urllib.parse import unquote, urlparse, urlunparse

from .errors import InvalidURIError


def scheme_of(uri: str) -> str:
    """The URI's scheme, lower-cased: ``file`` for a plain path (and a Windows drive letter)."""
    scheme = urlparse(uri).scheme.lower()
    if scheme == "" or (len(scheme) == 1 and os.name == "nt"):
        return "file"
    return scheme


def is_local(uri: str) -> bool:
    """True for a file log on this machine's disk (``file://`` or a plain path)."""
    return scheme_of(uri) == "file"


def local_path(uri: str) -> str | None:
    """The local folder a ``file://`` URI or a plain path names (None for other schemes); InvalidURIError for
    a ``file://`` URI that names another host."""
    parsed = urlparse(uri)
    scheme = parsed.scheme.lower()
    if scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise InvalidURIError(f"file URIs name a local path (file:///path), got host {parsed.netloc!r}")
        return unquote(parsed.path)
    if scheme_of(uri) == "file":
        return uri
    return None


def memory_name(uri: str) -> str:
    """The name of the in-process log ``memory://name``."""
    parsed = urlparse(uri)
    name = (parsed.netloc + parsed.path).strip("/")
    if not name:
        raise InvalidURIError(f"memory URI needs a name: {uri!r} (e.g. memory://pipeline)")
    return name


def split_query(uri: str) -> tuple[str, str]:
    """``(uri without its query, "?query" or "")``; a local path keeps every character (``?`` is a file name's)."""
    if is_local(uri):
        return uri, ""
    base, sep, query = uri.partition("?")
    return base, sep + query


def join_uri(log_uri: str, *names: str) -> str:
    """``log_uri`` with ``names`` appended to its path (before its query)."""
    base, query = split_query(log_uri)
    return "/".join([base.rstrip("/"), *names]) + query


def parent_uri(uri: str) -> str:
    """The folder holding ``uri`` (its path's last segment dropped; the query kept)."""
    base, query = split_query(uri)
    return base.rstrip("/").rpartition("/")[0] + query


def with_path(uri: str, path: str) -> str:
    """``uri`` naming ``path`` instead of its own path, its host and settings kept."""
    return urlunparse(urlparse(uri)._replace(path=path))


def display_uri(uri: str) -> str:
    """``uri`` without its query, for messages (a query may hold keys)."""
    return split_query(uri)[0]


__all__ = ["display_uri", "is_local", "join_uri", "local_path", "memory_name", "parent_uri", "scheme_of",
           "split_query", "with_path"]
