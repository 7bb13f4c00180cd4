#!/usr/bin/env python3
"""Stress test of live reads of a file log: a writer process appends on tiny segments (a rotation every few
events) while concurrent followers read the part — ``log.reader`` polled, and ``Replayer(follow=True)`` —
each in its own process. Every follower must receive every event exactly once, in order, with the right
content, and end when the part is finished; the writer may be killed (SIGKILL) and restarted meanwhile.

    python tools/stress_live_reads.py                                   # every sync mode, Arrow and Avro
    python tools/stress_live_reads.py --times 20000 --followers 4 --kills 5      # the long run
    python tools/stress_live_reads.py --encoding avro --sync none --times 500    # one configuration

Exit status 0 when every follower of every configuration got exactly the final log's events; 1 otherwise.
A run prints, per configuration, the events written, the segments (rotations + 1), the kills, and what
each follower received.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = str(Path(__file__).resolve().parent.parent)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

STREAM = "live"
SYNC_MODES = ("fsync", "flush", "none")
ENCODINGS = ("arrow", "avro")
SEGMENT_BYTES = {"arrow": 1024, "avro": 1536}
"""Tiny segments: a few events each (an Avro segment's container header alone is ~1.3 KiB)."""


def rows(t: int) -> list[dict]:
    """The records the writer sends at time ``t`` (followers check them)."""
    return [{"x": t * 1000 + i, "s": "v" * (t % 13)} for i in range(t % 5 + 1)]


def _schema():  # noqa: ANN202
    import pyarrow as pa

    return pa.schema([("x", pa.int64()), ("s", pa.string())])


# -- the writer process ------------------------------------------------------------------------------------


def writer_main(root: str, encoding: str, sync: str, segment_bytes: int, times: int, seed: int) -> None:
    """Capture times up to ``times`` (continuing where a killed writer stopped), then finish the part."""
    from capture import Capture
    from eventlog import open_log

    rng = random.Random(seed)
    log = open_log(root, sync=sync, segment_bytes=segment_bytes)
    cap = Capture(log, STREAM, 0, 1, schema=_schema(), encoding=encoding)
    (t,) = cap.frontier
    while t < times:
        for _ in range(rng.choice((1, 1, 2))):  # sometimes two Messages events at one time
            cap.send(t, rows(t))
        if rng.random() < 0.05:
            time.sleep(rng.uniform(0, 0.003))  # let followers meet the writer between append and sync
        cap.advance_to(t + 1)
        t += 1
    cap.close()


# -- followers ---------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    """What one follower received."""

    kind: str
    events: int = 0
    messages: int = 0
    digest: str = ""
    error: str | None = None
    seconds: float = 0.0


def _fingerprint(ev: Any) -> bytes:
    from eventlog.events import Messages

    if isinstance(ev, Messages):
        return json.dumps(["M", ev.time, ev.records.to_pylist()]).encode()
    return json.dumps(["P", [list(u) for u in ev.updates]]).encode()


def _check_messages(ev: Any, where: str) -> None:
    from eventlog.events import Messages

    if isinstance(ev, Messages) and ev.records.to_pylist() != rows(ev.time):
        raise AssertionError(f"{where}: records at time {ev.time} differ from those written")


def follow_reader(root: str, idle_timeout: float, seed: int) -> Outcome:
    """Poll ``log.reader`` until the part is finished; check seq 1, 2, … and each event's content."""
    from eventlog import StreamNotFoundError, open_log
    from eventlog.antichain import MutableAntichain
    from eventlog.events import Progress

    rng = random.Random(seed)
    out = Outcome("reader")
    digest = hashlib.sha256()
    start = last_new = time.monotonic()
    log = open_log(root)
    reader = None
    frontier = MutableAntichain([(0, 1)])
    try:
        while True:
            if reader is None:
                try:
                    reader = log.reader(STREAM, 0)
                except StreamNotFoundError:
                    reader = None
            got = 0
            if reader is not None:
                for entry in reader:
                    got += 1
                    if entry.seq != out.events + 1:
                        raise AssertionError(f"seq {entry.seq} after {out.events}")
                    out.events += 1
                    _check_messages(entry.event, f"seq {entry.seq}")
                    if isinstance(entry.event, Progress):
                        frontier.update_iter(entry.event.updates)
                    else:
                        out.messages += 1
                    digest.update(_fingerprint(entry.event))
                    if rng.random() < 0.002:
                        break  # leave the iterator suspended mid-segment, as a replayer's read-ahead does
            if out.events and frontier.is_empty():
                break
            now = time.monotonic()
            if got:
                last_new = now
            elif now - last_new > idle_timeout:
                raise TimeoutError(f"no new event for {idle_timeout} s after seq {out.events}")
            time.sleep(rng.choice((0, 0, 0.0005, 0.002)))
    except Exception as e:  # noqa: BLE001 - reported by the parent
        out.error = f"{type(e).__name__}: {e}"
    finally:
        if reader is not None:
            reader.close()
    out.digest = digest.hexdigest()
    out.seconds = time.monotonic() - start
    return out


def follow_replayer(root: str, idle_timeout: float, seed: int) -> Outcome:
    """``Replayer(follow=True)`` until the part is finished; check each Messages event's content."""
    from eventlog.events import Messages
    from replay import Replayer

    out = Outcome("replayer")
    digest = hashlib.sha256()
    start = time.monotonic()
    try:
        r = Replayer(root, STREAM, follow=True, poll_interval=0.001, timeout=idle_timeout)
        for ev in r:
            if isinstance(ev, Messages):
                out.messages += 1
                _check_messages(ev, f"messages #{out.messages}")
                digest.update(_fingerprint(ev))
            out.events += 1
        if r.frontier:
            raise AssertionError(f"replayer stopped with frontier {list(r.frontier)}")
    except Exception as e:  # noqa: BLE001 - reported by the parent
        out.error = f"{type(e).__name__}: {e}"
    out.digest = digest.hexdigest()
    out.seconds = time.monotonic() - start
    return out


def follower_main(kind: str, root: str, idle_timeout: float, seed: int) -> None:
    """Run one follower and print its Outcome as JSON (the parent reads it)."""
    fn = follow_reader if kind == "reader" else follow_replayer
    print(json.dumps(fn(root, idle_timeout, seed).__dict__), flush=True)


# -- one configuration -------------------------------------------------------------------------------------


@dataclass
class Result:
    """One configuration's run."""

    encoding: str
    sync: str
    events: int = 0
    messages: int = 0
    segments: int = 0
    kills: int = 0
    seconds: float = 0.0
    followers: list[Outcome] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _final(root: str) -> tuple[int, int, str, str, int]:
    """The finished log: (events, committed messages, reader digest of every event, digest of the Messages
    events a committed replayer delivers (FORMAT.md §1.1: not those a killed writer left at a time it had
    not completed, which the restarted writer sent again), segments)."""
    from eventlog import open_log
    from eventlog.events import Messages
    from replay import Replayer

    log = open_log(root)
    all_d, msg_d = hashlib.sha256(), hashlib.sha256()
    n = m = 0
    for entry in log.reader(STREAM, 0):
        n += 1
        all_d.update(_fingerprint(entry.event))
    with Replayer(log, STREAM) as r:
        for ev in r:
            if isinstance(ev, Messages):
                m += 1
                msg_d.update(_fingerprint(ev))
    return n, m, all_d.hexdigest(), msg_d.hexdigest(), len(log.segments(STREAM, 0))


def run_config(encoding: str, sync: str, *, times: int, followers: int, kills: int, seed: int,
               idle_timeout: float, workdir: str, segment_bytes: int | None = None) -> Result:
    """Run one writer (killed and restarted ``kills`` times) against ``followers`` followers of each kind."""
    res = Result(encoding, sync)
    root = os.path.join(workdir, f"{encoding}-{sync}")
    shutil.rmtree(root, ignore_errors=True)
    rng = random.Random(seed)
    procs = []
    started = time.monotonic()
    me = os.path.abspath(__file__)
    for i in range(followers):
        for kind in ("reader", "replayer"):
            fseed = seed * 100 + i * 2 + (kind == "replayer")
            procs.append(subprocess.Popen([sys.executable, me, "--follower", kind, root, str(idle_timeout), str(fseed)],
                                          stdout=subprocess.PIPE, text=True))
    cmd = [sys.executable, os.path.abspath(__file__), "--writer", root, encoding, sync,
           str(segment_bytes or SEGMENT_BYTES[encoding]), str(times)]
    kill_at = sorted(rng.uniform(0.3, 0.9) for _ in range(kills))
    n_writer = 0
    while True:
        n_writer += 1
        w = subprocess.Popen([*cmd, str(seed * 1000 + n_writer)])
        if kill_at:
            # kill once the log holds the planned share of the events (so each kill lands mid-run)
            goal = int(kill_at.pop(0) * times * 2)
            deadline = time.monotonic() + idle_timeout
            while w.poll() is None and time.monotonic() < deadline and _events_now(root) < goal:
                time.sleep(rng.uniform(0.001, 0.02))
            if w.poll() is None:
                w.send_signal(signal.SIGKILL)
                res.kills += 1
            w.wait()
            continue
        if w.wait() != 0:
            res.problems.append(f"writer exited with {w.returncode}")
        break
    for p in procs:
        try:
            out, _ = p.communicate(timeout=idle_timeout * 2)
            res.followers.append(Outcome(**json.loads(out.strip().splitlines()[-1])))
        except Exception as e:  # noqa: BLE001 - a follower that never reported
            p.kill()
            p.wait()
            res.problems.append(f"a follower did not report (hung or crashed, exit {p.returncode}): {e}")
    res.seconds = time.monotonic() - started
    try:
        res.events, res.messages, all_d, msg_d, res.segments = _final(root)
    except Exception as e:  # noqa: BLE001 - the finished log must read back
        res.problems.append(f"the finished log does not read back: {type(e).__name__}: {e}")
        return res
    for o in res.followers:
        if o.error:
            res.problems.append(f"{o.kind}: {o.error}")
        elif o.kind == "reader" and (o.events, o.digest) != (res.events, all_d):
            res.problems.append(f"reader got {o.events} events (digest {o.digest[:12]}), the log holds "
                                f"{res.events} ({all_d[:12]})")
        elif o.kind == "replayer" and (o.messages, o.digest) != (res.messages, msg_d):
            res.problems.append(f"replayer got {o.messages} messages events (digest {o.digest[:12]}), the log "
                                f"holds {res.messages} ({msg_d[:12]})")
    return res


def _events_now(root: str) -> int:
    try:
        from eventlog import open_log

        st = open_log(root).part_stats(STREAM, 0)
        return st.events
    except Exception:  # noqa: BLE001 - not created yet
        return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--times", type=int, default=1500, help="times the writer captures (about 2.3 events each)")
    ap.add_argument("--followers", type=int, default=2, help="followers of each kind per configuration")
    ap.add_argument("--kills", type=int, default=1, help="SIGKILLs of the writer per configuration")
    ap.add_argument("--encoding", action="append", choices=ENCODINGS)
    ap.add_argument("--sync", action="append", choices=SYNC_MODES)
    ap.add_argument("--segment-bytes", type=int, default=None)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--idle-timeout", type=float, default=120.0)
    ap.add_argument("--workdir", default=None, help="where the logs go (default: a temporary folder, removed)")
    ap.add_argument("--writer", nargs=6, metavar=("ROOT", "ENC", "SYNC", "SEGBYTES", "TIMES", "SEED"),
                    help=argparse.SUPPRESS)
    ap.add_argument("--follower", nargs=4, metavar=("KIND", "ROOT", "IDLE", "SEED"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.follower:
        kind, root, idle, seed = args.follower
        follower_main(kind, root, float(idle), int(seed))
        return 0
    if args.writer:
        root, enc, sync, seg, times, seed = args.writer
        writer_main(root, enc, sync, int(seg), int(times), int(seed))
        return 0
    workdir = args.workdir or tempfile.mkdtemp(prefix="stress_live_")
    failed = 0
    try:
        for enc in args.encoding or ENCODINGS:
            for sync in args.sync or SYNC_MODES:
                r = run_config(enc, sync, times=args.times, followers=args.followers, kills=args.kills,
                               seed=args.seed, idle_timeout=args.idle_timeout, workdir=workdir,
                               segment_bytes=args.segment_bytes)
                status = "FAIL" if r.problems else "ok"
                print(f"{enc:5} {sync:5} {status}: {r.events} events, {r.segments} segments, {r.kills} kill(s), "
                      f"{len(r.followers)} followers, {r.seconds:.1f} s", flush=True)
                for p in r.problems:
                    print(f"    {p}", flush=True)
                failed += bool(r.problems)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
