"""The streaming runtime on Spark vs Spark Structured Streaming, interleaved in the same session.

    .venv/bin/python tools/bench/bench_runtime.py [--rounds 5] [--seconds 14] [--kafka 127.0.0.1:19092] [--write]
    .venv/bin/python tools/bench/bench_runtime.py --quick --kafka HOST:PORT       # ~90 s, every HEADLINE

Pipeline (both systems): source -> map (k = value % keys) -> keyed count -> sink, parallelism 2.

* runtime: ``Job.from_generator`` (2 parts of Arrow batches of ``--batch`` consecutive int64 values, one time
  per batch, for ``--seconds`` from each part's first item) -> ``map_batches`` -> ``key_by("k").count()``
  (emits each completed time's updated counts) -> a callable sink; every operator at parallelism 2, each
  instance a Spark barrier task (``local[8]``: 8 tasks, 3 channel hops); and *chained* (``chaining=True``:
  source+map and count+sink share a task: 4 tasks, only the keyed exchange goes through channels). Channels on
  files and on Kafka; a checkpoint every second, and none (only the final one).
* Structured Streaming: ``rate-micro-batch`` (``--ss-batch`` rows per micro-batch, 2 partitions) ->
  ``value % keys`` -> ``groupBy("k").count()`` -> ``noop`` sink, update mode, 2 shuffle partitions, on the same
  session; rate = rows / trigger time after 2 warm-up micro-batches, at least 3 timed ones (its state store checkpoints every
  micro-batch).

Rates. *Steady* (compared with Structured Streaming's): events completed between the first and the last sink
commit before the final checkpoint's, over the time between them — a commit delivers the counts of every time
completed before its checkpoint. *End to end*: events / (last sink commit - first source item); the checkpoint
ratio (checkpoint every 1 s ÷ none) compares end-to-end rates, since a run without checkpoints commits only
at its end.

Every round runs each case once and Structured Streaming once, back to back, so a load on the shared machine
slows a round's cases alike; each headline is the median over rounds of the per-round ratio
(``_common.Samples.ratio``), printed as ``HEADLINE`` lines (``_common.headline``) with best, spread and the
load average. A warm-up run of each system comes first (Spark's JIT, the Python workers' imports). Full runs
last ``--seconds`` (default 14 s: at least 10 checkpoints at 1 s; the table says how many each case had);
``--quick`` runs 2.5 s cases and 4 s of Structured Streaming (1M-row micro-batches) (a smoke check of every ratio in about 90 s, too
short for 10 checkpoints). Then, full runs only, the recovery after a SIGKILLed source task. ``--write``
writes ``tools/bench/runtime_results.md``.
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

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
from _common import ROUNDS, Load, Samples, format_table, headline  # noqa: E402

from runtime import Job  # noqa: E402

SS = "Structured Streaming"
UNCHAINED = "runtime, file channels, checkpoint 1 s"
NO_CK = "runtime, file channels, no checkpoints"
CHAINED = "runtime chained, file channels, checkpoint 1 s"
KAFKA = "runtime, Kafka channels, checkpoint 1 s"
KAFKA_CHAINED = "runtime chained, Kafka channels, checkpoint 1 s"

HEADLINES = [
    # (HEADLINE name, case, baseline, target, end to end?)
    ("runtime unchained file channels / Structured Streaming", UNCHAINED, SS, 2.0, False),
    ("runtime chained file channels / Structured Streaming", CHAINED, SS, 3.0, False),
    ("runtime checkpoint every 1 s / no checkpoints", UNCHAINED, NO_CK, 0.9, True),
    ("runtime Kafka channels unchained / Structured Streaming", KAFKA, SS, 1.0, False),
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
    out["steady"] = steady_rate(commits, 2 * batch)
    out["rate"] = out["steady"] or out["end_to_end"]
    if kill_at is not None:
        killed = float(open(os.path.join(marks, "killed")).read())
        after = sorted(float(c[0]) for c in commits if float(c[0]) > killed)
        out["kill"] = {
            "detected": result.failure_times[0] - killed,
            "restarted": result.generation_starts[1] - killed,
            "first_output": after[0] - killed if after else None,
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
    ap.add_argument("--ss-batch", type=int, default=None, help="rows per Structured Streaming micro-batch "
                    "(default 2,000,000; --quick 1,000,000)")
    ap.add_argument("--ss-seconds", type=float, default=None, help="default 20; --quick 4")
    ap.add_argument("--quick", action="store_true", help="short runs: every headline in about 90 s")
    ap.add_argument("--kafka", help="bootstrap host:port (default: start tools/kafka-broker on port 19392)")
    ap.add_argument("--no-kafka", action="store_true", help="skip the Kafka cases")
    ap.add_argument("--write", action="store_true", help="write tools/bench/runtime_results.md")
    args = ap.parse_args()
    seconds = args.seconds or (2.5 if args.quick else 14.0)
    args.ss_batch = args.ss_batch or (1_000_000 if args.quick else 2_000_000)
    ss_seconds = args.ss_seconds or (4.0 if args.quick else 20.0)
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
    runs: dict[str, list[dict]] = {c[0]: [] for c in cases}
    runs[SS] = []
    rec = None
    common = {"batch": args.batch, "keys": args.keys, "timeout": timeout}
    try:
        print("warm-up (not counted)", flush=True)
        run_ss(spark, args.ss_batch, args.keys, min(ss_seconds, 6.0))
        run_ours(spark, "files", interval=1.0, seconds=2.0, **common)
        for rnd in range(args.rounds):
            print(f"round {rnd + 1}/{args.rounds} ({Load()})", flush=True)
            for case, channels, interval, chaining in cases:
                r = run_ours(spark, channels, interval=interval, seconds=seconds, chaining=chaining, **common)
                runs[case].append(r)
                steady.add(case, 1 / r["rate"])
                e2e.add(case, 1 / r["end_to_end"])
                print(f"  {case:<48} {r['rate'] / 1e6:6.2f} M events/s (end to end {r['end_to_end'] / 1e6:.2f} M, "
                      f"{r['checkpoints']} checkpoints, {r['seconds']:.1f} s)", flush=True)
            r = run_ss(spark, args.ss_batch, args.keys, ss_seconds)
            runs[SS].append(r)
            steady.add(SS, 1 / r["rate"])
            e2e.add(SS, 1 / r["rate"])
            print(f"  {SS:<48} {r['rate'] / 1e6:6.2f} M events/s ({r['batches']} micro-batches)", flush=True)
        if not args.quick:
            rec = run_ours(spark, "files", interval=1.0, events=int(seconds * 10e6), kill=True, **common)
    finally:
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
    rows = []
    for case, rs in runs.items():
        rates = [r["rate"] for r in rs]
        vs = ratios.get((case, SS)) or (steady.ratio(case, SS) if case != SS else None)
        rows.append([case, f"{med(rates) / 1e6:.2f}M", f"{max(rates) / 1e6:.2f}M",
                     f"{vs.median:.2f}x" if vs else "",
                     f"{med([r['end_to_end'] for r in rs]) / 1e6:.2f}M" if case != SS else "",
                     f"{min(r['checkpoints'] for r in rs)}-{max(r['checkpoints'] for r in rs)}" if case != SS else "",
                     f"{med([r['seconds'] for r in rs]):.1f}" if case != SS else ""])
    table = format_table(["case", "median events/s", "best", "median vs SS (per round)", "end to end (median)",
                          "checkpoints", "seconds"], rows, markdown=True)
    per_round = format_table(["round", *[c for c in runs]],
                             [[i + 1, *[f"{runs[c][i]['rate'] / 1e6:.2f}M" for c in runs]] for i in range(args.rounds)],
                             markdown=True)
    cmd = " ".join(["tools/bench/bench_runtime.py", *sys.argv[1:]])
    text = [
        "# Runtime benchmark results",
        "",
        f"Command: `.venv/bin/python {cmd}`",
        "",
        f"Machine: {os.cpu_count()} cores (shared), Spark local[8], parallelism 2 per operator (8 tasks unchained, 4 "
        f"chained); each runtime case's sources run {seconds:g} s ({args.batch} rows per batch, {args.keys} keys); "
        f"Structured Streaming {ss_seconds:g} s per round; {args.rounds} interleaved rounds; {load}.",
        "",
        "Headlines (median of the per-round ratios; `_common.headline`):",
        "",
        *[f"    {h}" for h in heads],
        "",
        table,
        "",
        "Every round (steady events/s; Structured Streaming: rows / trigger time):",
        "",
        per_round,
        "",
    ]
    if rec is not None:
        k = rec["kill"]
        text += [
            "Recovery after SIGKILL of a source task's Python worker (checkpoint every second):",
            "",
            f"- failure noticed by the driver: {k['detected']:.2f} s after the kill",
            f"- next generation submitted: {k['restarted']:.2f} s after the kill",
            f"- first output committed after the restart: {k['first_output']:.2f} s after the kill"
            if k["first_output"] is not None else "- no output after the restart",
            "",
        ]
    print("\n".join(text))
    for h in heads:
        print(h, flush=True)
    if args.write:
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "runtime_results.md"), "w") as f:
            f.write("\n".join(text))


if __name__ == "__main__":
    main()
