"""The task state store: checkpoint files, written atomically, in formats that run no code when read.

Everything lives under ``<checkpoints>/<job>/``; ``checkpoints`` is a local path or ``file://`` URI, which
every task must see (the driver's disk in Spark local mode, a shared filesystem on a cluster), or an
``s3://bucket/prefix`` URI, which every executor reaches over the network (``runtime.checkpoints.storage``)::

    master.json, master.bak.json      two copies of the job's counters: the last generation and checkpoint
                                      id used (never reused) and the commit horizon
    LATEST                            the manifest of the last complete checkpoint (a copy, for people)
    chk-<id>/<op>-<instance>.state    one operator instance's snapshot: input offsets, output offsets and
                                      state (``runtime.checkpoints.formats``: tagged JSON + Arrow IPC tables, CRC-32)
    chk-<id>/_COMPLETE                the manifest: written by the coordinator once every task reported
    staging/<sink>/p<part>/…          sinks' pre-committed output per epoch (``runtime.sinks``)

On the local disk every file is written to a temporary name, fsynced, renamed into place and its directory
fsynced; on S3 every file is one object PUT, which is atomic, and durable and visible to every reader (S3 is
strongly consistent) once it returns. Either way a reader sees a whole file or none. Manifests and counters
are checksummed JSON documents (``runtime.checkpoints.formats``). A checkpoint counts only once its ``_COMPLETE``
manifest exists; ``prune`` deletes a checkpoint's folder (on S3, every object under its prefix) after the
newer manifest is written, so a half-deleted checkpoint is never the newest complete one, and a manifest
whose snapshots are partly gone fails ``select``'s verification (each missing object named).

**The commit horizon** ``H`` (in the counters) is the last checkpoint whose output sinks may commit; it only
grows. When checkpoint ``c`` completes, ``H`` becomes the complete checkpoint before ``c`` (the one ``c``'s
run restored from or completed before it) — or ``c`` itself when ``c`` is final or the job stops at it — and
is saved before any task hears of it. So output of the newest complete checkpoint is never committed
until a later one completes, and the job may restore from any complete checkpoint ``>= H``: restoring from
before ``H`` could produce again output that sinks already committed. The driver keeps exactly those
checkpoints (``prune``): the newest complete one and ``H``.

**Choosing where to restore** (``select``): the newest complete checkpoint ``>= H`` that verifies — every
manifest and snapshot file decodes and passes its checksums, each operator accepts its state
(``Operator.verify_state``: field types, sinks' staged files, no pickle where the operator did not opt in)
— with the damaged ones skipped (each a ``CheckpointCorruptError`` naming its file). With none left, a job
whose horizon is 0 (no output ever committed) starts from scratch, which is exactly-once; any other job
fails with ``CheckpointCorruptError``.

**Two drivers of one job** must not run at once (each would fail the other's tasks' writes to the output
parts). The counters are the store's one read-modify-write: on S3 the first copy (``master.json``) is
written with ``If-Match`` on the ETag read (``If-None-Match: *`` when it did not exist), so when a second
driver starts (its ``next_generation`` updates the counters) the first one fails with ``CheckpointError``
("another driver … changed its counters") at its next trigger or completion, before it lets a sink commit
anything more; of two drivers updating at the same moment exactly one wins. On the local disk there are no
conditional writes: nothing fences a second driver (run one).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import CheckpointCorruptError, CheckpointError, UnstorableStateError
from .formats import StateTypeError, decode_document, encode_document, encode_snapshot, read_document, read_snapshot
from .keygroups import groups_of_instance
from .storage import open_state_fs

_log = logging.getLogger("runtime.checkpoints")

_MANIFEST = "_COMPLETE"
_MASTER = ("master.json", "master.bak.json")
MAX_TASKS = 1 << 20
"""The most operator instances a manifest may declare (a larger count is damage)."""
MAX_PARALLELISM = 1 << 16
"""The largest parallelism of one operator a manifest may declare."""
MAX_COUNTERS_BYTES = 1 << 16
"""The largest counters document read."""


@dataclass(frozen=True)
class StateCheck:
    """Where a restored state comes from, for ``Operator.verify_state``."""

    node: str
    """The operator's name."""
    where: str
    """The snapshot file (or checkpoint directory, for a state merged from several files) it was read from."""
    checkpoint_dir: str
    """The job's checkpoint directory (sinks' staging files live under it): a local path or an ``s3://``
    location (``OperatorContext.checkpoint_dir``)."""
    horizon: int
    """Output of checkpoints up to this id may already be committed (the commit horizon, module doc)."""


