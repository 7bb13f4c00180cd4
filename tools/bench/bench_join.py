"""Two-stream join: the streaming runtime on Spark vs Spark Structured Streaming's stream-stream join, both
reading the same pre-generated Parquet files.

    .venv/bin/python tools/bench/bench_join.py [--rounds 5] [--rows 16000000] [--write]
    .venv/bin/python tools/bench/bench_join.py --quick          # short runs, every HEADLINE

Input (``prepare_input``, written once per run, before the rounds): a left and a right directory of Parquet
files, ``--file-rows`` rows each (``k`` int64, ``ts`` timestamp), file ``j`` of a side holding event time ``j``
seconds and the keys ``j * rows .. (j + 1) * rows - 1`` — each key occurs once on each side, at the same time,
so every left row has exactly one partner and the output has as many rows as the left input. Both systems
read these files with their own Parquet readers: the same input and the same per-row decoding cost (until
2026-12, the runtime's sources built Arrow ``arange`` batches in Python and Structured Streaming read its
``rate-micro-batch`` source: not like for like).

* runtime: two ``Job.from_generator`` sources (2 parts each, parallelism 2; part ``p`` reads the files ``j`` with
  ``j % 2 == p``, each file one item at time ``j``) -> ``key_by("k").join(...).interval(-1, 1)`` (and, in this
  script, ``.window(4)`` too) at parallelism 2 -> a callable sink at parallelism 2; 8 Spark barrier tasks
  (``local[8]``), file channels; a checkpoint every second, and none (only the final one). It reads every file.
* Structured Streaming: two Parquet file-stream sources on the same directories (``maxFilesPerTrigger`` files per
  micro-batch) -> ``withWatermark("ts", "2 seconds")`` -> inner join on the key and ``rts BETWEEN lts - 1 second
  AND lts + 1 second`` (its time-range join, state evicted by the watermarks) -> ``noop`` sink, 2 shuffle
  partitions, on the same session; it runs ``--ss-seconds`` and reads a prefix of the files. It pays a fixed
  cost per trigger, so a sweep over ``--ss-files`` (files per micro-batch) first finds the size at which it is
  fastest on this machine (``sweep_ss``), and the rounds use that one (the results say which).

Rates are input events (left + right rows) per second. Runtime: *steady*, between the first and the last sink
commit before the final one (a commit delivers every time completed before its checkpoint) — as in
``bench_runtime.py``; *end to end*: events / (last commit - first source item), which the checkpoint ratio
(every 1 s ÷ none) compares since a run without checkpoints commits only at its end. Structured Streaming:
rows / trigger time after 2 warm-up micro-batches. Every round runs each case and Structured Streaming back to
back, each round starting one case later (``_common.rotated``; the fixed order before put the checkpointed join
right after Structured Streaming's query in every round); each headline is the median of the per-round ratios (``_common``). The checkpoint cost is said twice: in
end-to-end rate, and in the CPU the job's tasks used per event (``task_cpu``), which a load on the shared machine
inflates far less than wall time. ``bench_runtime.py`` runs the interval
join's two headlines with this module's functions. ``--write`` appends a dated section to
``tools/bench/join_results.md``.
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
import pyarrow.parquet as pq  # noqa: E402
from _common import ROUNDS, Load, Samples, format_table, headline, rotated  # noqa: E402

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
CPU_HEADLINES = [
    # (HEADLINE name, case, baseline, target): task CPU per event, the baseline's ÷ the case's
    ("runtime join checkpoint every 1 s / no checkpoints, task CPU per event", INTERVAL, INTERVAL_NO_CK, 0.9),
]
SIDES = ("left", "right")


def prepare_input(work: str, *, rows: int, file_rows: int) -> dict:
    """Write the input of both sides under ``work`` (see the module doc): ``rows // file_rows`` files per side.
    Returns ``{"dirs": [left, right], "files": n, "file_rows": file_rows, "bytes": total}``."""
    n = max(4, rows // file_rows)
    dirs = [os.path.join(work, s) for s in SIDES]
    base = time.time() - n - 60            # file mtimes 1 s apart, in file order (the file source's order)
    nbytes = 0
    for d in dirs:
        os.makedirs(d)
        for j in range(n):
            keys = np.arange(j * file_rows, (j + 1) * file_rows, dtype=np.int64)
            ts = pa.array(np.full(file_rows, j * 1_000_000, dtype=np.int64), pa.timestamp("us", tz="UTC"))
            path = os.path.join(d, f"part-{j:06d}.parquet")
            pq.write_table(pa.table({"k": keys, "ts": ts}), path)
            os.utime(path, (base + j, base + j))
            nbytes += os.path.getsize(path)
    return {"dirs": dirs, "files": n, "file_rows": file_rows, "bytes": nbytes}


def source(inputs: dict, side: int, marks: str, seconds: float | None = None):
    """Part p of ``side``: file ``j`` (``j % 2 == p``, in order) as one item at time ``j``, every file (or as
    many as it reads in ``seconds`` from its first item); the count of items goes to ``marks/end-<side>-<p>``."""
    d, n = inputs["dirs"][side], inputs["files"]

    def gen(part: int, offset: int):
        started = time.time()
        with open(os.path.join(marks, f"start-{side}-{part}-{os.getpid()}"), "w") as f:
            f.write(repr(started))
        i = offset
        while part + 2 * i < n and (seconds is None or time.time() - started <= seconds):
            j = part + 2 * i
            yield j, pq.read_table(os.path.join(d, f"part-{j:06d}.parquet"))
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


def run_ours(spark, kind: str, inputs: dict, *, interval: float | None, timeout: float,
             seconds: float | None = None) -> dict:
    """One run of the runtime's ``kind`` (``interval`` or ``window``) join over ``inputs``."""
    work = tempfile.mkdtemp(prefix="bench-join-")
    marks = os.path.join(work, "marks")
    os.makedirs(marks)
    job = Job(f"benchjoin{uuid.uuid4().hex[:6]}")
    left = job.from_generator(source(inputs, 0, marks, seconds), parts=2, parallelism=2, name="left")
    right = job.from_generator(source(inputs, 1, marks, seconds), parts=2, parallelism=2, name="right")
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
    items = sum(int(open(os.path.join(marks, f"end-{s}-{p}")).read()) for s in range(2) for p in range(2))
    total = items * inputs["file_rows"]
    out_rows = sum(int(c[2]) for c in commits)
    ck = result.checkpoint_seconds
    out = {"events": total, "seconds": last - min(starts), "wall": wall, "checkpoints": result.checkpoints,
           "restarts": result.restarts, "output_rows": out_rows,
           "checkpoint_median": float(np.median(ck)) if ck else None, "checkpoint_max": max(ck) if ck else None}
    out["end_to_end"] = total / out["seconds"]
    out["cpu_per_event"] = task_cpu(result) / total
    out["steady"] = steady_rate(commits, 2 * inputs["file_rows"])
    out["rate"] = out["steady"] or out["end_to_end"]
    shutil.rmtree(work, ignore_errors=True)
    return out


