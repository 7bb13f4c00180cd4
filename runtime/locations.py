"""Where a run keeps its checkpoints, channels, inputs and outputs, and how a task knows it sees them.

**Before a run starts** (``check_locations``) every location is checked against what can work:

| kind | accepted | on Spark also |
|---|---|---|
| checkpoints | a path, ``file://`` or ``s3://bucket/prefix`` (``runtime.statefs``) | absolute paths only |
| channels | a path, ``file://`` or ``kafka://`` (object stores cannot carry channels) | absolute paths only |
| inputs (``from_log``), outputs (``to_log``) | any log URI (``open_log``) | no relative path, no ``memory://`` |

A relative path on Spark would resolve in each executor's own work folder and a ``memory://`` log in each
Python worker's memory: the job would hang or its output vanish, so both raise ``LocationError`` instead;
``spark=None`` runs every task in this process, where both work.

Other object stores than S3 (``gs://``, ``abfs://``, ``hdfs://``, …) are refused for checkpoints: their writes
were not shown to be atomic through the runtime's seam, nor do they have its conditional writes.

**While it runs**, the driver writes a *run mark* — the generation and a random token — into the folders it
prepared for a generation: the checkpoint store (a local folder or an S3 prefix) and the generation's file
channels (``write_mark``). Each task reads the marks back before it starts (``check_mark``); a task on a host
that does not share the disk — or that reaches another S3 endpoint or bucket than the driver's, or none (no
credentials, the store does not answer) — finds no mark (or another run's) and fails with
``UnreachableLocationError`` naming the folder and its host, instead of writing checkpoints and channel data
nobody else sees.
"""

from __future__ import annotations

import os
import secrets
import socket
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from .errors import CheckpointCorruptError, LocationError, StoreUnavailableError, UnreachableLocationError
from .statefile import encode_document, read_document
from .statefs import SUPPORTED_OBJECT_STORES, local_path, state_location_problem, open_state_fs

if TYPE_CHECKING:
    from .graph import Plan

MARK = "_RUN"
"""File name of the run mark in a prepared folder."""

OBJECT_STORE_SCHEMES = frozenset({"s3", "gs", "gcs", "hdfs", "viewfs", "abfs", "abfss"})
"""Schemes of ``pyarrow.fs`` filesystems, which ``open_log`` accepts for inputs and outputs."""


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
        if scheme not in SUPPORTED_OBJECT_STORES:
            extra = (f" (checkpoints on object storage: s3:// only, {scheme}:// is not supported)"
                     if scheme in OBJECT_STORE_SCHEMES else "")
            raise _refuse("checkpoint", checkpoints, f"checkpoints live in a filesystem folder (a path or file:// "
                                                     f"URI) or on S3 (s3://bucket/prefix), not {scheme}://{extra}")
        why = state_location_problem(checkpoints)
        if why is not None:
            raise _refuse("checkpoint", checkpoints, why)
    _check_path("checkpoint", checkpoints, on_spark)
    scheme = _scheme(channels)
    if local_path(channels) is None and scheme != "kafka":
        extra = (" (an object store cannot carry channels: they are appended to and tailed; use kafka:// across "
                 "hosts)" if scheme in OBJECT_STORE_SCHEMES else "")
        raise _refuse("channel", channels, f"channels live in a folder (a path or file:// URI) or on Kafka "
                                           f"(kafka://host:port/prefix), not {scheme}://{extra}")
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
    """Write the run mark of ``generation`` into ``folder`` — a local path or an ``s3://`` location
    (``runtime.statefs``) — (the driver, before the generation's tasks start)."""
    fs, path = open_state_fs(folder)
    fs.make_dirs(path)
    fs.write(fs.join(path, MARK), encode_document("run", {"generation": generation, "token": token}))


def check_mark(folder: str, generation: int, token: str, *, what: str, uri: str, task: str) -> None:
    """Raise ``UnreachableLocationError`` unless ``folder`` (a local path or an ``s3://`` location) holds the
    run mark of ``generation`` with ``token`` (a task, before it starts); ``what`` names the folder's role,
    ``uri`` the location the user gave."""
    why = None
    objects = False
    try:
        fs, folder_path = open_state_fs(folder)
        objects = fs.objects
        path = fs.join(folder_path, MARK)
        shown = fs.display(path)
        if not fs.exists(path):
            why = f"{shown} does not exist here"
        else:
            try:
                body = read_document(path, "run", limit=4096, fs=fs)
            except CheckpointCorruptError as e:
                why = f"{shown} cannot be read: {e.reason}"
            else:
                if body.get("generation") != generation or body.get("token") != token:
                    why = f"{shown} holds another run's mark (generation {body.get('generation')})"
    except StoreUnavailableError as e:
        objects = True
        why = f"the store cannot be reached: {e}"
    if why is not None:
        where = ("the object store must be reachable from every executor with the driver's endpoint, bucket and "
                 "credentials (the AWS_* settings in spark.executorEnv.*)" if objects else
                 "the location must be on a disk every executor shares with the driver (or, for channels, kafka://)")
        raise UnreachableLocationError(
            f"task {task} on host {socket.gethostname()} does not see the {what} {uri!r} the driver prepared for "
            f"generation {generation}: {why}; {where}")
