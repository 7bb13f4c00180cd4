"""Where the runtime's own files live: a local folder or an object store (S3), behind one small seam.

The checkpoint store (``runtime.state``), the run marks (``runtime.locations``) and the sinks' staging files
and cursors (``runtime.sinks``) reach their files only through a ``StateFs``. ``open_state_fs(location)`` gives
the filesystem of a location — a path, a ``file://`` URI or ``s3://bucket/prefix`` — and the location's path on
it: an absolute local path, or ``bucket/key`` on S3; ``display(path)`` is the URI errors name (``s3://…``).

What each operation is on the local disk (``LocalStateFs``) and on S3 (``S3StateFs``, through ``pyarrow.fs``):

* ``write``: a temporary file, fsync, rename, fsync of the folder | one whole-object PUT: atomic, durable and
  visible to every reader once it returns (S3 is strongly consistent).
* ``replace`` (the counters' read-modify-write): ``write`` (no conditional writes) | a PUT with ``If-Match``
  on the ETag read (``If-None-Match: *`` for a new object), which a concurrent writer makes fail.
* ``read``: the size is checked against the limit, then the bytes read | the same: the object's size
  (HEAD), then one GET (the counters: one GET, its declared length checked before the body is read).
* ``list``: ``listdir`` | one listing of the prefix (``/`` delimiter).
* ``remove_tree``: ``rmtree`` | every object under the prefix deleted.
* ``stage`` (a sink's epoch file): appended with ``os.write``, fsynced at ``finish`` | the bytes kept in
  memory, put whole at ``finish`` (objects cannot be appended to).

Only ``s3://`` of the object stores is supported (S3 and S3-compatible servers): it is the one whose writes
were tested to be atomic and whose conditional writes the counters use; other schemes raise ``LocationError``.
The S3 client is configured the standard way — ``AWS_ENDPOINT_URL``, ``AWS_REGION``, keys — in the driver's
and every executor's environment (``spark.executorEnv.*``); checkpoint URIs take no query options.

An object store that fails a request for any reason but a missing object (it does not answer, refuses the
request, times out — after its client's own retries) raises ``StoreUnavailableError`` naming the store, the
object, the host and the cause; a task hitting it fails its generation, and a driver hitting it fails the run.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
from typing import Any, BinaryIO
from urllib.parse import unquote, urlparse

from .errors import CheckpointCorruptError, LocationError, StoreUnavailableError

SUPPORTED_OBJECT_STORES = ("s3",)
"""URI schemes of the object stores the runtime keeps checkpoints and staging files on."""

READ_BUFFER = 1 << 20
"""Bytes fetched per request when an object is read as a stream (staged epoch files)."""


def local_path(location: str) -> str | None:
    """The path of a plain path or ``file://`` URI; None for any other scheme."""
    parsed = urlparse(location)
    scheme = parsed.scheme.lower()
    if scheme == "":
        return location
    if scheme == "file" and parsed.netloc in ("", "localhost"):
        return unquote(parsed.path)
    return None


# -- the local disk ----------------------------------------------------------------------------------------


def atomic_write(path: str, data: bytes, *, sync: bool = True) -> None:
    """Write ``data`` to local file ``path`` so that readers see the old file or the whole new one."""
    d = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-")
    try:
        view = memoryview(data)
        while view.nbytes:
            view = view[os.write(fd, view):]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    if sync:
        dfd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


