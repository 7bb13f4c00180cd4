"""What watching a log costs: ``replay ui``'s view on a log of 1,000 parts, and on a stream written at full speed.

    python tools/bench/bench_ui.py [--rounds 5] [--quick] [--markdown] [--parts 1000] [--seconds 3]

**1,000 parts.** One stream of ``--parts`` parts, each 10 times of 10 records (20 events), left open (a live job).
Interleaved round by round (``_common.Samples``):

* baselines: ``replay frontier``'s way to know every part's frontier (``part_frontier`` of each part: its Progress
  events, Messages skipped undecoded) and ``Log.part_stats`` of every part (the cheapest look a log offers);
* the view's first look (``LogWatch.poll`` on a new watch: frontiers rebuilt, each part's tail decoded);
* a later look when nothing was written (what a watched idle log costs every ``--interval``), with and without
  the ``part_stats`` refresh the view does every 5 s.

Printed: seconds of each, per-round ratios to the baselines, the share of one core the view keeps busy on that log
at the default interval (0.5 s; one look in ten refreshes the stats), and the size of one server-sent update.

**Full speed.** A writer process appends to a 2-part stream as fast as it can (``Capture``, 100 records an event,
``sync="none"``) for ``--seconds``; in the same round it runs once alone and once while ``replay ui`` serves the
log with a page connected (an event-stream reader in this process, so the view polls every 0.5 s). Printed: the
writer's records/s either way, their ratio (the headline: how much the view slows a writer), and the CPU the
``replay ui`` process used per second of watching. A last check: ``replay ui`` with nobody watching uses no CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import Load, Samples, format_table, headline  # noqa: E402

from replay.cli._web.pump import BUSY  # noqa: E402

WRITER = r"""
import sys, time
import pyarrow as pa
from capture import Capture
from eventlog import open_log
log, seconds = open_log(sys.argv[1]), float(sys.argv[2])
schema = pa.schema([("n", pa.int64()), ("word", pa.string())])
batch = pa.record_batch({"n": pa.array(range(100), pa.int64()), "word": pa.array(["spark"] * 100)}, schema=schema)
caps = [Capture(log, "fast", p, 2, schema=schema, sync="none") for p in range(2)]
t, n = caps[0].frontier.elements[0], 0
end = time.monotonic() + seconds
started = time.monotonic()
while time.monotonic() < end:
    for cap in caps:
        cap.send(t, batch)
        cap.advance_to(t + 1)
        n += 100
    t += 1
took = time.monotonic() - started
for cap in caps:
    cap.abort()