def task_cpu(result) -> float:
    """CPU seconds the job's tasks used (``JobResult.tasks[…]["cpu_s"]``: each task's threads), summed: unlike
    wall time, a load on the shared machine does not inflate it much, so checkpoint costs compare on it too."""
    return sum(s.get("cpu_s") or 0.0 for s in result.tasks.values())


def run_ss(spark, inputs: dict, files: int, seconds: float, min_batches: int = 3) -> dict:
    """Structured Streaming's join over ``inputs`` for ``seconds`` (and on until ``min_batches`` timed
    micro-batches after 2 warm-up ones, at most ``4 * seconds + 30`` s); ``files`` files per side per
    micro-batch (``maxFilesPerTrigger``)."""
    ck = tempfile.mkdtemp(prefix="bench-ss-join-")
    from pyspark.sql.functions import expr
    from pyspark.sql.types import LongType, StructField, StructType, TimestampType

    schema = StructType([StructField("k", LongType()), StructField("ts", TimestampType())])

    def side(d: str, prefix: str):
        return (spark.readStream.schema(schema).option("maxFilesPerTrigger", files).parquet(d)
                .selectExpr(f"k as {prefix}k", f"ts as {prefix}ts").withWatermark(f"{prefix}ts", "2 seconds"))

    joined = side(inputs["dirs"][0], "l").join(side(inputs["dirs"][1], "r"), expr(
        "lk = rk AND rts BETWEEN lts - INTERVAL 1 SECOND AND lts + INTERVAL 1 SECOND"))
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
    shutil.rmtree(ck, ignore_errors=True)
    if not ms:
        raise RuntimeError(f"Structured Streaming completed no micro-batch in {time.time() - t0:.0f} s")
    if n >= 2 * (inputs["files"] - files) * inputs["file_rows"]:
        raise RuntimeError("Structured Streaming read every input file: give it more (--rows)")
    return {"rate": n / ms * 1000, "rows": n, "batches": len(ps), "files": files}


