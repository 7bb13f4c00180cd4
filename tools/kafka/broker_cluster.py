"""A local Apache Kafka cluster on loopback ports: layout on disk, storage format, node processes, readiness.

Standard library only (``tools/kafka-broker`` runs under a bare ``python3``). A cluster of N nodes (1 or 3)
runs N combined broker+controller JVMs in KRaft mode with a static quorum. With base port P, node n
(1-based) serves clients on P+n-1 and the quorum on P+N+n-1. Everything of a cluster lives in its data
folder (default ``$TMPDIR/eventlog-kafka-P``): ``cluster.json`` (what was started), and per node
``node-n/`` with ``server.properties``, ``data/`` (the log and metadata dirs), ``logs/server.log``,
``stdout.log`` and ``pid``.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from typing import Callable

import broker_wire

PROBE_TOPIC = "__eventlog_probe"
"""Topic ``start`` creates (replicated to every node) to prove the cluster can create topics."""

_HERE = os.path.dirname(os.path.abspath(__file__))
_LAYOUT_FILE = "cluster.json"


class ClusterError(Exception):
    """A start, stop or probe could not be done; the message is one line for the user."""


def default_data_dir(port: int) -> str:
    """Default data folder of the cluster whose first client port is ``port``."""
    return os.path.join(tempfile.gettempdir(), f"eventlog-kafka-{port}")


@dataclass
class Layout:
    """Where a cluster's nodes listen and keep their files."""

    port: int
    nodes: int
    data: str
    version: str
    cluster_id: str
    heap: str = "512m"

    def broker_port(self, node: int) -> int:
        """Client (PLAINTEXT) port of ``node``."""
        return self.port + node - 1

    def controller_port(self, node: int) -> int:
        """KRaft quorum port of ``node``."""
        return self.port + self.nodes + node - 1

    def node_dir(self, node: int) -> str:
        """Folder of ``node``'s config, data, logs and pid."""
        return os.path.join(self.data, f"node-{node}")

    def props(self, node: int) -> str:
        """Path of ``node``'s server.properties."""
        return os.path.join(self.node_dir(node), "server.properties")

    @property
    def bootstrap(self) -> str:
        """``bootstrap.servers`` of the cluster."""
        return ",".join(f"127.0.0.1:{self.broker_port(n)}" for n in self.all_nodes)

    @property
    def all_nodes(self) -> range:
        """Node ids, 1..N."""
        return range(1, self.nodes + 1)

    def save(self) -> None:
        """Write ``cluster.json``."""
        os.makedirs(self.data, exist_ok=True)
        tmp = os.path.join(self.data, _LAYOUT_FILE + ".tmp")
        with open(tmp, "w") as f:
            json.dump(self.__dict__, f, indent=1)
        os.replace(tmp, os.path.join(self.data, _LAYOUT_FILE))


def load_layout(data: str) -> Layout | None:
    """The layout saved in ``data``, or None when no cluster was started there."""
    try:
        with open(os.path.join(data, _LAYOUT_FILE)) as f:
            raw = json.load(f)
        return Layout(**raw)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as e:
        raise ClusterError(f"{data}/{_LAYOUT_FILE} is unreadable ({e}); stop the cluster or remove that folder") from e


def new_cluster_id() -> str:
    """A random KRaft cluster id (a UUID in URL-safe base64, 22 characters) that does not start with ``-``:
    Kafka's storage tool would take such an id for an option (as Kafka's own Uuid.randomUuid avoids)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


@contextlib.contextmanager
def locked(data: str):
    """Hold an exclusive lock on the cluster folder (two starts at once must not race)."""
    os.makedirs(data, exist_ok=True)
    with open(os.path.join(data, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


# ---- processes -------------------------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is dead for us
    except OSError:
        return True


def node_pid(layout: Layout, node: int) -> int | None:
    """Pid of ``node``'s broker when it runs (checked against its command line), else None."""
    try:
        with open(os.path.join(layout.node_dir(node), "pid")) as f:
            pid = int(f.read().strip())
    except (OSError, ValueError):
        return None
    if not _alive(pid):
        return None
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
    except OSError:
        return pid  # no /proc here: trust the pid
    if cmdline and layout.props(node).encode() not in cmdline:
        return None  # the pid was reused by another process (an empty cmdline: mid-exec, or exiting)
    return pid


