#!/usr/bin/env python3
"""Every headline ratio of the benchmarks, in a few minutes: ``make bench-quick``.

Runs each benchmark below with ``--quick`` (smaller inputs, the same interleaved rounds), collects the
``HEADLINE`` lines they print (``_common.headline``) and prints them as one table, with the load average. The
Kafka benchmarks get a broker: ``--kafka host:port``, else one this script starts on port 19592 and stops; the
Kafka log benchmark runs again on a three-broker cluster (replication factor 3): ``--kafka3 host:port,…``, else
one this script starts on ports 19892-19894 and stops.
Full-size figures (the ones in ``BENCHMARKS.md``) come from running each benchmark without ``--quick``.

    python tools/bench/quick.py [--kafka 127.0.0.1:9092] [--kafka3 HOST:PORT,…] [--only runtime,kafka,kafka3]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

from _common import Load, format_table  # noqa: E402

BENCHES: list[tuple[str, str, int, list[str]]] = [
    # (name for --only, script, brokers it needs (0: none), extra arguments)
    ("file_log", "bench_file_log.py", 0, []),
    ("replay", "bench_replay.py", 0, []),
    ("cli_startup", "bench_cli_startup.py", 0, []),
    ("kafka", "bench_kafka.py", 1, []),
    ("kafka3", "bench_kafka.py", 3, ["--no-per-record", "--latency-epochs", "0"]),
    ("runtime", "bench_runtime.py", 1, []),
    ("jvm_tap", "bench_jvm_tap.py", 0, []),
    ("jvm_read", "bench_jvm_read.py", 0, []),
    ("jvm_batches", "bench_jvm_batches.py", 0, []),
]
"""The benchmarks with headline figures, in the order they run."""

_HEADLINE = re.compile(r"^HEADLINE (?P<name>.+?): (?P<rest>.*)$")
BENCH_KAFKA_PORT = 19592
BENCH_KAFKA3_PORT = 19892
"""Where this script starts its one-broker and its three-broker cluster (unless given ``--kafka``/``--kafka3``)."""


def _kafka_args(script: str, bootstrap: str) -> list[str]:
    return ["--kafka", bootstrap] if script == "bench_runtime.py" else ["--bootstrap", bootstrap]


def _broker(action: str, port: int, brokers: int) -> None:
    """Start (``check``ed) or stop a local cluster of ``brokers`` on ``port``… with ``tools/kafka-broker``."""
    cmd = [sys.executable, os.path.join(ROOT, "tools", "kafka-broker"), action, "--port", str(port)]
    subprocess.run(cmd + (["--brokers", str(brokers)] if action == "start" else []), check=action == "start")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kafka", help="host:port of a Kafka broker (default: start one on port 19592)")
    p.add_argument("--kafka3", help="bootstrap servers of a three-broker Kafka cluster (default: start one on "
                                    "ports 19892-19894)")
    p.add_argument("--only", help="comma-separated benchmark names: " + ", ".join(b[0] for b in BENCHES))
    args = p.parse_args(argv)
    only = set(args.only.split(",")) if args.only else None
    chosen = [b for b in BENCHES if only is None or b[0] in only]
    load, rows, failed = Load(), [], []
    bootstraps = {1: args.kafka, 3: args.kafka3}
    ports = {1: BENCH_KAFKA_PORT, 3: BENCH_KAFKA3_PORT}
    started: list[int] = []
    t0 = time.monotonic()
    try:
        for name, script, brokers, extra in chosen:
            cmd = [sys.executable, os.path.join(HERE, script), "--quick", *extra]
            if brokers:
                if bootstraps[brokers] is None:
                    _broker("start", ports[brokers], brokers)
                    started.append(brokers)
                    bootstraps[brokers] = ",".join(f"127.0.0.1:{ports[brokers] + i}" for i in range(brokers))
                cmd += _kafka_args(script, bootstraps[brokers])
            print(f"== {name}: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
            sys.stderr.write(proc.stdout)
            found = [m for m in map(_HEADLINE.match, proc.stdout.splitlines()) if m]
            if proc.returncode != 0 or not found:
                failed.append(f"{name} (exit {proc.returncode}, {len(found)} headlines)")
            rows += [(name, m["name"], m["rest"]) for m in found]
    finally:
        for brokers in started:
            _broker("stop", ports[brokers], brokers)
    print(format_table(["bench", "headline", "median ratio (best, spread, rounds) / target; load"], rows))
    print(f"{len(rows)} headlines in {time.monotonic() - t0:.0f} s; {load}")
    if failed:
        print("FAILED: " + "; ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
