"""A capturing process killed with SIGKILL at random moments loses nothing it acknowledged."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest

from eventlog import Messages, MutableAntichain, Progress, StreamNotFoundError, open_log
from tests.support.crash_child import rows
from tests.support.paths import SUPPORT

CHILD = str(SUPPORT / "crash_child.py")


def check_log(root: str) -> tuple[int, list[int]]:
    """Read the whole part; return (events, frontier) after checking every event's content."""
    frontier = MutableAntichain([(0, 1)])
    n = 0
    try:
        reader = open_log(root).reader("crash", 0)
    except StreamNotFoundError:  # killed before it created the stream (the header is created atomically)
        return 0, [0]
    for entry in reader:
        n += 1
        assert entry.seq == n
        ev = entry.event
        if isinstance(ev, Messages):
            assert frontier.less_equal(ev.time)
            assert ev.records.to_pylist() == rows(ev.time)
        else:
            assert isinstance(ev, Progress)
            frontier.update_iter(ev.updates)
    return n, list(frontier.frontier)


@pytest.mark.parametrize("encoding", ["arrow", "avro"])
def test_sigkill_loses_no_acknowledged_event(tmp_path, encoding):
    rng = random.Random(int.from_bytes(os.urandom(4), "little"))
    root = str(tmp_path / "log")
    kills = 0
    acked_seq, acked_frontier = 0, 0
    rounds = 12  # per encoding: 24 kills in all
    # a warm server forks each writer (see tests/support/crash_child.py): the kill lands in the writer's work, not in an
    # interpreter start-up (the old 0.2-1.6 s after a cold start spent most kills in imports, before the log
    # was touched). The square puts about one kill in four within the first 50 ms of a writer (creating the
    # stream, or after a kill cutting the torn tail and rebuilding the index it left, the first
    # acknowledgements), the rest in steady writing with segment rolls (~10 segments per run), up to 0.6 s in.
    server = subprocess.Popen([sys.executable, CHILD, root, encoding, "30000", "--serve"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline() == "ready\n"
        for r in range(rounds):
            acks = tmp_path / f"round-{r}.out"
            server.stdin.write(f"{acks}\n")
            server.stdin.flush()
            word, pid = server.stdout.readline().split()
            assert word == "pid"
            time.sleep(0.6 * rng.random() ** 2)
            os.kill(int(pid), signal.SIGKILL)
            assert server.stdout.readline() == f"exit {-signal.SIGKILL}\n"
            kills += 1
            out = acks.read_text()
            for line in out.splitlines():
                word, seq, t = line.split()
                if word == "start":  # the restarted child resumes after everything acknowledged before
                    assert int(seq) >= acked_seq + 1 and int(t) >= acked_frontier
                else:
                    acked_seq, acked_frontier = int(seq), int(t)
            n, frontier = check_log(root)
            assert n >= acked_seq, f"acknowledged seq {acked_seq} but only {n} events after the kill"
            assert frontier and frontier[0] >= acked_frontier
    finally:
        server.stdin.close()
        server.wait(timeout=30)
    # after the last crash a writer reopens, cuts any torn tail, and continues with the next sequence id
    from capture import Capture

    n, (t,) = check_log(root)
    cap = Capture(open_log(root), "crash", 0, 1)
    assert cap.next_seq == n + 1 and list(cap.frontier) == [t]
    cap.send(t, rows(t))
    cap.close()
    assert check_log(root) == (n + 2, [])
    assert kills == rounds and acked_seq > 0
    assert len(open_log(root).segments("crash", 0)) > 1