def _wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while True:
        pids = [p for p in pids if _alive(p)]
        if not pids or time.monotonic() >= deadline:
            return pids
        time.sleep(0.1)


def _log_tail(layout: Layout, node: int, lines: int = 3) -> str:
    """What a dead node last said: the JVM's own output (stdout.log), then the ERROR lines of its server.log."""
    out = []
    for name, only_errors in (("stdout.log", False), (os.path.join("logs", "server.log"), True)):
        try:
            with open(os.path.join(layout.node_dir(node), name), errors="replace") as f:
                tail = [ln.strip() for ln in f.readlines()[-500:] if ln.strip()]
        except OSError:
            continue
        if only_errors:
            tail = [ln for ln in tail if " ERROR " in ln or " FATAL " in ln or "Unable to register" in ln]
        out.extend(tail[-lines:])
    return (" | ".join(out) or "no output")[-800:]


def _log_opts(layout: Layout, node: int) -> list[str]:
    return [
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={os.path.join(_HERE, 'log4j2.properties')}",
        f"-Dkafka.logs.dir={os.path.join(layout.node_dir(node), 'logs')}",
    ]


def _session_ms(layout: Layout) -> int:
    """The broker session: a single broker has no other to lead its partitions, so fencing it when a starved
    machine delays its heartbeats only stops every client (and their retries starve it more); three nodes
    detect a lost one."""
    return 60000 if layout.nodes == 1 else 6000


def write_config(layout: Layout, node: int) -> None:
    """Write ``node``'s server.properties from the template beside this file."""
    with open(os.path.join(_HERE, "server.properties.in")) as f:
        text = f.read()
    voters = ",".join(f"{n}@127.0.0.1:{layout.controller_port(n)}" for n in layout.all_nodes)
    values = {
        "NODE_ID": str(node), "NODES": str(layout.nodes), "VOTERS": voters,
        "PORT": str(layout.broker_port(node)), "CONTROLLER_PORT": str(layout.controller_port(node)),
        "DATA_DIR": os.path.join(layout.node_dir(node), "data"),
        "MIN_ISR": str(1 if layout.nodes < 3 else 2),
        "SESSION_MS": str(_session_ms(layout)),
        "REGISTRATION_MS": str(_session_ms(layout) + 60000),
    }
    for key, value in values.items():
        text = text.replace(f"@{key}@", value)
    os.makedirs(os.path.join(layout.node_dir(node), "logs"), exist_ok=True)
    with open(layout.props(node), "w") as f:
        f.write(text)


def is_formatted(layout: Layout, node: int) -> bool:
    """True when ``node``'s storage was formatted (it holds meta.properties)."""
    return os.path.exists(os.path.join(layout.node_dir(node), "data", "meta.properties"))


def format_storage(layout: Layout, nodes: list[int], java: str, libs: str) -> None:
    """Format KRaft storage of ``nodes`` (kafka.tools.StorageTool format), all at once."""
    procs = {}
    for node in nodes:
        cmd = [java, "-Xmx256m", "-XX:TieredStopAtLevel=1", *_log_opts(layout, node),
               "-cp", os.path.join(libs, "*"), "kafka.tools.StorageTool", "format",
               "-t", layout.cluster_id, "-c", layout.props(node)]
        out = open(os.path.join(layout.node_dir(node), "format.log"), "wb")
        procs[node] = (subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL), out)
    for node, (proc, out) in procs.items():
        try:
            rc = proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
        out.close()
        if rc != 0 or not is_formatted(layout, node):
            with open(os.path.join(layout.node_dir(node), "format.log"), errors="replace") as f:
                last = [ln.strip() for ln in f if ln.strip()][-1:] or [f"exit {rc}"]
            raise ClusterError(f"formatting the storage of node {node} failed: {last[0][:300]}")


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


