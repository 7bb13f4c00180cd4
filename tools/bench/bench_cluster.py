"""The streaming runtime on a Spark standalone cluster vs Structured Streaming on the same cluster, same run.

    .venv/bin/python tools/bench/bench_cluster.py [--events 20000000] [--rounds 3] [--port 17577] [--write]

The benchmark starts its own cluster with ``tools/spark-cluster`` (a master and two workers on 127.0.0.1,
4 cores and 1 GB each: two executor JVMs, 8 task slots; stopped at the end) and one SparkSession on it
(driver on 127.0.0.1, executors 1 GB, 2 shuffle partitions). Pipeline (both systems, as in
``bench_runtime.py``): source -> map (k = value % keys) -> keyed count -> sink, parallelism 2.

* runtime: ``bench_runtime.build`` — 2 generator parts of Arrow batches of ``--batch`` int64 values -> ``map_batches``
  -> ``key_by("k").count()`` -> a callable sink, every operator at parallelism 2, each instance a barrier task
  on the executors (8 tasks, file channels on the shared disk, a checkpoint every second); and *chained*
  (``chaining=True``: 4 tasks). Rate: steady (events completed between checkpoint commits) or end to end.
* Structured Streaming: ``rate-micro-batch`` (``--ss-batch`` rows per micro-batch, 2 partitions) ->
  ``value % keys`` -> ``groupBy("k").count()`` -> ``noop`` sink, update mode, on the same executors (as
  ``bench_runtime.run_ss``); rate = rows / trigger time of the micro-batches after 2 warm-up ones, run
  until ``--ss-batches`` were measured (at most ``--ss-seconds``).
* Recovery: the executor JVM on worker 1 is SIGKILLed once the job committed its first output; the times
  from the kill to the failure being noticed, to the next generation's start (after waiting for the
  replacement executor's slots), and to the first output committed after the restart.

The cases are interleaved in each of ``--rounds`` rounds; each round prints the machine's load average and
the ratios against Structured Streaming measured in that round; the table reports each case's best round.
``--write`` writes ``tools/bench/cluster_results.md``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from _common import format_table, verdict  # noqa: E402
from bench_runtime import build, run_ours  # noqa: E402

TOOL = os.path.join(ROOT, "tools", "spark-cluster")


def ratio(a: float, b: float) -> str:
    """``a / b`` as ``1.23x``; ``-`` when ``b`` measured nothing."""
    return f"{a / b:.2f}x" if b else "-"


def load() -> str:
    """The 1, 5 and 15 minute load averages."""
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


def tool(port: int, data: str, *args: str) -> str:
    proc = subprocess.run([sys.executable, TOOL, *args, "--port", str(port), "--data", data], capture_output=True,
                          text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"tools/spark-cluster {' '.join(args)} failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout.strip()


def session(master: str):
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(master).appName("bench-cluster")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.executor.memory", "1g").config("spark.driver.memory", "2g")
             .config("spark.executorEnv.PYTHONPATH", ROOT)
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.python.daemon.module", "runtime.executors.spark_daemon").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    from runtime.executors.spark import spark_slots

    deadline = time.monotonic() + 120
    while spark_slots(spark) < 8:
        if time.monotonic() > deadline:
            raise SystemExit(f"the cluster's executors offer {spark_slots(spark)} of 8 slots after 120 s")
        time.sleep(0.1)
    return spark


def run_ss(spark, ss_batch: int, keys: int, batches: int, seconds: float) -> dict:
    """Structured Streaming's rate on the same pipeline (see the module doc)."""
    ck = tempfile.mkdtemp(prefix="bench-ss-")
    df = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", ss_batch)
          .option("numPartitions", 2).load())
    q = (df.selectExpr(f"value % {keys} as k").groupBy("k").count()
         .writeStream.format("noop").outputMode("update").option("checkpointLocation", ck).start())
    t0 = time.time()
    while time.time() - t0 < seconds and len([p for p in q.recentProgress if p["numInputRows"]]) < batches + 2:
        time.sleep(0.2)
    q.stop()
    ps = [p for p in q.recentProgress if p["numInputRows"]][2:]
    rows = sum(p["numInputRows"] for p in ps)
    ms = sum(p["durationMs"]["triggerExecution"] for p in ps)
    shutil.rmtree(ck, ignore_errors=True)
    return {"rate": rows / ms * 1000 if ms else 0.0, "rows": rows, "batches": len(ps)}


