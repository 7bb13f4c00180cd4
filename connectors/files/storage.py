"""Where the file log's bytes live: the local disk, S3, any other ``pyarrow.fs`` filesystem, or process memory.

The file log needs few operations: list a folder, create a file exclusively, append to a file it created,
read byte ranges, truncate (to cut a torn tail), fsync, and an exclusive writer lock per part.

Object stores (S3 and every ``pyarrow.fs`` filesystem but the local one; ``Storage.objects``) cannot append
and show a file only once its writer closed it, so the file log writes there in whole files: a writer keeps
its open segment in memory and puts it, sealed, at each ``sync`` (FORMAT.md §3.5). ``create_exclusive`` is
the fence between writers of one part: on S3 a conditional write (``If-None-Match: *``), which exactly one of
two writers racing for a name wins.

The runtime keeps its checkpoints, run marks and sinks' staging files on the same layer, on the local disk or S3
(``runtime.checkpoints.storage``). It needs three operations more: ``write_file`` without fsync (``sync=False``), a
read that gives the version it read and a ``replace`` conditional on that version (on S3 the object's ETag and
``If-Match``: the job's counters, the runtime's one read-modify-write), and ``remove_tree``.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import shutil
import tempfile
import threading
import time
import uuid
from typing import Protocol

import pyarrow as pa
import pyarrow.fs as pafs

from eventlog._extras import require
from eventlog.errors import ConditionalWritesError, PartLockedError


class AppendFile(Protocol):
    """A file being written at its end."""

    def write(self, data: bytes) -> None: ...
    def flush(self) -> None: ...
    def fsync(self) -> None: ...
    def close(self) -> None: ...


class ReadFile(Protocol):
    """A file read by byte ranges; ``size()`` may grow while a writer appends."""

    def size(self) -> int: ...
    def read_at(self, offset: int, length: int) -> bytes: ...
    def map(self) -> pa.Buffer:
        """The whole file as it is now, as a buffer (memory-mapped where the storage allows)."""
        ...
    def close(self) -> None: ...


class Storage(Protocol):
    """The operations the file log needs from a filesystem."""

    objects: bool
    """Files are written whole (an object store): no appends, nothing visible before it is complete."""

    def list_dir(self, path: str) -> list[str]: ...
    def file_sizes(self, path: str) -> dict[str, int]:
        """Name -> size of the files in folder ``path`` (empty when it does not exist), from one listing."""
        ...
    def exists(self, path: str) -> bool: ...
    def mtime(self, path: str) -> float | None:
        """When ``path`` was last modified (seconds since the epoch); None where the storage does not keep it.
        OSError when it does not exist."""
        ...
    def make_dirs(self, path: str) -> None: ...
    def read_file(self, path: str, limit: int | None = None) -> bytes:
        """The bytes of ``path``; at most ``limit`` of them when given (the rest is not read)."""
        ...
    def create_exclusive(self, path: str, data: bytes) -> bool:
        """Create ``path`` holding ``data`` unless it exists (then False, changing nothing), atomically: of two
        callers racing for one name exactly one wins, and readers see the whole file or none."""
        ...
    def write_file(self, path: str, data: bytes, *, sync: bool = True) -> None:
        """Replace (or create) ``path`` with ``data`` atomically: a crash leaves the old or the new content.
        ``sync=False``: not made durable before it returns (the local disk skips its fsyncs)."""
        ...
    def read_versioned(self, path: str, limit: int | None = None) -> tuple[bytes, str | None]:
        """``read_file`` and the version of what it read, from one request: on S3 the object's ETag; None where
        the storage keeps no versions. FileNotFoundError when it does not exist."""
        ...
    def replace(self, path: str, data: bytes, version: str | None, *, sync: bool = True) -> tuple[bool, str | None]:
        """``write_file`` if ``path`` is still at ``version`` (None: if it does not exist): ``(True, its new
        version)``, or ``(False, None)``, changing nothing, when another writer changed it since. Only S3 has
        conditional writes; the other storages write regardless (``(True, None)``)."""
        ...
    def create(self, path: str) -> AppendFile: ...
    def append_to(self, path: str) -> AppendFile:
        """Open an existing file to append to it (a repair sealing a segment a crashed writer left)."""
        ...
    def rename(self, src: str, dst: str) -> None:
        """Give ``src`` the name ``dst`` (absent) atomically: readers see one name or the other."""
        ...
    def open_read(self, path: str) -> ReadFile: ...
    def truncate(self, path: str, size: int) -> None: ...
    def remove(self, path: str) -> None: ...
    def remove_dir(self, path: str) -> None:
        """Remove the folder ``path`` if it is empty (else leave it)."""
        ...
    def remove_tree(self, path: str) -> None:
        """Remove the folder ``path`` and everything under it (nothing when it does not exist)."""
        ...
    def sync_dir(self, path: str) -> None: ...
    def lock(self, path: str) -> object: ...
    def unlock(self, handle: object) -> None: ...
    def join(self, *parts: str) -> str: ...


class _Unversioned:
    """``read_versioned`` and ``replace`` of a storage without versions or conditional writes."""

    def read_versioned(self, path: str, limit: int | None = None) -> tuple[bytes, str | None]:
        return self.read_file(path, limit), None  # type: ignore[attr-defined]

    def replace(self, path: str, data: bytes, version: str | None, *, sync: bool = True) -> tuple[bool, str | None]:
        self.write_file(path, data, sync=sync)  # type: ignore[attr-defined]
        return True, None


# -- local disk -------------------------------------------------------------------------------------------


class _LocalAppend:
    def __init__(self, path: str, mode: str = "xb") -> None:
        self._f = open(path, mode)  # noqa: SIM115 - closed by close()

    def write(self, data: bytes) -> None:
        self._f.write(data)

    def flush(self) -> None:
        self._f.flush()

    def fsync(self) -> None:
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()


class _LocalRead:
    def __init__(self, path: str) -> None:
        self._path = path
        self._fd = -1  # so __del__ is safe when open() fails
        self._fd = os.open(path, os.O_RDONLY)

    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def read_at(self, offset: int, length: int) -> bytes:
        return os.pread(self._fd, length, offset)

    def map(self) -> pa.Buffer:
        size = self.size()
        if size == 0:
            return pa.py_buffer(b"")
        # map the open descriptor, not the path: a 2.x writer renames a segment once it sealed it
        return pa.py_buffer(mmap.mmap(self._fd, size, prot=mmap.PROT_READ))  # lives as long as the buffer

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:  # a reader dropped without close() must not leak its descriptor
        self.close()


def temp_beside(path: str) -> tuple[int, str]:
    """A new temporary file in ``path``'s folder, to be renamed over ``path`` once whole: ``(fd, name)``. The
    name is unpredictable and the file is created exclusively (``O_EXCL``: a file or symlink planted at the name
    is never opened, so nothing outside the folder is written through it); its mode is what a plain ``open``
    would give (the umask's), not ``mkstemp``'s 0600. The name ends in ``.tmp``, which the file log's readers and
    repair skip."""
    folder, name = os.path.split(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    return fd, tmp


def _umask() -> int:
    """The process's umask (read by setting it and setting it back, once)."""
    global _UMASK
    if _UMASK is None:
        _UMASK = os.umask(0o022)
        os.umask(_UMASK)
    return _UMASK


_UMASK: int | None = None


class LocalStorage(_Unversioned):
    """The local disk through ``os``: real appends, fsync, truncate and ``flock`` writer locks."""

    objects = False

    def join(self, *parts: str) -> str:
        return os.path.join(*parts)

    def list_dir(self, path: str) -> list[str]:
        try:
            return sorted(os.listdir(path))
        except FileNotFoundError:
            return []

    def file_sizes(self, path: str) -> dict[str, int]:
        out = {}
        try:
            with os.scandir(path) as it:
                for e in it:
                    try:
                        if e.is_file():
                            out[e.name] = e.stat().st_size
                    except FileNotFoundError:
                        continue
        except FileNotFoundError:
            pass
        return out

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def mtime(self, path: str) -> float | None:
        return os.stat(path).st_mtime

    def make_dirs(self, path: str) -> None:
        for _ in range(100):
            try:
                os.makedirs(path, exist_ok=True)
                return
            except FileNotFoundError:  # a folder above was removed meanwhile (an empty staging folder): again
                continue
        os.makedirs(path, exist_ok=True)

    def read_file(self, path: str, limit: int | None = None) -> bytes:
        with open(path, "rb") as f:
            return f.read() if limit is None else f.read(limit)

    def create_exclusive(self, path: str, data: bytes) -> bool:
        fd, tmp = temp_beside(path)
        with open(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)  # atomic create-if-absent: readers never see a half-written file
            self.sync_dir(os.path.dirname(path) or ".")
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)

    def write_file(self, path: str, data: bytes, *, sync: bool = True) -> None:
        fd, tmp = temp_beside(path)
        try:
            with open(fd, "wb") as f:
                f.write(data)
                if sync:
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(tmp, path)  # atomic: readers and a crash see the old file or the new one
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        if sync:
            self.sync_dir(os.path.dirname(path) or ".")

    def create(self, path: str) -> _LocalAppend:
        return _LocalAppend(path)

    def append_to(self, path: str) -> _LocalAppend:
        if not os.path.isfile(path):
            raise FileNotFoundError(path)
        return _LocalAppend(path, "ab")

    def rename(self, src: str, dst: str) -> None:
        os.link(src, dst)  # FileExistsError rather than replacing a file of that name
        os.unlink(src)
        self.sync_dir(os.path.dirname(dst) or ".")

    def open_read(self, path: str) -> _LocalRead:
        return _LocalRead(path)

    def truncate(self, path: str, size: int) -> None:
        with open(path, "r+b") as f:
            f.truncate(size)
            f.flush()
            os.fsync(f.fileno())

    def remove(self, path: str) -> None:
        os.unlink(path)

    def remove_dir(self, path: str) -> None:
        try:
            os.rmdir(path)
        except OSError:  # not empty (or already gone): leave it
            pass

    def remove_tree(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def sync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def lock(self, path: str) -> object:
        import fcntl

        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise PartLockedError("another writer holds this part", path=path) from None
            raise
        return fd

    def unlock(self, handle: object) -> None:
        os.close(handle)  # type: ignore[arg-type] - closing the fd releases the flock


# -- any pyarrow filesystem --------------------------------------------------------------------------------


class _ArrowAppend:
    def __init__(self, fs: pafs.FileSystem, path: str) -> None:
        self._out = fs.open_output_stream(path)

    def write(self, data: bytes) -> None:
        self._out.write(data)

    def flush(self) -> None:
        self._out.flush()

    def fsync(self) -> None:  # pyarrow streams have no fsync; the object store makes the file durable on close
        self._out.flush()

    def close(self) -> None:
        self._out.close()


_WHOLE_READ = 64 << 20
"""Objects up to this size are fetched in one request when opened; larger ones are read by ranges."""


class _ArrowRead:
    """An object as it was when opened (objects are written whole and never grow): fetched at once when it is
    small, else read by ranged requests."""

    def __init__(self, fs: pafs.FileSystem, path: str) -> None:
        self._f = fs.open_input_file(path)
        self._size = self._f.size()
        self._buf: pa.Buffer | None = None

    def size(self) -> int:
        return self._size

    def read_at(self, offset: int, length: int) -> bytes:
        length = max(0, min(length, self._size - offset))
        if self._buf is None and self._size <= _WHOLE_READ:  # one request for the whole object on first use
            self._buf = self._f.read_buffer()
        if self._buf is not None:
            return self._buf[offset:offset + length].to_pybytes()
        return self._f.read_at(length, offset)

    def map(self) -> pa.Buffer:
        if self._buf is None:
            self._buf = self._f.read_at(self._size, 0)
        return self._buf

    def close(self) -> None:
        self._f.close()
        self._buf = None


class ArrowFsStorage(_Unversioned):
    """Any ``pyarrow.fs.FileSystem`` (GCS, HDFS, Azure, …; S3 has ``S3Storage``), used as an object store:
    files are written whole, no writer lock, no fsync (a file is durable once closed). ``create_exclusive``
    checks and then writes: it fences writers only where the filesystem has no conditional write (use S3, or one
    writer per part)."""

    objects = True

    def __init__(self, fs: pafs.FileSystem) -> None:
        self.fs = fs

    def join(self, *parts: str) -> str:
        return "/".join(p.rstrip("/") for p in parts if p)

    def list_dir(self, path: str) -> list[str]:
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
        except FileNotFoundError:
            return []
        return sorted(i.base_name for i in infos)

    def file_sizes(self, path: str) -> dict[str, int]:
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
        except FileNotFoundError:
            return {}
        return {i.base_name: i.size for i in infos if i.type == pafs.FileType.File}

    def exists(self, path: str) -> bool:
        return self.fs.get_file_info(path).type != pafs.FileType.NotFound

    def mtime(self, path: str) -> float | None:
        info = self.fs.get_file_info(path)
        if info.type == pafs.FileType.NotFound:
            raise FileNotFoundError(path)
        return info.mtime.timestamp() if info.mtime is not None else None

    def make_dirs(self, path: str) -> None:
        self.fs.create_dir(path, recursive=True)

    def read_file(self, path: str, limit: int | None = None) -> bytes:
        with self.fs.open_input_stream(path) as f:
            return f.read() if limit is None else f.read(limit)

    def create_exclusive(self, path: str, data: bytes) -> bool:
        if self.exists(path):  # best effort: object stores offer no atomic create-if-absent here
            return False
        with self.fs.open_output_stream(path) as out:
            out.write(data)
        return True

    def write_file(self, path: str, data: bytes, *, sync: bool = True) -> None:
        with self.fs.open_output_stream(path) as out:  # object stores replace an object atomically on close
            out.write(data)

    def create(self, path: str) -> _ArrowAppend:
        return _ArrowAppend(self.fs, path)

    def append_to(self, path: str) -> _ArrowAppend:
        with self.fs.open_input_file(path) as f:  # object stores cannot append: rewrite the object
            data = f.read()
        out = _ArrowAppend(self.fs, path)
        out.write(data)
        return out

    def rename(self, src: str, dst: str) -> None:
        if self.exists(dst):
            raise FileExistsError(dst)
        self.fs.move(src, dst)

    def open_read(self, path: str) -> _ArrowRead:
        return _ArrowRead(self.fs, path)

    def truncate(self, path: str, size: int) -> None:
        with self.fs.open_input_file(path) as f:
            data = f.read_at(size, 0)
        with self.fs.open_output_stream(path) as out:
            out.write(data)

    def remove(self, path: str) -> None:
        self.fs.delete_file(path)

    def remove_dir(self, path: str) -> None:
        if self.exists(path) and not self.list_dir(path):
            self.fs.delete_dir(path)

    def remove_tree(self, path: str) -> None:
        try:
            self.fs.delete_dir(path)
        except FileNotFoundError:
            pass

    def sync_dir(self, path: str) -> None:
        pass

    def lock(self, path: str) -> object:
        return None

    def unlock(self, handle: object) -> None:
        pass


_CLIENTS: dict[tuple, object] = {}
_CLIENTS_LOCK = threading.Lock()
_FENCING: dict[tuple[str, str], "str | None"] = {}
"""What each (endpoint, bucket) answered to the probe of conditional writes: None when it honours them, else why
not. Probed once per process and bucket, at the first conditional write."""
_FENCING_LOCK = threading.Lock()
FENCING_ENV = "EVENTLOG_S3_FENCING"
"""``off``: write to an S3 store without probing or trusting its conditional writes (one writer per part and one
driver per job guaranteed by the deployment); anything else, or unset: probe, and refuse a store that ignores them."""
_UNFENCED_SAID: set[str] = set()
CHECKSUM_SETTINGS = {"AWS_REQUEST_CHECKSUM_CALCULATION": "when_required",
                     "AWS_RESPONSE_CHECKSUM_VALIDATION": "when_required"}
"""The AWS SDKs' checksum settings the S3 clients use unless the environment sets them: checksums only where an
operation requires them, as the SDKs did before 2025. S3-compatible stores (s3proxy, older MinIO and Ceph) refuse
the default flexible checksums (``NotImplemented``, ``XAmzContentSHA256Mismatch``); AWS S3 accepts both."""


def quiet_checksums() -> None:
    """Put :data:`CHECKSUM_SETTINGS` into the process environment where it has none of its own, for pyarrow's S3
    client (the AWS C++ SDK reads them when a filesystem is made; it has no option for them)."""
    for key, value in CHECKSUM_SETTINGS.items():
        os.environ.setdefault(key, value)
AWS_SETTINGS = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE")
"""The S3 client settings taken from the environment (by boto3 and pyarrow): a client made from them is reused
only while they are the same."""


class S3Storage(ArrowFsStorage):
    """S3 and S3-compatible stores: listings and reads through pyarrow's ``S3FileSystem``, exclusive creates as
    conditional writes (``PutObject`` with ``If-None-Match: *``, through boto3: the ``s3`` extra), so that of
    writers racing for one segment or header exactly one wins. The client uses the filesystem's endpoint,
    region and keys, else the standard AWS settings (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, …)."""

    _RETRIES = 5

    def __init__(self, fs: pafs.S3FileSystem) -> None:
        super().__init__(fs)
        self._client: object | None = None

    def __getstate__(self) -> dict:
        return {"fs": self.fs}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["fs"])

    def _s3(self):  # noqa: ANN202 - a boto3 client
        if self._client is None:
            boto3 = require("boto3", "s3", "writing logs to S3 (conditional writes)")
            botocore_config = require("botocore.config", "s3", "writing logs to S3 (conditional writes)")
            kwargs = self._settings()
            checksums = {"request_checksum_calculation": os.environ.get("AWS_REQUEST_CHECKSUM_CALCULATION")
                         or CHECKSUM_SETTINGS["AWS_REQUEST_CHECKSUM_CALCULATION"],
                         "response_checksum_validation": os.environ.get("AWS_RESPONSE_CHECKSUM_VALIDATION")
                         or CHECKSUM_SETTINGS["AWS_RESPONSE_CHECKSUM_VALIDATION"]}
            kwargs["config"] = botocore_config.Config(retries={"max_attempts": 5, "mode": "standard"}, **checksums)
            key = (repr(sorted((k, v) for k, v in kwargs.items() if k != "config")),
                   tuple(os.environ.get(v) for v in AWS_SETTINGS), os.getpid())
            with _CLIENTS_LOCK:  # one client per settings and process: making one costs ~50 ms
                client = _CLIENTS.get(key)
                if client is None:
                    client = _CLIENTS[key] = boto3.client("s3", **kwargs)
            self._client = client
        return self._client

    def _settings(self) -> dict:
        """The boto3 client arguments the filesystem's options give (endpoint, region, keys); the rest comes from
        the standard AWS settings."""
        opts = self.fs.__reduce__()[1][0]
        endpoint = opts.get("endpoint_override") or None
        if endpoint and "://" not in endpoint:
            endpoint = f"{opts.get('scheme') or 'https'}://{endpoint}"
        kwargs: dict = {}
        if endpoint:
            kwargs["endpoint_url"] = endpoint
        region = getattr(self.fs, "region", None) or opts.get("region")
        if region:
            kwargs["region_name"] = region
        if opts.get("access_key"):
            kwargs.update(aws_access_key_id=opts["access_key"], aws_secret_access_key=opts.get("secret_key"),
                          aws_session_token=opts.get("session_token") or None)
        return kwargs

    def resolved(self) -> "tuple[str, str, str, str, str]":
        """``(endpoint, region, access key, secret key, session token)`` as this process's client uses them: the
        filesystem's options, else the standard AWS settings and credential chain (frozen now). The endpoint is
        "" for AWS S3 itself, the access key "" for anonymous access (for clients outside Python: the JVM tap)."""
        client = self._s3()
        endpoint = client.meta.endpoint_url or ""
        if endpoint.split("://", 1)[-1].split("/", 1)[0].split(":", 1)[0].endswith(".amazonaws.com"):
            endpoint = ""
        settings = self._settings()
        if "aws_access_key_id" in settings:
            keys = (settings["aws_access_key_id"], settings.get("aws_secret_access_key") or "",
                    settings.get("aws_session_token") or "")
        else:
            import boto3

            found = boto3.session.Session().get_credentials()
            frozen = found.get_frozen_credentials() if found is not None else None
            keys = ("", "", "") if frozen is None else (frozen.access_key, frozen.secret_key, frozen.token or "")
        return (endpoint, client.meta.region_name or "us-east-1", *keys)

    def _put(self, path: str, data: bytes, **condition: str) -> dict | None:
        """One ``PutObject`` of ``data`` at ``path`` (``condition``: boto3's ``IfNoneMatch`` or ``IfMatch``): its
        response, None when the condition failed; OSError when the store does not answer or refuses."""
        client = self._s3()  # MissingExtraError without boto3
        from botocore.exceptions import BotoCoreError

        bucket, _, key = path.partition("/")
        for attempt in range(self._RETRIES):
            try:
                return client.put_object(Bucket=bucket, Key=key, Body=data, **condition)
            except BotoCoreError as e:  # no answer (connection refused, timeouts): after botocore's own retries
                raise OSError(f"S3 PutObject s3://{path} failed: {e}") from None
            except client.exceptions.ClientError as e:
                code = e.response.get("Error", {}).get("Code", "")
                status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
                if condition and (code == "PreconditionFailed" or status == 412):
                    return None
                if (code == "ConditionalRequestConflict" or status == 409) and attempt + 1 < self._RETRIES:
                    time.sleep(0.05 * 2 ** attempt)  # another conditional write to this key is in flight
                    continue
                raise OSError(f"S3 PutObject s3://{path} failed: {code or status}: "
                              f"{e.response.get('Error', {}).get('Message', e)}") from None
        return None

    def check_fencing(self, path: str) -> None:
        """Raise ConditionalWritesError when the bucket of ``path`` does not honour conditional writes (probed at
        the first call per process and bucket: :meth:`_probe`); nothing when ``EVENTLOG_S3_FENCING=off``."""
        bucket = path.partition("/")[0]
        endpoint = self._s3().meta.endpoint_url or ""
        if os.environ.get(FENCING_ENV, "").strip().lower() == "off":
            if bucket not in _UNFENCED_SAID:
                _UNFENCED_SAID.add(bucket)
                logging.getLogger("eventlog").warning(
                    "%s=off: writing to s3://%s without fencing writers (conditional writes neither probed nor "
                    "trusted): two writers of one part, or two drivers of one job, would overwrite each other",
                    FENCING_ENV, bucket)
            return
        with _FENCING_LOCK:
            if (endpoint, bucket) not in _FENCING:
                _FENCING[(endpoint, bucket)] = self._probe(bucket, path)
            why = _FENCING[(endpoint, bucket)]
        if why is not None:
            raise ConditionalWritesError(
                f"the object store at {endpoint or 'AWS S3'} {why}: writers of one part (and drivers of one job) "
                f"cannot be fenced there, so eventlog writes nothing to s3://{bucket}. Use a store that honours "
                f"If-None-Match and If-Match (AWS S3, MinIO, Ceph RGW 19+), or, where the deployment guarantees one "
                f"writer per part and one driver per job, set {FENCING_ENV}=off", path=f"s3://{path}")

    def _probe(self, bucket: str, path: str) -> "str | None":
        """Whether ``bucket`` honours conditional writes, tried on a scratch object: a conditional create of a
        new key succeeds, a second one fails, an ``If-Match`` on a wrong ETag fails. None when all three hold,
        else what the store did. The scratch object goes at the bucket's root, else (no permission there) beside
        ``path``, and is deleted after."""
        client = self._s3()
        scratch = uuid.uuid4().hex
        keys = [f".eventlog-probe/{scratch}", f"{path.partition('/')[2].rpartition('/')[0]}/.eventlog-probe-{scratch}"]
        for i, key in enumerate(keys):
            probe = f"{bucket}/{key.lstrip('/')}"
            try:
                if self._put(probe, b"eventlog conditional-write probe 1", IfNoneMatch="*") is None:
                    return "refuses a conditional create of a new object (If-None-Match: *)"
                if self._put(probe, b"eventlog conditional-write probe 2", IfNoneMatch="*") is not None:
                    return "ignores If-None-Match (a second conditional create of one object succeeded)"
                if self._put(probe, b"eventlog conditional-write probe 3", IfMatch='"eventlog-no-such-etag"') is not None:
                    return "ignores If-Match (a write conditional on a wrong ETag succeeded)"
                return None
            except OSError as e:
                said = str(e)
                if "NotImplemented" in said or "501" in said:
                    return f"does not implement conditional writes ({said})"
                if i == 0 and ("AccessDenied" in said or "403" in said):
                    continue  # no write permission at the bucket's root: probe beside the object instead
                raise
            finally:
                try:
                    client.delete_object(Bucket=bucket, Key=key.lstrip("/"))
                except Exception:  # noqa: BLE001,S110 - best effort: a scratch object left behind harms nothing
                    pass
        return None

    def create_exclusive(self, path: str, data: bytes) -> bool:
        self.check_fencing(path)
        return self._put(path, data, IfNoneMatch="*") is not None

    def write_file(self, path: str, data: bytes, *, sync: bool = True) -> None:
        self._put(path, data)  # one request (pyarrow's output stream makes a small object a 3-request multipart upload)

    def read_versioned(self, path: str, limit: int | None = None) -> tuple[bytes, str | None]:
        """One ``GetObject``: the bytes (at most ``limit``) and the object's ETag."""
        client = self._s3()
        bucket, _, key = path.partition("/")
        try:
            resp = client.get_object(Bucket=bucket, Key=key)
        except client.exceptions.NoSuchKey:
            raise FileNotFoundError(path) from None
        except Exception as e:  # noqa: BLE001 - botocore's errors are not OSErrors
            raise OSError(f"S3 GetObject s3://{path} failed: {e}") from None
        body = resp["Body"]
        try:
            data = body.read() if limit is None else body.read(limit)
        except Exception as e:  # noqa: BLE001
            raise OSError(f"S3 GetObject s3://{path} failed while reading: {e}") from None
        finally:
            body.close()
        return data, resp.get("ETag")

    def replace(self, path: str, data: bytes, version: str | None, *, sync: bool = True) -> tuple[bool, str | None]:
        """A ``PutObject`` with ``If-Match: version`` (``If-None-Match: *`` for None)."""
        self.check_fencing(path)
        resp = self._put(path, data, **({"IfMatch": version} if version is not None else {"IfNoneMatch": "*"}))
        return (False, None) if resp is None else (True, resp.get("ETag"))


