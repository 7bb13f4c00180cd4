"""Job B of the cross-job handoff: 3 workers replay job A's stream from Kafka, following it live, and
handle each completed epoch exactly once (here: a per-epoch summary line per worker).

    python examples/handoff/job_b.py --log kafka://127.0.0.1:19092/handoff --out summary.txt

Job B uses its own parallelism (3 workers over job A's 4 parts, records repartitioned by sensor), and a
worker handles epoch t only when every part of job A has passed t: no partial epochs, even while job A
crashes and restarts. A worker that fails makes the job exit with status 1.
"""

from __future__ import annotations

import argparse
import sys
import threading

from eventlog import open_log
from replay import Replayer

STREAM = "readings"


def worker(uri: str, j: int, peers: int, out, lock: threading.Lock, timeout: float) -> None:  # noqa: ANN001
    r = Replayer(open_log(uri), STREAM, worker=j, peers=peers, mode="repartition", key="sensor",
                 follow=True, timeout=timeout)
    for epoch, table in r.completed():
        values = table.column("value").to_pylist()
        line = f"{j} {epoch} {table.num_rows} {sum(values):.1f}\n"
        with lock:
            out.write(line)
            out.flush()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--log", required=True)
    p.add_argument("--out", required=True, help="file receiving one line per (worker, completed epoch)")
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--timeout", type=float, default=120.0, help="give up after this long without events")
    args = p.parse_args()
    lock = threading.Lock()
    failures: list[str] = []

    def run(j: int, out) -> None:  # noqa: ANN001
        try:
            worker(args.log, j, args.workers, out, lock, args.timeout)
        except BaseException as e:  # noqa: BLE001 - reported, and the job fails
            failures.append(f"worker {j}: {type(e).__name__}: {e}")

    with open(args.out, "w") as out:
        threads = [threading.Thread(target=run, args=(j, out)) for j in range(args.workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    if failures:
        print("job B failed:\n  " + "\n  ".join(failures), file=sys.stderr, flush=True)
        sys.exit(1)
    print(f"job B: done, summary in {args.out}", flush=True)


if __name__ == "__main__":
    main()
