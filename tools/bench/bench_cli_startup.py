"""Start-up time of the ``replay`` command line vs the interpreter's own start and ``import pyarrow``.

    python tools/bench/bench_cli_startup.py [--rounds 15] [--quick] [--markdown]

A small file log (one stream ``numbers`` of 2 parts, 10 times, 100 int64 + string records a time) is captured
once. Then, interleaved round by round (the order rotates; ``_common.Samples``), each case runs once as a fresh
process:

* the baselines: ``python -c pass`` (the interpreter's start, site-packages included) and
  ``python -c "import pyarrow"`` (what any command that reads a log must pay);
* ``replay --version``, ``replay ls LOG``, ``replay info LOG numbers`` and ``replay cat LOG numbers -n 20``,
  through the ``replay`` console script next to this interpreter (``python -m replay.cli`` where there is none).

Each case is timed from the parent (``subprocess.run``, output discarded), in wall time and in the CPU time
(user + system) the child used, which barely moves with the load of a shared machine where wall time does.
Printed: the median and best wall seconds of each case, its median CPU seconds, its median per-round ratio (of
wall times) to each baseline, and, from one more run of each command under
``python -X importtime``, how many modules it imported and which of the heavy ones (pandas, pyarrow.dataset,
pyspark, duckdb, matplotlib, confluent_kafka, boto3; pyarrow) it pulled in.

Headlines (time ratios of the same round, lower is better), with the targets of issue 35: ``replay --version`` ÷
``import pyarrow`` (target <= 0.5: it imports no pyarrow, so it costs well under pyarrow alone), and ``replay ls``,
``replay info`` and ``replay cat -n 20`` ÷ ``import pyarrow`` (target <= 2.5: the issue asks for a plain command
in well under 0.3 s on a machine where ``import pyarrow`` takes ~0.12 s).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import Load, Samples, format_table, headline  # noqa: E402

ROUNDS_DEFAULT, ROUNDS_QUICK = 15, 5
STREAM = "numbers"
HEAVY = ("pandas", "pyarrow.dataset", "pyspark", "duckdb", "matplotlib", "confluent_kafka", "boto3", "pyarrow")
PASS, PYARROW = "python -c pass", "python -c 'import pyarrow'"
VERSION_TARGET = 0.5
"""``replay --version`` ÷ ``import pyarrow``: the interpreter, click and the CLI's own small modules, no pyarrow."""
COMMAND_TARGET = 2.5
"""``replay ls``/``info``/``cat -n 20`` ÷ ``import pyarrow``: 0.3 s where pyarrow takes ~0.12 s (issue 35)."""


def capture(root: str) -> None:
    """The small log every command reads (imports the library in this process only)."""
    import pyarrow as pa

    from capture import Capture
    from eventlog import open_log

    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    log = open_log(root, sync="none")
    caps = [Capture(log, STREAM, w, 2, schema=schema) for w in range(2)]
    for t in range(10):
        for w, cap in enumerate(caps):
            ids = list(range(t * 100 + w * 50, t * 100 + w * 50 + 50))
            cap.send(t, pa.record_batch([pa.array(ids), pa.array([f"n{i}" for i in ids])], schema=schema))
            cap.advance_to(t + 1)
    for cap in caps:
        cap.close()
    log.close()


def replay_command() -> list[str]:
    """How to start the ``replay`` console script of this interpreter's environment."""
    script = os.path.join(os.path.dirname(sys.executable), "replay")
    return [sys.executable, script] if os.path.exists(script) else [sys.executable, "-m", "replay.cli"]


def run(cmd: list[str]) -> float:
    """Run ``cmd`` to its end; the CPU seconds (user + system) it used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def imported(cmd: list[str]) -> tuple[int, list[str]]:
    """Modules a run of ``cmd`` (``[python, ...]``) imported, and which of ``HEAVY`` (from ``-X importtime``)."""
    proc = subprocess.run([cmd[0], "-X", "importtime", *cmd[1:]], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, check=True)
    names = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    names.discard("imported package")
    return len(names), [h for h in HEAVY if h in names]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=None,
                   help=f"interleaved rounds (default {ROUNDS_DEFAULT}; {ROUNDS_QUICK} with --quick)")
    p.add_argument("--quick", action="store_true", help=f"{ROUNDS_QUICK} rounds: the whole run in well under a minute")
    p.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    p.add_argument("--dir", default=None, help="where to make the log's temporary folder")
    args = p.parse_args()
    rounds = args.rounds if args.rounds is not None else (ROUNDS_QUICK if args.quick else ROUNDS_DEFAULT)
    if rounds < 1:
        p.error("--rounds must be positive")
    load = Load()
    root = tempfile.mkdtemp(prefix="bench-cli-startup-", dir=args.dir)
    try:
        log = os.path.join(root, "log")
        capture(log)
        replay = replay_command()
        cases: list[tuple[str, list[str]]] = [
            (PASS, [sys.executable, "-c", "pass"]),
            (PYARROW, [sys.executable, "-c", "import pyarrow"]),
            ("replay --version", [*replay, "--version"]),
            ("replay ls LOG", [*replay, "ls", log]),
            ("replay info LOG S", [*replay, "info", log, STREAM]),
            ("replay cat LOG S -n 20", [*replay, "cat", log, STREAM, "-n", "20"]),
        ]
        for _, cmd in cases:  # untimed warm-up: the page cache and .pyc files, not the commands, would be timed
            run(cmd)
        s, cpu = Samples(), Samples()
        for k in range(rounds):
            for name, cmd in cases[k % len(cases):] + cases[:k % len(cases)]:
                cpu.add(name, s.run(name, lambda: run(cmd)))
            print(f"  round {k + 1}/{rounds} done", file=sys.stderr, flush=True)
        modules = {name: imported(cmd) for name, cmd in cases}
        rows = []
        for name, _ in cases:
            count, heavy = modules[name]
            rows.append([name, f"{s.median(name):.3f}", f"{s.best(name):.3f}", f"{s.spread(name):.0%}",
                         f"{cpu.median(name):.3f}",
                         f"{s.ratio(name, PASS, higher_is_better=False).median:.2f}x",
                         f"{s.ratio(name, PYARROW, higher_is_better=False).median:.2f}x",
                         count, ", ".join(heavy) or "-"])
        import pyarrow as pa

        print(f"replay start-up  ({datetime.datetime.now():%Y-%m-%d %H:%M}; CPython {platform.python_version()}, "
              f"pyarrow {pa.__version__}, {platform.machine()}, {os.cpu_count()} cores)")
        print(f"{rounds} interleaved rounds, one fresh process per case a round; {load}")
        print(format_table(["case", "median s", "best s", "spread", "median CPU s", "÷ python -c pass (median)",
                            "÷ import pyarrow (median)", "modules", "heavy modules imported"], rows,
                           markdown=args.markdown))
        print()
        print(headline("replay --version / import pyarrow",
                       s.ratio("replay --version", PYARROW, higher_is_better=False), VERSION_TARGET, load))
        for name in ("replay ls LOG", "replay info LOG S", "replay cat LOG S -n 20"):
            print(headline(f"{name} / import pyarrow", s.ratio(name, PYARROW, higher_is_better=False),
                           COMMAND_TARGET, load))
    finally:
        shutil.rmtree(root, ignore_errors=True)  # our own folder (inside --dir when given)
    return 0


if __name__ == "__main__":
    sys.exit(main())
