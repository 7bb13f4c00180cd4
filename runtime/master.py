"""The job master on the driver, and how tasks talk to it.

Tasks send the master a *heartbeat* every ``heartbeat_interval`` (10 ms by default) from a thread of
their own, and the reply carries everything the master has to tell them. A heartbeat holds the task's
generation, the bytes it consumed per input channel (acknowledgements for its writers' flow control), the
checkpoints it saved since the last heartbeat, the commit horizon it handled (``committed``: its sinks
committed output up to it), whether its input is finished, and a failure if it is failing. The reply holds
the last checkpoint triggered (sources inject its barrier), the last one complete (readers trim), the commit
horizon (``commit``: sinks commit up to it, ``runtime.checkpoints.store``), ``stop`` (the job is done), ``abort`` (the
generation is over: another task failed), and the acknowledged bytes of the task's output channels.

Transport: in-process tasks call ``JobMaster.handle`` directly (``LocalClient``); Spark tasks connect to
a small TCP server on the driver (``MasterServer``, one JSON object per line each way, ``TcpClient``). It
binds the driver's bind address (``spark.driver.bindAddress``, else ``spark.driver.host``; 127.0.0.1 in
local mode, where every task runs on the driver's machine) on an ephemeral port, and tasks connect to
``spark.driver.host``. Every connection must first prove it belongs to the job: its first line is
``{"secret": S}`` with the job's random secret ``S`` (``new_secret``, handed to the tasks inside their
Spark closure); the server answers ``{"ok": true}``, or ``{"refused": why}`` and closes the connection for
a missing or wrong secret, anything that is not such a line, or a line not sent within ``HELLO_TIMEOUT``
seconds — nothing such a connection sends reaches the master. The secret travels in the clear, as the
closure does over Spark's RPC: on an untrusted network enable Spark's ``spark.authenticate`` and
``spark.network.crypto.enabled`` and keep the driver's ports behind a firewall. A task that stops sending
heartbeats for ``heartbeat_timeout`` seconds fails its generation.
"""

from __future__ import annotations

import hmac
import json
import logging
import secrets
import socket
import socketserver
import threading
import time
from typing import Any

from .checkpoints.coordinator import CheckpointCoordinator
from .checkpoints.store import CheckpointStore
from .graph import Plan

_log = logging.getLogger("runtime.master")

HELLO_TIMEOUT = 10.0
"""Seconds a new connection has to send its secret."""
MAX_LINE = 16 << 20
"""The longest line (bytes) the master reads; a longer one closes the connection."""


def new_secret() -> str:
    """A random secret for one run's control port."""
    return secrets.token_hex(16)


