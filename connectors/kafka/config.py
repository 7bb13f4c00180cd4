"""Kafka log URIs and client settings.

``kafka://host:port[,host:port…]/prefix?setting=value&…`` names a log on a Kafka cluster: the hosts are
``bootstrap.servers``, ``prefix`` (optional) is prepended to every stream's topic (``prefix.stream``), and
query parameters are librdkafka settings (``security.protocol``, ``sasl.mechanism``, ``ssl.ca.location``,
…), as are the keys of ``open_log(uri, config={…})``. Every setting reaches the producer, the consumers and
the admin client, so the same code runs against a local broker and a production cluster.

Two settings are eventlog's own, not librdkafka's (FORMAT.md "Kafka log"):

* ``eventlog.transactions`` (``true`` by default): each part writer uses a transactional producer, which
  fences any older writer of its part; ``false`` for clusters that refuse transactions (writers are then
  not fenced; readers still detect interleaved writers by their epochs).
* ``eventlog.transactional.id.prefix`` (``eventlog`` by default): part writers use the transactional id
  ``<prefix>.<topic>.<part>``; set it where the cluster's ACLs grant transactional ids by prefix.

* ``eventlog.replication.factor`` (the broker's ``default.replication.factor`` by default): replicas of the
  topics eventlog creates — stream topics, the runtime's channel topics and its Kafka outputs alike
  (``open_log(uri, replication_factor=…)`` overrides it for a log).
* ``eventlog.timeout`` (seconds, 30 by default): how long a call waits for the cluster before it fails
  with ``ClusterUnavailableError`` (``open_log(uri, timeout=…)`` overrides it).
* ``eventlog.sync`` (``fsync`` by default; ``open_log(uri, sync=…)`` and ``Capture(…, sync=…)`` override it):
  ``fsync`` and ``flush`` make every ``advance_to`` commit the part's transaction and wait for it; ``none``
  pipelines: ``advance_to`` commits only once ``eventlog.commit.interval.ms`` (100 by default) passed since the
  first event not yet committed was appended; ``Capture.flush`` and ``close`` always commit (the promise:
  ``connectors/kafka/writer.py``, "Pipelining"; FORMAT.md §9.1). The interval may not exceed the producer's
  ``transaction.timeout.ms`` (60000 by default), after which the broker would abort the open transaction.

``transactional.id`` itself is derived per part and may not be set. One librdkafka default differs:
``reconnect.backoff.ms`` is 10 (librdkafka: 100), which takes a new client's first answer from ~55 ms to ~14 ms
on a local broker (``_CLIENT_DEFAULTS``); set it in the URI or ``config`` to change it. Part readers' consumers
refill their fetch queue after ``fetch.queue.backoff.ms=5`` (librdkafka: 1000; ``connectors.kafka.reader.READ_SETTINGS``).

**Client logs.** librdkafka's own log lines (a refused connection is retried, and logged, every few
milliseconds) go to the Python logger ``eventlog.kafka.rdkafka``: each distinct line at most once a minute, at
WARNING, the repeats at DEBUG. A cluster that does not answer is one ``ClusterUnavailableError`` naming the
servers, the timeout and librdkafka's last complaint, never a flood on stderr.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlparse

from eventlog.errors import InvalidURIError
from eventlog.log import SYNC_MODES

_TOPIC_PART = re.compile(r"^[A-Za-z0-9._-]+$")

# Every client's defaults, under the user's settings. A new client connects to a bootstrap server, learns the
# brokers' ids from its first metadata answer, drops the bootstrap connection and connects again to the broker
# by id, after ``reconnect.backoff.ms`` (librdkafka's 100 ms, with jitter): ~55 ms before a new client's first
# answer on a local broker, ~14 ms with 10 ms. Opening a part writer makes three clients (admin, producer,
# consumer), so this was most of an opening. The backoff still doubles on every failed attempt up to
# ``reconnect.backoff.max.ms`` (10 s), so a broker that is down is not hammered.
_CLIENT_DEFAULTS: dict[str, Any] = {"reconnect.backoff.ms": 10}

# settings that belong to one kind of client only; librdkafka warns about the others
_PRODUCER_ONLY = {"acks", "enable.idempotence", "linger.ms", "batch.size", "compression.type", "retries",
                  "delivery.timeout.ms", "max.in.flight.requests.per.connection", "transactional.id",
                  "queue.buffering.max.messages", "queue.buffering.max.kbytes", "message.send.max.retries",
                  "transaction.timeout.ms", "enable.gapless.guarantee", "message.timeout.ms",
                  "queue.buffering.max.ms", "compression.codec", "request.required.acks"}
_CONSUMER_ONLY = {"group.id", "enable.auto.commit", "auto.offset.reset", "enable.partition.eof",
                  "fetch.wait.max.ms", "fetch.min.bytes", "isolation.level", "session.timeout.ms",
                  "max.partition.fetch.bytes", "fetch.max.bytes", "queued.max.messages.kbytes",
                  "fetch.queue.backoff.ms", "fetch.error.backoff.ms", "queued.min.messages", "max.poll.interval.ms",
                  "auto.commit.interval.ms", "check.crcs"}


class _Throttle(logging.Filter):
    """Lets each distinct librdkafka line through once a minute (at WARNING), the repeats at DEBUG; keeps the
    last line per client (what ``last_complaint`` reports)."""

    def __init__(self, interval: float = 60.0) -> None:
        super().__init__()
        self._interval = interval
        self._seen: dict[str, float] = {}
        self._lock = threading.Lock()
        self.last: dict[str, str] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        key = re.sub(r"\d+", "#", text)
        now = time.monotonic()
        with self._lock:
            self.last[_client_of(text)] = text
            fresh = now - self._seen.get(key, -1e9) >= self._interval
            if fresh:
                self._seen[key] = now
                if len(self._seen) > 10_000:
                    self._seen.clear()
        if fresh and record.levelno > logging.WARNING:
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        elif not fresh:
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return fresh or _RDKAFKA.isEnabledFor(logging.DEBUG)


def _client_of(text: str) -> str:
    m = re.search(r"\[thrd:([^\]/]+)", text)
    return m.group(1) if m else ""


_RDKAFKA = logging.getLogger("eventlog.kafka.rdkafka")
_RDKAFKA.addHandler(logging.NullHandler())  # silent unless the application configures logging
_THROTTLE = _Throttle()
_RDKAFKA.addFilter(_THROTTLE)


def last_complaint(bootstrap: str) -> str | None:
    """The last line librdkafka logged about one of ``bootstrap``'s servers (e.g. "Connection refused")."""
    hosts = set(bootstrap.split(","))
    with _THROTTLE._lock:
        found = [t for h, t in _THROTTLE.last.items() if h in hosts]
    if not found:
        return None
    text = found[-1]
    return text.split("]: ", 1)[-1][:300]


