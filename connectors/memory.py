"""The in-process log (``memory://name``): the file log's code over bytes kept in memory.

Logs with the same name share their streams within one process, so a capturing and a replaying part of
a single-process pipeline (or a test) meet at ``memory://name``. Nothing survives the process.
"""

from __future__ import annotations

import threading
from typing import Any

from eventlog.uri import memory_name

from .files.log import FileLog
from .files.storage import MemoryStorage

_stores: dict[str, MemoryStorage] = {}
_mutex = threading.Lock()


class MemoryLog(FileLog):
    """A log in process memory, shared by every ``open_log("memory://<name>")`` of this process."""

    encode_ahead = False
    """Readers of this process see each event once the call that appended it returns (no encoding ahead)."""

    def __init__(self, name: str, **options: Any) -> None:
        with _mutex:
            store = _stores.setdefault(name, MemoryStorage())
        options.setdefault("sync", "none")
        super().__init__("", uri=f"memory://{name}", storage=store, **options)
        self.name = name


def open_uri(uri: str, **options: Any) -> MemoryLog:
    """The memory log ``memory://name`` (``open_log``'s opener for ``memory://``)."""
    return MemoryLog(memory_name(uri), **options)


def drop(name: str) -> None:
    """Forget the memory log ``name`` and everything in it."""
    with _mutex:
        _stores.pop(name, None)
