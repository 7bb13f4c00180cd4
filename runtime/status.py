"""A running job's status, published for people and monitors: a small JSON file the job master's driver rewrites
about once a second (``replay ui --jobs`` shows it, and exports its counters as Prometheus metrics).

The file is ``<checkpoints>/<job>/_STATUS.json`` (beside the job's checkpoints, on the local disk or S3, written
whole and atomically, without fsync: it is a view, not state; on S3 every ``S3_INTERVAL`` seconds). Nothing of the
job reads it. It holds what the driver already knows — no task does any work for it:

* ``job``, ``status`` (the master's: running, finished, stopped, failed), ``generation``, ``updated_ms``;
* ``operators``: each with its kind and parallelism, and per instance (task) the statistics its heartbeats
  carry (records in, rows out, writer peak and blocked seconds, state bytes of its last snapshot), and how long
  ago the master heard from it;
* ``channels``: per channel, bytes sent (its writer), acknowledged (its reader) and the backlog between them,
  and the seconds its writer was blocked on a full ring (backpressure);
* ``checkpoints``: the last completed id, the one in flight, how many completed in the run, the durations of
  the last ones (seconds from trigger to completion), the size of the last (the tasks' state bytes) and when
  it completed;
* ``restarts``: each failed generation with when and why.

``STATUS_FILE`` is the file's name; ``read_status`` reads one back.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

_log = logging.getLogger("runtime.status")

STATUS_FILE = "_STATUS.json"
"""The status file's name in the job's checkpoint folder."""
INTERVAL = 1.0
"""Seconds between two writes of the status file on the local disk."""
S3_INTERVAL = 5.0
"""Seconds between two writes on an object store (each write is a PUT)."""
MAX_STATUS_BYTES = 4 << 20
"""The largest status file ``read_status`` reads."""
_KEEP = 20
"""Checkpoint durations and restarts kept in the file (the newest)."""


class StatusPublisher:
    """Writes the status of a run (``run_job``) from a daemon thread until ``close()``, which writes it once more.

    ``master`` is the run's ``JobMaster``, ``store`` its ``CheckpointStore``; ``failures`` and ``failure_times``
    are the driver's lists of failed generations (read, never changed)."""

    def __init__(self, plan: Any, master: Any, store: Any, failures: list[str], failure_times: list[float],
                 *, interval: float | None = None) -> None:
        self._plan, self._master, self._store = plan, master, store
        self._failures, self._failure_times = failures, failure_times
        self._path = store.fs.join(store.root, STATUS_FILE)
        self._interval = interval if interval is not None else (S3_INTERVAL if store.fs.objects else INTERVAL)
        self._started_ms = int(time.time() * 1000)
        self._completed_seen = 0
        self._completed_ms: int | None = None
        self._stop = threading.Event()
        self._failed_writes = 0
        self._thread = threading.Thread(target=self._run, name=f"status-{plan.name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._write()
        self._write()  # the final status

    def _write(self) -> None:
        try:
            data = json.dumps(self.document(), separators=(",", ":")).encode()
            self._store.fs.write(self._path, data, sync=False)
        except Exception as e:  # noqa: BLE001 - a view must never fail the job
            self._failed_writes += 1
            if self._failed_writes == 1:
                _log.warning("job %s: cannot write its status file %s: %s", self._plan.name, self._path, e)

    def document(self) -> dict[str, Any]:
        """The status now (module doc)."""
        m, plan = self._master, self._plan
        with m._lock:  # one consistent look at what the heartbeats left (the master's own lock)
            stats = {k: dict(v) for k, v in m.task_stats.items()}
            seen = dict(m._seen)
            acks = dict(m._acks)
            c = m.coordinator
            completed, trigger, in_flight = c.completed_id, c.trigger_id, c._in_flight
            durations = list(c.durations[-_KEEP:])
            completed_in_run = c.completed_in_run
            status, generation, failure = m.status, m.generation, m.failure
        now = time.time()
        mono = time.monotonic()
        if completed != self._completed_seen:
            self._completed_seen = completed
            self._completed_ms = int(now * 1000)
        operators = []
        for name in plan.order:
            node = plan.nodes[name]
            instances = []
            for i in range(node.parallelism):
                key = f"{name}.{i}"
                s = stats.get(key, {})
                instances.append({
                    "task": key, "records_in": s.get("records_in"), "rows_out": s.get("rows_out"),
                    "writer_peak_bytes": s.get("writer_peak_bytes"), "writer_blocked_s": s.get("writer_blocked_s"),
                    "state_bytes": s.get("state_bytes"), "align_s": s.get("align_s"),
                    "heard_s_ago": round(mono - seen[key], 3) if key in seen else None,
                })
            inputs = getattr(node, "inputs", None)
            operators.append({"name": name, "kind": node.kind, "parallelism": node.parallelism,
                              "inputs": list(inputs) if inputs is not None else [i for i in [node.input] if i],
                              "instances": instances})
        sent: dict[str, dict[str, Any]] = {}
        for s in stats.values():
            sent.update(s.get("channels") or {})
        channels = []
        for ch in plan.channels:
            w = sent.get(ch.name, {})
            out = w.get("sent_bytes")
            got = acks.get(ch.name, 0)
            channels.append({"name": ch.name, "from": f"{ch.src}.{ch.src_index}", "to": f"{ch.dst}.{ch.dst_index}",
                             "sent_bytes": out, "acked_bytes": got,
                             "backlog_bytes": None if out is None else max(0, out - got),
                             "blocked_s": w.get("blocked_s")})
        sizes = [s.get("state_bytes") for s in stats.values() if s.get("state_bytes") is not None]
        restarts = [{"generation": i + 1, "at_ms": int(t * 1000) if t else None, "reason": r}
                    for i, (r, t) in enumerate(zip(list(self._failures), list(self._failure_times)))]
        return {
            "job": plan.name, "status": status, "generation": generation, "failure": failure,
            "started_ms": self._started_ms, "updated_ms": int(now * 1000), "interval_s": self._interval,
            "operators": operators, "channels": channels,
            "checkpoints": {"last_completed": completed, "triggered": trigger, "in_flight": in_flight,
                            "completed_in_run": completed_in_run, "durations_s": [round(d, 4) for d in durations],
                            "last_duration_s": round(durations[-1], 4) if durations else None,
                            "last_size_bytes": sum(sizes) if sizes else None,
                            "last_completed_ms": self._completed_ms},
            "restarts": restarts[-_KEEP:], "restart_count": len(restarts),
        }

    def close(self, wait: float = 2.0) -> None:
        """Stop the thread after it wrote the final status, waiting at most ``wait`` seconds (a store that does not
        answer never holds the driver up for longer)."""
        self._stop.set()
        self._thread.join(timeout=wait)


def read_status(fs: Any, path: str) -> dict[str, Any] | None:
    """The status document at ``path`` of ``fs`` (a ``StateFs``), or None when there is none or it does not
    parse (a view: never an error)."""
    try:
        return json.loads(fs.read(path, MAX_STATUS_BYTES))
    except Exception:  # noqa: BLE001
        return None
