"""Child process of the exactly-once test: a job A whose source is nondeterministic.

Every run picks a random run id and, for every time it sends, a random number of records; each record
carries ``(run, t, i, n)``. It captures ``peers`` parts, interleaved, from each part's recovered frontier
(no hand-written skipping of what an earlier run sent), and sends part of the next time's records before
advancing (so a kill can land while a time's records are in the log but the time is not complete).

With ``--wait`` after the arguments it imports what it needs and then waits for a line on stdin before it
opens the log: the test starts the next run while the current one runs, so only the current one writes.
"""

from __future__ import annotations

import os
import random
import sys
import time
import uuid

# run by path (tests/support/nondeterministic_child.py): the repository root, two folders up, before anything imports from it
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import pyarrow as pa  # noqa: E402

from capture import Capture  # noqa: E402
from eventlog import ProgressError, open_log  # noqa: E402

SCHEMA = pa.schema([("run", pa.string()), ("t", pa.int64()), ("i", pa.int64()), ("n", pa.int64())])


def main(uri: str, peers: int, times: int, pause: float) -> None:
    run = uuid.uuid4().hex[:12]
    log = open_log(uri)
    caps = []
    for w in range(peers):
        try:
            caps.append(Capture(log, "numbers", w, peers, schema=SCHEMA))
        except ProgressError:  # the part finished in an earlier run: nothing left to send
            caps.append(None)
    plan: list[dict[int, int]] = [{} for _ in range(peers)]  # per part: time -> this run's record count
    sent: list[dict[int, int]] = [{} for _ in range(peers)]  # per part: time -> records this run sent

    def send(w: int, t: int, upto: int) -> None:
        n = plan[w].setdefault(t, random.randint(1, 6))
        while sent[w].get(t, 0) < min(upto, n):
            i = sent[w].get(t, 0)
            caps[w].send(t, [{"run": run, "t": t, "i": i, "n": n}])
            sent[w][t] = i + 1
            time.sleep(pause * random.random())

    print(f"run {run} from {[list(c.frontier) if c else [] for c in caps]}", flush=True)
    while True:
        live = [w for w in range(peers) if caps[w] is not None and not caps[w].frontier.is_empty()]
        if not live:
            break
        for w in live:
            (t,) = caps[w].frontier
            if t >= times:
                caps[w].close()
                continue
            send(w, t, 1 << 30)  # the rest of time t
            if t + 1 < times:
                send(w, t + 1, random.randint(0, 3))  # some of time t+1, before t completes
            caps[w].advance_to(t + 1)
            print(f"advanced {w} {t + 1}", flush=True)  # lets the test kill after a number of advances
    print("done", flush=True)


if __name__ == "__main__":
    if sys.argv[5:] == ["--wait"]:  # started ahead of its turn: imported, it waits for a line before it runs
        if sys.argv[1].startswith("kafka://"):
            import connectors.kafka.log  # noqa: F401
        if not sys.stdin.readline():
            sys.exit(0)  # never given its turn
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
