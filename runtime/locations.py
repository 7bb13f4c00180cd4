"""Where a run keeps its checkpoints, channels, inputs and outputs, and how a task knows it sees them.

**Before a run starts** (``check_locations``) every location is checked against what can work:

| kind | accepted | on Spark also |
|---|---|---|
| checkpoints | a filesystem path or ``file://`` URI | absolute: every executor must reach the same folder |
| channels | a path, ``file://`` or ``kafka://`` | absolute paths only |
| inputs (``from_log``), outputs (``to_log``) | any log URI (``open_log``) | no relative path, no ``memory://`` |

A relative path on Spark would resolve in each executor's own work folder and a ``memory://`` log in each
Python worker's memory: the job would hang or its output vanish, so both raise ``LocationError`` instead;
``spark=None`` runs every task in this process, where both work.

**While it runs**, the driver writes a *run mark* — the generation and a random token — into the folders it
prepared for a generation: the checkpoint store and the generation's file channels (``write_mark``). Each
task reads the marks back before it starts (``check_mark``); a task on a host that does not share the disk
finds no mark (or another run's) and fails with ``UnreachableLocationError`` naming the folder and its host,
instead of writing checkpoints and channel data nobody else sees.
"""

from __future__ import annotations

import os
import secrets
import socket
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

from .errors import CheckpointCorruptError, LocationError, UnreachableLocationError
from .statefile import encode_document, read_document

if TYPE_CHECKING:
    from .graph import Plan

MARK = "_RUN"
"""File name of the run mark in a prepared folder."""

OBJECT_STORE_SCHEMES = frozenset({"s3", "gs", "gcs", "hdfs", "viewfs", "abfs", "abfss"})
"""Schemes of ``pyarrow.fs`` filesystems, which ``open_log`` accepts for inputs and outputs."""


def local_path(uri: str) -> str | None:
    """The path of a plain path or ``file://`` URI; None for any other scheme."""
    parsed = urlparse(uri)
    scheme = parsed.scheme.lower()
    if scheme == "":
        return uri
    if scheme == "file" and parsed.netloc in ("", "localhost"):
        return unquote(parsed.path)
    return None


def _scheme(uri: str) -> str:
    return urlparse(uri).scheme.lower()


def _refuse(kind: str, uri: str, why: str) -> LocationError:
    return LocationError(f"{kind} location {uri!r}: {why}")


def _check_path(kind: str, uri: str, on_spark: bool) -> None:
    path = local_path(uri)
    if path is not None and on_spark and not os.path.isabs(path):
        raise _refuse(kind, uri, "a relative path resolves in each Spark executor's own work folder; use an "
                                 "absolute path (or file:///abs/path) on a disk every executor shares with the driver")


def check_locations(plan: Plan, *, channels: str, checkpoints: str, on_spark: bool) -> None:
    """Raise ``LocationError`` for a checkpoint, channel, input or output location the run cannot use (see
    the module doc); ``on_spark``: tasks run in Spark's processes rather than this one."""
    for kind, uri in (("checkpoint", checkpoints), ("channel", channels)):
        if not isinstance(uri, str) or not uri:
            raise LocationError(f"the {kind} location must be a non-empty URI string, not {uri!r}")
    scheme = _scheme(checkpoints)
    if local_path(checkpoints) is None:
        extra = " (checkpoints on object storage are not supported yet)" if scheme in OBJECT_STORE_SCHEMES else ""
        raise _refuse("checkpoint", checkpoints, f"checkpoints live in a filesystem folder: a path or file:// URI, "
                                                 f"not {scheme}://{extra}")
    _check_path("checkpoint", checkpoints, on_spark)
    scheme = _scheme(channels)
    if local_path(channels) is None and scheme != "kafka":
        raise _refuse("channel", channels, f"channels live in a folder (a path or file:// URI) or on Kafka "
                                           f"(kafka://host:port/prefix), not {scheme}://")
    _check_path("channel", channels, on_spark)
    for node in plan.nodes.values():
        uri = getattr(node, "location", None)
        if uri is None:
            continue
        kind = f"{'output' if node.kind == 'sink' else 'input'} (operator {node.name!r})"
        scheme = _scheme(uri)
        if scheme == "memory":
            if on_spark:
                raise _refuse(kind, uri, "a memory:// log lives in one process, but on Spark the operator runs in "
                                         "an executor's Python worker (its output would be lost); use a file path "
                                         "every executor shares or kafka://")
            continue
        if local_path(uri) is None and scheme != "kafka" and scheme not in OBJECT_STORE_SCHEMES:
            raise _refuse(kind, uri, f"{scheme}:// is not a log URI (a path, file://, kafka://, memory:// or a "
                                     f"pyarrow.fs filesystem: {', '.join(sorted(OBJECT_STORE_SCHEMES))})")
        _check_path(kind, uri, on_spark)


def new_token() -> str:
    """A random token for one generation's run marks."""
    return secrets.token_hex(8)


def write_mark(folder: str, generation: int, token: str) -> None:
    """Write the run mark of ``generation`` into ``folder`` (the driver, before the generation's tasks start)."""
    from .state import atomic_write

    os.makedirs(folder, exist_ok=True)
    atomic_write(os.path.join(folder, MARK), encode_document("run", {"generation": generation, "token": token}))


def check_mark(folder: str, generation: int, token: str, *, what: str, uri: str, task: str) -> None:
    """Raise ``UnreachableLocationError`` unless ``folder`` holds the run mark of ``generation`` with ``token``
    (a task, before it starts); ``what`` names the folder's role, ``uri`` the location the user gave."""
    path = os.path.join(folder, MARK)
    why = None
    if not os.path.exists(path):
        why = f"{path} does not exist here"
    else:
        try:
            body = read_document(path, "run", limit=4096)
        except CheckpointCorruptError as e:
            why = f"{path} cannot be read: {e.reason}"
        else:
            if body.get("generation") != generation or body.get("token") != token:
                why = f"{path} holds another run's mark (generation {body.get('generation')})"
    if why is not None:
        raise UnreachableLocationError(
            f"task {task} on host {socket.gethostname()} does not see the {what} {uri!r} the driver prepared for "
            f"generation {generation}: {why}; the location must be on a disk every executor shares with the driver "
            f"(or, for channels, kafka://)")
