"""The task state store: checkpoint files, written atomically, and their layout.

Everything lives under ``<checkpoints>/<job>/`` (``checkpoints`` is a local path or ``file://`` URI, which
every task must see: the driver's disk in Spark local mode, a shared filesystem on a cluster)::

    master.json                       the last generation and checkpoint id used (never reused)
    LATEST                            the manifest of the last complete checkpoint (a copy)
    chk-<id>/<op>-<instance>.state    one task's snapshot: input offsets, output offsets, operator state
    chk-<id>/_COMPLETE                the manifest: written by the coordinator once every task reported
    staging/<sink>/p<part>/…          sinks' pre-committed output per epoch (``runtime.sinks``)

Every file is written to a temporary name, fsynced, renamed into place and its directory fsynced, so a
reader sees a whole file or none. A checkpoint counts only once its ``_COMPLETE`` manifest exists.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import struct
import tempfile
import time
from typing import Any, Iterator

from eventlog import bundle

from .channels import local_path
from .errors import CheckpointError
from .keygroups import groups_of_instance

_HEADER = struct.Struct("<IQQIII")
_MANIFEST = "_COMPLETE"


def atomic_write(path: str, data: bytes, *, sync: bool = True) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one."""
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


def read_bundles(path: str) -> Iterator[tuple[int, memoryview]]:
    """``(message type, payload)`` of each single-message bundle in a staging file, reading one at a time."""
    with open(path, "rb") as f:
        while True:
            head = f.read(32)
            if not head:
                return
            if len(head) < 32:
                raise CheckpointError("torn bundle at the end of a staging file", path=path)
            raw = _HEADER.unpack(head)[5]
            body = f.read(raw)
            if len(body) < raw:
                raise CheckpointError("torn bundle at the end of a staging file", path=path)
            try:
                b = bundle.decode(head + body)
            except bundle.BundleError as e:
                raise CheckpointError(f"bad bundle in a staging file: {e}", path=path) from None
            for i in range(b.count):
                yield int(b.types[i]), b.payload(i)


