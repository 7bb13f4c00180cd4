"""``replay diff`` of two 4M-record captures vs exporting both and DuckDB's ``EXCEPT ALL`` both ways.

    python tools/bench/bench_diff.py [--rows 4000000] [--times 300] [--rounds 3] [--out FILE.md]

Two file logs of one stream are captured once (sync="none"): ``--rows`` records over ``--times`` times,
columns ``user`` (a 10-character string), ``country`` (a string of 8 values), ``clicks`` (int64), ``bucket``
(int32) and ``score`` (float64). A has 4 parts, B the same records over 3 parts with ``--changes`` records
changed (a click count, one per differing time). Then, interleaved in each round:

* ``replay diff A B events`` (in process, through the CLI's click command; exit 1, the differing times);
* the baseline, what the issue's reporter did: ``replay export`` of each side to Parquet (in process too),
  then DuckDB ``(A except all B)`` and ``(B except all A)`` over the records and ``_time``
  (``_part``/``_seq`` left out, since the captures' parts differ);
* for information, the DuckDB queries alone, on the exported files.

Prints each case's best and median seconds, the ratio of ``diff`` to the baseline (best and median, both
measured in this run), the load average before every round, and checks that both find the same differences.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import duckdb  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
from _common import Samples, format_table, timed  # noqa: E402
from click.testing import CliRunner  # noqa: E402

from capture import Capture  # noqa: E402
from eventlog import open_log  # noqa: E402
from replay.cli import main as replay_main  # noqa: E402

SCHEMA = pa.schema([("user", pa.string()), ("country", pa.string()), ("clicks", pa.int64()), ("bucket", pa.int32()),
                    ("score", pa.float64())])
_COUNTRIES = np.array(["de", "fr", "us", "jp", "br", "in", "gb", "it"], dtype=object)
PARTS_A, PARTS_B = 4, 3
DIFF, BASELINE, QUERIES = "replay diff", "export both + duckdb except all both ways", "duckdb except all only (info)"


def records_at(t: int, n: int) -> pa.RecordBatch:
    """The ``n`` records at time ``t`` (the same in every run)."""
    r = np.random.default_rng(t)
    users = np.char.mod("u%09d", r.integers(0, 10**9, n)).astype(object)
    return pa.record_batch([pa.array(users, pa.string()), pa.array(_COUNTRIES[r.integers(0, 8, n)], pa.string()),
                            pa.array(r.integers(0, 1000, n)), pa.array(r.integers(0, 100, n).astype(np.int32)),
                            pa.array(r.random(n))], schema=SCHEMA)


def capture(root: str, peers: int, rows: int, times: int, changed: set[int]) -> None:
    """Each time's records split over ``peers`` parts; at the times in ``changed``, record 0's click count + 1."""
    log = open_log(root, sync="none")
    per_time = rows // times
    caps = [Capture(log, "events", w, peers, schema=SCHEMA) for w in range(peers)]
    for t in range(times):
        batch = records_at(t, per_time)
        if t in changed:
            clicks = batch.column("clicks").to_numpy().copy()
            clicks[0] += 1
            batch = batch.set_column(2, "clicks", pa.array(clicks))
        bounds = np.linspace(0, per_time, peers + 1).astype(int)
        for w, cap in enumerate(caps):
            cap.send(t, batch.slice(bounds[w], bounds[w + 1] - bounds[w]))
            cap.advance_to(t + 1)
    for cap in caps:
        cap.close()


def run_diff(a: str, b: str) -> str:
    result = CliRunner().invoke(replay_main, ["diff", a, b, "events"])
    assert result.exit_code == 1, result.output
    return result.stdout


def export_both(a: str, b: str, work: str) -> tuple[str, str]:
    paths = []
    for side, root in (("a", a), ("b", b)):
        path = os.path.join(work, f"{side}.parquet")
        result = CliRunner().invoke(replay_main, ["export", root, "events", path, "--force"])
        assert result.exit_code == 0, result.output
        paths.append(path)
    return paths[0], paths[1]


def except_all(pa_path: str, pb_path: str) -> tuple[int, int]:
    con = duckdb.connect()
    side = "select * exclude (_part, _seq) from read_parquet('{}')"
    a, b = side.format(pa_path), side.format(pb_path)
    only_a = con.sql(f"select count(*) from ({a} except all {b})").fetchone()[0]
    only_b = con.sql(f"select count(*) from ({b} except all {a})").fetchone()[0]
    con.close()
    return only_a, only_b


def baseline(a: str, b: str, work: str) -> tuple[tuple[str, str], tuple[int, int]]:
    """Export both sides to Parquet, then EXCEPT ALL both ways: the exported files and the two counts."""
    paths = export_both(a, b, work)
    return paths, except_all(*paths)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=4_000_000)
    p.add_argument("--times", type=int, default=300)
    p.add_argument("--changes", type=int, default=5, help="records changed in B, each at its own time")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--dir", help="work folder (kept; default: a temporary one, deleted)")
    p.add_argument("--out", help="also write the results as Markdown to this file")
    args = p.parse_args()
    work = args.dir or tempfile.mkdtemp(prefix="bench-diff-")
    a, b = os.path.join(work, "a"), os.path.join(work, "b")
    changed = set(np.linspace(0, args.times - 1, args.changes).astype(int).tolist())
    try:
        if not os.path.exists(a):
            capture(a, PARTS_A, args.rows, args.times, set())
            capture(b, PARTS_B, args.rows, args.times, changed)
        s = Samples()
        rounds = []  # per round: load average before it, then the seconds of each case
        for _ in range(args.rounds):
            load = os.getloadavg()[0]
            t_diff, out = timed(lambda: run_diff(a, b))
            t_base, (files, counts) = timed(lambda: baseline(a, b, work))
            t_queries, again = timed(lambda: except_all(*files))
            assert counts == again == (len(changed), len(changed)), (counts, again)
            first = min(changed)
            assert f"differ at {len(changed)} of {args.times} times; first diverging time: {first}" in out, out
            for name, secs in ((DIFF, t_diff), (BASELINE, t_base), (QUERIES, t_queries)):
                s.add(name, secs)
            rounds.append([load, t_diff, t_base, t_queries])
        lines = report(s, args, rounds)
        print("\n".join(lines))
        if args.out:
            with open(args.out, "w") as f:
                f.write("\n".join(lines) + "\n")
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)


def report(s: Samples, args: argparse.Namespace, rounds: list[list[float]]) -> list[str]:
    rows = []
    for name in s.names():
        rows.append([name, f"{s.best(name):.2f}", f"{s.median(name):.2f}", f"{s.spread(name):.0%}",
                     f"{s.best(name) / s.best(BASELINE):.2f}x", f"{s.median(name) / s.median(BASELINE):.2f}x"])
    per_time = args.rows // args.times
    return [
        "# replay diff benchmark",
        "",
        f"Command: `python tools/bench/bench_diff.py --rows {args.rows} --times {args.times} --changes {args.changes} "
        f"--rounds {args.rounds}` ({dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC)",
        "",
        f"Environment: CPython {platform.python_version()}, pyarrow {pa.__version__}, duckdb {duckdb.__version__}, "
        f"numpy {np.__version__}; {os.cpu_count()} cores; load average (1 min) before each round: "
        + ", ".join(f"{r[0]:.2f}" for r in rounds),
        "",
        f"{per_time * args.times} records a side ({per_time} at each of {args.times} times), A in {PARTS_A} parts and "
        f"B in {PARTS_B}, {args.changes} records changed in B; cases interleaved in each of {args.rounds} rounds.",
        "",
        format_table(["case", "best s", "median s", "spread", "vs baseline (best)", "vs baseline (median)"], rows,
                     markdown=True),
        "",
        "Per round (the cases ran one after the other, so each round's ratio compares like with like):",
        "",
        format_table(["round", "load before", "diff s", "baseline s", "duckdb only s", "diff / baseline"],
                     [[i + 1, f"{load:.2f}", f"{d:.2f}", f"{b:.2f}", f"{q:.2f}", f"{d / b:.2f}x"]
                      for i, (load, d, b, q) in enumerate(rounds)], markdown=True),
    ]


if __name__ == "__main__":
    main()
