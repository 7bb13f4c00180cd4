#!/usr/bin/env python3
"""Every headline ratio of the benchmarks, in a few minutes: ``make bench-quick``.

Runs each benchmark below with ``--quick`` (smaller inputs, the same interleaved rounds), collects the
``HEADLINE`` lines they print (``_common.headline``) and prints them as one table, with the load average. The
Kafka benchmarks get a broker: ``--kafka host:port``, else one this script starts on port 19592 and stops.
Full-size figures (the ones in ``BENCHMARKS.md``) come from running each benchmark without ``--quick``.

    python tools/bench/quick.py [--kafka 127.0.0.1:9092] [--only runtime,kafka]
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

BENCHES: list[tuple[str, str, bool]] = [
    # (name for --only, script, needs Kafka)
    ("file_log", "bench_file_log.py", False),
    ("replay", "bench_replay.py", False),
    ("cli_startup", "bench_cli_startup.py", False),
    ("kafka", "bench_kafka.py", True),
    ("runtime", "bench_runtime.py", True),
    ("jvm_tap", "bench_jvm_tap.py", False),
    ("jvm_read", "bench_jvm_read.py", False),
    ("jvm_batches", "bench_jvm_batches.py", False),
]
"""The benchmarks with headline figures, in the order they run."""

_HEADLINE = re.compile(r"^HEADLINE (?P<name>.+?): (?P<rest>.*)$")
BENCH_KAFKA_PORT = 19592


def _kafka_args(script: str, bootstrap: str) -> list[str]:
    return ["--kafka", bootstrap] if script == "bench_runtime.py" else ["--bootstrap", bootstrap]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kafka", help="host:port of a Kafka broker (default: start one on port 19592)")
    p.add_argument("--only", help="comma-separated benchmark names: " + ", ".join(b[0] for b in BENCHES))
    args = p.parse_args(argv)
    only = set(args.only.split(",")) if args.only else None
    chosen = [b for b in BENCHES if only is None or b[0] in only]
    load, started, rows, failed = Load(), False, [], []
    bootstrap = args.kafka
    t0 = time.monotonic()
    try:
        if bootstrap is None and any(k for _, _, k in chosen):
            subprocess.run([sys.executable, os.path.join(ROOT, "tools", "kafka-broker"), "start", "--port",
                            str(BENCH_KAFKA_PORT)], check=True)
            started, bootstrap = True, f"127.0.0.1:{BENCH_KAFKA_PORT}"
        for name, script, kafka in chosen:
            cmd = [sys.executable, os.path.join(HERE, script), "--quick"]
            cmd += _kafka_args(script, bootstrap) if kafka else []
            print(f"== {name}: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
            sys.stderr.write(proc.stdout)
            found = [m for m in map(_HEADLINE.match, proc.stdout.splitlines()) if m]
            if proc.returncode != 0 or not found:
                failed.append(f"{name} (exit {proc.returncode}, {len(found)} headlines)")
            rows += [(name, m["name"], m["rest"]) for m in found]
    finally:
        if started:
            subprocess.run([sys.executable, os.path.join(ROOT, "tools", "kafka-broker"), "stop", "--port",
                            str(BENCH_KAFKA_PORT)], check=False)
    print(format_table(["bench", "headline", "median ratio (best, spread, rounds) / target; load"], rows))
    print(f"{len(rows)} headlines in {time.monotonic() - t0:.0f} s; {load}")
    if failed:
        print("FAILED: " + "; ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
