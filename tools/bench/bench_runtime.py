"""The streaming runtime on Spark vs Spark Structured Streaming, interleaved in the same session.

    .venv/bin/python tools/bench/bench_runtime.py [--rounds 5] [--seconds 14] [--kafka 127.0.0.1:19092] [--write]
    .venv/bin/python tools/bench/bench_runtime.py --quick --kafka HOST:PORT       # a few minutes, every HEADLINE

Pipeline (both systems): source -> map (k = value % keys) -> keyed count -> sink, parallelism 2.

* runtime: ``Job.from_generator`` (2 parts of Arrow batches of ``--batch`` consecutive int64 values, one time
  per batch, for ``--seconds`` from each part's first item) -> ``map_batches`` -> ``key_by("k").count()``
  (emits each completed time's updated counts) -> a callable sink; every operator at parallelism 2, each
  instance a Spark barrier task (``local[8]``: 8 tasks, 3 channel hops); and *chained* (``chaining=True``:
  source+map and count+sink share a task: 4 tasks, only the keyed exchange goes through channels). Channels on
  files and on Kafka; a checkpoint every second, and none (only the final one).
* Structured Streaming: ``rate-micro-batch`` (2 partitions) -> ``value % keys`` -> ``groupBy("k").count()`` ->
  ``noop`` sink, update mode, 2 shuffle partitions, on the same session; rate = rows / trigger time after 2
  warm-up micro-batches, at least 3 timed ones (its state store checkpoints every micro-batch). It pays a fixed
  cost per trigger, so its rate moves with the micro-batch size: once per run, before the rounds, a sweep over
  ``--ss-sizes`` rows per micro-batch (one run each, ``--ss-sweep-seconds``; while the largest size is still more
  than 5% faster than the rest, twice that size is tried too, up to ``--ss-max``) picks the size at which it is
  fastest on this machine, and every round runs that size (``--ss-batch`` fixes one size instead; the output says which).
* The join (issue 37; ``--no-join`` skips it): ``bench_join.py``'s interval join (two sources of Parquet files
  -> ``key_by("k").join(...).interval(-1, 1)`` -> sink, 8 tasks, file channels; checkpoint every 1 s and none)
  against Structured Streaming's stream-stream time-range join reading the same files, at the micro-batch size
  (files per trigger) its own sweep found fastest — ``bench_join.prepare_input``, ``run_ours``, ``run_ss`` and
  ``sweep_ss``, so the two scripts measure the join the same way (``bench_join.py`` adds the window join).

Rates. *Steady* (compared with Structured Streaming's): events completed between the first and the last sink
commit before the final checkpoint's, over the time between them — a commit delivers the counts of every time
completed before its checkpoint. *End to end*: events / (last sink commit - first source item); the checkpoint
ratio (checkpoint every 1 s ÷ none) compares end-to-end rates, since a run without checkpoints commits only
at its end, and is said again in the CPU the job's tasks used per event (``bench_join.task_cpu``), which a load
on the shared machine inflates far less than wall time.

Every round runs each case once and Structured Streaming once, back to back, so a load on the shared machine
slows a round's cases alike; each headline is the median over rounds of the per-round ratio
(``_common.Samples.ratio``), printed as ``HEADLINE`` lines (``_common.headline``) with best, spread and the
load average. A warm-up run of each system comes first (Spark's JIT, the Python workers' imports). Full runs
last ``--seconds`` (default 14 s: at least 10 checkpoints at 1 s; the table says how many each case had);
``--quick`` runs 2.5 s cases, 4 s of Structured Streaming, a sweep of 2 sizes and a smaller join (a smoke check
of every ratio, too short for 10 checkpoints). Then, full runs only, the recovery after a SIGKILLed source task:
when the driver noticed the failure and submitted the next generation (``JobResult.failure_times``,
``generation_starts``), when the new generation's sources took their first item, and when the first output
*committed by the new generation* reached the sink — measured from the new generation's start
(``generation_starts[1]``) and from the kill; a commit before that start belongs to the old generation.
``--write`` appends a dated section to ``tools/bench/runtime_results.md``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_join  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
from _common import ROUNDS, Load, Samples, format_table, headline, rotated  # noqa: E402

from runtime import Job  # noqa: E402

SS = "Structured Streaming"
UNCHAINED = "runtime, file channels, checkpoint 1 s"
NO_CK = "runtime, file channels, no checkpoints"
CHAINED = "runtime chained, file channels, checkpoint 1 s"
KAFKA = "runtime, Kafka channels, checkpoint 1 s"
KAFKA_CHAINED = "runtime chained, Kafka channels, checkpoint 1 s"
JOIN = "runtime interval join, file channels, checkpoint 1 s"
JOIN_NO_CK = "runtime interval join, file channels, no checkpoints"
SS_JOIN = "Structured Streaming stream-stream join"

HEADLINES = [
    # (HEADLINE name, case, baseline, target, end to end?)
    ("runtime unchained file channels / Structured Streaming", UNCHAINED, SS, 2.0, False),
    ("runtime chained file channels / Structured Streaming", CHAINED, SS, 3.0, False),
    ("runtime checkpoint every 1 s / no checkpoints", UNCHAINED, NO_CK, 0.9, True),
    ("runtime Kafka channels unchained / Structured Streaming", KAFKA, SS, 1.0, False),
    ("runtime interval join / Structured Streaming stream-stream join (same Parquet input)", JOIN, SS_JOIN, 2.0,
     False),
    ("runtime join checkpoint every 1 s / no checkpoints", JOIN, JOIN_NO_CK, 0.9, True),
]
CPU_HEADLINES = [
    # (HEADLINE name, case, baseline, target): the tasks' CPU per event, the baseline's ÷ the case's
    ("runtime checkpoint every 1 s / no checkpoints, task CPU per event", UNCHAINED, NO_CK, 0.9),
    ("runtime join checkpoint every 1 s / no checkpoints, task CPU per event", JOIN, JOIN_NO_CK, 0.9),
]


def source(batches: int, batch: int, marks: str, seconds: float | None = None, kill_at: int | None = None):
    """Part p yields batches of ``batch`` consecutive int64 values, batch i at time i: ``batches`` of them, or
    as many as it makes in ``seconds`` from its first item (its count goes to ``marks/end-<part>``)."""

    def gen(part: int, offset: int):
        started = time.time()
        with open(os.path.join(marks, f"start-{part}-{os.getpid()}"), "w") as f:
            f.write(repr(started))
        for i in range(offset, batches):
            if seconds is not None and time.time() - started > seconds:
                break
            if kill_at is not None and part == 0 and i == kill_at and not os.path.exists(os.path.join(marks, "killed")):
                with open(os.path.join(marks, "killed"), "w") as f:
                    f.write(repr(time.time()))
                os.kill(os.getpid(), signal.SIGKILL)
            lo = (part * batches + i) * batch
            yield i, pa.record_batch({"value": np.arange(lo, lo + batch, dtype=np.int64)})
        else:
            i = batches
        with open(os.path.join(marks, f"end-{part}"), "w") as f:
            f.write(str(i))

    return gen


def sink(marks: str):
    def fn(t: int, table: pa.Table) -> None:
        with open(os.path.join(marks, "commits"), "a") as f:
            f.write(f"{time.time()!r} {t} {table.num_rows}\n")

    return fn


def steady_rate(commits: list[list[str]], per_time: int) -> float | None:
    """Events per second between the first and the last checkpoint commit before the final one: a commit
    delivers the counts of every time completed before its checkpoint, so ``(max time + 1) * per_time``
    events were processed by then."""
    points = sorted((float(w), int(t)) for w, t, _n in commits)
    groups: list[list[tuple[float, int]]] = []
    for w, t in points:
        if groups and w - groups[-1][-1][0] < 0.2:
            groups[-1].append((w, t))
        else:
            groups.append([(w, t)])
    groups = groups[:-1]                       # the final checkpoint's commit
    if len(groups) < 2:
        return None
    first, last = groups[0], groups[-1]
    done = lambda g: (max(t for _w, t in g) + 1) * per_time  # noqa: E731
    return (done(last) - done(first)) / (last[0][0] - first[0][0])


def build(name: str, batches: int, batch: int, keys: int, marks: str, seconds: float | None,
          kill_at: int | None = None) -> Job:
    job = Job(name)
    src = job.from_generator(source(batches, batch, marks, seconds, kill_at), parts=2, parallelism=2, name="source")
    mapped = src.map_batches(lambda b: pa.record_batch({"k": np.remainder(b.column(0).to_numpy(), keys)}),
                             parallelism=2, name="map")
    mapped.key_by("k").count(parallelism=2, name="count").sink(sink(marks), parallelism=2, name="sink")
    return job


def run_ours(spark, channels: str, *, batch: int, keys: int, interval: float | None, seconds: float | None = None,
             events: int | None = None, kill: bool = False, chaining: bool = False, timeout: float = 900) -> dict:
    work = tempfile.mkdtemp(prefix="bench-rt-")
    marks = os.path.join(work, "marks")
    os.makedirs(marks)
    name = f"bench{uuid.uuid4().hex[:6]}"
    if channels == "files":
        channels = os.path.join(work, "ch")
    batches = events // (2 * batch) if events else 1 << 40
    kill_at = batches // 2 if kill else None     # half-way through part 0
    job = build(name, batches, batch, keys, marks, seconds, kill_at)
    t0 = time.time()
    result = job.run(spark, channels=channels, checkpoints=os.path.join(work, "ck"), checkpoint_interval=interval,
                     timeout=timeout, chaining=chaining)
    wall = time.time() - t0
    if result.restarts:
        print(f"    (restarted {result.restarts}x: {result.failures[0][:100]})", flush=True)
    starts = [float(open(os.path.join(marks, f)).read()) for f in os.listdir(marks) if f.startswith("start-")]
    commits = [line.split() for line in open(os.path.join(marks, "commits"))]
    last = max(float(c[0]) for c in commits)
    total = sum(int(open(os.path.join(marks, f"end-{p}")).read()) for p in range(2)) * batch
    out = {"events": total, "seconds": last - min(starts), "wall": wall, "checkpoints": result.checkpoints}
    out["end_to_end"] = total / out["seconds"]
    out["cpu_per_event"] = bench_join.task_cpu(result) / total
    out["steady"] = steady_rate(commits, 2 * batch)
    out["rate"] = out["steady"] or out["end_to_end"]
    if kill_at is not None:
        killed = float(open(os.path.join(marks, "killed")).read())
        if len(result.generation_starts) < 2:
            raise RuntimeError(f"the killed run did not restart ({result.generations} generation)")
        gen2 = result.generation_starts[1]          # the driver submits the new generation's tasks
        new_starts = sorted(s for s in starts if s >= gen2)
        new_commits = sorted(float(c[0]) for c in commits if float(c[0]) >= gen2)
        out["kill"] = {
            "detected": result.failure_times[0] - killed,
            "restarted": gen2 - killed,
            "sources_started": new_starts[0] - gen2 if new_starts else None,
            "first_output": new_commits[0] - gen2 if new_commits else None,
            "old_commits_after_kill": sum(1 for c in commits if killed < float(c[0]) < gen2),
        }
    shutil.rmtree(work, ignore_errors=True)
    return out


def run_ss(spark, ss_batch: int, keys: int, seconds: float, min_batches: int = 3) -> dict:
    """Structured Streaming for ``seconds``, and on until ``min_batches`` micro-batches after the 2 warm-up
    ones were timed (a loaded machine slows its micro-batches; at most ``4 * seconds + 30`` s in all)."""
    ck = tempfile.mkdtemp(prefix="bench-ss-")
    df = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", ss_batch)
          .option("numPartitions", 2).load())
    q = (df.selectExpr(f"value % {keys} as k").groupBy("k").count()
         .writeStream.format("noop").outputMode("update").option("checkpointLocation", ck).start())
    t0 = time.time()

    def timed() -> list:
        return [p for p in q.recentProgress if p["numInputRows"]][2:]

    while time.time() - t0 < seconds or (len(timed()) < min_batches and time.time() - t0 < 4 * seconds + 30):
        time.sleep(0.25)
    q.stop()
    ps = timed() or [p for p in q.recentProgress if p["numInputRows"]]
    rows = sum(p["numInputRows"] for p in ps)
    ms = sum(p["durationMs"]["triggerExecution"] for p in ps)
    shutil.rmtree(ck, ignore_errors=True)
    if not ms:
        raise RuntimeError(f"Structured Streaming completed no micro-batch in {time.time() - t0:.0f} s")
    return {"rate": rows / ms * 1000, "rows": rows, "batches": len(ps)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=ROUNDS, help=f"interleaved rounds (default {ROUNDS})")
    ap.add_argument("--seconds", type=float, default=None, help="each runtime case's source runs this long "
                    "(default 14; --quick 2.5)")
    ap.add_argument("--batch", type=int, default=65536, help="rows per source batch")
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--ss-batch", type=int, default=None, help="rows per Structured Streaming micro-batch (default: "
                    "the fastest of --ss-sizes)")
    ap.add_argument("--ss-sizes", default=None, help="Structured Streaming micro-batch sizes (rows) to sweep, "
                    "comma-separated (default 2000000,4000000,8000000,16000000; --quick 8000000,16000000)")
    ap.add_argument("--ss-seconds", type=float, default=None, help="default 20; --quick 4")
    ap.add_argument("--ss-max", type=int, default=64_000_000, help="while Structured Streaming is still more than 5%% "
                    "faster at the sweep's largest size, the sweep doubles it, up to this many rows (default 64M)")
    ap.add_argument("--ss-sweep-seconds", type=float, default=None, help="each sweep run (default 10; --quick 4)")
    ap.add_argument("--no-join", action="store_true", help="skip the join cases")
    ap.add_argument("--join-rows", type=int, default=None, help="join input rows per side (default 30,000,000; "
                    "--quick 8,000,000)")
    ap.add_argument("--join-ss-files", default=None, help="Structured Streaming join: files (of 50,000 rows) per "
                    "side per micro-batch to sweep (default 1,2,5; --quick 2,5; 10 ran the 2 GiB driver out of memory)")
    ap.add_argument("--join-ss-seconds", type=float, default=None, help="default 12; --quick 5")
    ap.add_argument("--quick", action="store_true", help="short runs: every headline in a few minutes")
    ap.add_argument("--kafka", help="bootstrap host:port (default: start tools/kafka-broker on port 19392)")
    ap.add_argument("--no-kafka", action="store_true", help="skip the Kafka cases")
    ap.add_argument("--write", action="store_true", help="append the results to tools/bench/runtime_results.md")
    args = ap.parse_args()
    seconds = args.seconds or (2.5 if args.quick else 14.0)
    ss_sizes = [args.ss_batch] if args.ss_batch else [int(x) for x in (
        args.ss_sizes or ("8000000,16000000" if args.quick else "2000000,4000000,8000000,16000000")).split(",")]
    ss_seconds = args.ss_seconds or (4.0 if args.quick else 20.0)
    sweep_seconds = args.ss_sweep_seconds or (4.0 if args.quick else 10.0)
    join_rows = args.join_rows or (8_000_000 if args.quick else 30_000_000)
    join_sizes = [int(x) for x in (args.join_ss_files or ("2,5" if args.quick else "1,2,5")).split(",")]
    join_ss_seconds = args.join_ss_seconds or (5.0 if args.quick else 12.0)
    timeout = 180 if args.quick else 900

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join([ROOT, *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]])
    from pyspark.sql import SparkSession

    load = Load()
    spark = (SparkSession.builder.master("local[8]").appName("bench-runtime")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").config("spark.python.daemon.module", "runtime.executors.spark_daemon")
             .config("spark.driver.memory", "2g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")

    broker = None
    bootstrap = args.kafka
    if bootstrap is None and not args.no_kafka:
        broker = "19392"
        subprocess.run([sys.executable, os.path.join(ROOT, "tools", "kafka-broker"), "start", "--port", broker], check=True)
        bootstrap = f"127.0.0.1:{broker}"
    kafka = f"kafka://{bootstrap}/benchrt{uuid.uuid4().hex[:6]}" if bootstrap else None

    cases = [(UNCHAINED, "files", 1.0, False), (NO_CK, "files", None, False), (CHAINED, "files", 1.0, True)]
    if kafka:
        cases.append((KAFKA, kafka, 1.0, False))
        if not args.quick:
            cases.append((KAFKA_CHAINED, kafka, 1.0, True))
    steady, e2e = Samples(), Samples()        # seconds per event: Samples.ratio gives rate ratios
    cpu = Samples()                           # the tasks' CPU seconds per event
    runs: dict[str, list[dict]] = {c[0]: [] for c in cases}
    runs[SS] = []
    join_cases = [] if args.no_join else [(JOIN, 1.0), (JOIN_NO_CK, None)]
    runs.update({c: [] for c, _i in join_cases})
    if join_cases:
        runs[SS_JOIN] = []
    rec = None
    common = {"batch": args.batch, "keys": args.keys, "timeout": timeout}
    sweep: list[tuple[int, dict]] = []
    join_sweep: list[tuple[int, dict]] = []
    join_best = inputs = None
    data = tempfile.mkdtemp(prefix="bench-rt-join-input-")
    try:
        print("warm-up (not counted)", flush=True)
        run_ss(spark, ss_sizes[0], args.keys, min(ss_seconds, 6.0))
        run_ours(spark, "files", interval=1.0, seconds=2.0, **common)
        if len(ss_sizes) > 1:
            print("Structured Streaming micro-batch sweep:", flush=True)
        todo = list(ss_sizes) if len(ss_sizes) > 1 else []
        while todo:
            size = todo.pop(0)
            r = run_ss(spark, size, args.keys, sweep_seconds)
            sweep.append((size, r))
            print(f"  {size:>10,} rows per micro-batch: {r['rate'] / 1e6:.2f} M events/s ({r['batches']} timed "
                  f"micro-batches)", flush=True)
            fastest = max(sweep, key=lambda x: x[1]["rate"])
            if not todo and fastest[0] == size and len(sweep) > 1 and size * 2 <= args.ss_max:
                prev = max(x[1]["rate"] for x in sweep[:-1])
                if r["rate"] > 1.05 * prev:   # still gaining at the largest size: try twice as large
                    todo.append(size * 2)
        ss_batch = max(sweep, key=lambda x: x[1]["rate"])[0] if sweep else ss_sizes[0]
        print(f"Structured Streaming runs {ss_batch:,} rows per micro-batch"
              f"{' (its fastest in the sweep)' if sweep else ' (--ss-batch)'}", flush=True)
        if join_cases:
            inputs = bench_join.prepare_input(data, rows=join_rows, file_rows=50_000)
            print(f"join input: {bench_join.describe_input(inputs)}", flush=True)
            bench_join.run_ours(spark, "interval", inputs, interval=1.0, timeout=timeout, seconds=1.0)
            join_best, join_sweep = bench_join.sweep_ss(spark, inputs, join_sizes, join_ss_seconds)
        for rnd in range(args.rounds):
            print(f"round {rnd + 1}/{args.rounds} ({Load()})", flush=True)
            for case, channels, interval, chaining in rotated(cases, rnd):
                r = run_ours(spark, channels, interval=interval, seconds=seconds, chaining=chaining, **common)
                runs[case].append(r)
                steady.add(case, 1 / r["rate"])
                e2e.add(case, 1 / r["end_to_end"])
                cpu.add(case, r["cpu_per_event"])
                print(f"  {case:<48} {r['rate'] / 1e6:6.2f} M events/s (end to end {r['end_to_end'] / 1e6:.2f} M, "
                      f"{r['checkpoints']} checkpoints, {r['seconds']:.1f} s)", flush=True)
            r = run_ss(spark, ss_batch, args.keys, ss_seconds)
            runs[SS].append(r)
            steady.add(SS, 1 / r["rate"])
            e2e.add(SS, 1 / r["rate"])
            print(f"  {SS:<48} {r['rate'] / 1e6:6.2f} M events/s ({r['batches']} micro-batches)", flush=True)
            for case, interval in rotated(join_cases, rnd):
                r = bench_join.run_ours(spark, "interval", inputs, interval=interval, timeout=timeout)
                runs[case].append(r)
                steady.add(case, 1 / r["rate"])
                e2e.add(case, 1 / r["end_to_end"])
                cpu.add(case, r["cpu_per_event"])
                print(f"  {case:<48} {r['rate'] / 1e6:6.2f} M events/s (end to end {r['end_to_end'] / 1e6:.2f} M, "
                      f"{r['checkpoints']} checkpoints, {r['seconds']:.1f} s{bench_join.ck_note(r)})", flush=True)
            if join_cases:
                r = bench_join.run_ss(spark, inputs, join_best, join_ss_seconds)
                runs[SS_JOIN].append(r)
                steady.add(SS_JOIN, 1 / r["rate"])
                e2e.add(SS_JOIN, 1 / r["rate"])
                print(f"  {SS_JOIN:<48} {r['rate'] / 1e6:6.2f} M events/s ({r['batches']} micro-batches)", flush=True)
        if not args.quick:
            rec = run_ours(spark, "files", interval=1.0, events=int(seconds * 10e6), kill=True, **common)
    finally:
        shutil.rmtree(data, ignore_errors=True)
        if broker:
            subprocess.run([sys.executable, os.path.join(ROOT, "tools", "kafka-broker"), "stop", "--port", broker])
        spark.stop()

    def med(xs: list[float]) -> float:
        xs = sorted(xs)
        return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2

    heads, ratios = [], {}
    for title, case, base, target, end_to_end in HEADLINES:
        if case not in runs or not runs[case]:
            continue
        ratio = (e2e if end_to_end else steady).ratio(case, base)
        ratios[case, base] = ratio
        heads.append(headline(title, ratio, target, load))
    for title, case, base, target in CPU_HEADLINES:
        if runs.get(case) and runs.get(base):
            heads.append(headline(title, cpu.ratio(case, base), target, load))
    rows = []
    for case, rs in runs.items():
        rates = [r["rate"] for r in rs]
        base = SS_JOIN if case in (JOIN, JOIN_NO_CK) else SS
        ss = case in (SS, SS_JOIN)
        vs = ratios.get((case, base)) or (steady.ratio(case, base) if not ss else None)
        rows.append([case, f"{med(rates) / 1e6:.2f}M", f"{max(rates) / 1e6:.2f}M",
                     f"{vs.median:.2f}x" if vs else "",
                     f"{med([r['end_to_end'] for r in rs]) / 1e6:.2f}M" if not ss else "",
                     f"{min(r['checkpoints'] for r in rs)}-{max(r['checkpoints'] for r in rs)}" if not ss else "",
                     f"{med([r['seconds'] for r in rs]):.1f}" if not ss else ""])
    table = format_table(["case", "median events/s", "best", "median vs its SS (per round)", "end to end (median)",
                          "checkpoints", "seconds"], rows, markdown=True)
    per_round = format_table(["round", *[c for c in runs]],
                             [[i + 1, *[f"{runs[c][i]['rate'] / 1e6:.2f}M" for c in runs]] for i in range(args.rounds)],
                             markdown=True)
    cmd = " ".join(["tools/bench/bench_runtime.py", *sys.argv[1:]])
    text = [
        f"Command: `.venv/bin/python {cmd}`",
        "",
        f"Machine: {os.cpu_count()} cores (shared), Spark local[8], parallelism 2 per operator (8 tasks unchained, 4 "
        f"chained); each runtime case's sources run {seconds:g} s ({args.batch} rows per batch, {args.keys} keys); "
        f"Structured Streaming {ss_seconds:g} s per round at {ss_batch:,} rows per micro-batch "
        f"({'its fastest in the sweep below' if sweep else 'fixed by --ss-batch'}); {args.rounds} interleaved "
        f"rounds; {load}.",
        "",
    ]
    if join_cases:
        text += [
            f"Join: {bench_join.describe_input(inputs)} read by both systems; the runtime's interval join reads every "
            f"file; Structured Streaming's stream-stream join {join_ss_seconds:g} s per round at {join_best} files "
            f"({join_best * inputs['file_rows']:,} rows) per side per micro-batch (its fastest in the join sweep "
            f"below). The join rows' \"vs SS\" column is against that join.",
            "",
        ]
    text += [
        "Headlines (median of the per-round ratios; `_common.headline`):",
        "",
        *[f"    {h}" for h in heads],
        "",
        table,
        "",
    ]
    if sweep:
        text += [
            f"Structured Streaming micro-batch sweep (one {sweep_seconds:g} s run per size, before the rounds):",
            "",
            format_table(["rows per micro-batch", "events/s", "timed micro-batches"],
                         [[f"{s:,}", f"{r['rate'] / 1e6:.2f}M", r["batches"]] for s, r in sweep], markdown=True),
            "",
        ]
    if join_sweep:
        text += [
            f"Structured Streaming join micro-batch sweep (one {join_ss_seconds:g} s run per size, before the rounds):",
            "",
            bench_join.sweep_table(inputs, join_sweep),
            "",
        ]
    text += [
        "Every round (steady events/s; Structured Streaming: rows / trigger time):",
        "",
        per_round,
        "",
    ]
    if rec is not None:
        k = rec["kill"]
        def after(x: float | None) -> str:
            return "never" if x is None else f"{x:.2f} s after it ({k['restarted'] + x:.2f} s after the kill)"

        text += [
            "Recovery after SIGKILL of a source task's Python worker (checkpoint every second):",
            "",
            f"- failure noticed by the driver: {k['detected']:.2f} s after the kill",
            f"- next generation submitted (`JobResult.generation_starts[1]`): {k['restarted']:.2f} s after the kill",
            f"- the new generation's first source item: {after(k['sources_started'])}",
            f"- first output committed by the new generation (the first sink commit at or after "
            f"`generation_starts[1]`): {after(k['first_output'])}",
            f"- (commits of the old generation between the kill and the restart: {k['old_commits_after_kill']})",
            "",
        ]
    print("\n".join(text))
    for h in heads:
        print(h, flush=True)
    if args.write:
        bench_join.append_results(os.path.join(os.path.dirname(os.path.abspath(__file__)), "runtime_results.md"),
                                  text)


if __name__ == "__main__":
    main()
