"""A two-stream join: the streaming runtime on Spark vs Spark Structured Streaming's stream-stream join.

    .venv/bin/python tools/bench/bench_join.py [--rounds 3] [--seconds 8] [--write]
    .venv/bin/python tools/bench/bench_join.py --quick          # short runs, every HEADLINE

Both systems join a left and a right stream of int64 keys; each key occurs once on each side, at the same
time, so every left row has exactly one partner and the output has as many rows as the left input.

* runtime: two ``Job.from_generator`` sources (2 parts each, parallelism 2: Arrow batches of ``--batch``
  consecutive keys, batch ``i`` at time ``i``) -> ``key_by("k").join(...).interval(-1, 1)`` (and, as a second
  case, ``.window(4)``) at parallelism 2 -> a callable sink at parallelism 2; 8 Spark barrier tasks
  (``local[8]``), file channels; a checkpoint every second, and none (only the final one).
* Structured Streaming: two ``rate-micro-batch`` sources (2 partitions, ``rowsPerBatch`` rows per micro-batch
  each, one second of event time per micro-batch) -> ``withWatermark`` -> inner join on the key and
  ``rts BETWEEN lts - 1 second AND lts + 1 second`` (its time-range join, state evicted by the watermarks)
  -> ``noop`` sink, 2 shuffle partitions, on the same session. Its micro-batch size matters (it pays a fixed
  cost per trigger), so a sweep over ``--ss-sizes`` first finds the size at which it is fastest on this
  machine, and the rounds use that one (the results say which).

Rates are input events (left + right rows) per second. Runtime: *steady*, between the first and the last sink
commit before the final one (a commit delivers every window/time completed before its checkpoint) — as in
``bench_runtime.py``; Structured Streaming: rows / trigger time after 2 warm-up micro-batches. Every round runs
each case and Structured Streaming back to back; each headline is the median of the per-round ratios
(``_common``). ``--write`` writes ``tools/bench/join_results.md``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
from _common import ROUNDS, Load, Samples, format_table, headline  # noqa: E402

from runtime import Job  # noqa: E402

SS = "Structured Streaming stream-stream join"
INTERVAL = "runtime interval join, checkpoint 1 s"
INTERVAL_NO_CK = "runtime interval join, no checkpoints"
WINDOW = "runtime window join, checkpoint 1 s"

HEADLINES = [
    ("runtime interval join / Structured Streaming join (its fastest micro-batch)", INTERVAL, SS, 2.0, False),
    ("runtime window join / Structured Streaming join (its fastest micro-batch)", WINDOW, SS, 2.0, False),
    ("runtime join checkpoint every 1 s / no checkpoints", INTERVAL, INTERVAL_NO_CK, 0.9, True),
]


def source(side: int, batch: int, marks: str, seconds: float):
    """Part p: batches of ``batch`` keys, batch i at time i (keys unique per part and batch, equal on both
    sides), for ``seconds`` from the part's first item; the count goes to ``marks/end-<side>-<part>``."""

    def gen(part: int, offset: int):
        started = time.time()
        with open(os.path.join(marks, f"start-{side}-{part}-{os.getpid()}"), "w") as f:
            f.write(repr(started))
        i = offset
        while time.time() - started <= seconds:
            lo = (i * 2 + part) * batch
            keys = np.arange(lo, lo + batch, dtype=np.int64)
            yield i, pa.record_batch({"k": keys, "v" if side == 0 else "w": keys})
            i += 1
        with open(os.path.join(marks, f"end-{side}-{part}"), "w") as f:
            f.write(str(i))

    return gen


def sink(marks: str):
    def fn(t: int, table: pa.Table) -> None:
        with open(os.path.join(marks, "commits"), "a") as f:
            f.write(f"{time.time()!r} {t} {table.num_rows}\n")

    return fn


def steady_rate(commits: list[list[str]], per_time: int) -> float | None:
    """Events per second between the first and the last commit before the final one (see the module doc)."""
    points = sorted((float(w), int(t)) for w, t, _n in commits)
    groups: list[list[tuple[float, int]]] = []
    for w, t in points:
        if groups and w - groups[-1][-1][0] < 0.2:
            groups[-1].append((w, t))
        else:
            groups.append([(w, t)])
    groups = groups[:-1]
    if len(groups) < 2:
        return None
    first, last = groups[0], groups[-1]
    done = lambda g: (max(t for _w, t in g) + 1) * per_time  # noqa: E731
    return (done(last) - done(first)) / (last[0][0] - first[0][0])


