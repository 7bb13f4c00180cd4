"""Opening a job's channel logs by URI: ``open_channel_store(uri, job)``, above the kinds it builds.

``kafka://host:port/prefix`` opens Kafka channels (``runtime.channels.kafka``, the ``kafka`` extra: the module is
imported only for such a URI, so a core install runs file channels and says which extra Kafka needs); a path or
``file://`` URI opens file channels (``runtime.channels.file``); any other scheme is an ``InvalidURIError``.
"""

from __future__ import annotations

from typing import Any

from eventlog.errors import InvalidURIError
from eventlog.uri import scheme_of

from .base import ChannelStore
from .file import FileChannelStore


def open_channel_store(uri: str, job: str, **options: Any) -> ChannelStore:
    """The channel store at ``uri`` for job ``job``: ``kafka://…`` or a file path / ``file://`` URI."""
    scheme = scheme_of(uri)
    if scheme == "kafka":
        from .kafka import KafkaChannelStore  # the kafka extra (confluent_kafka): only for kafka:// channels

        return KafkaChannelStore(uri, job, **options)
    if scheme != "file":
        raise InvalidURIError(f"channels must be a file path, file:// or kafka:// URI, not {uri!r}")
    return FileChannelStore(uri, job, **options)