def sweep_ss(spark, inputs: dict, sizes: list[int], seconds: float) -> tuple[int, list[tuple[int, dict]]]:
    """One Structured Streaming run per micro-batch size (files per side per trigger), after a short warm-up
    (not counted); returns the fastest size and every run."""
    print("Structured Streaming join: warm-up (not counted), then its micro-batch sweep", flush=True)
    run_ss(spark, inputs, sizes[0], min(seconds, 3.0), min_batches=1)
    sweep = []
    for size in sizes:
        r = run_ss(spark, inputs, size, seconds)
        sweep.append((size, r))
        print(f"  {size:>4} files ({size * inputs['file_rows']:>9,} rows) per side per micro-batch: "
              f"{r['rate'] / 1e6:.2f} M events/s ({r['batches']} timed micro-batches)", flush=True)
    best = max(sweep, key=lambda x: x[1]["rate"])[0]
    print(f"Structured Streaming's join is fastest at {best} files ({best * inputs['file_rows']:,} rows) per side "
          f"per micro-batch", flush=True)
    return best, sweep


def sweep_table(inputs: dict, sweep: list[tuple[int, dict]]) -> str:
    return format_table(["files per side per micro-batch", "rows per side per micro-batch", "events/s",
                         "timed micro-batches"],
                        [[s, f"{s * inputs['file_rows']:,}", f"{r['rate'] / 1e6:.3f}M", r["batches"]]
                         for s, r in sweep], markdown=True)


def describe_input(inputs: dict) -> str:
    return (f"{inputs['files']} Parquet files per side of {inputs['file_rows']:,} rows "
            f"({2 * inputs['files'] * inputs['file_rows'] / 1e6:.0f}M events, {inputs['bytes'] / 2**20:.0f} MiB)")


def ck_note(r: dict) -> str:
    if not r.get("checkpoint_median"):
        return ""
    return (f", checkpoints took {r['checkpoint_median'] * 1000:.0f} ms median, {r['checkpoint_max'] * 1000:.0f} ms "
            f"max (trigger to complete)")