class VerifiesState(Protocol):
    """What ``verify`` and ``select`` need of an operator (``runtime.operators.Operator``)."""

    def verify_state(self, state: dict[str, Any] | None, check: StateCheck) -> None: ...


class CheckpointStore:
    """The checkpoints of one job (see the module doc)."""

    def __init__(self, uri: str, job: str, *, create: bool = True) -> None:
        self.uri = uri
        self.job = job
        self.fs, base = open_state_fs(uri)
        """The files the checkpoints live on (``runtime.checkpoints.storage``: the local disk or S3)."""
        self.root = self.fs.join(base, job)
        """The job's folder of checkpoints, as a path of ``fs``; ``create``: make it if missing (the driver does; a
        task must find it where the driver made it, ``runtime.checkpoints.marks``)."""
        self.location = self.fs.display(self.root)
        """The job's folder as a location (a local path, or ``s3://bucket/prefix/job``): what errors name, and
        where operators find it (``OperatorContext.checkpoint_dir``)."""
        if create:
            self.fs.make_dirs(self.root)
        self._counters_version: str | None = None
        """The version (S3: the ETag) of the counters this store last wrote: another one when it reads them
        means another driver wrote them since (``_write_master``)."""

    def _chk(self, checkpoint: int) -> str:
        return self.fs.join(self.root, f"chk-{checkpoint:010d}")

    def _where(self, path: str) -> str:
        return self.fs.display(path)

    # -- counters -------------------------------------------------------------------------------------

    def _master(self) -> tuple[dict[str, int], str | None]:
        """The counters and the version of their first copy (its ETag on S3; None when it is absent or on the
        local disk): the larger of each field over the copies that verify (a damaged copy is logged and the
        ids move one further, in case it was the newer one); raises ``CheckpointCorruptError`` when no copy
        verifies and the job has checkpoint files (its ids and horizon are unknown)."""
        good: list[dict[str, int]] = []
        errors: list[CheckpointCorruptError] = []
        version = None
        for name in _MASTER:
            path = self.fs.join(self.root, name)
            try:
                data, v = self.fs.read_versioned(path, MAX_COUNTERS_BYTES)
                if name == _MASTER[0]:
                    version = v
                if data is None:
                    continue
                body = decode_document(data, "counters", self._where(path))
                if not all(type(body.get(k)) is int and body[k] >= 0 for k in ("generation", "checkpoint", "horizon")):
                    raise CheckpointCorruptError("job counters are not {generation, checkpoint, horizon} ints",
                                                 path=self._where(path))
                good.append(body)
            except CheckpointCorruptError as e:
                errors.append(e)
        if not good:
            if errors or self._has_checkpoint_files():
                raise errors[0] if errors else CheckpointCorruptError(
                    "the job's counters are missing, yet it has checkpoint files (its ids and commit horizon are "
                    "unknown; remove the job's checkpoint directory to start over)",
                    path=self._where(self.fs.join(self.root, _MASTER[0])))
            return {"generation": 0, "checkpoint": 0, "horizon": 0}, version
        m = {k: max(b[k] for b in good) for k in ("generation", "checkpoint", "horizon")}
        if errors:
            _log.warning("job %s: %s; using the other copy", self.job, errors[0])
            m["generation"] += 1
            m["checkpoint"] += 1
        return m, version

    def _has_checkpoint_files(self) -> bool:
        return any(n.startswith("chk-") or n in ("LATEST", "staging") for n in self.fs.list(self.root))

    def _write_master(self, m: dict[str, int], version: str | None, sync: bool = True) -> None:
        """Save the counters read at ``version``. On S3 the first copy is a conditional write on that version,
        and a version other than the one this store last wrote means another driver wrote them in between:
        either way ``CheckpointError`` (the module doc, "Two drivers")."""
        data = encode_document("counters", m)
        first = self.fs.join(self.root, _MASTER[0])
        mine = self._counters_version
        ok, new = (False, None) if mine is not None and version != mine else self.fs.replace(first, data, version,
                                                                                             sync=sync)
        if not ok:
            raise CheckpointError(f"another driver of job {self.job!r} changed its counters since this one wrote "
                                  f"them: two drivers run the job at once (this one stops; only one may run it)",
                                  path=self._where(first))
        self._counters_version = new
        self.fs.write(self.fs.join(self.root, _MASTER[1]), data, sync=sync)

    def next_generation(self) -> int:
        """A generation number never used before by this job (persisted)."""
        m, version = self._master()
        m["generation"] += 1
        self._write_master(m, version)
        return m["generation"]

    def last_checkpoint_id(self) -> int:
        """The largest checkpoint id ever handed out."""
        return self._master()[0]["checkpoint"]

    def reserve_checkpoint(self, checkpoint: int) -> None:
        """Record that ``checkpoint`` was triggered (ids are never reused, even after a failure)."""
        m, version = self._master()
        if checkpoint > m["checkpoint"]:
            m["checkpoint"] = checkpoint
            self._write_master(m, version, sync=False)

    def commit_horizon(self) -> int:
        """The last checkpoint whose output sinks may have committed (0: none; see the module doc)."""
        return self._master()[0]["horizon"]

    def advance_horizon(self, checkpoint: int) -> int:
        """Let sinks commit output up to ``checkpoint`` (saved, fsynced, before any task is told); returns
        the horizon, which never moves back."""
        m, version = self._master()
        if checkpoint > m["horizon"]:
            m["horizon"] = checkpoint
            self._write_master(m, version)
        return m["horizon"]

    # -- task snapshots -------------------------------------------------------------------------------

    def task_path(self, checkpoint: int, node: str, index: int) -> str:
        """Where a task's snapshot of ``checkpoint`` lives."""
        return self.fs.join(self._chk(checkpoint), f"{node}-{index:05d}.state")

    def save_task(self, checkpoint: int, node: str, index: int, snapshot: dict[str, Any]) -> int:
        """Write a task's snapshot atomically; returns its size in bytes. Raises ``UnstorableStateError``
        naming the operator when the snapshot holds a value the format cannot store."""
        data = self.encode_task(node, snapshot)
        self.write_task(checkpoint, node, index, data)
        return len(data)

    @staticmethod
    def encode_task(node: str, snapshot: dict[str, Any]) -> bytes:
        """The bytes of a task's snapshot (``save_task`` in two steps: the state is captured here, at the
        barrier; ``write_task`` may follow later, from another thread)."""
        try:
            return encode_snapshot(snapshot)
        except StateTypeError as e:
            raise UnstorableStateError(f"operator {node!r} keeps state of type {e.type_name} (at {e.where}), which "
                                       f"a checkpoint cannot store") from None

    def write_task(self, checkpoint: int, node: str, index: int, data: bytes) -> None:
        """Write an encoded snapshot atomically (temporary file, fsync, rename, directory fsync)."""
        self.fs.make_dirs(self._chk(checkpoint))
        self.fs.write(self.task_path(checkpoint, node, index), data)

    def load_task(self, checkpoint: int, node: str, index: int) -> dict[str, Any]:
        """A task's snapshot of a complete checkpoint, keyed tables as lists (see ``restore``); raises
        ``CheckpointCorruptError`` naming the file when it is missing, damaged or not this task's."""
        path = self.task_path(checkpoint, node, index)
        snap = read_snapshot(path, fs=self.fs)
        path = self._where(path)
        ok = (isinstance(snap, dict) and snap.get("checkpoint") == checkpoint and snap.get("node") == node
              and snap.get("index") == index and type(snap.get("finished")) is bool
              and all(isinstance(snap.get(k), dict) and all(isinstance(c, str) and type(v) is int and v >= 0
                                                            for c, v in snap[k].items())
                      for k in ("inputs", "outputs"))
              and (snap.get("state") is None or isinstance(snap.get("state"), dict)))
        if not ok:
            raise CheckpointCorruptError(f"snapshot is not task {node}[{index}]'s of checkpoint {checkpoint} (or a "
                                         f"field has the wrong type)", path=path)
        state = snap.get("state")
        if state is not None and state.get("keyed") is not None:
            keyed = state["keyed"]
            if not isinstance(keyed, dict) or not all(isinstance(t, pa.Table) and "group" in t.column_names
                                                      for t in keyed.values()):
                raise CheckpointCorruptError("snapshot's keyed state is not a map of tables with a group column",
                                             path=path)
            meta = {b"path": path.encode()}
            state["keyed"] = {k: [t.replace_schema_metadata({**(t.schema.metadata or {}), **meta})]
                              for k, t in keyed.items()}
        return snap

    # -- manifests ------------------------------------------------------------------------------------

    def complete(self, manifest: dict[str, Any]) -> None:
        """Mark a checkpoint complete (every task's snapshot is written) and make it the latest."""
        data = encode_document("manifest", manifest)
        self.fs.write(self.fs.join(self._chk(manifest["checkpoint"]), _MANIFEST), data)
        self.fs.write(self.fs.join(self.root, "LATEST"), data)

    def manifest(self, checkpoint: int) -> dict[str, Any]:
        """The manifest of complete checkpoint ``checkpoint``; raises ``CheckpointCorruptError`` naming the
        file when it is missing, damaged or declares impossible values."""
        path = self.fs.join(self._chk(checkpoint), _MANIFEST)
        m = read_document(path, "manifest", fs=self.fs)
        path = self._where(path)
        par = m.get("parallelism")
        ok = (m.get("checkpoint") == checkpoint and type(m.get("generation")) is int
              and type(m.get("key_groups")) is int and m["key_groups"] >= 1 and type(m.get("final")) is bool
              and isinstance(par, dict) and all(type(p) is int and 1 <= p <= MAX_PARALLELISM for p in par.values())
              and sum(par.values()) <= MAX_TASKS)
        if not ok:
            raise CheckpointCorruptError(f"manifest is not checkpoint {checkpoint}'s (or declares impossible "
                                         f"parallelisms or key groups)", path=path)
        return m

    def latest(self) -> dict[str, Any] | None:
        """The manifest of the newest complete checkpoint, or None (its files are not verified: ``select``)."""
        done = [c for c in self.checkpoints() if self.is_complete(c)]
        return self.manifest(done[-1]) if done else None

    def checkpoints(self) -> list[int]:
        """Ids of the checkpoint directories present (complete or not)."""
        out = []
        for name in self.fs.list(self.root):
            if name.startswith("chk-") and name[4:].isdigit():
                out.append(int(name[4:]))
        return sorted(out)

    def is_complete(self, checkpoint: int) -> bool:
        """True when checkpoint ``checkpoint`` has its manifest."""
        return self.fs.exists(self.fs.join(self._chk(checkpoint), _MANIFEST))

    def remove_before(self, checkpoint: int) -> None:
        """Delete every checkpoint before ``checkpoint`` (complete or not)."""
        for c in self.checkpoints():
            if c < checkpoint:
                self.fs.remove_tree(self._chk(c))

    def prune(self, latest: int, horizon: int) -> None:
        """Delete the checkpoints no restore can use once ``latest`` is complete: all before it but the
        horizon (the one to fall back to); later ones (in flight) stay."""
        for c in self.checkpoints():
            if c < latest and c != horizon:
                self.fs.remove_tree(self._chk(c))

    # -- verifying and choosing -----------------------------------------------------------------------

    def verify(self, manifest: dict[str, Any], operators: dict[str, VerifiesState], horizon: int) -> None:
        """Read every snapshot of the checkpoint and let its operator check it (``Operator.verify_state``)
        without running anything from it; raises ``CheckpointCorruptError`` naming the first bad file.
        Operators not in ``operators`` (no longer in the job) are skipped."""
        c = manifest["checkpoint"]
        for node, parallelism in manifest["parallelism"].items():
            op = operators.get(node)
            if op is None:
                continue
            for i in range(parallelism):
                snap = self.load_task(c, node, i)
                op.verify_state(snap.get("state"), StateCheck(node, self._where(self.task_path(c, node, i)),
                                                              self.location, horizon))

    def select(self, operators: dict[str, VerifiesState]) -> tuple[dict[str, Any] | None,
                                                                  list[CheckpointCorruptError]]:
        """Where the next generation restores from (see the module doc): ``(manifest, skipped)``, the
        manifest None for a fresh start, ``skipped`` the errors of the newer checkpoints passed over."""
        horizon = self.commit_horizon()
        skipped: list[CheckpointCorruptError] = []
        done = [c for c in self.checkpoints() if self.is_complete(c)]
        hint = self._latest_hint()
        if hint is not None and (not done or hint > done[-1]) and hint >= horizon:
            skipped.append(CheckpointCorruptError(f"LATEST names checkpoint {hint}, which has no manifest",
                                                  path=self._where(self.fs.join(self._chk(hint), _MANIFEST))))
        for c in reversed(done):
            if c < horizon:
                break
            try:
                m = self.manifest(c)
                self.verify(m, operators, horizon)
            except CheckpointCorruptError as e:
                skipped.append(e)
                continue
            m["commit_horizon"] = horizon
            return m, skipped
        if horizon == 0:
            return None, skipped          # no output was ever committed: a fresh start is exactly-once
        if not skipped:
            raise CheckpointCorruptError(f"no complete checkpoint at or after checkpoint {horizon}, whose output "
                                         f"sinks may have committed", path=self.location)
        why = "; ".join(str(e) for e in skipped)
        raise CheckpointCorruptError(f"no usable checkpoint at or after checkpoint {horizon} (sinks may have "
                                     f"committed its output, so the job cannot go further back): {why}",
                                     path=skipped[0].path)

    def _latest_hint(self) -> int | None:
        path = self.fs.join(self.root, "LATEST")
        if not self.fs.exists(path):
            return None
        try:
            c = read_document(path, "manifest", fs=self.fs).get("checkpoint")
        except CheckpointCorruptError as e:   # only a copy for people: the checkpoints themselves decide
            _log.warning("job %s: %s (ignored; it is rewritten at the next checkpoint)", self.job, e)
            return None
        return c if type(c) is int else None

    # -- restoring ------------------------------------------------------------------------------------

    def restore(self, manifest: dict[str, Any], node: str, index: int, parallelism: int) -> dict[str, Any] | None:
        """The snapshot instance ``index`` of ``node`` at ``parallelism`` starts from: its own when the
        parallelism is unchanged, else its share of every old instance's state (rows of keyed tables by
        key group, parts by ``part % parallelism``); None when the checkpoint has no such operator. Keyed
        state is ``{name: [table, …]}`` (one table per snapshot file read)."""
        old = manifest["parallelism"].get(node)
        if old is None:
            return None
        if old == parallelism:
            return self.load_task(manifest["checkpoint"], node, index)
        groups = pa.array(list(groups_of_instance(index, manifest["key_groups"], parallelism)), pa.int32())
        merged: dict[str, Any] = {"keyed": {}, "parts": {}, "instance": None}
        finished = True
        for i in range(old):
            snap = self.load_task(manifest["checkpoint"], node, i)
            finished = finished and snap.get("finished", False)
            st = snap.get("state") or {}
            for name, tables in (st.get("keyed") or {}).items():
                for t in tables:
                    merged["keyed"].setdefault(name, []).append(t.filter(pc.is_in(t.column("group"), groups)))
            parts = st.get("parts") or {}
            if not isinstance(parts, dict):
                raise CheckpointCorruptError("snapshot's 'parts' is not a map", path=self._where(self.task_path(
                    manifest["checkpoint"], node, i)))
            for p, v in parts.items():
                if type(p) is int and p % parallelism == index:
                    merged["parts"][p] = v
            if merged["instance"] is None and st.get("instance"):
                merged["instance"] = st["instance"]
        return {"checkpoint": manifest["checkpoint"], "inputs": {}, "outputs": {}, "state": merged,
                "finished": finished, "rescaled": True}