_TRANSACTIONS = "eventlog.transactions"
_TXN_PREFIX = "eventlog.transactional.id.prefix"
_TIMEOUT = "eventlog.timeout"
_REPLICATION = "eventlog.replication.factor"
_SYNC = "eventlog.sync"
_COMMIT_INTERVAL = "eventlog.commit.interval.ms"
_TXN_TIMEOUT_DEFAULT = 60000  # librdkafka's transaction.timeout.ms
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


@dataclass(frozen=True)
class KafkaTarget:
    """Where a Kafka log lives: bootstrap servers, topic prefix, and the user's client settings;
    ``transactions`` and ``transactional_id_prefix`` are eventlog's own settings (module doc)."""

    bootstrap: str
    prefix: str = ""
    settings: dict[str, Any] = field(default_factory=dict)
    transactions: bool = True
    transactional_id_prefix: str = "eventlog"
    timeout: float | None = None
    """Seconds a call waits for the cluster (``eventlog.timeout``; None: the log's default)."""
    replication_factor: int | None = None
    """Replicas of the topics eventlog creates (``eventlog.replication.factor``; None: the broker's default)."""
    sync: str | None = None
    """Durability of ``advance_to`` (``eventlog.sync``: fsync, flush or none; None: the log's default)."""
    commit_interval: float = 0.1
    """Seconds a ``sync="none"`` writer lets a transaction stay open before ``advance_to`` commits it."""

    def transactional_id(self, topic: str, part: int) -> str:
        """The transactional id of the writer of one part: one per (topic, part), so a new writer of the
        part fences the previous one and no two parts fence each other."""
        return f"{self.transactional_id_prefix}.{topic}.{part}"

    def topic(self, stream: str) -> str:
        """The topic of a stream."""
        return f"{self.prefix}.{stream}" if self.prefix else stream

    def stream_of(self, topic: str) -> str | None:
        """The stream of a topic, or None when the topic is outside this log's prefix."""
        if not self.prefix:
            return topic
        head = self.prefix + "."
        return topic[len(head):] if topic.startswith(head) and len(topic) > len(head) else None

    def common(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, "logger": _RDKAFKA, **_CLIENT_DEFAULTS,
                **{k: v for k, v in self.settings.items() if k not in _PRODUCER_ONLY | _CONSUMER_ONLY}}

    def producer(self, **defaults: Any) -> dict[str, Any]:
        """Producer settings: eventlog's defaults, overridden by the user's."""
        return {**defaults, **self.common(), **{k: v for k, v in self.settings.items() if k in _PRODUCER_ONLY}}

    def consumer(self, **defaults: Any) -> dict[str, Any]:
        """Consumer settings: eventlog's defaults, overridden by the user's."""
        return {**defaults, **self.common(), **{k: v for k, v in self.settings.items() if k in _CONSUMER_ONLY}}

    def admin(self) -> dict[str, Any]:
        """Admin client settings."""
        return self.common()