class CheckpointStore:
    """The checkpoints of one job (see the module doc)."""

    def __init__(self, uri: str, job: str) -> None:
        self.uri = uri
        self.job = job
        self.root = os.path.join(os.path.abspath(local_path(uri)), job)
        os.makedirs(self.root, exist_ok=True)

    def _chk(self, checkpoint: int) -> str:
        return os.path.join(self.root, f"chk-{checkpoint:010d}")

    # -- ids ------------------------------------------------------------------------------------------

    def _master(self) -> dict[str, int]:
        try:
            with open(os.path.join(self.root, "master.json")) as f:
                return json.load(f)
        except FileNotFoundError:
            return {"generation": 0, "checkpoint": 0}

    def next_generation(self) -> int:
        """A generation number never used before by this job (persisted)."""
        m = self._master()
        m["generation"] += 1
        atomic_write(os.path.join(self.root, "master.json"), json.dumps(m).encode())
        return m["generation"]

    def last_checkpoint_id(self) -> int:
        """The largest checkpoint id ever handed out."""
        return self._master()["checkpoint"]

    def reserve_checkpoint(self, checkpoint: int) -> None:
        """Record that ``checkpoint`` was triggered (ids are never reused, even after a failure)."""
        m = self._master()
        if checkpoint > m["checkpoint"]:
            m["checkpoint"] = checkpoint
            atomic_write(os.path.join(self.root, "master.json"), json.dumps(m).encode(), sync=False)

    # -- task snapshots -------------------------------------------------------------------------------

    def task_path(self, checkpoint: int, node: str, index: int) -> str:
        """Where a task's snapshot of ``checkpoint`` lives."""
        return os.path.join(self._chk(checkpoint), f"{node}-{index:05d}.state")

    def save_task(self, checkpoint: int, node: str, index: int, snapshot: dict[str, Any]) -> int:
        """Write a task's snapshot atomically; returns its size in bytes."""
        os.makedirs(self._chk(checkpoint), exist_ok=True)
        data = pickle.dumps(snapshot, protocol=pickle.HIGHEST_PROTOCOL)
        atomic_write(self.task_path(checkpoint, node, index), data)
        return len(data)

    def load_task(self, checkpoint: int, node: str, index: int) -> dict[str, Any]:
        """A task's snapshot of a complete checkpoint."""
        path = self.task_path(checkpoint, node, index)
        try:
            with open(path, "rb") as f:
                return pickle.load(f)
        except FileNotFoundError:
            raise CheckpointError(f"checkpoint {checkpoint} has no state of task {node}[{index}]", path=path) from None

    # -- manifests ------------------------------------------------------------------------------------

    def complete(self, manifest: dict[str, Any]) -> None:
        """Mark a checkpoint complete (every task's snapshot is written) and make it the latest."""
        data = json.dumps(manifest, sort_keys=True).encode()
        atomic_write(os.path.join(self._chk(manifest["checkpoint"]), _MANIFEST), data)
        atomic_write(os.path.join(self.root, "LATEST"), data)

    def latest(self) -> dict[str, Any] | None:
        """The manifest of the last complete checkpoint, or None."""
        try:
            with open(os.path.join(self.root, "LATEST")) as f:
                m = json.load(f)
        except FileNotFoundError:
            return None
        if not os.path.exists(os.path.join(self._chk(m["checkpoint"]), _MANIFEST)):
            raise CheckpointError(f"LATEST names checkpoint {m['checkpoint']}, which is not complete", path=self.root)
        return m

    def checkpoints(self) -> list[int]:
        """Ids of the checkpoint directories present (complete or not)."""
        out = []
        for name in os.listdir(self.root):
            if name.startswith("chk-") and name[4:].isdigit():
                out.append(int(name[4:]))
        return sorted(out)

    def is_complete(self, checkpoint: int) -> bool:
        """True when checkpoint ``checkpoint`` has its manifest."""
        return os.path.exists(os.path.join(self._chk(checkpoint), _MANIFEST))

    def remove_before(self, checkpoint: int) -> None:
        """Delete every checkpoint before ``checkpoint`` (complete or not)."""
        for c in self.checkpoints():
            if c < checkpoint:
                shutil.rmtree(self._chk(c), ignore_errors=True)

    # -- restoring ------------------------------------------------------------------------------------

    def restore(self, manifest: dict[str, Any], node: str, index: int, parallelism: int) -> dict[str, Any] | None:
        """The snapshot instance ``index`` of ``node`` at ``parallelism`` starts from: its own when the
        parallelism is unchanged, else its share of every old instance's state (key groups by range,
        parts by ``part % parallelism``); None when the checkpoint has no such operator."""
        old = manifest["parallelism"].get(node)
        if old is None:
            return None
        if old == parallelism:
            return self.load_task(manifest["checkpoint"], node, index)
        groups = set(groups_of_instance(index, manifest["key_groups"], parallelism))
        merged: dict[str, Any] = {"keyed": {}, "parts": {}, "instance": None}
        finished = True
        for i in range(old):
            snap = self.load_task(manifest["checkpoint"], node, i)
            finished = finished and snap.get("finished", False)
            st = snap.get("state") or {}
            for g, v in (st.get("keyed") or {}).items():
                if g in groups:
                    merged["keyed"][g] = v
            for p, v in (st.get("parts") or {}).items():
                if p % parallelism == index:
                    merged["parts"][p] = v
            if merged["instance"] is None and st.get("instance"):
                merged["instance"] = st["instance"]
        return {"checkpoint": manifest["checkpoint"], "inputs": {}, "outputs": {}, "state": merged,
                "finished": finished, "rescaled": True}


def now_ms() -> int:
    """Wall-clock milliseconds (manifest timestamps)."""
    return int(time.time() * 1000)
