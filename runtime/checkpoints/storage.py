"""Where the runtime's own files live — checkpoints, run marks, sinks' staging files and cursors — on the file
log's storage layer (``connectors.files.storage``): a local folder (``LocalStorage``) or S3 (``S3Storage``).

``open_state_fs(location)`` gives the files of a location — a path, a ``file://`` URI or ``s3://bucket/prefix``
— and the location's path on them: an absolute local path, or ``bucket/key`` on S3. A ``StateFs`` is that
storage as the runtime uses it: ``display(path)`` is the URI errors name (``s3://…``), reads are bounded, and a
failure is one of the runtime's typed errors. What each operation is on the local disk and on S3:

* ``write``: a temporary file, fsync, rename, fsync of the folder (``sync=False``: no fsyncs) | one whole-object
  PUT: atomic, durable and visible to every reader once it returns (S3 is strongly consistent).
* ``replace`` (the counters' read-modify-write): ``write`` (no conditional writes) | a PUT with ``If-Match``
  on the ETag read (``If-None-Match: *`` for a new object), which a concurrent writer makes fail.
* ``read``: the size is checked against the limit, then the bytes read | the same: the object's size
  (HEAD), then one GET. ``read_versioned`` (the counters): one read, or one GET, that also gives the ETag.
* ``list``: ``listdir`` | one listing of the prefix (``/`` delimiter).
* ``remove_tree``: ``rmtree`` | every object under the prefix deleted.
* ``stage`` (a sink's epoch file): appended as it comes, fsynced at ``finish`` | the bytes kept in memory, put
  whole at ``finish`` (objects cannot be appended to, and nothing is visible before the barrier).

Only ``s3://`` of the object stores is supported (S3 and S3-compatible servers): it is the one whose writes
were tested to be atomic and whose conditional writes the counters use; other schemes raise ``LocationError``.
The S3 client is configured the standard way — ``AWS_ENDPOINT_URL``, ``AWS_REGION``, keys — in the driver's
and every executor's environment (``spark.executorEnv.*``); checkpoint URIs take no query options.

An object store that fails a request for any reason but a missing object (it does not answer, refuses the
request, times out — after its client's own retries) raises ``StoreUnavailableError`` naming the store, the
object, the host and the cause; a task hitting it fails its generation, and a driver hitting it fails the run.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from typing import Any, Callable, Iterator, TypeVar
from urllib.parse import unquote, urlparse

import pyarrow.fs as pafs

from connectors.files.storage import (
    AWS_SETTINGS,
    LocalStorage,
    MemoryFile,
    ReadFile,
    S3Storage,
    Storage,
    quiet_checksums,
)
from eventlog import uri
from eventlog.errors import InvalidURIError

from ..errors import CheckpointCorruptError, LocationError, StoreUnavailableError

SUPPORTED_OBJECT_STORES = ("s3",)
"""URI schemes of the object stores the runtime keeps checkpoints and staging files on."""

READ_BUFFER = 1 << 20
"""Bytes fetched per request when a file is read front to back (staged epoch files)."""

_T = TypeVar("_T")


def local_path(location: str) -> str | None:
    """The path of a plain path or ``file://`` URI (``eventlog.uri``); None for any other scheme, and for a
    ``file://`` URI naming another host."""
    try:
        return uri.local_path(location)
    except InvalidURIError:
        return None