class JobMaster:
    """Coordinates one run of a job: checkpoints, completion, failure and stop (see the module doc)."""

    def __init__(self, plan: Plan, store: CheckpointStore, *, checkpoint_interval: float | None,
                 stop_after_checkpoints: int | None = None, heartbeat_timeout: float = 60.0) -> None:
        self.plan = plan
        self.store = store
        self.coordinator = CheckpointCoordinator(store, plan.parallelism, plan.key_groups, checkpoint_interval)
        self.stop_after = stop_after_checkpoints
        self.heartbeat_timeout = heartbeat_timeout
        self._lock = threading.Lock()
        self._tasks = {t.key for t in plan.tasks}
        self._sinks = {t.key for t in plan.tasks if t.has_sink}
        self._outputs = {t.key: [c.name for chs in t.outputs.values() for c in chs] for t in plan.tasks}
        self.generation = 0
        self.status = "running"
        """``running``, ``finished`` (every source finished and every sink committed), ``stopped``
        (``stop_after_checkpoints`` reached) or ``failed`` (the generation failed)."""
        self.failure: str | None = None
        self.first_failure_at: float | None = None
        self.driver_error: BaseException | None = None
        """An error of the driver's own checkpoint-store work while it handled a heartbeat (completing a
        checkpoint: the store unavailable, another driver of the job): it failed the generation, and the
        driver's loop raises it (``runtime.failover``)."""
        self.task_stats: dict[str, dict[str, Any]] = {}
        self._reset()

    def _reset(self) -> None:
        self._seen: dict[str, float] = {}
        self._finished: set[str] = set()
        self._committed: dict[str, int] = {}
        self._acks: dict[str, int] = {}

    def begin(self, generation: int, restored: dict[str, Any] | None) -> None:
        """Start a generation (after a restart: from checkpoint ``restored``)."""
        with self._lock:
            self.generation = generation
            self.status = "running"
            self.failure = None
            self._reset()
            self.coordinator.begin(generation, self._tasks, restored)

    # -- heartbeats ------------------------------------------------------------------------------------

    def handle(self, msg: dict[str, Any]) -> dict[str, Any]:
        """One heartbeat of a task; returns the reply."""
        with self._lock:
            task = msg["task"]
            if msg.get("gen") != self.generation or self.status == "failed" or task not in self._tasks:
                return {"abort": True}
            self._seen[task] = time.monotonic()
            if msg.get("failed"):
                self._fail(f"task {task} failed: {msg['failed']}")
                return {"abort": True}
            acks = msg.get("acks")
            if acks:
                self._acks.update(acks)
            for c in msg.get("reports", ()):
                try:
                    self.coordinator.report(task, c)
                except Exception as e:  # noqa: BLE001 - the driver's loop raises it
                    self.driver_error = e
                    self._fail(f"the driver could not complete checkpoint {c}: {type(e).__name__}: {e}")
                    return {"abort": True}
            if msg.get("finished"):
                self._finished.add(task)
            if msg.get("committed") is not None:
                self._committed[task] = msg["committed"]
            if msg.get("stats"):
                self.task_stats[task] = msg["stats"]
            c = self.coordinator
            return {
                "trigger": c.trigger_id,
                "completed": c.completed_id,
                "commit": c.horizon,
                "stop": self.status in ("finished", "stopped"),
                "acks": {name: self._acks.get(name, 0) for name in self._outputs[task]},
            }

    def _fail(self, reason: str) -> None:
        if self.status != "failed":
            self.status = "failed"
            self.failure = reason
            if self.first_failure_at is None:
                self.first_failure_at = time.time()

    def fail(self, reason: str) -> None:
        """Fail the current generation (every task aborts at its next heartbeat)."""
        with self._lock:
            self._fail(reason)

    # -- the driver's periodic work ----------------------------------------------------------------------

    def tick(self) -> list[int]:
        """Trigger due checkpoints, decide stop, check liveness; returns checkpoints completed since the
        last tick (the caller deletes what they made obsolete)."""
        with self._lock:
            if self.status != "running":
                return self.coordinator.take_completed()
            now = time.monotonic()
            if len(self._seen) == len(self._tasks):
                late = [t for t, seen in self._seen.items() if now - seen > self.heartbeat_timeout]
                if late:
                    self._fail(f"no heartbeat from task(s) {sorted(late)} for {self.heartbeat_timeout} s")
                    return self.coordinator.take_completed()
                all_finished = len(self._finished) == len(self._tasks)
                c = self.coordinator
                c.maybe_trigger(all_finished)
                if c.final_id is not None and c.completed_id >= c.final_id and self._sinks_committed(c.final_id):
                    self.status = "finished"
                elif self.stop_after is not None and c.completed_in_run >= self.stop_after:
                    c.commit_through(c.completed_id)      # stopping here: commit all of its output
                    if self._sinks_committed(c.completed_id):
                        self.status = "stopped"
            return self.coordinator.take_completed()

    def _sinks_committed(self, checkpoint: int) -> bool:
        return all(self._committed.get(t, 0) >= checkpoint for t in self._sinks)

    @property
    def registered(self) -> int:
        """Tasks of the current generation that sent a heartbeat."""
        return len(self._seen)


