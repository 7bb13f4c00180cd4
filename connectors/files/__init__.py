"""The file log: streams as directories of Arrow IPC or Avro container segments (local or ``pyarrow.fs``)."""

from .log import DEFAULT_SEGMENT_BYTES, FileLog
from .reader import FilePartReader
from .writer import FilePartWriter, Recovery

__all__ = ["DEFAULT_SEGMENT_BYTES", "FileLog", "FilePartReader", "FilePartWriter", "Recovery"]
