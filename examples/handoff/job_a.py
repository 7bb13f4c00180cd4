"""Job A of the cross-job handoff: 4 workers capture a stream of sensor readings into a Kafka log.

    python examples/handoff/job_a.py --log kafka://127.0.0.1:19092/handoff --epochs 40

Each worker sends its readings of epoch t at time t, then advance_to(t + 1), which returns once Kafka has
acknowledged both. Restarted after a crash (even SIGKILL), each worker resumes its part: the frontier and
the next sequence id come back from the log, and batches of the open epoch that already reached the log
are not sent again. So job B sees every record exactly once.
"""

from __future__ import annotations

import argparse
import threading
import time

import pyarrow as pa

from capture import Capture
from eventlog import Messages, open_log

STREAM = "readings"
SCHEMA = pa.schema([("sensor", pa.int64()), ("value", pa.float64())])
BATCHES_PER_EPOCH = 2


def readings(worker: int, epoch: int, batch: int) -> list[dict]:
    """Deterministic data: what worker ``worker`` reads in ``batch`` of ``epoch``."""
    return [{"sensor": worker * 100 + s, "value": float(epoch * 1000 + batch * 10 + s)} for s in range(5)]


def already_sent(log, worker: int, epoch: int) -> int:  # noqa: ANN001
    """How many batches of ``epoch`` this worker's part already holds (written before a crash)."""
    return sum(1 for e in log.reader(STREAM, worker) if isinstance(e.event, Messages) and e.event.time == epoch)


def worker(uri: str, w: int, peers: int, epochs: int, delay: float) -> None:
    log = open_log(uri)
    with Capture(log, STREAM, worker=w, peers=peers, schema=SCHEMA) as cap:
        (start,) = cap.frontier
        skip = already_sent(log, w, start) if cap.next_seq > 1 else 0
        for epoch in range(start, epochs):
            for b in range(skip, BATCHES_PER_EPOCH):
                cap.send(epoch, readings(w, epoch, b))
            skip = 0
            cap.advance_to(epoch + 1)
            time.sleep(delay)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--log", required=True, help="log URI, e.g. kafka://127.0.0.1:19092/handoff")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--epochs", type=int, default=40)
    p.add_argument("--delay", type=float, default=0.05, help="seconds between epochs")
    args = p.parse_args()
    threads = [threading.Thread(target=worker, args=(args.log, w, args.workers, args.epochs, args.delay))
               for w in range(args.workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"job A: {args.workers} workers captured {args.epochs} epochs into {args.log}/{STREAM}", flush=True)


if __name__ == "__main__":
    main()
