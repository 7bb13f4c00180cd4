"""Fetch Apache Kafka's broker jars through Maven into a cache outside the repository (standard library only).

The cache is ``$EVENTLOG_KAFKA_CACHE`` or ``${XDG_CACHE_HOME:-~/.cache}/eventlog``; version ``V`` lives in
``kafka-V/libs/`` and is complete once ``kafka-V/COMPLETE`` exists. A complete cache is used as it is: a
second start never runs Maven and never touches the network. The first fetch runs
``mvn dependency:copy-dependencies`` on a generated pom (org.apache.kafka:kafka_2.13:V), retried, then adds
the SLF4J binding of the Log4j version Kafka resolved, so the broker's logs are written. The generic part
(cache, Java, Maven with retries) is ``tools/maven_jars.py``, shared with ``tools/s3-server``'s S3Proxy.
"""

from __future__ import annotations

import os
import re
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_TOOLS = os.path.dirname(_HERE)
if _TOOLS not in sys.path:  # maven_jars.py sits in tools/, this module in tools/kafka/
    sys.path.append(_TOOLS)

import maven_jars  # noqa: E402

DEFAULT_VERSION = "4.4.0"
_BACKOFF = maven_jars.BACKOFF  # seconds; the n-th Maven retry waits n times this (the tests shorten it)

FetchError = maven_jars.FetchError
cache_root = maven_jars.cache_root


def version_dir(version: str) -> str:
    """Folder of one cached Kafka version."""
    return maven_jars.version_dir("kafka", version)


def java_binary() -> str:
    """The ``java`` to run Kafka with ($JAVA_HOME/bin/java, else the one on PATH); it must be Java 17+."""
    return maven_jars.java_binary("Kafka 4")


def _log(msg: str) -> None:
    print(f"kafka-broker: {msg}", file=sys.stderr, flush=True)


def _log4j_binding(jars: list) -> list:
    """The SLF4J binding of the Log4j version Kafka resolved, when Kafka's dependencies lack one."""
    if any(j.startswith("log4j-slf4j") for j in jars):
        return []
    log4j = next((m.group(1) for j in jars if (m := re.fullmatch(r"log4j-api-(.+)\.jar", j))), None)
    if not log4j:
        return []
    _log(f"fetching the SLF4J binding of Log4j {log4j} (the broker logs through SLF4J)")
    return [f"org.apache.logging.log4j:log4j-slf4j-impl:{log4j}"]


def ensure_kafka(version: str = DEFAULT_VERSION) -> str:
    """Return the folder of Kafka ``version``'s jars, fetching them through Maven the first time."""
    if not re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+[A-Za-z0-9.-]*", version):
        raise FetchError(f"not a Kafka version: {version!r}")
    return maven_jars.ensure_jars("kafka", version, [f"org.apache.kafka:kafka_2.13:{version}"],
                                  title=f"Apache Kafka {version}", tool="kafka-broker", extra=_log4j_binding,
                                  backoff=_BACKOFF)