def _read_exactly(f: ReadFile, offset: int, length: int) -> bytes:
    """``length`` bytes of ``f`` from ``offset`` (fewer only at its end), in as many reads as the storage needs."""
    data = f.read_at(offset, length)
    if len(data) >= length or not data:
        return data
    parts = [data]
    got = len(data)
    while got < length:
        more = f.read_at(offset + got, length - got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


class _Reader:
    """A file read front to back: ``read(n)`` gives ``n`` bytes (fewer only at the end; all the rest without
    ``n``), fetched ``READ_BUFFER`` bytes at a time."""

    def __init__(self, f: ReadFile) -> None:
        self._f = f
        self._pos = 0                 # the file offset after the buffer
        self._buf = memoryview(b"")

    def read(self, n: int = -1) -> bytes:
        if n < 0:
            n = self._f.size() - self._pos + len(self._buf)
        if n <= len(self._buf):
            out, self._buf = self._buf[:n], self._buf[n:]
            return bytes(out)
        head = bytes(self._buf)
        want = n - len(head)
        data = _read_exactly(self._f, self._pos, max(want, READ_BUFFER))
        self._pos += len(data)
        self._buf = memoryview(data)[want:]
        return head + data[:want]

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> _Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Stage:
    """A staged file (``StateFs.stage``): appended to as items come and made durable at ``finish`` on the local
    disk; on an object store kept in memory and put whole at ``finish``."""

    def __init__(self, fs: StateFs, path: str) -> None:
        self._fs = fs
        self._path = path
        self._out: Any = MemoryFile() if fs.objects else fs.storage.create(path)

    def write(self, data: bytes | memoryview) -> None:
        self._out.write(data)

    def finish(self) -> None:
        out, self._out = self._out, None
        if self._fs.objects:
            self._fs.write(self._path, bytes(out.data))
        else:
            out.fsync()
            out.close()

    def abort(self) -> None:
        out, self._out = self._out, None
        if out is not None:
            out.close()


class StateFs:
    """A storage of ``connectors.files.storage`` as the runtime uses it (the module doc)."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.objects = storage.objects
        """An object store: files are written whole, there are no folders and no appends."""

    def join(self, *parts: str) -> str:
        return self.storage.join(*parts)

    def display(self, path: str) -> str:
        return f"s3://{path}" if self.objects else path

    def _unavailable(self, what: str, path: str, e: BaseException) -> StoreUnavailableError:
        cause = " ".join(str(e).split())[:400]
        return StoreUnavailableError(f"the object store failed to {what} this object (asked from host "
                                     f"{socket.gethostname()}): {type(e).__name__}: {cause}", path=self.display(path))

    def _call(self, what: str, path: str, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """``fn(*args, **kwargs)``, an object store's failure (but a missing object) as ``StoreUnavailableError``."""
        try:
            return fn(*args, **kwargs)
        except FileNotFoundError:
            raise
        except OSError as e:
            if not self.objects:
                raise
            raise self._unavailable(what, path, e) from None

    def make_dirs(self, path: str) -> None:
        """Make the folder (nothing on an object store: a key's prefix is its folder)."""
        if not self.objects:
            self.storage.make_dirs(path)

    def write(self, path: str, data: bytes, *, sync: bool = True) -> None:
        self._call("write", path, self.storage.write_file, path, data, sync=sync)

    @contextlib.contextmanager
    def _reading(self, path: str) -> Iterator[str]:
        """Around a read of checkpoint file ``path`` (yields its URI): a failure as ``CheckpointCorruptError``
        naming the file, or ``StoreUnavailableError`` when the object store failed."""
        where = self.display(path)
        try:
            yield where
        except FileNotFoundError:
            raise CheckpointCorruptError("checkpoint file is missing", path=where) from None
        except IsADirectoryError:
            raise CheckpointCorruptError("checkpoint file is a directory", path=where) from None
        except OSError as e:
            if self.objects:
                raise self._unavailable("read", path, e) from None
            raise CheckpointCorruptError(f"checkpoint file cannot be read: {e.strerror or e}", path=where) from None

    def read(self, path: str, limit: int) -> bytes:
        """The bytes of checkpoint file ``path``: its size is checked against ``limit`` before it is read
        (``CheckpointCorruptError`` naming the file when it is missing, too large, unreadable or changed while
        read; ``StoreUnavailableError`` when the object store fails)."""
        with self._reading(path) as where:
            f = self.storage.open_read(path)
            try:
                size = f.size()
                if size > limit:
                    raise CheckpointCorruptError(f"file is {size} bytes, more than the {limit} a checkpoint file "
                                                 f"may have", path=where)
                data = _read_exactly(f, 0, size)
                grew = b"" if self.objects else f.read_at(size, 1)    # an object does not change once written
            finally:
                f.close()
        if grew or len(data) != size:
            raise CheckpointCorruptError("checkpoint file changed size while it was read", path=where)
        return data

    def read_versioned(self, path: str, limit: int) -> tuple[bytes | None, str | None]:
        """``(bytes, version)`` of checkpoint file ``path`` from one read — the version ``replace`` compares (S3:
        the ETag; the local disk keeps none: None) — or ``(None, None)`` when it does not exist; more than
        ``limit`` bytes are refused (``CheckpointCorruptError``) without reading the rest."""
        with self._reading(path) as where:
            try:
                data, version = self.storage.read_versioned(path, limit + 1)
            except FileNotFoundError:
                return None, None
        if len(data) > limit:
            raise CheckpointCorruptError(f"file has more than the {limit} bytes a checkpoint file may have",
                                         path=where)
        return data, version

    def replace(self, path: str, data: bytes, version: str | None, *, sync: bool = True) -> tuple[bool, str | None]:
        """Write ``path`` if it is still at ``version``: ``(written, new version)``; on S3 a conditional PUT that
        fails, changing nothing, when another writer changed the object since it was read; the local disk
        cannot tell, so it always writes (and has no versions)."""
        return self._call("conditionally write", path, self.storage.replace, path, data, version, sync=sync)

    def exists(self, path: str) -> bool:
        return self._call("look up", path, self.storage.exists, path)

    def size(self, path: str) -> int:
        """The size of file ``path`` (FileNotFoundError when there is none)."""
        f = self._call("look up", path, self.storage.open_read, path)
        try:
            return f.size()
        finally:
            f.close()

    def list(self, path: str) -> list[str]:
        """The names in folder ``path``, sorted (empty when it does not exist)."""
        return self._call("list", path, self.storage.list_dir, path)

    def remove(self, path: str) -> None:
        """Remove file ``path`` (nothing when it does not exist)."""
        try:
            self._call("delete", path, self.storage.remove, path)
        except FileNotFoundError:
            pass

    def remove_tree(self, path: str) -> None:
        self._call("delete", path, self.storage.remove_tree, path)

    def open_read(self, path: str) -> _Reader:
        """File ``path`` to read front to back (``read(n)``; a context manager)."""
        return _Reader(self._call("read", path, self.storage.open_read, path))

    def stage(self, path: str) -> _Stage:
        """A file written as items come and complete at its ``finish`` (module doc)."""
        return _Stage(self, path)


LOCAL = StateFs(LocalStorage())
"""The local disk."""

_opened: dict[tuple, StateFs] = {}
_lock = threading.Lock()


def state_location_problem(location: str) -> str | None:
    """Why ``open_state_fs`` cannot use ``location``, or None: a path, ``file://`` or ``s3://bucket[/prefix]``
    URI with no query is fine."""
    if local_path(location) is not None:
        return None
    parsed = urlparse(location)
    scheme = uri.scheme_of(location)
    if scheme not in SUPPORTED_OBJECT_STORES:
        return (f"the runtime keeps its state on a filesystem path, file:// or s3:// (S3 and S3-compatible "
                f"stores), not {scheme}://")
    if not parsed.netloc:
        return "an s3:// location names a bucket (s3://bucket/prefix)"
    if parsed.query or parsed.fragment or parsed.params:
        return ("s3:// state locations take no options; configure the S3 client with the standard settings "
                "(AWS_ENDPOINT_URL, AWS_REGION, the keys) in the environment of the driver and of every executor "
                "(spark.executorEnv.*)")
    return None


def open_state_fs(location: str) -> tuple[StateFs, str]:
    """``(files, path)`` of a state location (module doc); raises ``LocationError`` for one it cannot use and
    ``StoreUnavailableError`` when the S3 client cannot be set up. S3 files are shared per bucket and client
    settings."""
    path = local_path(location)
    if path is not None:
        return LOCAL, os.path.abspath(path)
    why = state_location_problem(location)
    if why is not None:
        raise LocationError(f"{location!r}: {why}")
    parsed = urlparse(location)
    key = (parsed.scheme.lower(), parsed.netloc, tuple(os.environ.get(k) for k in AWS_SETTINGS))
    with _lock:
        fs = _opened.get(key)
        if fs is None:
            quiet_checksums()
            try:
                s3, _ = pafs.FileSystem.from_uri(f"s3://{parsed.netloc}")   # resolves the bucket's region
            except (OSError, ValueError, TypeError) as e:
                raise StoreUnavailableError(f"cannot set up the S3 client for {location!r} on host "
                                            f"{socket.gethostname()}: {e}", path=location) from None
            fs = _opened[key] = StateFs(S3Storage(s3))
    prefix = unquote(parsed.path).strip("/")
    return fs, fs.join(parsed.netloc, prefix) if prefix else parsed.netloc
