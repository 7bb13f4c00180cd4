"""The process's pool of eventlog worker threads: file readers decode ahead on it, file writers encode ahead
on it (pyarrow releases the GIL while it decodes and compresses). Made on first use; a forked child (Spark
forks its Python workers from a daemon) has none of its parent's threads, so it makes a pool of its own."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

THREAD_PREFIX = "eventlog-worker"
"""The name its threads start with."""

_pool: ThreadPoolExecutor | None = None
_lock = threading.Lock()


CORES = os.cpu_count() or 1
"""The machine's cores, asked once (``os.cpu_count`` costs ~2 µs a call, and readers asked for it
for every event)."""


def size() -> int:
    """Threads in the pool: one per core, at least two."""
    return max(2, CORES)


def pool() -> ThreadPoolExecutor:
    """The pool (made now if this process has none yet)."""
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=size(), thread_name_prefix=THREAD_PREFIX)
        return _pool


def started() -> bool:
    """Whether this process has made its pool."""
    return _pool is not None


def _forget() -> None:
    global _pool, _lock
    _pool = None
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_forget)


__all__ = ["THREAD_PREFIX", "pool", "size", "started"]