class LocalClient:
    """A task's link to a master in the same process."""

    def __init__(self, master: JobMaster) -> None:
        self._master = master

    def call(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Send a heartbeat; returns the master's reply."""
        return self._master.handle(msg)

    def close(self) -> None:
        """Nothing to release."""


class _Handler(socketserver.StreamRequestHandler):
    def _hello(self) -> bool:
        server = self.server
        self.request.settimeout(HELLO_TIMEOUT)
        why = None
        try:
            line = self.rfile.readline(4096)
            hello = json.loads(line) if line.endswith(b"\n") else None
            given = hello.get("secret") if isinstance(hello, dict) else None
            if not isinstance(given, str):
                why = "the first line must be {\"secret\": …} with the job's secret"
            elif not hmac.compare_digest(given.encode(), server.secret.encode()):  # type: ignore[attr-defined]
                why = "wrong secret"
        except (ValueError, UnicodeDecodeError):
            why = "the first line must be {\"secret\": …} with the job's secret"
        except OSError:
            why = f"no secret within {HELLO_TIMEOUT} s"
        if why is not None:
            server.refused += 1  # type: ignore[attr-defined]
            _log.warning("job master: refused a connection from %s:%s: %s", *self.client_address[:2], why)
            try:
                self.wfile.write(json.dumps({"refused": why}).encode() + b"\n")
                self.wfile.flush()
            except OSError:
                pass
            return False
        self.request.settimeout(None)
        self.wfile.write(b'{"ok": true}\n')
        self.wfile.flush()
        return True

    def handle(self) -> None:
        master: JobMaster = self.server.master  # type: ignore[attr-defined]
        try:
            if not self._hello():
                return
            while True:
                line = self.rfile.readline(MAX_LINE)
                if not line:
                    return
                if not line.endswith(b"\n"):
                    _log.warning("job master: a line of more than %d bytes from %s:%s; closing", MAX_LINE,
                                 *self.client_address[:2])
                    return
                try:
                    reply = master.handle(json.loads(line))
                except Exception as e:  # noqa: BLE001 - a bad message must not kill the server
                    reply = {"abort": True, "error": repr(e)}
                self.wfile.write(json.dumps(reply).encode() + b"\n")
                self.wfile.flush()
        except (ConnectionError, OSError):
            pass  # the task's process died (a SIGKILLed Spark worker): its generation fails through Spark


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


class MasterServer:
    """The master's TCP endpoint for tasks in other processes: JSON lines on ``bind`` (an ephemeral port),
    each connection opened with the job's ``secret`` (see the module doc); tasks connect to ``advertise``
    (default: the bound address)."""

    def __init__(self, master: JobMaster, bind: str = "127.0.0.1", *, secret: str,
                 advertise: str | None = None) -> None:
        if not secret:
            raise ValueError("the job master's control port needs a secret")
        self._server = _Server((bind, 0), _Handler)
        self._server.master = master  # type: ignore[attr-defined]
        self._server.secret = secret  # type: ignore[attr-defined]
        self._server.refused = 0  # type: ignore[attr-defined]
        port = self._server.server_address[1]
        self.bound = self._server.server_address[:2]
        """``(host, port)`` the server listens on."""
        self.address = (advertise or self.bound[0], port)
        """``(host, port)`` tasks connect to."""
        self._thread = threading.Thread(target=self._server.serve_forever, name="job-master", daemon=True)
        self._thread.start()

    @property
    def refused(self) -> int:
        """Connections refused so far (no or a wrong secret, or not the protocol)."""
        return self._server.refused  # type: ignore[attr-defined]

    def close(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()


class TcpClient:
    """A task's link to the master's TCP server, opened with the job's ``secret``; raises ``ConnectionError``
    naming the address when the master refuses it."""

    def __init__(self, address: tuple[str, int], secret: str, timeout: float = 30.0) -> None:
        self._sock = socket.create_connection(tuple(address), timeout=timeout)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._file = self._sock.makefile("rwb")
        try:
            reply = self.call({"secret": secret})
        except (ConnectionError, OSError, ValueError) as e:
            self.close()
            raise ConnectionError(f"the job master at {address[0]}:{address[1]} did not answer the secret: {e}") \
                from None
        if not reply.get("ok"):
            self.close()
            raise ConnectionError(f"the job master at {address[0]}:{address[1]} refused this task: "
                                  f"{reply.get('refused')}")

    def call(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Send a heartbeat; returns the master's reply."""
        self._file.write(json.dumps(msg).encode() + b"\n")
        self._file.flush()
        line = self._file.readline()
        if not line:
            raise ConnectionError("the job master closed the connection")
        return json.loads(line)

    def close(self) -> None:
        """Close the connection."""
        try:
            self._file.close()
            self._sock.close()
        except OSError:
            pass
