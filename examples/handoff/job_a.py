"""Job A of the cross-job handoff: 4 workers capture a stream of sensor readings into a Kafka log.

    python examples/handoff/job_a.py --log kafka://127.0.0.1:19092/handoff --epochs 40

Each worker sends its readings of epoch t at time t, then advance_to(t + 1), which returns once Kafka has
acknowledged both. Restarted after a crash (even SIGKILL), each worker reopens its part: the frontier comes
back from the log and the worker sends every epoch from there on again — the log voids what the crashed run
had sent of an epoch it did not complete (FORMAT.md §1.1), so job B sees each epoch once, whatever the
source reads the second time. A worker that fails makes the job exit with status 1.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time

import pyarrow as pa

from capture import Capture
from eventlog import ProgressError, open_log

STREAM = "readings"
SCHEMA = pa.schema([("sensor", pa.int64()), ("value", pa.float64())])
BATCHES_PER_EPOCH = 2


def readings(worker: int, epoch: int, batch: int) -> list[dict]:
    """What worker ``worker`` reads in ``batch`` of ``epoch``."""
    return [{"sensor": worker * 100 + s, "value": float(epoch * 1000 + batch * 10 + s)} for s in range(5)]


def worker(uri: str, w: int, peers: int, epochs: int, delay: float) -> None:
    log = open_log(uri)
    try:
        cap = Capture(log, STREAM, worker=w, peers=peers, schema=SCHEMA)
    except ProgressError:  # the part finished in an earlier run
        return
    with cap:
        (start,) = cap.frontier
        for epoch in range(start, epochs):
            for b in range(BATCHES_PER_EPOCH):
                cap.send(epoch, readings(w, epoch, b))
            cap.advance_to(epoch + 1)
            time.sleep(delay)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--log", required=True, help="log URI, e.g. kafka://127.0.0.1:19092/handoff")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--epochs", type=int, default=40)
    p.add_argument("--delay", type=float, default=0.05, help="seconds between epochs")
    args = p.parse_args()
    failures: list[str] = []

    def run(w: int) -> None:
        try:
            worker(args.log, w, args.workers, args.epochs, args.delay)
        except BaseException as e:  # noqa: BLE001 - reported, and the job fails
            failures.append(f"worker {w}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=run, args=(w,)) for w in range(args.workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        print("job A failed:\n  " + "\n  ".join(failures), file=sys.stderr, flush=True)
        sys.exit(1)
    print(f"job A: {args.workers} workers captured {args.epochs} epochs into {args.log}/{STREAM}", flush=True)


if __name__ == "__main__":
    main()
