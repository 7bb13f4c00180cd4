"""The Kafka log: ``kafka://host:port/prefix`` — a topic per stream, a partition per part, bundles of
events as record values, sequence ids as offsets (duplicates dropped on read); one fenced writer per part,
and typed errors when records were lost (FORMAT.md "Kafka log")."""

from .config import KafkaTarget, parse_kafka_uri
from .errors import InterleavedWritersError, LostDataError, WriterFencedError
from .log import KafkaLog, PartTail
from .reader import KafkaPartReader
from .writer import KafkaPartWriter

__all__ = ["InterleavedWritersError", "KafkaLog", "KafkaPartReader", "KafkaPartWriter", "KafkaTarget", "LostDataError",
           "PartTail", "WriterFencedError", "parse_kafka_uri"]