def parse_kafka_uri(uri: str, config: dict[str, Any] | None = None) -> KafkaTarget:
    """Parse a ``kafka://`` URI; ``config`` entries override the URI's query settings."""
    parsed = urlparse(uri)
    if parsed.scheme != "kafka" or not parsed.netloc:
        raise InvalidURIError(f"not a kafka log URI (kafka://host:port/prefix): {uri!r}")
    prefix = unquote(parsed.path).strip("/").replace("/", ".")
    if prefix and not _TOPIC_PART.match(prefix):
        raise InvalidURIError(f"topic prefix {prefix!r} may use only A-Z a-z 0-9 . _ -: {uri!r}")
    settings: dict[str, Any] = dict(parse_qsl(parsed.query, keep_blank_values=True))
    settings.update(config or {})
    if "transactional.id" in settings:
        raise InvalidURIError(f"transactional.id is derived per part (<prefix>.<topic>.<part>); set {_TXN_PREFIX} "
                              f"instead: {uri!r}")
    transactions = _flag(settings.pop(_TRANSACTIONS, True), uri)
    txn_prefix = str(settings.pop(_TXN_PREFIX, "eventlog"))
    if not txn_prefix or len(txn_prefix) > 200 or not txn_prefix.isprintable():
        raise InvalidURIError(f"{_TXN_PREFIX} must be 1-200 printable characters, got {txn_prefix!r}: {uri!r}")
    timeout = settings.pop(_TIMEOUT, None)
    if timeout is not None:
        try:
            timeout = float(timeout)
        except (TypeError, ValueError):
            timeout = -1.0
        if not 0 < timeout <= 86400:
            raise InvalidURIError(f"{_TIMEOUT} must be seconds in (0, 86400], got {settings.get(_TIMEOUT, timeout)!r}: "
                                  f"{uri!r}")
    rf = settings.pop(_REPLICATION, None)
    if rf is not None:
        text = str(rf).strip()
        if not text.isdigit() or not 1 <= int(text) <= 32767:
            raise InvalidURIError(f"{_REPLICATION} must be a replica count from 1, got {rf!r}: {uri!r}")
        rf = int(text)
    sync = settings.pop(_SYNC, None)
    if sync is not None and sync not in SYNC_MODES:
        raise InvalidURIError(f"{_SYNC} must be one of {', '.join(SYNC_MODES)}, got {sync!r}: {uri!r}")
    interval = str(settings.pop(_COMMIT_INTERVAL, "100")).strip()
    if not interval.isdigit() or not 0 <= int(interval) <= 3_600_000:
        raise InvalidURIError(f"{_COMMIT_INTERVAL} must be milliseconds in [0, 3600000], got {interval!r}: {uri!r}")
    txn_timeout = str(settings.get("transaction.timeout.ms", _TXN_TIMEOUT_DEFAULT)).strip()
    if transactions and txn_timeout.isdigit() and int(interval) > int(txn_timeout):
        raise InvalidURIError(f"{_COMMIT_INTERVAL}={interval} is longer than transaction.timeout.ms={txn_timeout}: the "
                              f"broker would abort a sync=\"none\" writer's transaction before it commits; lower the "
                              f"interval or raise transaction.timeout.ms (up to the broker's "
                              f"transaction.max.timeout.ms): {uri!r}")
    return KafkaTarget(parsed.netloc, prefix, settings, transactions, txn_prefix, timeout, rf, sync,
                       int(interval) / 1000)


def _flag(value: Any, uri: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE | _FALSE:
        return text in _TRUE
    raise InvalidURIError(f"{_TRANSACTIONS} must be true or false, got {value!r}: {uri!r}")
