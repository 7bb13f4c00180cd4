"""Run a local Apache Kafka cluster (KRaft mode) for eventlog's tests, examples and benchmarks.

    tools/kafka-broker start  [--port 19092] [--brokers 1|3] [--data DIR]   # start (or resume) the cluster
    tools/kafka-broker start  --fresh [--port 19092]  # a new cluster unless one runs (what `make test` does)
    tools/kafka-broker status [--port 19092]          # exit 0 when every node answers, 3 when one does not
    tools/kafka-broker stop   [--port 19092] [--keep-data]   # SIGTERM, SIGKILL after --timeout s
    tools/kafka-broker kill   --node N [--port 19092]  # SIGKILL one node (failure tests)
    tools/kafka-broker start  --node N [--port 19092]  # restart that one node on its storage

The first start fetches Apache Kafka (org.apache.kafka:kafka_2.13, version --version or
$EVENTLOG_KAFKA_VERSION) with its runtime dependencies through Maven into ${XDG_CACHE_HOME:-~/.cache}/eventlog
(or $EVENTLOG_KAFKA_CACHE); later starts use that cache and never touch the network. Needs Java 17+ and,
for that first fetch, Maven. The cluster is N combined broker+controller nodes on 127.0.0.1: node n serves
clients on PORT+n-1; replication factor N for every topic, min.insync.replicas 2 with 3 nodes, topics are
not auto-created. Storage is durable: data, logs and pids live in --data (default $TMPDIR/eventlog-kafka-PORT);
`stop` deletes that data unless --keep-data, and a later `start` resumes a kept cluster (after a kill, its
node waits out the old broker session before it registers: up to a minute on one node). `start` returns
once every node answers, the metadata lists them all and a replicated topic can be created; it prints the
bootstrap servers. Standard library only (Python 3.8+); ``tools/kafka-broker`` is the launcher that runs this.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import broker_cluster as bc
import broker_fetch


def _say(msg: str) -> None:
    print(f"kafka-broker: {msg}", flush=True)


def _layout(args: argparse.Namespace) -> bc.Layout:
    data = os.path.abspath(args.data) if args.data else bc.default_data_dir(args.port)
    layout = bc.load_layout(data)
    if layout is None:
        raise bc.ClusterError(f"no cluster was started in {data} (start one with: tools/kafka-broker start --port {args.port})")
    return layout


def cmd_start(args: argparse.Namespace) -> int:
    data = os.path.abspath(args.data) if args.data else bc.default_data_dir(args.port)
    version = args.version or os.environ.get("EVENTLOG_KAFKA_VERSION") or broker_fetch.DEFAULT_VERSION
    with bc.locked(data):
        layout = bc.load_layout(data)
        if layout is not None and args.fresh and not args.node \
                and all(bc.node_pid(layout, n) is None for n in layout.all_nodes):
            _say(f"--fresh: discarding the stopped cluster's data in {data}")
            bc.remove_data(layout)
            layout = None
        if layout is None:
            if args.node:
                raise bc.ClusterError(f"no cluster in {data} to restart node {args.node} of; start the cluster first")
            layout = bc.Layout(port=args.port, nodes=args.brokers or 1, data=data, version=version,
                               cluster_id=bc.new_cluster_id(), heap=args.heap)
        else:
            if args.brokers and args.brokers != layout.nodes:
                raise bc.ClusterError(f"{data} holds a {layout.nodes}-node cluster, not {args.brokers}: stop it "
                                      f"(tools/kafka-broker stop --port {layout.port}) or choose another --port/--data")
            if args.version and args.version != layout.version:
                raise bc.ClusterError(f"{data} holds a Kafka {layout.version} cluster, not {args.version}")
            if layout.port != args.port and not args.data:
                raise bc.ClusterError(f"{data} was started with --port {layout.port}")
        if args.node and args.node not in layout.all_nodes:
            raise bc.ClusterError(f"node {args.node} is not in this {layout.nodes}-node cluster (nodes 1..{layout.nodes})")
        nodes = [args.node] if args.node else list(layout.all_nodes)
        to_start = [n for n in nodes if bc.node_pid(layout, n) is None]
        started = time.monotonic()
        if to_start:
            for n in to_start:
                bc.check_ports(layout, n, say=_say)
            libs = broker_fetch.ensure_kafka(layout.version)
            java = broker_fetch.java_binary()
            layout.save()
            for n in to_start:
                bc.write_config(layout, n)
            unformatted = [n for n in to_start if not bc.is_formatted(layout, n)]
            if unformatted:
                bc.format_storage(layout, unformatted, java, libs)
            for n in to_start:
                bc.launch_node(layout, n, java, libs)
            _say(f"starting Kafka {layout.version} node(s) {to_start} of {layout.nodes}; data and logs in {data}")
        # every running node must answer; the whole cluster must also create a replicated topic
        running = [n for n in layout.all_nodes if n in to_start or bc.node_pid(layout, n) is not None]
        try:
            bc.wait_ready(layout, running, args.wait, create_topic=len(running) == layout.nodes, say=_say)
        except bc.ClusterError:
            if to_start and not args.node:
                bc.signal_nodes(layout, to_start, timeout=10, term=False)
            raise
    pids = {n: bc.node_pid(layout, n) for n in nodes}
    what = f"node {args.node}" if args.node else f"{layout.nodes} broker(s)"
    verb = "running" if to_start else "already running"
    _say(f"{what} {verb} in {time.monotonic() - started:.1f} s (pids {pids}); bootstrap servers: {layout.bootstrap}")
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    data = os.path.abspath(args.data) if args.data else bc.default_data_dir(args.port)
    layout = bc.load_layout(data)
    if layout is None:
        _say(f"no kafka cluster in {data}")
        return 0
    with bc.locked(data):
        pids = bc.signal_nodes(layout, list(layout.all_nodes), timeout=args.timeout)
        if not args.keep_data:
            bc.remove_data(layout)
    kept = f"; data kept in {data}" if args.keep_data else ""
    _say(f"stopped kafka cluster on port {layout.port} (pids {pids}){kept}")
    return 0


def cmd_kill(args: argparse.Namespace) -> int:
    layout = _layout(args)
    if not args.node or args.node not in layout.all_nodes:
        raise bc.ClusterError(f"kill needs --node N with N in 1..{layout.nodes}")
    pids = bc.signal_nodes(layout, [args.node], timeout=0, term=False)
    _say(f"killed node {args.node} (pid {pids[0]})" if pids else f"node {args.node} was not running")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    data = os.path.abspath(args.data) if args.data else bc.default_data_dir(args.port)
    layout = bc.load_layout(data)
    if layout is None:
        print(f"not running on port {args.port} (no cluster in {data})")
        return 3
    ok = True
    for n in layout.all_nodes:
        pid = bc.node_pid(layout, n)
        reason = "not running" if pid is None else bc.probe(layout, [n], create_topic=False)
        ok = ok and reason is None
        print(f"node {n}: 127.0.0.1:{layout.broker_port(n)} pid {pid or '-'}: {reason or 'answers'}")
    print(f"bootstrap servers: {layout.bootstrap}")
    return 0 if ok else 3


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="kafka-broker", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=["start", "stop", "status", "kill"])
    p.add_argument("--port", type=int, default=int(os.environ.get("EVENTLOG_KAFKA_PORT", "19092")),
                   help="client port of node 1 (node n: PORT+n-1; quorum ports follow)")
    p.add_argument("--brokers", type=int, choices=[1, 3], help="nodes of a new cluster (default 1)")
    p.add_argument("--data", help="cluster folder (default $TMPDIR/eventlog-kafka-PORT)")
    p.add_argument("--node", type=int, help="start or kill only this node (1-based)")
    p.add_argument("--fresh", action="store_true",
                   help="start: a stopped cluster's data is discarded and a new cluster starts (a running one is used)")
    p.add_argument("--keep-data", action="store_true", help="stop: keep the storage for a later start")
    p.add_argument("--version", help=f"Kafka version of a new cluster (default {broker_fetch.DEFAULT_VERSION})")
    p.add_argument("--heap", default=os.environ.get("EVENTLOG_KAFKA_HEAP", "512m"), help="-Xmx of each node")
    p.add_argument("--wait", type=float, default=180.0, help="start: seconds to wait for readiness")
    p.add_argument("--timeout", type=float, default=30.0, help="stop: seconds before SIGKILL")
    args = p.parse_args(argv)
    try:
        return {"start": cmd_start, "stop": cmd_stop, "status": cmd_status, "kill": cmd_kill}[args.command](args)
    except (bc.ClusterError, broker_fetch.FetchError) as e:
        print(f"kafka-broker: error: {e}", file=sys.stderr)
        return 1