def run_ours(spark, kind: str, *, batch: int, seconds: float, interval: float | None, timeout: float) -> dict:
    work = tempfile.mkdtemp(prefix="bench-join-")
    marks = os.path.join(work, "marks")
    os.makedirs(marks)
    job = Job(f"benchjoin{uuid.uuid4().hex[:6]}")
    left = job.from_generator(source(0, batch, marks, seconds), parts=2, parallelism=2, name="left")
    right = job.from_generator(source(1, batch, marks, seconds), parts=2, parallelism=2, name="right")
    pair = left.key_by("k").join(right.key_by("k"))
    joined = pair.interval(-1, 1, parallelism=2, name="join") if kind == "interval" else \
        pair.window(4, parallelism=2, name="join")
    joined.sink(sink(marks), parallelism=2, name="sink")
    t0 = time.time()
    result = job.run(spark, channels=os.path.join(work, "ch"), checkpoints=os.path.join(work, "ck"),
                     checkpoint_interval=interval, timeout=timeout)
    wall = time.time() - t0
    starts = [float(open(os.path.join(marks, f)).read()) for f in os.listdir(marks) if f.startswith("start-")]
    commits = [line.split() for line in open(os.path.join(marks, "commits"))]
    last = max(float(c[0]) for c in commits)
    total = sum(int(open(os.path.join(marks, f"end-{s}-{p}")).read()) for s in range(2) for p in range(2)) * batch
    out_rows = sum(int(c[2]) for c in commits)
    out = {"events": total, "seconds": last - min(starts), "wall": wall, "checkpoints": result.checkpoints,
           "restarts": result.restarts, "output_rows": out_rows}
    out["end_to_end"] = total / out["seconds"]
    out["steady"] = steady_rate(commits, 4 * batch)
    out["rate"] = out["steady"] or out["end_to_end"]
    shutil.rmtree(work, ignore_errors=True)
    return out


