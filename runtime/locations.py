"""Where a run keeps its checkpoints, channels, inputs and outputs: checked before the run starts.

``check_locations`` checks every location against what can work:

| kind | accepted | on Spark also |
|---|---|---|
| checkpoints | a path, ``file://`` or ``s3://bucket/prefix`` (``runtime.checkpoints.storage``) | absolute paths only |
| channels | a path, ``file://`` or ``kafka://`` (object stores cannot carry channels) | absolute paths only |
| inputs (``from_log``), outputs (``to_log``) | any log URI (``open_log``) | no relative path, no ``memory://`` |

A relative path on Spark would resolve in each executor's own work folder and a ``memory://`` log in each
Python worker's memory: the job would hang or its output vanish, so both raise ``LocationError`` instead;
``spark=None`` runs every task in this process, where both work.

Other object stores than S3 (``gs://``, ``abfs://``, ``hdfs://``, …) are refused for checkpoints: their writes
were not shown to be atomic through the runtime's seam, nor do they have its conditional writes.

While it runs, the tasks check that they see the folders the driver prepared: run marks
(``runtime.checkpoints.marks``).
"""

from __future__ import annotations

import os

from eventlog.uri import scheme_of

from .checkpoints.storage import SUPPORTED_OBJECT_STORES, local_path, state_location_problem
from .errors import LocationError
from .graph import Plan

OBJECT_STORE_SCHEMES = frozenset({"s3", "gs", "gcs", "hdfs", "viewfs", "abfs", "abfss"})
"""Schemes of ``pyarrow.fs`` filesystems, which ``open_log`` accepts for inputs and outputs."""




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
    scheme = scheme_of(checkpoints)
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
    scheme = scheme_of(channels)
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
        scheme = scheme_of(uri)
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