class _LocalStage:
    """A staged file on the local disk: appended as items come, fsynced and closed at ``finish``."""

    def __init__(self, path: str) -> None:
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    def write(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        while view.nbytes:
            view = view[os.write(self._fd, view):]

    def finish(self) -> None:
        os.fsync(self._fd)
        self.abort()

    def abort(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class LocalStateFs:
    """The local disk (or a shared filesystem mounted on every host): today's POSIX files (module doc)."""

    objects = False
    conditional = False
    """No conditional writes: ``replace`` always writes."""

    def join(self, *parts: str) -> str:
        return os.path.join(*parts)

    def display(self, path: str) -> str:
        return path

    def make_dirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def write(self, path: str, data: bytes, *, sync: bool = True) -> None:
        atomic_write(path, data, sync=sync)

    def read(self, path: str, limit: int) -> bytes:
        from .statefile import read_bounded

        return read_bounded(path, limit)

    def read_versioned(self, path: str, limit: int) -> tuple[bytes | None, str | None]:
        """``(bytes, version)`` of ``path``, ``(None, None)`` when it does not exist (local files have no
        version: None)."""
        if not os.path.exists(path):
            return None, None
        return self.read(path, limit), None

    def replace(self, path: str, data: bytes, version: str | None, *, sync: bool = True) -> tuple[bool, str | None]:
        """Write ``path`` if it is still at ``version``: ``(written, new version)``; the local disk cannot tell,
        so it always writes (and has no versions)."""
        self.write(path, data, sync=sync)
        return True, None

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def size(self, path: str) -> int:
        return os.stat(path).st_size

    def list(self, path: str) -> list[str]:
        try:
            return sorted(os.listdir(path))
        except FileNotFoundError:
            return []

    def remove(self, path: str) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

    def remove_tree(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def open_read(self, path: str) -> BinaryIO:
        return open(path, "rb")  # noqa: SIM115 - the caller closes it

    def stage(self, path: str) -> _LocalStage:
        return _LocalStage(path)


LOCAL = LocalStateFs()


# -- S3 ----------------------------------------------------------------------------------------------------


class _ObjectStage:
    """A staged object: its bytes in memory, put whole at ``finish``."""

    def __init__(self, fs: S3StateFs, path: str) -> None:
        self._fs = fs
        self._path = path
        self._buf: bytearray | None = bytearray()

    def write(self, data: bytes | memoryview) -> None:
        self._buf += data

    def finish(self) -> None:
        data, self._buf = bytes(self._buf), None
        self._fs.write(self._path, data)

    def abort(self) -> None:
        self._buf = None


class S3StateFs:
    """S3 through ``pyarrow.fs.S3FileSystem`` (module doc); the conditional writes through the boto3 client of
    ``connectors.files.storage.S3Storage`` (the file log's, with its endpoint and keys)."""

    objects = True
    conditional = True
    """``replace`` is a conditional PUT."""

    def __init__(self, fs: Any) -> None:
        from connectors.files.storage import S3Storage

        self.fs = fs
        self.storage = S3Storage(fs)

    def join(self, *parts: str) -> str:
        return "/".join(p.strip("/") for p in parts if p.strip("/"))

    def display(self, path: str) -> str:
        return f"s3://{path}"

    def _unavailable(self, what: str, path: str, e: BaseException) -> StoreUnavailableError:
        cause = " ".join(str(e).split())[:400]
        return StoreUnavailableError(f"the object store failed to {what} this object (asked from host "
                                     f"{socket.gethostname()}): {type(e).__name__}: {cause}", path=self.display(path))

    def make_dirs(self, path: str) -> None:
        """Nothing: object stores have no folders (a key's prefix is its folder)."""

    def write(self, path: str, data: bytes, *, sync: bool = True) -> None:
        try:
            with self.fs.open_output_stream(path) as out:   # allow_delayed_open: one PUT (multipart when large)
                out.write(data)
        except OSError as e:
            raise self._unavailable("write", path, e) from None

    def read(self, path: str, limit: int) -> bytes:
        """The bytes of object ``path``: its size is checked against ``limit`` before it is read
        (``CheckpointCorruptError`` naming the object when it is missing, too large or changed while read)."""
        where = self.display(path)
        try:
            with self.fs.open_input_file(path) as f:
                size = f.size()
                if size > limit:
                    raise CheckpointCorruptError(f"file is {size} bytes, more than the {limit} a checkpoint file "
                                                 f"may have", path=where)
                data = f.read(size)
        except FileNotFoundError:
            raise CheckpointCorruptError("checkpoint file is missing", path=where) from None
        except IsADirectoryError:
            raise CheckpointCorruptError("checkpoint file is a directory", path=where) from None
        except OSError as e:
            raise self._unavailable("read", path, e) from None
        if len(data) != size:
            raise CheckpointCorruptError("checkpoint file changed size while it was read", path=where)
        return data

    def read_versioned(self, path: str, limit: int) -> tuple[bytes | None, str | None]:
        """``(bytes, ETag)`` of object ``path`` from one GET, ``(None, None)`` when it does not exist; the size
        the response declares is checked against ``limit`` before the body is read."""
        bucket, _, key = path.partition("/")
        client = self.storage._s3()
        try:
            resp = client.get_object(Bucket=bucket, Key=key)
        except client.exceptions.NoSuchKey:
            return None, None
        except Exception as e:  # noqa: BLE001 - botocore's errors are not OSErrors
            raise self._unavailable("read", path, e) from None
        body = resp["Body"]
        try:
            size = int(resp.get("ContentLength", -1))
            if not 0 <= size <= limit:
                raise CheckpointCorruptError(f"file is {size} bytes, more than the {limit} a checkpoint file may "
                                             f"have", path=self.display(path))
            data = body.read(size + 1)
        except CheckpointCorruptError:
            raise
        except Exception as e:  # noqa: BLE001
            raise self._unavailable("read", path, e) from None
        finally:
            body.close()
        if len(data) != size:
            raise CheckpointCorruptError("checkpoint file changed size while it was read", path=self.display(path))
        return data, resp.get("ETag")

    def replace(self, path: str, data: bytes, version: str | None, *, sync: bool = True) -> tuple[bool, str | None]:
        """Put ``data`` at ``path`` only if the object is still at ETag ``version`` (None: only if it does not
        exist): ``(True, its new ETag)``, or ``(False, None)``, changing nothing, when another writer changed
        it since it was read."""
        bucket, _, key = path.partition("/")
        client = self.storage._s3()
        cond = {"IfMatch": version} if version is not None else {"IfNoneMatch": "*"}
        try:
            resp = client.put_object(Bucket=bucket, Key=key, Body=data, **cond)
        except client.exceptions.ClientError as e:
            code = e.response.get("Error", {}).get("Code", "")
            status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in ("PreconditionFailed", "ConditionalRequestConflict") or status in (409, 412):
                return False, None
            raise self._unavailable("conditionally write", path, e) from None
        except Exception as e:  # noqa: BLE001 - botocore's connection errors are not OSErrors
            raise self._unavailable("conditionally write", path, e) from None
        return True, resp.get("ETag")

    def exists(self, path: str) -> bool:
        import pyarrow.fs as pafs

        try:
            return self.fs.get_file_info(path).type != pafs.FileType.NotFound
        except OSError as e:
            raise self._unavailable("look up", path, e) from None

    def size(self, path: str) -> int:
        import pyarrow.fs as pafs

        try:
            info = self.fs.get_file_info(path)
        except OSError as e:
            raise self._unavailable("look up", path, e) from None
        if info.type != pafs.FileType.File:
            raise FileNotFoundError(self.display(path))
        return info.size

    def list(self, path: str) -> list[str]:
        import pyarrow.fs as pafs

        try:
            infos = self.fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
        except FileNotFoundError:
            return []
        except OSError as e:
            raise self._unavailable("list", path, e) from None
        return sorted(i.base_name for i in infos)

    def remove(self, path: str) -> None:
        try:
            self.fs.delete_file(path)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise self._unavailable("delete", path, e) from None

    def remove_tree(self, path: str) -> None:
        try:
            self.fs.delete_dir(path)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise self._unavailable("delete", path, e) from None

    def open_read(self, path: str) -> BinaryIO:
        try:
            return self.fs.open_input_stream(path, compression=None, buffer_size=READ_BUFFER)
        except FileNotFoundError:
            raise
        except OSError as e:
            raise self._unavailable("read", path, e) from None

    def stage(self, path: str) -> _ObjectStage:
        return _ObjectStage(self, path)


# -- opening a location ------------------------------------------------------------------------------------

StateFs = LocalStateFs | S3StateFs

_opened: dict[tuple, S3StateFs] = {}
_lock = threading.Lock()


def state_location_problem(location: str) -> str | None:
    """Why ``open_state_fs`` cannot use ``location``, or None: a path, ``file://`` or ``s3://bucket[/prefix]``
    URI with no query is fine."""
    if local_path(location) is not None:
        return None
    parsed = urlparse(location)
    scheme = parsed.scheme.lower()
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
    """``(filesystem, path)`` of a state location (module doc); raises ``LocationError`` for one it cannot use
    and ``StoreUnavailableError`` when the S3 client cannot be set up. Filesystems are shared per bucket and
    client settings."""
    path = local_path(location)
    if path is not None:
        return LOCAL, os.path.abspath(path)
    why = state_location_problem(location)
    if why is not None:
        raise LocationError(f"{location!r}: {why}")
    from connectors.files.storage import AWS_SETTINGS

    parsed = urlparse(location)
    key = (parsed.scheme.lower(), parsed.netloc, tuple(os.environ.get(k) for k in AWS_SETTINGS))
    with _lock:
        fs = _opened.get(key)
        if fs is None:
            import pyarrow.fs as pafs

            try:
                s3, _ = pafs.FileSystem.from_uri(f"s3://{parsed.netloc}")
                opts = dict(s3.__reduce__()[1][0])
                opts["region"] = opts.get("region") or s3.region  # the bucket's region from_uri resolved
                opts["allow_delayed_open"] = True     # a small object is one PUT, not a multipart upload
                fs = _opened[key] = S3StateFs(pafs.S3FileSystem(**opts))
            except (OSError, ValueError, TypeError) as e:
                raise StoreUnavailableError(f"cannot set up the S3 client for {location!r} on host "
                                            f"{socket.gethostname()}: {e}", path=location) from None
    return fs, fs.join(parsed.netloc, unquote(parsed.path))