def run_killed(spark, port: int, data: str, events: int, batch: int, keys: int) -> dict:
    """The runtime job with the executor JVM of worker 1 SIGKILLed once the first output was committed."""
    work = tempfile.mkdtemp(prefix="bench-cl-")
    marks = os.path.join(work, "marks")
    os.makedirs(marks)
    job = build(f"benchkill{uuid.uuid4().hex[:6]}", events, batch, keys, marks)
    killed: list[float] = []

    def killer() -> None:
        deadline = time.monotonic() + 300
        while not os.path.exists(os.path.join(marks, "commits")) and time.monotonic() < deadline:
            time.sleep(0.005)
        killed.append(time.time())
        tool(port, data, "kill-executor", "--app", spark.sparkContext.applicationId, "--worker", "1")

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    result = job.run(spark, channels=os.path.join(work, "ch"), checkpoints=os.path.join(work, "ck"),
                     checkpoint_interval=1.0, timeout=900)
    t.join(30)
    commits = [float(line.split()[0]) for line in open(os.path.join(marks, "commits"))]
    shutil.rmtree(work, ignore_errors=True)
    k = killed[0]
    if len(result.generation_starts) < 2:
        return {"restarts": result.restarts, "failure": "the job ended before the kill took effect", "detected": None,
                "slot_wait": None, "restarted": None, "first_output": None}
    # the second generation is submitted once its slots are there; output committed after that is its own
    submitted = result.generation_starts[1] + result.slot_waits[1]
    after = sorted(c for c in commits if c > submitted)
    return {
        "restarts": result.restarts,
        "failure": result.failures[0],
        "detected": result.failure_times[0] - k,
        "slot_wait": result.slot_waits[1],
        "restarted": submitted - k,
        "first_output": after[0] - k if after else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=20_000_000)
    ap.add_argument("--batch", type=int, default=65536, help="rows per source batch")
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--ss-batch", type=int, default=2_000_000, help="rows per Structured Streaming micro-batch")
    ap.add_argument("--ss-batches", type=int, default=8, help="Structured Streaming micro-batches measured")
    ap.add_argument("--ss-seconds", type=float, default=90.0, help="at most this long per Structured Streaming run")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--port", type=int, default=17577, help="the cluster's master port (tools/spark-cluster)")
    ap.add_argument("--write", action="store_true", help="write tools/bench/cluster_results.md")
    args = ap.parse_args()

    data = tempfile.mkdtemp(prefix=f"bench-spark-{args.port}-")
    print(f"starting the cluster: {tool(args.port, data, 'start', '--workers', '2', '--cores', '4', '--memory', '1g')}",
          flush=True)
    spark = None
    rounds: list[dict] = []
    best: dict[str, dict] = {}
    try:
        spark = session(f"spark://127.0.0.1:{args.port}")
        cases = {
            "runtime, file channels, checkpoint 1 s": lambda: run_ours(spark, "files", args.events, args.batch,
                                                                       args.keys, 1.0),
            "runtime chained, file channels, checkpoint 1 s": lambda: run_ours(
                spark, "files", args.events, args.batch, args.keys, 1.0, chaining=True),
            "Structured Streaming": lambda: run_ss(spark, args.ss_batch, args.keys, args.ss_batches, args.ss_seconds),
        }
        for rnd in range(args.rounds):
            row = {"load_before": load()}
            for case, fn in cases.items():
                r = fn()
                row[case] = r
                if case not in best or r["rate"] > best[case]["rate"]:
                    best[case] = r
            row["load_after"] = load()
            rounds.append(row)
            ss = row["Structured Streaming"]["rate"]
            print(f"round {rnd + 1}/{args.rounds} (load {row['load_before']} -> {row['load_after']}): " + ", ".join(
                f"{c} {row[c]['rate'] / 1e6:.2f}M ({ratio(row[c]['rate'], ss)})" for c in cases), flush=True)
        kill = run_killed(spark, args.port, data, 2 * args.events, args.batch, args.keys)
        print(f"recovery: {kill}", flush=True)
    finally:
        if spark is not None:
            spark.stop()
        print(tool(args.port, data, "stop"), flush=True)
        shutil.rmtree(data, ignore_errors=True)

    ss_best = best["Structured Streaming"]["rate"]
    table = format_table(
        ["case", "best events/s", "vs SS (best rounds)", "goal 2x", "end-to-end events/s"],
        [[case, f"{r['rate'] / 1e6:.2f}M", ratio(r["rate"], ss_best),
          verdict(r["rate"] / ss_best, 2.0) if case.startswith("runtime") and ss_best else "",
          f"{r['end_to_end'] / 1e6:.2f}M" if "end_to_end" in r else ""] for case, r in best.items()],
        markdown=True)
    per_round = format_table(
        ["round", "load before", "load after", "runtime", "chained", "Structured Streaming", "runtime / SS",
         "chained / SS"],
        [[i + 1, row["load_before"], row["load_after"], *(f"{row[c]['rate'] / 1e6:.2f}M" for c in cases),
          *(ratio(row[c]["rate"], row["Structured Streaming"]["rate"]) for c in list(cases)[:2])]
         for i, row in enumerate(rounds)], markdown=True)

    def secs(x: float | None) -> str:
        return "-" if x is None else f"{x:.2f} s"

    text = [
        "# Cluster benchmark results",
        "",
        f"Command: `.venv/bin/python tools/bench/bench_cluster.py --events {args.events} --batch {args.batch} "
        f"--keys {args.keys} --ss-batch {args.ss_batch} --ss-batches {args.ss_batches} --ss-seconds {args.ss_seconds:g} "
        f"--rounds {args.rounds} "
        f"--port {args.port} --write`",
        "",
        f"Machine: {os.cpu_count()} cores (shared with other developers' runs: see the load averages). Spark standalone "
        f"cluster from tools/spark-cluster: a master and 2 workers x 4 cores x 1 GB on 127.0.0.1 (two executor JVMs, "
        f"8 task slots), driver on 127.0.0.1; parallelism 2 per operator; {args.events:,} events per runtime run, "
        f"{args.batch} rows per batch, {args.keys} keys; Structured Streaming {args.ss_batch:,} rows per micro-batch, "
        f"{args.ss_batches} measured after 2 warm-up ones; {args.rounds} interleaved rounds.",
        "",
        table,
        "",
        "Every round (events/s; ratios against Structured Streaming in the same round):",
        "",
        per_round,
        "",
        f"Recovery after SIGKILL of the executor JVM on worker 1 once the job committed its first output (runtime, "
        f"file channels, checkpoint every second, {2 * args.events:,} events):",
        "",
        f"- failure noticed by the driver: {secs(kill['detected'])} after the kill "
        f"({kill['failure'].split(' (Spark:')[0][:200]})",
        f"- waited for task slots (the replacement executor): {secs(kill['slot_wait'])}",
        f"- next generation submitted (after that wait): {secs(kill['restarted'])} after the kill",
        f"- first output the new generation committed: {secs(kill['first_output'])} after the kill",
        f"- restarts: {kill['restarts']}",
        "",
    ]
    print("\n".join(text))
    if args.write:
        with open(os.path.join(HERE, "cluster_results.md"), "w") as f:
            f.write("\n".join(text))


if __name__ == "__main__":
    main()
