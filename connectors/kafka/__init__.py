"""The Kafka log: ``kafka://host:port/prefix`` — a topic per stream, a partition per part, one record per
event that any Kafka tool reads (format 2.0: kind, seq, time and writer in headers, an Arrow IPC stream or an
Avro single-object encoding as value), sequence ids as offsets (duplicates dropped on read); one fenced
writer per part, and typed errors when records were lost (FORMAT.md "Kafka log")."""

from eventlog._extras import require

require("confluent_kafka", "kafka", "kafka:// logs")  # one clear error naming the extra, before any submodule

from .config import KafkaTarget, parse_kafka_uri
from .errors import InterleavedWritersError, LostDataError, WriterFencedError
from .log import KAFKA_FORMAT_VERSION, KafkaLog, PartTail
from .reader import KafkaPartReader
from .writer import KafkaPartWriter

__all__ = ["KAFKA_FORMAT_VERSION", "InterleavedWritersError", "KafkaLog", "KafkaPartReader", "KafkaPartWriter", "KafkaTarget", "LostDataError",
           "PartTail", "WriterFencedError", "parse_kafka_uri"]