_TCP_STATES = {"01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1", "05": "FIN_WAIT2",
               "06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT", "09": "LAST_ACK", "0A": "LISTEN",
               "0B": "CLOSING"}


def port_holders(port: int) -> list[tuple[str, str]]:
    """The sockets bound to local ``port`` (Linux ``/proc/net/tcp{,6}``), as (state, owner) pairs: the owner is
    "pid N (command)" when this user can see the process, else "?"; empty where /proc cannot tell."""
    inodes: dict[str, str] = {}
    found: list[tuple[str, str]] = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) > 9 and int(cols[1].rsplit(":", 1)[1], 16) == port:
                found.append((_TCP_STATES.get(cols[3], cols[3]), cols[9]))
                inodes[cols[9]] = "?"
    wanted = {f"socket:[{i}]" for i in inodes if i != "0"}
    if wanted:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            with contextlib.suppress(OSError):
                fd_dir = f"/proc/{pid}/fd"
                for fd in os.listdir(fd_dir):
                    target = os.readlink(f"{fd_dir}/{fd}")
                    if target in wanted:
                        with open(f"/proc/{pid}/comm") as f:
                            inodes[target[8:-1]] = f"pid {pid} ({f.read().strip()})"
    return [(state, inodes.get(inode, "?") if inode != "0" else "no process") for state, inode in found]


_LINGERING = {"TIME_WAIT", "FIN_WAIT1", "FIN_WAIT2", "CLOSING", "LAST_ACK"}  # states a closed socket passes through
PORT_SETTLE_S = 120.0  # a killed node's sockets linger (TIME_WAIT is 60 s on Linux); no listener waits this long


def check_ports(layout: Layout, node: int, settle: float = PORT_SETTLE_S,
                say: Callable[[str], None] | None = None) -> None:
    """Raise when a port ``node`` needs is taken by another process. A port held only by sockets that were closed
    and linger (what a killed node's connections leave) is waited for, up to ``settle`` s, saying so once; a
    port a live socket holds fails at once. The error names the sockets that hold it and their processes."""
    deadline = time.monotonic() + settle
    for port in (layout.broker_port(node), layout.controller_port(node)):
        told = False
        while not _port_free(port):
            holders = port_holders(port)
            live = not holders or any(state not in _LINGERING and owner != "no process" for state, owner in holders)
            if live or time.monotonic() >= deadline:
                held = ", ".join(sorted({f"{state} by {owner}" for state, owner in holders})) or "no socket /proc lists"
                raise ClusterError(f"port {port} of node {node} is taken by another process ({held}); "
                                   f"choose another --port")
            if not told and say is not None:
                say(f"port {port} of node {node} is still held ({', '.join(sorted({s for s, _ in holders}))}); "
                    f"waiting up to {settle:.0f} s for it to be released")
                told = True
            time.sleep(0.5)


def launch_node(layout: Layout, node: int, java: str, libs: str) -> int:
    """Start ``node``'s broker in its own session (it outlives this process) and record its pid."""
    check_ports(layout, node, settle=0)
    out = open(os.path.join(layout.node_dir(node), "stdout.log"), "ab")
    heap = [f"-Xmx{layout.heap}", "-Xms128m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:+ExitOnOutOfMemoryError"]
    cmd = [java, *heap, *_log_opts(layout, node), "-cp", os.path.join(libs, "*"), "kafka.Kafka", layout.props(node)]
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True, cwd=layout.node_dir(node))
    out.close()
    with open(os.path.join(layout.node_dir(node), "pid"), "w") as f:
        f.write(str(proc.pid))
    return proc.pid


def signal_nodes(layout: Layout, nodes: list[int], timeout: float, term: bool = True) -> list[int]:
    """Stop ``nodes``: SIGTERM (or SIGKILL at once when ``term`` is False), SIGKILL whatever still runs after
    ``timeout`` s; return the pids that were stopped."""
    pids = {n: p for n in nodes if (p := node_pid(layout, n))}
    for pid in pids.values():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM if term else signal.SIGKILL)
    left = _wait_gone(list(pids.values()), timeout if term else 10)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    left = _wait_gone(left, 10)
    if left:
        raise ClusterError(f"processes {left} did not die after SIGKILL")
    for n in pids:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(layout.node_dir(n), "pid"))
    return list(pids.values())


