"""The capture tap on a Spark standalone cluster writing to an S3 server vs ``df.write.parquet`` to the same server.

    .venv/bin/python tools/bench/bench_s3_tap.py [--rows 4000000] [--partitions 8] [--rounds 5]
                                                 [--port 17177] [--s3-port 17985]

The benchmark starts its own S3 server (``tools/s3-server start --port S3_PORT``: moto's server, every object in
its memory) and its own cluster (``tools/spark-cluster start --port PORT --data /tmp/bench-spark-PORT``: a master
and two workers on 127.0.0.1, 2 cores and 1 GB each), and stops both at the end. One SparkSession on the cluster
(executors 1 GB) gets the server's client settings twice: ``spark.executorEnv.AWS_*`` for eventlog's writers in
the executors' Python workers, and ``spark.hadoop.fs.s3a.*`` (path-style access, plain HTTP) for Spark's own
``s3a://`` filesystem, which comes from ``hadoop-aws`` of the Hadoop version pyspark bundles
(``spark.jars.packages``; fetched once from Maven Central into the Ivy cache ``~/.cache/eventlog/ivy``).

The same DataFrame — ``--rows`` rows of (``id`` bigint, ``k`` = id % 1000, ``word`` string, ``x`` double,
``t`` = id % 8) in ``--partitions`` partitions, computed from ``spark.range`` each time — goes

* **tap**: ``tap(df, "s3://bench/tap-R", "rows", time="t")`` consumed by a ``noop`` write: every partition is
  staged as objects on S3 by its task and published (its segment objects copied under the conditional create),
  one part per partition, 8 times per part;
* **tap (jvm)**: the same with ``engine="jvm"`` (``connectors/spark/jvm``): the rows stay in the executor JVMs,
  each task stages its part on its local disk and publishes it with conditional puts;
* **parquet**: ``df.write.parquet("s3a://bench/parquet-R")`` (Spark's default committer: task and job commits
  copy the files on S3, as s3a renames);
* **noop**: ``df.write.format("noop")``, the cost of computing and moving the rows to Python and back
  without storing them (a floor for the tap, not a competitor).

and then is read back (``--no-read`` skips these): **read (jvm)** = ``read_log(spark, uri, engine="jvm")`` of
round 0's JVM-tapped stream, **read (python)** = the ``eventlog`` data source on it, **read parquet** =
``spark.read.parquet`` of round 0's parquet files, each consumed by a ``noop`` write.

Cases are interleaved in each of ``--rounds`` rounds (the order rotates per round). Each round prints the load
average before and after and its times; the table gives best, median and spread ((worst - best) / best) per
case, and tap / parquet (and JVM tap / parquet, JVM read / parquet read) from the best times, the medians and
the median of same-round ratios. The first
round checks what was stored (row counts read back through the ``eventlog`` data source and ``spark.read.parquet``).
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from _common import Samples, fmt_bytes, fmt_count_rate, format_table  # noqa: E402

CLUSTER = os.path.join(ROOT, "tools", "spark-cluster")
S3 = os.path.join(ROOT, "tools", "s3-server")
IVY = os.path.expanduser("~/.cache/eventlog/ivy")
BUCKET = "bench"


def load() -> str:
    """The 1, 5 and 15 minute load averages."""
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


def run(tool: str, *args: str) -> str:
    proc = subprocess.run([sys.executable, tool, *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{os.path.basename(tool)} {' '.join(args)} failed: "
                         f"{proc.stderr.strip()[-2000:] or proc.stdout.strip()[-2000:]}")
    return proc.stdout.strip()


def hadoop_version() -> str:
    """The Hadoop version pyspark bundles (its ``hadoop-client-api-<v>.jar``): hadoop-aws must match it."""
    import pyspark

    jars = glob.glob(os.path.join(os.path.dirname(pyspark.__file__), "jars", "hadoop-client-api-*.jar"))
    if not jars:
        raise SystemExit("pyspark bundles no hadoop-client-api jar: cannot pick a hadoop-aws version")
    return os.path.basename(jars[0])[len("hadoop-client-api-"):-len(".jar")]


def session(master: str, env: dict[str, str]):
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    endpoint = env["AWS_ENDPOINT_URL"]
    b = (SparkSession.builder.master(master).appName("bench-s3-tap")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.executor.memory", "1g").config("spark.driver.memory", "1g")
         .config("spark.executorEnv.PYTHONPATH", ROOT)
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
         .config("spark.jars.packages", f"org.apache.hadoop:hadoop-aws:{hadoop_version()}")
         .config("spark.jars.ivy", IVY)
         .config("spark.hadoop.fs.s3a.endpoint", endpoint)
         .config("spark.hadoop.fs.s3a.endpoint.region", env["AWS_REGION"])
         .config("spark.hadoop.fs.s3a.path.style.access", "true")
         .config("spark.hadoop.fs.s3a.connection.ssl.enabled", "false")
         .config("spark.hadoop.fs.s3a.access.key", env["AWS_ACCESS_KEY_ID"])
         .config("spark.hadoop.fs.s3a.secret.key", env["AWS_SECRET_ACCESS_KEY"])
         .config("spark.hadoop.fs.s3a.aws.credentials.provider",
                 "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider")
         .config("spark.hadoop.fs.s3a.change.detection.mode", "none"))
    for k, v in env.items():
        b = b.config(f"spark.executorEnv.{k}", v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    from connectors.spark import register

    register(spark)
    return spark


def wait_for_executors(spark, slots: int, timeout: float = 120.0) -> None:
    from runtime.executors.spark import spark_slots

    deadline = time.monotonic() + timeout
    while spark_slots(spark) < slots:
        if time.monotonic() > deadline:
            raise SystemExit(f"the cluster's executors offer {spark_slots(spark)} of {slots} slots")
        time.sleep(0.2)


def frame(spark, rows: int, partitions: int):
    return spark.range(0, rows, 1, partitions).selectExpr(
        "id", "id % 1000 as k", "concat('w', cast(id % 997 as string)) as word", "cast(id * 7 % 1000003 as double) as x",
        "id % 8 as t")


def stored(uri: str) -> int:
    import pyarrow.fs as pafs

    fs, path = pafs.FileSystem.from_uri(uri)
    return sum(i.size or 0 for i in fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
               if i.type == pafs.FileType.File)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--port", type=int, default=17177, help="the cluster's master port (tools/spark-cluster)")
    ap.add_argument("--s3-port", type=int, default=17985, help="the S3 server's port (tools/s3-server)")
    ap.add_argument("--cores", type=int, default=2, help="cores each of the two workers offers")
    ap.add_argument("--no-read", action="store_true", help="time the writes only")
    args = ap.parse_args()

    data = f"/tmp/bench-spark-{args.port}"
    s3_data = f"/tmp/bench-s3-{args.s3_port}"
    print(run(S3, "start", "--port", str(args.s3_port), "--data", s3_data, "--bucket", BUCKET), flush=True)
    env = dict(line.removeprefix("export ").split("=", 1)
               for line in run(S3, "env", "--port", str(args.s3_port)).splitlines() if "=" in line)
    os.environ.update(env)
    spark = None
    samples = Samples()
    same_round: dict[str, list[float]] = {}
    sizes: dict[str, int] = {}
    try:
        print(run(CLUSTER, "start", "--port", str(args.port), "--data", data, "--workers", "2", "--cores",
                  str(args.cores), "--memory", "1g"), flush=True)
        spark = session(f"spark://127.0.0.1:{args.port}", env)
        wait_for_executors(spark, 2 * args.cores)
        from capture import tap

        df = frame(spark, args.rows, args.partitions)

        def ours(r: int) -> None:
            tap(df, f"s3://{BUCKET}/tap-{r}", "rows", time="t", engine="python").write.format("noop").mode("overwrite").save()

        def ours_jvm(r: int) -> None:
            tap(df, f"s3://{BUCKET}/jvm-{r}", "rows", time="t", engine="jvm").write.format("noop") \
                .mode("overwrite").save()

        def parquet(r: int) -> None:
            df.write.parquet(f"s3a://{BUCKET}/parquet-{r}")

        def noop(r: int) -> None:
            df.write.format("noop").mode("overwrite").save()

        from connectors.spark.jvm.read import read_log

        def read_jvm(r: int) -> None:
            read_log(spark, f"s3://{BUCKET}/jvm-0/rows", engine="jvm").write.format("noop").mode("overwrite").save()

        def read_python(r: int) -> None:
            read_log(spark, f"s3://{BUCKET}/jvm-0/rows", engine="python").write.format("noop").mode("overwrite") \
                .save()

        def read_parquet(r: int) -> None:
            spark.read.parquet(f"s3a://{BUCKET}/parquet-0").write.format("noop").mode("overwrite").save()

        cases = {"tap to s3://": ours, "df.write.parquet to s3a://": parquet, "tap (jvm) to s3://": ours_jvm,
                 "noop (no storage)": noop}
        reads = {"read (jvm)": read_jvm, "read (python)": read_python, "read parquet": read_parquet}
        ours(-1)   # warm-up: executors' Python workers, the s3a classes, the JVM tap's jar, the server
        parquet(-1)
        ours_jvm(-1)
        names = list(cases)
        pairs = {"tap / parquet": (names[0], names[1]), "JVM tap / parquet": (names[2], names[1])}
        for r in range(args.rounds):
            before = load()
            took = {}
            for name in names[r % len(names):] + names[:r % len(names)]:
                t0 = time.perf_counter()
                cases[name](r)
                took[name] = time.perf_counter() - t0
                samples.add(name, took[name])
            if r == 0:
                got = spark.read.format("eventlog").load(f"s3://{BUCKET}/tap-0/rows").count()
                got_jvm = spark.read.format("eventlog").load(f"s3://{BUCKET}/jvm-0/rows").count()
                pq = spark.read.parquet(f"s3a://{BUCKET}/parquet-0").count()
                if got != args.rows or pq != args.rows or got_jvm != args.rows:
                    raise SystemExit(f"stored rows: tap {got}, JVM tap {got_jvm}, parquet {pq}; expected {args.rows}")
                sizes = {names[0]: stored(f"s3://{BUCKET}/tap-0"), names[1]: stored(f"s3://{BUCKET}/parquet-0"),
                         names[2]: stored(f"s3://{BUCKET}/jvm-0")}
                if not args.no_read:
                    names += list(reads)
                    cases.update(reads)
                    pairs["JVM read / parquet read"] = ("read (jvm)", "read parquet")
                    for name in reads:  # warm-up
                        cases[name](r)
                    for name in reads:
                        t0 = time.perf_counter()
                        cases[name](r)
                        took[name] = time.perf_counter() - t0
                        samples.add(name, took[name])
            for label, (a, b) in pairs.items():
                same_round.setdefault(label, []).append(took[a] / took[b])
            print(f"round {r + 1}/{args.rounds} (load {before} -> {load()}): "
                  + ", ".join(f"{n} {t:.2f} s" for n, t in took.items())
                  + "".join(f"; {label} {v[-1]:.2f}" for label, v in same_round.items()), flush=True)
            if r == 0:
                print(f"checked: {args.rows} rows read back from each; stored "
                      + ", ".join(f"{n} {fmt_bytes(b)}" for n, b in sizes.items()), flush=True)
    finally:
        if spark is not None:
            spark.stop()
        print(run(CLUSTER, "stop", "--port", str(args.port), "--data", data), flush=True)
        shutil.rmtree(data, ignore_errors=True)
        print(run(S3, "stop", "--port", str(args.s3_port), "--data", s3_data), flush=True)

    rows = [[n, f"{samples.best(n):.2f}", f"{samples.median(n):.2f}", f"{samples.spread(n):.0%}",
             fmt_count_rate(args.rows, samples.best(n)), fmt_bytes(sizes[n]) if n in sizes else ""] for n in names]
    print()
    print(f"{args.rows} rows, {args.partitions} partitions, {args.rounds} rounds, cluster 2 workers x {args.cores} "
          f"cores, load now {load()}")
    print(format_table(["case", "best s", "median s", "spread", "rows/s (best)", "stored"], rows, markdown=True))
    print()
    for label, (a, b) in pairs.items():
        v = same_round[label]
        print(f"{label}: best {samples.best(a) / samples.best(b):.2f}x, median "
              f"{samples.median(a) / samples.median(b):.2f}x, same-round median "
              f"{statistics.median(v):.2f}x (range {min(v):.2f}-{max(v):.2f}); time ratios, below 1 means ours is "
              "faster")


if __name__ == "__main__":
    main()
