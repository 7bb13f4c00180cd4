"""The main job on embedded defaults: four Python workers count words per epoch and capture their output
stream into a file log; then the log is read back and each epoch is shown once every part has passed it.

    make demo                      # = .venv/bin/python examples/demo.py --log ./demo-log
"""

from __future__ import annotations

import argparse
import collections
import random
import shutil
import threading
from pathlib import Path

import pyarrow as pa
from rich.console import Console
from rich.table import Table

from capture import Capture
from eventlog import Messages, MutableAntichain, open_log

STREAM = "word_counts"
SCHEMA = pa.schema([("word", pa.string()), ("count", pa.int64())])
WORDS = "spark kafka arrow avro timely frontier replay capture stream epoch".split()


def worker(log_uri: str, index: int, peers: int, epochs: int, seed: int) -> None:
    """One worker: for each epoch, count the words of its shard and send them at time = epoch."""
    rng = random.Random(seed * 1000 + index)
    with Capture(open_log(log_uri), STREAM, worker=index, peers=peers, schema=SCHEMA) as cap:
        for epoch in range(epochs):
            counts = collections.Counter(rng.choice(WORDS) for _ in range(rng.randint(50, 200)))
            cap.send(epoch, [{"word": w, "count": c} for w, c in sorted(counts.items())])
            cap.advance_to(epoch + 1)  # epoch is complete for this worker; durable when this returns


def read_back(log_uri: str, console: Console) -> None:
    """Read every part, track the merged frontier, and summarise each epoch once it is complete."""
    log = open_log(log_uri)
    header = log.header(STREAM)
    frontier = MutableAntichain([(header.time_type.minimum, header.peers)])  # every part starts at time 0
    pending: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    rows_per_part: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    table = Table(title=f"{STREAM}: {header.peers} parts, {header.encoding} encoding")
    for col in ("epoch", "records", "per part", "top word", "distinct words"):
        table.add_column(col)
    events = 0
    for part in range(header.peers):
        for entry in log.reader(STREAM, part):
            events += 1
            if isinstance(entry.event, Messages):
                t = entry.event.time
                for r in entry.event.records.to_pylist():
                    pending[t][r["word"]] += r["count"]
                rows_per_part[t][part] += entry.event.records.num_rows
            else:
                frontier.update_iter(entry.event.updates)
    for t in sorted(pending):
        if frontier.less_equal(t):
            continue  # not complete: some part may still send at t
        word, n = pending[t].most_common(1)[0]
        per_part = " ".join(str(rows_per_part[t][p]) for p in range(header.peers))
        table.add_row(str(t), str(sum(rows_per_part[t].values())), per_part, f"{word} ({n})", str(len(pending[t])))
    console.print(table)
    console.print(f"{events} events read; merged frontier: {list(frontier.frontier) or 'empty (all parts finished)'}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--log", default="./demo-log", help="log directory (default ./demo-log)")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args()
    console = Console(stderr=False)
    shutil.rmtree(Path(args.log) / STREAM, ignore_errors=True)  # the demo starts its stream afresh
    threads = [
        threading.Thread(target=worker, args=(args.log, i, args.workers, args.epochs, args.seed))
        for i in range(args.workers)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    console.print(f"captured {args.workers} workers x {args.epochs} epochs into {args.log}/{STREAM}")
    read_back(args.log, console)
    console.print(
        f"segments are plain Arrow IPC streams: {args.log}/{STREAM}/part-*/<first seq>.arrows "
        "(pyarrow.ipc.open_stream opens them); the format is specified in schemas/FORMAT.md"
    )


if __name__ == "__main__":
    main()
