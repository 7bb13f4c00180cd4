"""The cross-job handoff, end to end, on a Kafka cluster you name (``make demo-handoff`` starts one):

1. job B (3 workers) starts first and follows the stream until job A's parts finish;
2. job A (4 workers) captures 30 epochs, is SIGKILLed mid-way, and is started again: its workers re-send every
   epoch from their parts' recovered frontiers, and the log voids what the killed run left of an epoch it had
   not completed;
3. job B's summary has each (worker, epoch) exactly once, every epoch whole: the walkthrough checks it.

    python examples/handoff/walkthrough.py --bootstrap 127.0.0.1:19092
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

HERE = os.path.dirname(os.path.abspath(__file__))
EPOCHS = 30


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bootstrap", required=True, help="bootstrap servers, e.g. 127.0.0.1:19092")
    args = p.parse_args()
    uri = f"kafka://{args.bootstrap}/walk{uuid.uuid4().hex[:6]}"
    env = {**os.environ, "PYTHONPATH": os.path.join(HERE, "..", "..") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = os.path.join(tempfile.mkdtemp(prefix="handoff-"), "summary.txt")
    job_a = [sys.executable, os.path.join(HERE, "job_a.py"), "--log", uri, "--epochs", str(EPOCHS)]
    print(f"log: {uri}\njob B follows, writing {out}", flush=True)
    b = subprocess.Popen([sys.executable, os.path.join(HERE, "job_b.py"), "--log", uri, "--out", out,
                          "--timeout", "120"], env=env)
    a = subprocess.Popen([*job_a, "--delay", "0.1"], env=env)
    from eventlog import EventLogError

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and a.poll() is None:  # kill it once it is well under way
        try:
            if max(_part_frontiers(uri)) >= EPOCHS // 3:
                break
        except EventLogError:  # the stream is not created yet
            pass
        time.sleep(0.2)
    a.send_signal(signal.SIGKILL)
    a.wait()
    frontiers = _part_frontiers(uri)
    print(f"job A: SIGKILLed mid-way, its 4 parts at epochs {frontiers} (every epoch below "
          f"{min(frontiers)} complete); starting it again", flush=True)
    if subprocess.run([*job_a, "--delay", "0.02"], env=env).returncode != 0:
        print("job A failed", file=sys.stderr)
        b.kill()
        return 1
    if b.wait(180) != 0:
        print("job B failed", file=sys.stderr)
        return 1
    voided = _voided(uri)
    print(f"job A's restart voided {voided} message event(s) the killed run had committed at epochs it had not "
          f"finished (readers skip them: FORMAT.md §1.1)" if voided else
          "job A's restart voided nothing: the killed run's open transaction was aborted by Kafka, and everything "
          "it had committed lay at epochs its parts had finished", flush=True)
    rows = [line.split() for line in open(out)]
    keys = [(r[0], r[1]) for r in rows]
    per_epoch: dict[str, int] = {}
    for r in rows:
        per_epoch[r[1]] = per_epoch.get(r[1], 0) + int(r[2])
    ok = len(keys) == len(set(keys)) and len(per_epoch) == EPOCHS and set(per_epoch.values()) == {4 * 2 * 5}
    print(f"job B: {len(rows)} (worker, epoch) lines, {len(per_epoch)} epochs, "
          f"records per epoch {sorted(set(per_epoch.values()))} (4 workers x 2 batches x 5 sensors): "
          + ("each epoch once and whole" if ok else "WRONG"), flush=True)
    for r in sorted(rows, key=lambda r: (int(r[1]), int(r[0])))[:6]:
        print("  worker {} epoch {:>2}: {} records, sum {}".format(*r))
    shutil.rmtree(os.path.dirname(out), ignore_errors=True)
    return 0 if ok else 1


def _part_frontiers(uri: str) -> list[int]:
    """Each part's frontier (its next epoch) as the log holds it now (the committed view)."""
    from replay import Replayer

    with Replayer(uri, "readings") as r:
        for _ in r:
            pass
        return [int(f.elements[0]) if f.elements else EPOCHS for _, f in sorted(r.part_frontiers().items())]


def _voided(uri: str) -> int:
    """How many message events the committed read of the whole stream skipped as void."""
    from replay import Replayer

    with Replayer(uri, "readings") as r:
        for _ in r:
            pass
        return r.voided


if __name__ == "__main__":
    sys.exit(main())
