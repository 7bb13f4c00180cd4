"""One operator instance at work: its reader, operator, writers, heartbeat thread and checkpoints.

The task's own thread runs the operator: it takes events from the reader (or items from the source),
calls the operator, routes emitted batches to the output writers (forward, round-robin, or by key group)
and moves the output frontier (the meet of the input frontier and what the operator holds back, or the
source's frontier). At an aligned barrier (a source: at a trigger from the master) it saves its snapshot,
forwards the barrier and reports. A heartbeat thread exchanges state with the job master
(``runtime.master``); a transfer thread drains the writers (``runtime.channels.writer``).
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
import traceback
from typing import Any

import pyarrow as pa

from eventlog.antichain import Antichain

from .channels.factory import open_channel_store
from .channels.payload import FINISHED_TS, encode_batch
from .channels.reader import BARRIER, DATA, ChannelReader
from .channels.writer import ChannelWriter, Transfer, WriterSettings
from .checkpoints.keygroups import destinations, split_by_destination
from .checkpoints.marks import check_mark
from .checkpoints.store import CheckpointStore, StateCheck
from .errors import JobAbortedError, TaskFailedError
from .faults import TaskFaults
from .graph import SINK, SOURCE, Plan, TaskSpec
from .operators import OperatorContext

_log = logging.getLogger("runtime.task")


class _Router:
    """Sends an operator's output batches to one downstream operator's channels."""

    def __init__(self, mode: str, writers: list[ChannelWriter], key: Any, key_groups: int) -> None:
        self.mode = mode
        self.writers = writers
        self.key = key
        self.key_groups = key_groups
        self._next = 0

    def send(self, time: int, batch: pa.RecordBatch) -> None:
        ws = self.writers
        if self.mode == "forward" or len(ws) == 1:
            payload = encode_batch(time, batch)
            ws[0].write(payload, payload.size)
        elif self.mode == "rebalance":
            payload = encode_batch(time, batch)
            ws[self._next % len(ws)].write(payload, payload.size)
            self._next += 1
        else:
            # one hash per row, one split per batch, one encode per destination (runtime.checkpoints.keygroups)
            parts = split_by_destination(destinations(batch, self.key, self.key_groups, len(ws)), len(ws))
            for j, idx in enumerate(parts):
                if idx is None:
                    continue
                payload = encode_batch(time, batch if idx is Ellipsis else batch.take(pa.array(idx)))
                ws[j].write(payload, payload.size)


class TaskRunner:
    """Runs one operator instance of one generation until the master says stop (or abort)."""

    def __init__(self, plan: Plan, spec: TaskSpec, *, generation: int, manifest: dict[str, Any] | None,
                 channels_uri: str, checkpoints_uri: str, client: Any, writer_settings: WriterSettings,
                 faults: TaskFaults, heartbeat_interval: float = 0.01, run_token: str | None = None) -> None:
        self.plan = plan
        self.spec = spec
        self.generation = generation
        self.manifest = manifest
        self.restore: dict[str, Any] | None = None
        self.channels_uri = channels_uri
        self.checkpoints_uri = checkpoints_uri
        self.client = client
        self.settings = writer_settings
        self.faults = faults
        self.heartbeat_interval = heartbeat_interval
        self.run_token = run_token
        """The generation's run mark token (``runtime.checkpoints.marks``): checked in the checkpoint store and the
        channels before the task starts; None skips the check."""
        self.key = spec.key
        # state shared with the heartbeat thread
        self._trigger = 0
        self._completed = 0
        self._horizon = 0                 # the commit horizon the master announced
        self._trimmed = 0                 # channels trimmed up to this complete checkpoint
        self._stop = False
        self._abort = False
        self._reports: collections.deque[int] = collections.deque()   # appended by the task, drained here
        self._committed = 0
        self._finished = False
        self._failed: str | None = None
        self._hb_error: BaseException | None = None
        self._snapshot_writer: threading.Thread | None = None
        self._snapshot_error: BaseException | None = None
        self._wake = threading.Event()
        self._done = threading.Event()
        self.stats: dict[str, Any] = {"task": self.key, "generation": generation}
        self._side_cpu = 0.0   # CPU seconds of the task's other threads (snapshot writers, heartbeat)

    # -- the heartbeat thread --------------------------------------------------------------------------

    def _heartbeat(self, final: bool = False) -> None:
        msg: dict[str, Any] = {"task": self.key, "gen": self.generation}
        if self._reader is not None:
            msg["acks"] = self._reader.acks()
        if self._reports:
            reports = []
            while self._reports:
                reports.append(self._reports.popleft())
            msg["reports"] = reports
        msg["committed"] = self._committed
        if self._finished:
            msg["finished"] = True
        if self._failed:
            msg["failed"] = self._failed
        if final or self._beats % 50 == 0:
            msg["stats"] = self._collect_stats()
        self._beats += 1
        reply = self.client.call(msg)
        if reply.get("abort"):
            self._abort = True
            self._wake.set()
            return
        if (reply["trigger"] > self._trigger or reply["completed"] > self._completed
                or reply.get("commit", 0) > self._horizon or reply["stop"]):
            self._trigger = max(self._trigger, reply["trigger"])
            self._completed = max(self._completed, reply["completed"])
            self._horizon = max(self._horizon, reply.get("commit", 0))
            self._stop = self._stop or reply["stop"]
            self._wake.set()
        if reply.get("acks") and self._transfer is not None:
            self._transfer.acknowledge(reply["acks"])

    def _heartbeat_loop(self) -> None:
        try:
            while not self._done.is_set():
                self._heartbeat()
                self._done.wait(self.heartbeat_interval)
        except BaseException as e:  # noqa: BLE001 - the task thread raises it
            self._hb_error = e
            self._abort = True
            self._wake.set()
        finally:
            self._side_cpu += time.thread_time()

    def _check(self) -> None:
        if self._abort:
            if self._snapshot_error is not None:
                raise TaskFailedError(f"task {self.key} could not write its snapshot: "
                                      f"{type(self._snapshot_error).__name__}: {self._snapshot_error}")
            if self._hb_error is not None:
                raise TaskFailedError(f"task {self.key} lost the job master: {self._hb_error!r}")
            raise JobAbortedError(f"task {self.key} of generation {self.generation} aborted")

    # -- setup -----------------------------------------------------------------------------------------

    def _valid_offsets(self, other: str) -> bool:
        """Channel offsets of the restored checkpoint apply when both ends kept their parallelism."""
        if not self.restore or self.restore.get("rescaled"):
            return False
        old = self._manifest_parallelism
        return old.get(other) == self.plan.parallelism[other] and old.get(self.spec.node) == self.spec.parallelism

    def _setup(self) -> None:
        spec = self.spec
        chain = spec.chain or [spec.node]
        self._chain = chain
        self._store = CheckpointStore(self.checkpoints_uri, self.plan.name, create=self.run_token is None)
        self._channels = open_channel_store(self.channels_uri, self.plan.name)
        if self.run_token is not None:     # fail now, not hang, when this host does not see the driver's folders
            check_mark(self._store.location, self.generation, self.run_token, what="checkpoint store",
                       uri=self.checkpoints_uri, task=self.key)
            self._channels.check_mark(self.generation, self.run_token, task=self.key)
        restores: list[dict[str, Any]] = [{} for _ in chain]
        if self.manifest is not None:
            for k, name in enumerate(chain):
                restores[k] = self._store.restore(self.manifest, name, spec.index, spec.parallelism) or {}
        self.restore = restores[0] if self.manifest is not None else None
        self._restored_id = self.manifest["checkpoint"] if self.manifest else 0
        self._manifest_parallelism = self.manifest["parallelism"] if self.manifest else {}
        self._last_ckpt = self._restored_id
        self._trimmed = self._restored_id
        start_horizon = min(self.manifest.get("commit_horizon", 0), self._restored_id) if self.manifest else 0
        self._horizon = max(self._horizon, start_horizon)
        outputs = restores[-1].get("outputs", {})
        self._transfer = Transfer(self.settings, self._check, name=f"transfer-{self.key}")
        self._writers: list[ChannelWriter] = []
        self._routers: list[_Router] = []
        for dst, chans in spec.outputs.items():
            valid = self._valid_offsets(dst) and not restores[-1].get("rescaled")
            ws = []
            for ch in chans:
                start = outputs.get(ch.name, 0) if valid else 0
                ws.append(ChannelWriter(ch.name, self._channels.appender(self.generation, ch.position, ch.name),
                                        self._transfer, start_id=start,
                                        max_bundle_bytes=self._channels.max_bundle_bytes,
                                        min_idle_interval=self._channels.min_idle_interval))
            self._writers.extend(ws)
            self._routers.append(_Router(spec.routing[dst], ws, self.plan.nodes[dst].key_of(chain[-1]),
                                         self.plan.key_groups))
        self._reader: ChannelReader | None = None
        if spec.inputs:
            inputs = restores[0].get("inputs", {})
            chans = []
            for ch in spec.inputs:
                last = inputs.get(ch.name, 0) if self._valid_offsets(ch.src) else 0
                chans.append((ch.position, ch.name, last, ch.input))
            tail = self._channels.tail(self.generation, [(c.position, c.name) for c in spec.inputs])
            self._reader = ChannelReader(tail, chans, last_barrier=self._restored_id)
        self._ops = [self.plan.nodes[name].make() for name in chain]
        self._op = self._ops[0]
        self._fronts: list[Any] = [None] * len(chain)     # the input frontier each operator saw last
        for k, (name, op) in enumerate(zip(chain, self._ops)):
            emit = self._emit if k == len(chain) - 1 else self._ops[k + 1].process
            if k == 0 and spec.kind == SOURCE:
                emit = self._counting(emit)
            ctx = OperatorContext(self.plan.name, name, spec.index, spec.parallelism, self.plan.key_groups,
                                  self.generation, self._store.location, emit, {"faults": self.faults},
                                  commit_horizon=start_horizon)
            state = restores[k].get("state")
            if self.manifest is not None:
                path = self._store.task_path(self._restored_id, name, spec.index)
                where = self._store.fs.display(path if not restores[k].get("rescaled") else os.path.dirname(path))
                op.verify_state(state, StateCheck(name, where, self._store.location, start_horizon))
            if state is not None:
                state = dict(state)
                state.setdefault("checkpoint", self._restored_id)
            if self.plan.nodes[name].kind == SINK and self.faults:
                self._wrap_commit_faults(op)
            op.open(ctx, state)
        self._committed = start_horizon
        self._out_ts = -1
        self._records = 0
        self._emitted = 0

    def _counting(self, emit: Any) -> Any:
        """A source's emit that counts (and may fail at) each batch it emits."""

        def counted(time: int, batch: pa.RecordBatch) -> None:
            self._records += 1
            self.faults.tick("record")
            emit(time, batch)

        return counted

    def _wrap_commit_faults(self, op: Any) -> None:
        faults = self.faults
        deliver = op._deliver

        def _deliver(*args: Any) -> None:
            faults.tick("commit")
            deliver(*args)

        op._deliver = _deliver

    # -- data path -------------------------------------------------------------------------------------

    def _emit(self, time: int, batch: pa.RecordBatch) -> None:
        self._emitted += batch.num_rows
        for r in self._routers:
            r.send(time, batch)

    def _advance(self, frontier_ts: int | None) -> None:
        ts = FINISHED_TS if frontier_ts is None else frontier_ts
        if ts > self._out_ts:
            self._out_ts = ts
            for w in self._writers:
                w.advance(ts)

    def _propagate(self, first: int, frontier: Antichain) -> int | None:
        """Hand ``frontier`` to operator ``first`` and on down the chain (each operator's output frontier is
        its input frontier met with its hold); returns the task's output frontier (None: empty)."""
        f = frontier
        for k in range(first, len(self._ops)):
            op = self._ops[k]
            if f != self._fronts[k]:
                self._fronts[k] = f
                op.on_frontier(f)
            hold = op.hold()
            if hold is not None and (f.is_empty() or hold < f.elements[0]):
                f = Antichain([hold])
        return f.elements[0] if f.elements else None

    # -- checkpoints -----------------------------------------------------------------------------------

    def _checkpoint(self, checkpoint: int) -> None:
        """At the barrier: capture every chained operator's snapshot (encoded here, so later records cannot
        change it), forward the barrier, and write the snapshots — temporary file, fsync, rename — from a
        thread of their own while records flow on; the task reports the checkpoint only once they are
        durable, so it completes as before, and a failed write fails the task."""
        self._join_snapshots()
        began = time.monotonic()
        encoded = []
        last = len(self._ops) - 1
        for k, (name, op) in enumerate(zip(self._chain, self._ops)):
            snapshot = {
                "checkpoint": checkpoint,
                "generation": self.generation,
                "node": name,
                "index": self.spec.index,
                "parallelism": self.spec.parallelism,
                "inputs": self._reader.offsets() if self._reader and k == 0 else {},
                "outputs": {w.name: w.last_id for w in self._writers} if k == last else {},
                "state": op.snapshot(checkpoint),
                "finished": self._finished,
            }
            encoded.append((name, self._store.encode_task(name, snapshot)))
        self.stats["state_bytes"] = sum(len(data) for _name, data in encoded)
        self.stats["state_bytes_max"] = max(self.stats.get("state_bytes_max", 0), self.stats["state_bytes"])
        self.stats["snapshot_s"] = self.stats.get("snapshot_s", 0.0) + time.monotonic() - began
        self.faults.tick("barrier")
        for w in self._writers:
            w.barrier(checkpoint)
        self._last_ckpt = checkpoint

        def write() -> None:
            try:
                for name, data in encoded:
                    self._store.write_task(checkpoint, name, self.spec.index, data)
                self._reports.append(checkpoint)
            except BaseException as e:  # noqa: BLE001 - the task thread raises it (_check)
                self._snapshot_error = e
                self._abort = True
                self._wake.set()
            finally:
                self._side_cpu += time.thread_time()

        self._snapshot_writer = threading.Thread(target=write, name=f"snapshot-{self.key}-{checkpoint}", daemon=True)
        self._snapshot_writer.start()

    def _join_snapshots(self) -> None:
        """Wait for the snapshot files of the previous checkpoint (normally written long ago)."""
        t = self._snapshot_writer
        if t is not None:
            t.join()
            self._snapshot_writer = None

    def _on_completed(self) -> None:
        c = self._completed
        if c > self._trimmed:
            if self._reader is not None:
                for ch in self.spec.inputs:
                    self._reader._tail.trim(ch.position, c)
            self._trimmed = c
        h = self._horizon
        if h > self._committed:
            for op in self._ops:
                op.notify_complete(h)
            self._committed = h

    # -- the loop --------------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        """Run the task; returns its statistics. Raises the task's failure (after reporting it)."""
        self._reader = None
        self._transfer = None
        self._beats = 0
        hb = threading.Thread(target=self._heartbeat_loop, name=f"heartbeat-{self.key}", daemon=True)
        started = self._started = time.monotonic()
        cpu0 = time.thread_time()
        ok = False
        try:
            self._setup()
            self._transfer.start()
            hb.start()
            if self.spec.kind == SOURCE:
                self._run_source()
            else:
                self._run_operator()
            self._join_snapshots()
            self._check()
            self._transfer.drain(30)
            ok = True
        except JobAbortedError:
            raise
        except BaseException as e:
            self._failed = f"{type(e).__name__}: {e}"
            _log.info("task %s failed: %s", self.key, "".join(traceback.format_exception(e)))
            try:
                self._done.set()
                self._heartbeat()
            except Exception:  # noqa: BLE001 - the failure itself is what matters
                pass
            raise
        finally:
            self._done.set()
            if hb.is_alive():
                hb.join(5)
            if not ok and self._transfer is not None:
                self._transfer.stop()
            for closer in (*getattr(self, "_ops", ()), self._reader, getattr(self, "_channels", None)):
                if closer is not None:
                    try:
                        closer.close()
                    except Exception:  # noqa: BLE001
                        pass
            self.stats["seconds"] = time.monotonic() - started
            transfer = getattr(self, "_transfer", None)
            self.stats["cpu_s"] = (time.thread_time() - cpu0 + self._side_cpu
                                   + (transfer.cpu_seconds if transfer is not None else 0.0))
        if ok:
            try:
                self._heartbeat(final=True)
            except Exception:  # noqa: BLE001 - the run is over
                pass
        return self._collect_stats()

    def _collect_stats(self) -> dict[str, Any]:
        s = self.stats
        s["records_in"] = getattr(self, "_records", 0)
        s["rows_out"] = getattr(self, "_emitted", 0)
        ws = getattr(self, "_writers", [])
        s["writer_peak_bytes"] = max((w.peak_bytes for w in ws), default=0)
        s["writer_blocked_s"] = sum(w.blocked_seconds for w in ws)
        s["writer_peak_unacked"] = max((w.peak_unacked for w in ws), default=0)
        s["messages_out"] = sum(w.messages for w in ws)
        s["bundles"] = sum(w.bundles for w in ws)
        s["bytes_sent"] = sum(w.sent_bytes for w in ws)
        s["channels"] = {w.name: {"sent_bytes": w.sent_bytes, "blocked_s": w.blocked_seconds} for w in ws}
        if self._reader is not None:
            s["duplicates"] = self._reader.duplicates
            s["align_s"] = self._reader.align_seconds
        return s

    def _control(self) -> None:
        self._check()
        if self._completed > self._trimmed or self._horizon > self._committed:
            self._on_completed()

    def _source_frontier(self) -> int | None:
        f = self._op.frontier()
        if len(self._ops) == 1:
            return f
        return self._propagate(1, Antichain() if f is None else Antichain([f]))

    def _run_source(self) -> None:
        src = self._op
        self._advance(self._source_frontier())
        while True:
            self._control()
            if self._trigger > self._last_ckpt:
                self._checkpoint(self._trigger)
            if self._stop:
                return
            if not self._finished:
                progressed = src.poll(16)
                f = self._source_frontier()
                self._advance(f)
                if f is None and src.frontier() is None:
                    self._finished = True
                    self.stats["finished_after_s"] = time.monotonic() - self._started
                if progressed:
                    continue
            self._wake.wait(0.002 if not self._finished else 0.02)
            self._wake.clear()

    def _run_operator(self) -> None:
        reader = self._reader
        assert reader is not None
        op = self._op
        multi = len(self.plan.nodes[self.spec.node].inputs) > 1   # union, connect, joins: data and frontiers by input
        idle = 0
        while True:
            self._control()
            if self._stop:
                return
            events = reader.poll()
            if not events:
                idle = min(idle + 1, 10)
                self._wake.wait(0.0002 * (1 << min(idle, 5)))
                self._wake.clear()
                continue
            idle = 0
            for ev in events:
                kind = ev[0]
                if kind == DATA:
                    if multi:
                        op.process_input(ev[3], ev[1], ev[2])
                    else:
                        op.process(ev[1], ev[2])
                    self._records += 1
                    self.faults.tick("record")
                elif kind == BARRIER:
                    self._checkpoint(ev[1])
                else:
                    if multi:
                        op.on_input_frontiers(ev[2])
                    f = self._propagate(0, ev[1])
                    self._advance(f)
                    if f is None and ev[1].is_empty() and not self._finished:
                        self._finished = True
                        self.stats["finished_after_s"] = time.monotonic() - self._started