print(n / took)
"""

VIEW_TARGET = 0.9
"""Writer records/s with a page watching ÷ without: the view may take at most a tenth of a full-speed writer."""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), "EVENTLOG_PRELOAD": "0"}


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def make_wide_log(root: str, parts: int) -> None:
    import pyarrow as pa

    from capture import Capture
    from eventlog import open_log

    log = open_log(root, sync="none")
    schema = pa.schema([("n", pa.int64()), ("word", pa.string())])
    for p in range(parts):
        cap = Capture(log, "wide", p, parts, schema=schema, sync="none")
        for t in range(10):
            cap.send(t, [{"n": 100 * t + i, "word": "w"} for i in range(10)])
            cap.advance_to(t + 1)
        cap.abort()  # left open: a live job's parts


def bench_wide(root: str, rounds: int, parts: int) -> tuple[list[list[str]], dict[str, float], Samples]:
    from eventlog import open_log
    from eventlog.parts import part_frontier
    from replay.cli._web.server import _changed_parts
    from replay.cli._web.watch import LogWatch

    s = Samples()
    sizes: dict[str, float] = {}
    for _ in range(rounds):
        log = open_log(root)
        header = log.header("wide")
        s.run("frontier pass (baseline)", lambda: [part_frontier(log, header, p) for p in range(parts)])
        s.run("part_stats pass (baseline)", lambda: [log.part_stats("wide", p) for p in range(parts)])
        watch = LogWatch(open_log(root), stats_every=1e9, stall_after=1e9)  # no part turns stalled between looks
        snap = s.run("view: first look", watch.poll)
        sent: dict = {}
        sizes["first event bytes"] = len(json.dumps(_changed_parts(snap, sent), separators=(",", ":")))
        later = s.run("view: later look, nothing new", watch.poll)
        sizes["update bytes"] = len(json.dumps(_changed_parts(later, sent), separators=(",", ":")))
        watch.stats_every = 0.0
        s.run("view: later look with stats", watch.poll)
        assert len(snap["streams"][0]["parts"]) == parts and snap["streams"][0]["frontier"] == [10]
        watch.close()
    rows = []
    for name in s.names():
        base = "frontier pass (baseline)" if "first" in name else "part_stats pass (baseline)"
        ratio = "" if "baseline" in name else f"{s.ratio(name, base, higher_is_better=False).median:.2f}x of {base.split(' (')[0]}"
        rows.append([name, f"{s.median(name):.3f}", f"{s.best(name):.3f}", f"{s.spread(name) * 100:.0f}%", ratio])
    idle = s.median("view: later look, nothing new")
    stats = s.median("view: later look with stats")
    look = (9 * idle + stats) / 10  # one look in ten refreshes the stats (every 5 s at 0.5 s)
    sizes["look s"] = look
    sizes["core share"] = look / max(0.5, look / BUSY)  # the pump rests at least 9 looks' time after a look
    return rows, sizes, s


def _watching(url: str, stop: threading.Event) -> None:
    """A page: read the event stream until ``stop``."""
    with urllib.request.urlopen(url + "api/events", timeout=60) as r:
        while not stop.is_set():
            if not r.readline():
                return


def _start_ui(root: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "replay.cli", "ui", root, "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=_env())
    url = proc.stdout.readline().strip()  # type: ignore[union-attr]
    return proc, url


def bench_fast(work: str, rounds: int, seconds: float) -> tuple[list[list[str]], dict[str, float], Samples]:
    rates = Samples()  # "times" are 1/rate, so ratios of the same round compare rates
    cpu_per_s: list[float] = []
    for r in range(rounds):
        for watched in ((False, True) if r % 2 == 0 else (True, False)):
            root = os.path.join(work, f"fast-{r}-{int(watched)}")
            shutil.rmtree(root, ignore_errors=True)
            os.makedirs(root)
            proc = url = None
            stop = threading.Event()
            if watched:
                proc, url = _start_ui(root)
                reader = threading.Thread(target=_watching, args=(url, stop), daemon=True)
                reader.start()
                time.sleep(0.5)
                cpu0 = _cpu_seconds(proc.pid)
            t0 = time.monotonic()
            out = subprocess.run([sys.executable, "-c", WRITER, root, str(seconds)], capture_output=True, text=True,
                                 env=_env(), check=True).stdout
            if watched:
                assert proc is not None
                cpu_per_s.append((_cpu_seconds(proc.pid) - cpu0) / (time.monotonic() - t0))
                stop.set()
                proc.terminate()
                proc.wait(timeout=30)
            rates.add("writer watched by replay ui" if watched else "writer alone (baseline)", 1 / float(out))
            shutil.rmtree(root, ignore_errors=True)
    rows = []
    for name in rates.names():
        ratio = "" if "baseline" in name else \
            f"{rates.ratio(name, 'writer alone (baseline)').median:.2f}x of the writer alone"
        rows.append([name, f"{1 / rates.median(name):,.0f}", f"{1 / rates.best(name):,.0f}", ratio])
    cpu_per_s.sort()
    return rows, {"ui cpu per s": cpu_per_s[len(cpu_per_s) // 2]}, rates


def idle_cpu(work: str, seconds: float) -> float:
    """CPU seconds ``replay ui`` uses per second while nobody watches (a log with a live stream)."""
    root = os.path.join(work, "idle")
    subprocess.run([sys.executable, "-m", "replay.cli", "gen", root, "numbers", "--unfinished", "--seed", "1"],
                   capture_output=True, env=_env(), check=True)
    proc, url = _start_ui(root)
    try:
        time.sleep(1.0)
        c0 = _cpu_seconds(proc.pid)
        time.sleep(seconds)
        return (_cpu_seconds(proc.pid) - c0) / seconds
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="3 rounds, 2 s writers")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--parts", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args()
    rounds = 3 if args.quick else args.rounds
    seconds = 2.0 if args.quick else args.seconds
    load = Load()
    work = tempfile.mkdtemp(prefix="bench-ui-")
    try:
        t0 = time.monotonic()
        make_wide_log(os.path.join(work, "wide"), args.parts)
        print(f"made a log of {args.parts} parts in {time.monotonic() - t0:.1f} s; {load}")
        rows, wide, ws = bench_wide(os.path.join(work, "wide"), rounds, args.parts)
        print(f"\n## a log of {args.parts} open parts (20 events each), {rounds} interleaved rounds\n")
        print(format_table(["case", "median s", "best s", "spread", "ratio (median of rounds)"], rows,
                           markdown=args.markdown))
        print(f"\nthe view on this log while watched: a look every {max(0.5, wide['look s'] / BUSY):.2f} s "
              f"(interval 0.5 s, at most {BUSY:.0%} of a core), {wide['core share'] * 100:.1f}% of one core; "
              f"server-sent events: {wide['first event bytes'] / 1024:.0f} KiB when a page connects, then "
              f"{wide['update bytes'] / 1024:.1f} KiB an update when nothing changed")
        frows, fast, fs = bench_fast(work, rounds, seconds)
        print(f"\n## a stream written at full speed ({seconds:g} s a run), {rounds} interleaved rounds\n")
        print(format_table(["case", "median records/s", "best records/s", "ratio (median of rounds)"], frows,
                           markdown=args.markdown))
        print(f"\nreplay ui while watching it: {fast['ui cpu per s'] * 100:.1f}% of one core")
        idle = idle_cpu(work, 5.0)
        print(f"replay ui with nobody watching (5 s): {idle * 100:.2f}% of one core\n")
        print(headline("writer watched by replay ui / writer alone",
                       fs.ratio("writer watched by replay ui", "writer alone (baseline)"), VIEW_TARGET, load))
        print(headline(f"view first look / frontier pass ({args.parts:,} parts)",
                       ws.ratio("view: first look", "frontier pass (baseline)", higher_is_better=False), None, load))
        print(headline(f"view later look / part_stats pass ({args.parts:,} parts)",
                       ws.ratio("view: later look, nothing new", "part_stats pass (baseline)",
                                higher_is_better=False), None, load))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