def run_ss(spark, rows: int, seconds: float, min_batches: int = 3) -> dict:
    """Structured Streaming's join for ``seconds`` (and on until ``min_batches`` timed micro-batches after 2
    warm-up ones, at most ``4 * seconds + 30`` s); ``rows`` per micro-batch on each side."""
    ck = tempfile.mkdtemp(prefix="bench-ss-join-")

    def side(prefix: str):
        return (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", rows).option("numPartitions", 2)
                .load().selectExpr(f"value as {prefix}k", f"timestamp as {prefix}ts")
                .withWatermark(f"{prefix}ts", "2 seconds"))

    from pyspark.sql.functions import expr

    joined = side("l").join(side("r"), expr("lk = rk AND rts BETWEEN lts - INTERVAL 1 SECOND AND "
                                            "lts + INTERVAL 1 SECOND"))
    q = joined.writeStream.format("noop").outputMode("append").option("checkpointLocation", ck).start()
    t0 = time.time()

    def timed() -> list:
        return [p for p in q.recentProgress if p["numInputRows"]][2:]

    while time.time() - t0 < seconds or (len(timed()) < min_batches and time.time() - t0 < 4 * seconds + 30):
        time.sleep(0.25)
    q.stop()
    ps = timed() or [p for p in q.recentProgress if p["numInputRows"]]
    n = sum(p["numInputRows"] for p in ps)
    ms = sum(p["durationMs"]["triggerExecution"] for p in ps)
    out_rows = sum(sum(s.get("numRowsTotal", 0) for s in p.get("stateOperators", [])) for p in ps[-1:])
    shutil.rmtree(ck, ignore_errors=True)
    if not ms:
        raise RuntimeError(f"Structured Streaming completed no micro-batch in {time.time() - t0:.0f} s")
    return {"rate": n / ms * 1000, "rows": n, "batches": len(ps), "state_rows": out_rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=ROUNDS, help=f"interleaved rounds (default {ROUNDS})")
    ap.add_argument("--seconds", type=float, default=None, help="runtime sources run this long (default 8; "
                    "--quick 4)")
    ap.add_argument("--batch", type=int, default=32768, help="rows per source batch")
    ap.add_argument("--ss-sizes", default=None, help="micro-batch sizes (rows per side) to sweep, comma-separated "
                    "(default 100000,250000,500000,1000000; --quick 250000,1000000)")
    ap.add_argument("--ss-seconds", type=float, default=None, help="default 12; --quick 6")
    ap.add_argument("--quick", action="store_true", help="short runs")
    ap.add_argument("--write", action="store_true", help="write tools/bench/join_results.md")
    args = ap.parse_args()
    seconds = args.seconds or (4.0 if args.quick else 8.0)
    ss_seconds = args.ss_seconds or (6.0 if args.quick else 12.0)
    sizes = [int(x) for x in (args.ss_sizes or ("250000,1000000" if args.quick else
                                                "100000,250000,500000,1000000")).split(",")]
    timeout = 300 if args.quick else 900

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join([ROOT, *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                                        if p]])
    from pyspark.sql import SparkSession

    load = Load()
    spark = (SparkSession.builder.master("local[8]").appName("bench-join")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.python.daemon.module", "runtime.executors.spark_daemon")
             .config("spark.driver.memory", "2g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")

    cases = [(INTERVAL, "interval", 1.0), (INTERVAL_NO_CK, "interval", None), (WINDOW, "window", 1.0)]
    steady, e2e = Samples(), Samples()
    runs: dict[str, list[dict]] = {c[0]: [] for c in cases}
    runs[SS] = []
    sweep: list[tuple[int, dict]] = []
    try:
        print("warm-up (not counted)", flush=True)
        run_ours(spark, "interval", batch=args.batch, seconds=2.0, interval=1.0, timeout=timeout)
        print("Structured Streaming micro-batch sweep:", flush=True)
        for size in sizes:
            r = run_ss(spark, size, ss_seconds)
            sweep.append((size, r))
            print(f"  {size:>9} rows/side/batch: {r['rate'] / 1e6:.2f} M events/s ({r['batches']} micro-batches)",
                  flush=True)
        best = max(sweep, key=lambda x: x[1]["rate"])[0]
        print(f"Structured Streaming is fastest at {best} rows per side per micro-batch", flush=True)
        for rnd in range(args.rounds):
            print(f"round {rnd + 1}/{args.rounds} ({Load()})", flush=True)
            for case, kind, interval in cases:
                r = run_ours(spark, kind, batch=args.batch, seconds=seconds, interval=interval, timeout=timeout)
                runs[case].append(r)
                steady.add(case, 1 / r["rate"])
                e2e.add(case, 1 / r["end_to_end"])
                print(f"  {case:<44} {r['rate'] / 1e6:6.2f} M events/s (end to end {r['end_to_end'] / 1e6:.2f} M, "
                      f"{r['checkpoints']} checkpoints, {r['output_rows']} rows out, {r['seconds']:.1f} s)",
                      flush=True)
            r = run_ss(spark, best, ss_seconds)
            runs[SS].append(r)
            steady.add(SS, 1 / r["rate"])
            e2e.add(SS, 1 / r["rate"])
            print(f"  {SS:<44} {r['rate'] / 1e6:6.2f} M events/s ({r['batches']} micro-batches)", flush=True)
    finally:
        spark.stop()

    def med(xs: list[float]) -> float:
        xs = sorted(xs)
        return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2

    heads, ratios = [], {}
    for title, case, base, target, end_to_end in HEADLINES:
        ratio = (e2e if end_to_end else steady).ratio(case, base)
        ratios[case, base] = ratio
        heads.append(headline(title, ratio, target, load))
    rows = []
    for case, rs in runs.items():
        rates = [r["rate"] for r in rs]
        vs = ratios.get((case, SS)) or (steady.ratio(case, SS) if case != SS else None)
        rows.append([case, f"{med(rates) / 1e6:.2f}M", f"{max(rates) / 1e6:.2f}M", f"{vs.median:.2f}x" if vs else "",
                     f"{med([r['end_to_end'] for r in rs]) / 1e6:.2f}M" if case != SS else "",
                     f"{min(r['checkpoints'] for r in rs)}-{max(r['checkpoints'] for r in rs)}" if case != SS else ""])
    table = format_table(["case", "median events/s", "best", "median vs SS (per round)", "end to end (median)",
                          "checkpoints"], rows, markdown=True)
    sweep_table = format_table(["rows per side per micro-batch", "events/s", "micro-batches"],
                               [[f"{s:,}", f"{r['rate'] / 1e6:.2f}M", r["batches"]] for s, r in sweep], markdown=True)
    cmd = " ".join(["tools/bench/bench_join.py", *sys.argv[1:]])
    text = [
        "# Join benchmark results",
        "",
        f"Command: `.venv/bin/python {cmd}`",
        "",
        f"Machine: {os.cpu_count()} cores (shared), Spark local[8]; runtime: 2 sources x 2 parts, join and sink at "
        f"parallelism 2 (8 tasks), file channels, sources run {seconds:g} s ({args.batch} rows per batch); "
        f"Structured Streaming: {ss_seconds:g} s per run, its stream-stream time-range join at {best:,} rows per "
        f"side per micro-batch (its fastest in the sweep below); {args.rounds} interleaved rounds; {load}.",
        "",
        "Headlines (median of the per-round ratios; `_common.headline`):",
        "",
        *[f"    {h}" for h in heads],
        "",
        table,
        "",
        "Structured Streaming micro-batch sweep (one run each, before the rounds):",
        "",
        sweep_table,
        "",
        "Every round (steady events/s; Structured Streaming: rows / trigger time):",
        "",
        format_table(["round", *runs], [[i + 1, *[f"{runs[c][i]['rate'] / 1e6:.2f}M" for c in runs]]
                                        for i in range(args.rounds)], markdown=True),
        "",
    ]
    print("\n".join(text))
    for h in heads:
        print(h, flush=True)
    if args.write:
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "join_results.md"), "w") as f:
            f.write("\n".join(text))


if __name__ == "__main__":
    main()
