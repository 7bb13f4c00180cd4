"""The main job: a Spark word count over generated click events, with a capture tap after the aggregation.

1. Spark (local, 2 cores, or the cluster of ``--master``/``$SPARK_MASTER``) counts words per epoch over
   generated events; a tap after the ``groupBy`` captures its output stream into ``./demo-log`` (one part
   per Spark partition, time = epoch) while the job goes on to pick each epoch's top word.
2. The log is replayed through the ``eventlog`` data source with another number of partitions (3 replay
   workers, records repartitioned by word), and each epoch is summarised once it is complete.
3. The job's and the replay's answers are compared.

    make demo                      # = .venv/bin/python examples/demo.py --log ./demo-log
    .venv/bin/python examples/demo.py --master spark://127.0.0.1:17077   # on tools/spark-cluster (docs/deploy.md)
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = str(Path(__file__).resolve().parent.parent)
for _path in (ROOT, str(Path(__file__).resolve().parent)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

STREAM = "word_counts"
WORDS = "spark kafka arrow avro timely frontier replay capture stream epoch".split()


def start_spark(partitions: int, master: str = "local[2]", confs: list[str] = ()):
    """A SparkSession on ``master`` whose Python workers use this interpreter and see this project
    (``examples/spark_session.py``)."""
    from spark_session import start_spark as start

    spark = start("eventlog-demo", master, {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": partitions,
        "spark.sql.adaptive.coalescePartitions.enabled": "false",   # keep 4 partitions: 4 parts
        "spark.sql.session.timeZone": "UTC",
    }, confs)
    spark.sparkContext.setLogLevel("ERROR")
    from connectors.spark import register

    register(spark)
    return spark


def _replay_command() -> str:
    """How to call the ``replay`` CLI from here: ``replay`` when it is on PATH and is this environment's,
    else its path in this environment (``make demo`` installs it in .venv/bin, which is not on PATH)."""
    mine = os.path.join(os.path.dirname(sys.executable), "replay")
    on_path = shutil.which("replay")
    if on_path and os.path.realpath(on_path) == os.path.realpath(mine):
        return "replay"
    rel = os.path.relpath(mine)
    return rel if not rel.startswith("..") else mine


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--log", default="./demo-log",
                   help="log directory or URI, e.g. s3://bucket/demo-log (default ./demo-log)")
    p.add_argument("--events", type=int, default=200_000, help="generated click events")
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--partitions", type=int, default=4, help="Spark partitions of the aggregation = parts")
    p.add_argument("--workers", type=int, default=3, help="replay workers = partitions of the replayed DataFrame")
    from spark_session import add_spark_options

    add_spark_options(p, "local[2]")
    args = p.parse_args()
    console = Console()
    log_dir = args.log if "://" in args.log else os.path.abspath(args.log)  # s3://…, file://… stay URIs

    from pyspark.sql import functions as F

    from capture import tap

    started = time.monotonic()
    spark = start_spark(args.partitions, args.master, args.conf)
    words = F.array(*[F.lit(w) for w in WORDS])
    events = spark.range(args.events).select(
        (F.col("id") % args.epochs).alias("epoch"),
        F.element_at(words, (F.abs(F.hash("id")) % len(WORDS) + 1).cast("int")).alias("word"),
        (F.abs(F.hash("id", F.lit(7))) % 1500 + 40).alias("bytes"),
    )
    counts = events.groupBy("epoch", "word").agg(F.count("*").alias("clicks"), F.sum("bytes").alias("bytes"))
    # the tap: same rows and schema; each partition of the aggregation becomes a part of the stream
    counts = tap(counts, log_dir, STREAM, time="epoch", replace=True)
    top_word = F.max_by("word", F.struct("clicks", "word")).alias("top")  # ties broken by word: deterministic
    top = counts.groupBy("epoch").agg(top_word, F.sum("clicks").alias("clicks")).orderBy("epoch").collect()
    job = {r["epoch"]: (r["top"], r["clicks"]) for r in top}
    console.print(f"[bold]job[/bold]: counted {args.events:,} events over {args.epochs} epochs with "
                  f"{args.partitions} partitions on {args.master}; the tap captured them into {log_dir}/{STREAM}")

    replayed = (spark.read.format("eventlog").option("workers", args.workers)
                .option("mode", "repartition").option("key", "word").load(f"{log_dir}/{STREAM}"))
    per_time = (replayed.groupBy("_time").agg(
        F.count("*").alias("records"),
        F.countDistinct("_part").alias("parts"),
        F.sum("clicks").alias("clicks"),
        F.max_by("word", F.struct("clicks", "word")).alias("top"),
        F.max("_seq").alias("last_seq"),
    ).orderBy("_time").collect())
    table = Table(title=f"{STREAM} replayed by {replayed.rdd.getNumPartitions()} workers (repartitioned by word)")
    for col in ("time (epoch)", "records", "from parts", "clicks", "top word", "same as job"):
        table.add_column(col)
    same = True
    for r in per_time:
        ok = job.get(r["_time"]) == (r["top"], r["clicks"])
        same &= ok
        table.add_row(str(r["_time"]), str(r["records"]), str(r["parts"]), f"{r['clicks']:,}", r["top"],
                      "yes" if ok else "[red]NO[/red]")
    console.print(table)
    spark.stop()
    verdict = "[green]every epoch matches the job[/green]" if same and len(per_time) == len(job) else \
        "[red]the replay differs from the job[/red]"
    console.print(f"{verdict} ({time.monotonic() - started:.0f} s)")
    replay = _replay_command()
    console.print(f"look at the log:  {replay} ls {args.log}   |   {replay} cat {args.log} {STREAM} -n 5")
    if replay != "replay":
        console.print(f"({replay} is the CLI of this environment; `source {os.path.dirname(replay)}/activate` puts "
                      "`replay` on PATH)")
    console.print(f"the stream folder is a dataset: pyarrow.dataset.dataset('{args.log}/{STREAM}', format='arrow', "
                  "partitioning='hive') reads it (Arrow IPC files with _time and _seq columns, part=N folders); "
                  "the format is specified in schemas/FORMAT.md")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
