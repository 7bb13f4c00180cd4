"""A minimal Kafka wire-protocol client, standard library only, for tools/kafka-broker's readiness checks.

It speaks just enough of the protocol to ask a broker which API versions it supports (ApiVersions v0),
what the cluster looks like (Metadata v4) and to create a topic (CreateTopics v2) — the three questions
``tools/kafka-broker start`` asks before it says the cluster is ready. It is not a Kafka client: no
produce, no fetch, no SASL/TLS. Every size read from the wire is bounded before anything is allocated.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass, field

API_CREATE_TOPICS = 19
API_METADATA = 3
API_VERSIONS = 18

_MAX_RESPONSE = 16 * 1024 * 1024  # a metadata response of a test cluster is far smaller
_MAX_ARRAY = 1_000_000

ERROR_NONE = 0
ERROR_TOPIC_ALREADY_EXISTS = 36


class WireError(Exception):
    """The broker did not answer, closed the connection, or sent a response this probe cannot parse."""


@dataclass
class PartitionInfo:
    """One partition of a topic as Metadata reports it."""

    partition: int
    error_code: int
    leader: int
    replicas: list[int]
    isr: list[int]


@dataclass
class TopicInfo:
    """One topic as Metadata reports it."""

    name: str
    error_code: int
    partitions: list[PartitionInfo] = field(default_factory=list)


@dataclass
class ClusterMetadata:
    """What a Metadata request answered: live brokers (node id -> host:port), controller, topics."""

    brokers: dict[int, str]
    controller: int
    cluster_id: str | None
    topics: dict[str, TopicInfo]


class Reader:
    """Big-endian reads over one response body; every read is bounds-checked."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0

    def _take(self, n: int) -> bytes:
        if n < 0 or self._pos + n > len(self._data):
            raise WireError(f"truncated response: wanted {n} bytes at {self._pos} of {len(self._data)}")
        out = self._data[self._pos:self._pos + n]
        self._pos += n
        return out

    def int8(self) -> int:
        return struct.unpack(">b", self._take(1))[0]

    def int16(self) -> int:
        return struct.unpack(">h", self._take(2))[0]

    def int32(self) -> int:
        return struct.unpack(">i", self._take(4))[0]

    def string(self) -> str | None:
        n = self.int16()
        if n == -1:
            return None
        return self._take(n).decode("utf-8", "replace")

    def array_len(self) -> int:
        n = self.int32()
        if n == -1:
            return 0
        if n < 0 or n > _MAX_ARRAY:
            raise WireError(f"implausible array length {n}")
        return n


def _string(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode("utf-8")
    return struct.pack(">h", len(b)) + b


def parse_metadata(r: Reader) -> ClusterMetadata:
    """Parse a Metadata v4 response body; raise :class:`WireError` when it is truncated or implausible."""
    r.int32()  # throttle_time_ms
    brokers = {}
    for _ in range(r.array_len()):
        node, host, port = r.int32(), r.string(), r.int32()
        r.string()  # rack
        brokers[node] = f"{host}:{port}"
    cluster_id = r.string()
    controller = r.int32()
    topics = {}
    for _ in range(r.array_len()):
        error, name = r.int16(), r.string() or ""
        r.int8()  # is_internal
        info = TopicInfo(name, error)
        for _ in range(r.array_len()):
            perr, index, leader = r.int16(), r.int32(), r.int32()
            replicas = [r.int32() for _ in range(r.array_len())]
            isr = [r.int32() for _ in range(r.array_len())]
            info.partitions.append(PartitionInfo(index, perr, leader, replicas, isr))
        topics[name] = info
    return ClusterMetadata(brokers, controller, cluster_id, topics)


class Connection:
    """One TCP connection to one broker; requests are answered in order."""

    def __init__(self, host: str, port: int, timeout: float = 5.0) -> None:
        try:
            self._sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as e:
            raise WireError(f"cannot connect to {host}:{port}: {e}") from e
        self._sock.settimeout(timeout)
        self._correlation = 0
        self.address = f"{host}:{port}"

    def close(self) -> None:
        """Close the socket."""
        self._sock.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _recv_exact(self, n: int) -> bytes:
        chunks = []
        while n > 0:
            try:
                chunk = self._sock.recv(min(n, 1 << 16))
            except OSError as e:
                raise WireError(f"{self.address}: {e}") from e
            if not chunk:
                raise WireError(f"{self.address} closed the connection")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def request(self, api_key: int, api_version: int, body: bytes) -> Reader:
        """Send one request (header v1) and return a reader over the response body (header v0 stripped)."""
        self._correlation += 1
        header = struct.pack(">hhi", api_key, api_version, self._correlation) + _string("eventlog-kafka-broker")
        payload = header + body
        try:
            self._sock.sendall(struct.pack(">i", len(payload)) + payload)
        except OSError as e:
            raise WireError(f"{self.address}: {e}") from e
        size = struct.unpack(">i", self._recv_exact(4))[0]
        if size < 4 or size > _MAX_RESPONSE:
            raise WireError(f"{self.address}: implausible response size {size}")
        reader = Reader(self._recv_exact(size))
        if reader.int32() != self._correlation:
            raise WireError(f"{self.address}: response out of order")
        return reader

    def api_versions(self) -> dict[int, tuple[int, int]]:
        """ApiVersions v0: api key -> (min version, max version) the broker supports."""
        r = self.request(API_VERSIONS, 0, b"")
        error = r.int16()
        if error != ERROR_NONE:
            raise WireError(f"{self.address}: ApiVersions error {error}")
        out = {}
        for _ in range(r.array_len()):
            key, lo, hi = r.int16(), r.int16(), r.int16()
            out[key] = (lo, hi)
        return out

    def metadata(self, topics: list[str] | None = None) -> ClusterMetadata:
        """Metadata v4: live brokers, controller and the given topics (all topics when None)."""
        if topics is None:
            body = struct.pack(">i", -1)
        else:
            body = struct.pack(">i", len(topics)) + b"".join(_string(t) for t in topics)
        body += struct.pack(">b", 0)  # allow_auto_topic_creation = false
        return parse_metadata(self.request(API_METADATA, 4, body))

    def create_topic(self, name: str, partitions: int, replication: int, timeout_ms: int = 10_000) -> tuple[int, str | None]:
        """CreateTopics v2 for one topic: (error code, error message); 0 is success, 36 already exists."""
        body = struct.pack(">i", 1) + _string(name) + struct.pack(">ih", partitions, replication)
        body += struct.pack(">ii", 0, 0)  # no manual assignment, no configs
        body += struct.pack(">ib", timeout_ms, 0)  # timeout, validate_only = false
        r = self.request(API_CREATE_TOPICS, 2, body)
        r.int32()  # throttle_time_ms
        for _ in range(r.array_len()):
            topic, error, message = r.string(), r.int16(), r.string()
            if topic == name:
                return error, message
        raise WireError(f"{self.address}: CreateTopics answered nothing about {name}")