def append_results(path: str, text: list[str]) -> None:
    """Append ``text`` as a dated section at the end of ``path``."""
    with open(path, "a") as f:
        f.write(f"\n## {time.strftime('%Y-%m-%d %H:%M')} (`{os.path.basename(sys.argv[0])}`)\n\n")
        f.write("\n".join(text).rstrip("\n") + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=ROUNDS, help=f"interleaved rounds (default {ROUNDS})")
    ap.add_argument("--rows", type=int, default=None, help="input rows per side (default 16,000,000; --quick "
                    "6,000,000): the runtime reads them all")
    ap.add_argument("--file-rows", type=int, default=50_000, help="rows per Parquet file")
    ap.add_argument("--ss-files", default=None, help="files per side per micro-batch to sweep, comma-separated "
                    "(default 1,2,5; --quick 2,5; 10 ran the 2 GiB driver out of memory)")
    ap.add_argument("--ss-seconds", type=float, default=None, help="default 12; --quick 6")
    ap.add_argument("--quick", action="store_true", help="short runs")
    ap.add_argument("--write", action="store_true", help="append the results to tools/bench/join_results.md")
    args = ap.parse_args()
    rows = args.rows or (6_000_000 if args.quick else 16_000_000)
    ss_seconds = args.ss_seconds or (6.0 if args.quick else 12.0)
    sizes = [int(x) for x in (args.ss_files or ("2,5" if args.quick else "1,2,5")).split(",")]
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
    steady, e2e, cpu = Samples(), Samples(), Samples()
    runs: dict[str, list[dict]] = {c[0]: [] for c in cases}
    runs[SS] = []
    data = tempfile.mkdtemp(prefix="bench-join-input-")
    try:
        t0 = time.time()
        inputs = prepare_input(data, rows=rows, file_rows=args.file_rows)
        print(f"input: {describe_input(inputs)}, written in {time.time() - t0:.1f} s", flush=True)
        print("warm-up (not counted)", flush=True)
        run_ours(spark, "interval", inputs, interval=1.0, timeout=timeout, seconds=2.0)
        best, sweep = sweep_ss(spark, inputs, sizes, ss_seconds)
        for rnd in range(args.rounds):
            print(f"round {rnd + 1}/{args.rounds} ({Load()})", flush=True)
            for case, kind, interval in rotated(cases, rnd):
                r = run_ours(spark, kind, inputs, interval=interval, timeout=timeout)
                runs[case].append(r)
                steady.add(case, 1 / r["rate"])
                e2e.add(case, 1 / r["end_to_end"])
                cpu.add(case, r["cpu_per_event"])
                print(f"  {case:<44} {r['rate'] / 1e6:6.2f} M events/s (end to end {r['end_to_end'] / 1e6:.2f} M, "
                      f"{r['checkpoints']} checkpoints, {r['output_rows']} rows out, {r['seconds']:.1f} s"
                      f"{ck_note(r)})", flush=True)
            r = run_ss(spark, inputs, best, ss_seconds)
            runs[SS].append(r)
            steady.add(SS, 1 / r["rate"])
            e2e.add(SS, 1 / r["rate"])
            print(f"  {SS:<44} {r['rate'] / 1e6:6.2f} M events/s ({r['batches']} micro-batches)", flush=True)
    finally:
        spark.stop()
        shutil.rmtree(data, ignore_errors=True)

    def med(xs: list[float]) -> float:
        xs = sorted(xs)
        return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2

    heads, ratios = [], {}
    for title, case, base, target, end_to_end in HEADLINES:
        ratio = (e2e if end_to_end else steady).ratio(case, base)
        ratios[case, base] = ratio
        heads.append(headline(title, ratio, target, load))
    for title, case, base, target in CPU_HEADLINES:
        heads.append(headline(title, cpu.ratio(case, base), target, load))
    rows_out = []
    for case, rs in runs.items():
        rates = [r["rate"] for r in rs]
        vs = ratios.get((case, SS)) or (steady.ratio(case, SS) if case != SS else None)
        cks = [r["checkpoint_median"] for r in rs if r.get("checkpoint_median")]
        rows_out.append([case, f"{med(rates) / 1e6:.2f}M", f"{max(rates) / 1e6:.2f}M", f"{vs.median:.2f}x" if vs else "",
                         f"{med([r['end_to_end'] for r in rs]) / 1e6:.2f}M" if case != SS else "",
                         f"{min(r['checkpoints'] for r in rs)}-{max(r['checkpoints'] for r in rs)}" if case != SS else "",
                         f"{med(cks) * 1000:.0f} ms" if cks else "",
                         f"{med([r['cpu_per_event'] for r in rs]) * 1e9:.0f} ns" if case != SS else ""])
    table = format_table(["case", "median events/s", "best", "median vs SS (per round)", "end to end (median)",
                          "checkpoints", "checkpoint duration (median)", "task CPU per event (median)"], rows_out,
                         markdown=True)
    cmd = " ".join(["tools/bench/bench_join.py", *sys.argv[1:]])
    text = [
        f"Command: `.venv/bin/python {cmd}`",
        "",
        f"Machine: {os.cpu_count()} cores (shared), Spark local[8]; input: {describe_input(inputs)}, read by both "
        f"systems; runtime: 2 sources x 2 parts, join and sink at parallelism 2 (8 tasks), file channels, every "
        f"file; Structured Streaming: {ss_seconds:g} s per run, its stream-stream time-range join at {best} files "
        f"({best * inputs['file_rows']:,} rows) per side per micro-batch (its fastest in the sweep below); "
        f"{args.rounds} interleaved rounds; {load}.",
        "",
        "Headlines (median of the per-round ratios; `_common.headline`):",
        "",
        *[f"    {h}" for h in heads],
        "",
        table,
        "",
        "Structured Streaming micro-batch sweep (one run each, before the rounds):",
        "",
        sweep_table(inputs, sweep),
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
        append_results(os.path.join(os.path.dirname(os.path.abspath(__file__)), "join_results.md"), text)


if __name__ == "__main__":
    main()