def remove_data(layout: Layout) -> None:
    """Delete what this tool wrote in the cluster folder; the folder itself only when nothing else is left."""
    for node in layout.all_nodes:
        shutil.rmtree(layout.node_dir(node), ignore_errors=True)
    for name in (_LAYOUT_FILE, ".lock"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(layout.data, name))
    with contextlib.suppress(OSError):
        os.rmdir(layout.data)


# ---- readiness -------------------------------------------------------------------------------------------


def probe(layout: Layout, nodes: list[int], create_topic: bool) -> str | None:
    """None when every node of ``nodes`` answers, the cluster's metadata lists them all and (with
    ``create_topic``) the probe topic exists with a leader for every partition; else what is missing."""
    for node in nodes:
        try:
            with broker_wire.Connection("127.0.0.1", layout.broker_port(node), timeout=3) as c:
                c.api_versions()
                meta = c.metadata([])
        except broker_wire.WireError as e:
            return f"node {node}: {e}"
        missing = [n for n in nodes if n not in meta.brokers]
        if missing:
            return f"node {node} does not list nodes {missing} yet"
    if not create_topic:
        return None
    try:
        with broker_wire.Connection("127.0.0.1", layout.broker_port(nodes[0]), timeout=15) as c:
            error, message = c.create_topic(PROBE_TOPIC, layout.nodes, layout.nodes)
            if error not in (broker_wire.ERROR_NONE, broker_wire.ERROR_TOPIC_ALREADY_EXISTS):
                return f"creating {PROBE_TOPIC}: error {error} {message or ''}".strip()
            topic = c.metadata([PROBE_TOPIC]).topics.get(PROBE_TOPIC)
    except broker_wire.WireError as e:
        return f"creating {PROBE_TOPIC}: {e}"
    if topic is None or topic.error_code != 0 or len(topic.partitions) != layout.nodes:
        return f"{PROBE_TOPIC} is not in the metadata yet"
    if any(p.leader < 0 for p in topic.partitions):
        return f"{PROBE_TOPIC} has partitions without a leader"
    return None


def _registering(layout: Layout, node: int) -> bool:
    """True when ``node``'s log ends with the controller refusing its registration (its old session lives on)."""
    try:
        with open(os.path.join(layout.node_dir(node), "logs", "server.log"), "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4096))
            return b"DUPLICATE_BROKER_REGISTRATION" in f.read()
    except OSError:
        return False


def wait_ready(layout: Layout, nodes: list[int], timeout: float, create_topic: bool,
               say: Callable[[str], None] = lambda _: None) -> None:
    """Wait until :func:`probe` passes; raise with the last reason (and the node's log) when a node dies
    or ``timeout`` s pass. ``say`` hears, every 20 s, why the wait goes on."""
    start = time.monotonic()
    deadline, next_say = start + timeout, start + 10
    reason = "not probed"
    while time.monotonic() < deadline:
        if time.monotonic() >= next_say:
            next_say += 20
            late = [n for n in nodes if _registering(layout, n)]
            say(f"still starting after {time.monotonic() - start:.0f} s: " + (
                f"node(s) {late} wait for the session of their killed predecessor to end (up to "
                f"{_session_ms(layout) // 1000} s) before they can register" if late else reason))
        for node in nodes:
            if node_pid(layout, node) is None:
                raise ClusterError(f"node {node} exited during startup: {_log_tail(layout, node)} "
                                   f"(logs in {layout.node_dir(node)})")
        reason = probe(layout, nodes, create_topic)
        if reason is None:
            return
        time.sleep(0.3)
    raise ClusterError(f"the cluster was not ready within {timeout:.0f} s: {reason} (logs in {layout.data}/node-*/)")
