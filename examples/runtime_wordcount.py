"""A word count on the streaming runtime: windows of word counts, exactly once, with a crash on the way.

    .venv/bin/python examples/runtime_wordcount.py                    # in-process (threads)
    .venv/bin/python examples/runtime_wordcount.py --spark            # on Spark, local[8], barrier mode
    .venv/bin/python examples/runtime_wordcount.py --spark --master spark://127.0.0.1:17077   # on a cluster
    .venv/bin/python examples/runtime_wordcount.py --channels kafka://127.0.0.1:19092/demo

A generator source (4 parts of generated lines, time = second of the line) feeds
``flat_map`` (split into words) -> ``key_by(word).window(10).count()`` -> a log sink. The first run is made
to fail twice (an operator raises; with ``--spark``, a task's Python worker is SIGKILLed), so the job
restarts from its last complete checkpoint; the captured output is then read back with ``Replayer`` and
compared with a direct count: every window once, with the right count.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = str(Path(__file__).resolve().parent.parent)
for _path in (ROOT, str(Path(__file__).resolve().parent)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import pyarrow as pa  # noqa: E402
from spark_session import add_spark_options, start_spark  # noqa: E402

from eventlog import open_log  # noqa: E402
from replay import Replayer  # noqa: E402
from runtime import Fault, FaultPlan, Job  # noqa: E402

WORDS = "spark kafka arrow avro timely frontier replay capture stream epoch barrier bundle".split()
SCHEMA = pa.schema([("word", pa.string()), ("count", pa.int64()), ("window_start", pa.int64()),
                    ("window_end", pa.int64())])
LINES = 400


def line(part: int, i: int) -> str:
    return " ".join(WORDS[(i * 7 + part * 5 + j * j) % len(WORDS)] for j in range(1 + (i + part) % 6))


def lines(part: int, offset: int):
    """Part ``part`` of the input from line ``offset`` on: ``(time, [{"line": …}])``, time = i // 4."""
    for i in range(offset, LINES):
        yield i // 4, [{"line": line(part, i)}]


def build(out: str, parallelism: int) -> Job:
    job = Job("wordcount")
    text = job.from_generator(lines, parts=4, parallelism=parallelism, name="lines")
    words = text.flat_map(lambda r: [{"word": w} for w in r["line"].split()], name="words")
    counts = words.key_by("word").window(10).count(parallelism=parallelism, name="counts")
    counts.to_log(out, "counts", schema=SCHEMA, parallelism=1, name="out")
    return job


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spark", action="store_true", help="run on Spark (barrier mode), on --master")
    ap.add_argument("--channels", help="channel store URI (default: a temporary directory)")
    ap.add_argument("--work", help="working directory (default: a temporary one, removed at the end); on a "
                                   "cluster, a folder every executor shares with the driver")
    add_spark_options(ap, "local[8]")
    args = ap.parse_args()
    work = os.path.abspath(args.work or tempfile.mkdtemp(prefix="runtime-wordcount-"))
    out = os.path.join(work, "out")
    spark = None
    if args.spark:
        spark = start_spark("runtime-wordcount", args.master, {
            "spark.ui.showConsoleProgress": "false",
            "spark.python.daemon.module": "runtime.executors.spark_daemon",
        }, args.conf)
        spark.sparkContext.setLogLevel("FATAL")
    kind = "kill" if args.spark else "raise"
    faults = FaultPlan([Fault(0, "counts", 0, "record", 30, kind), Fault(1, "words", 1, "barrier", 1)])
    try:
        result = build(out, 2).run(spark, channels=args.channels or os.path.join(work, "channels"),
                                   checkpoints=os.path.join(work, "checkpoints"), checkpoint_interval=0.2,
                                   faults=faults, timeout=600)
        print(f"job {result.status} in {result.seconds:.1f} s: {result.generations} generations "
              f"({result.restarts} restarts), {result.checkpoints} checkpoints")
        for f in result.failures:
            print(f"  restarted after: {f[:110]}")
        got = collections.Counter()
        with Replayer(open_log(out), "counts") as r:
            for _t, table in r.completed():
                for row in table.to_pylist():
                    key = (row["window_start"], row["word"])
                    assert key not in got, f"window {key} delivered twice"
                    got[key] = row["count"]
        want = collections.Counter()
        for part in range(4):
            for t, rows in lines(part, 0):
                for w in rows[0]["line"].split():
                    want[(t - t % 10, w)] += 1
        print(f"{len(got)} (window, word) counts captured; equal to a direct count: {got == want}")
        top = sorted(((c, w, ws) for (ws, w), c in got.items()), reverse=True)[:3]
        print("top:", ", ".join(f"{w} x{c} in [{ws}, {ws + 10})" for c, w, ws in top))
        if got != want:
            sys.exit(1)
    finally:
        if spark is not None:
            spark.stop()
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
