"""The Kafka log: ``kafka://host:port/prefix`` — a topic per stream, a partition per part, bundles of
events as record values, sequence ids as offsets (duplicates dropped on read)."""

from .config import KafkaTarget, parse_kafka_uri
from .log import KafkaLog
from .reader import KafkaPartReader
from .writer import KafkaPartWriter

__all__ = ["KafkaLog", "KafkaPartReader", "KafkaPartWriter", "KafkaTarget", "parse_kafka_uri"]