# -- process memory ----------------------------------------------------------------------------------------


class MemoryFile:
    """An ``AppendFile`` over a bytearray (``data``): in-process files, and the segment an object-store writer
    keeps until it puts it whole."""

    def __init__(self, buf: "bytearray | None" = None) -> None:
        self.data = bytearray() if buf is None else buf

    def write(self, data: bytes) -> None:
        self.data += data

    def flush(self) -> None:
        pass

    def fsync(self) -> None:
        pass

    def close(self) -> None:
        pass


class _MemRead:
    def __init__(self, buf: bytearray) -> None:
        self._buf = buf

    def size(self) -> int:
        return len(self._buf)

    def read_at(self, offset: int, length: int) -> bytes:
        return bytes(self._buf[offset : offset + length])

    def map(self) -> pa.Buffer:
        return pa.py_buffer(bytes(self._buf))  # a snapshot: the bytearray may grow under a live writer

    def close(self) -> None:
        pass


class MemoryStorage(_Unversioned):
    """Files as bytearrays in a dict: the same log code, in one process, for tests and local pipelines.
    ``objects=True`` makes it behave as an object store (whole files, sealed at every sync; no writer lock)."""

    def __init__(self, *, objects: bool = False) -> None:
        self.objects = objects
        self._files: dict[str, bytearray] = {}
        self._dirs: set[str] = {""}
        self._locks: set[str] = set()
        self._mutex = threading.Lock()

    def join(self, *parts: str) -> str:
        return "/".join(p.strip("/") for p in parts if p.strip("/"))

    def list_dir(self, path: str) -> list[str]:
        prefix = f"{path}/" if path else ""
        names = {p[len(prefix) :].split("/", 1)[0] for p in (*self._files, *self._dirs) if p.startswith(prefix) and p != path}
        return sorted(n for n in names if n)

    def file_sizes(self, path: str) -> dict[str, int]:
        prefix = f"{path}/" if path else ""
        return {p[len(prefix):]: len(b) for p, b in list(self._files.items())
                if p.startswith(prefix) and "/" not in p[len(prefix):]}

    def exists(self, path: str) -> bool:
        return path in self._files or path in self._dirs

    def mtime(self, path: str) -> float | None:
        if path not in self._files:
            raise FileNotFoundError(path)
        return None  # in-process files keep no times

    def make_dirs(self, path: str) -> None:
        parts = path.split("/")
        for i in range(1, len(parts) + 1):
            self._dirs.add("/".join(parts[:i]))

    def read_file(self, path: str, limit: int | None = None) -> bytes:
        try:
            return bytes(self._files[path] if limit is None else self._files[path][:limit])
        except KeyError:
            raise FileNotFoundError(path) from None

    def create_exclusive(self, path: str, data: bytes) -> bool:
        with self._mutex:
            if path in self._files:
                return False
            self._files[path] = bytearray(data)
            return True

    def write_file(self, path: str, data: bytes, *, sync: bool = True) -> None:
        with self._mutex:
            self._files[path] = bytearray(data)  # a new buffer: open readers keep the old one, as with a rename

    def create(self, path: str) -> MemoryFile:
        with self._mutex:
            if path in self._files:
                raise FileExistsError(path)
            buf = self._files[path] = bytearray()
        return MemoryFile(buf)

    def append_to(self, path: str) -> MemoryFile:
        try:
            return MemoryFile(self._files[path])
        except KeyError:
            raise FileNotFoundError(path) from None

    def rename(self, src: str, dst: str) -> None:
        with self._mutex:
            if dst in self._files:
                raise FileExistsError(dst)
            try:
                self._files[dst] = self._files.pop(src)
            except KeyError:
                raise FileNotFoundError(src) from None

    def open_read(self, path: str) -> _MemRead:
        try:
            return _MemRead(self._files[path])
        except KeyError:
            raise FileNotFoundError(path) from None

    def truncate(self, path: str, size: int) -> None:
        try:
            del self._files[path][size:]
        except KeyError:
            raise FileNotFoundError(path) from None

    def remove(self, path: str) -> None:
        try:
            del self._files[path]
        except KeyError:
            raise FileNotFoundError(path) from None

    def remove_dir(self, path: str) -> None:
        with self._mutex:
            if path in self._dirs and not self.list_dir(path):
                self._dirs.discard(path)

    def remove_tree(self, path: str) -> None:
        prefix = f"{path}/"
        with self._mutex:
            for p in [p for p in self._files if p.startswith(prefix)]:
                del self._files[p]
            self._dirs -= {d for d in self._dirs if d == path or d.startswith(prefix)}

    def sync_dir(self, path: str) -> None:
        pass

    def lock(self, path: str) -> object:
        if self.objects:  # as on an object store: no lock, writers are fenced by exclusive creates
            return None
        with self._mutex:
            if path in self._locks:
                raise PartLockedError("another writer holds this part", path=path)
            self._locks.add(path)
        return path

    def unlock(self, handle: object) -> None:
        with self._mutex:
            self._locks.discard(handle)  # type: ignore[arg-type]

