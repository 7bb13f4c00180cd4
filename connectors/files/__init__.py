"""The file log: streams as directories of Arrow IPC or Avro container segments (local or ``pyarrow.fs``).

The public names are imported from their modules on first use (``eventlog._lazy``): importing one module of
the package (``connectors.files.layout``) does not import the log, its reader and its writer."""

from typing import TYPE_CHECKING

from eventlog._lazy import lazy_package

if TYPE_CHECKING:
    from .log import DEFAULT_SEGMENT_BYTES, FileLog
    from .reader import FilePartReader
    from .writer import FilePartWriter, Recovery

lazy_package(__name__, {"DEFAULT_SEGMENT_BYTES": ".log", "FileLog": ".log", "FilePartReader": ".reader",
                        "FilePartWriter": ".writer", "Recovery": ".writer"})

__all__ = ["DEFAULT_SEGMENT_BYTES", "FileLog", "FilePartReader", "FilePartWriter", "Recovery"]
