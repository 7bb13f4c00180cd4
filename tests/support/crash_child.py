"""Child process of the crash test: captures forever, printing each acknowledged (seq, frontier).

With ``--serve`` after the arguments it is a warm server of such processes instead: it imports and warms up
once, says ``ready``, and for each line on stdin (an output file) forks a process that captures into the log
as above, printing to that file; it answers ``pid P`` at once and ``exit CODE`` when that process has died
(the test SIGKILLs it). Each killed writer is still a process of its own; only the interpreter start-up and
imports, where a kill touches no log, are paid once instead of once per kill.
"""

from __future__ import annotations

import os
import sys

# run by path (tests/support/crash_child.py): the repository root, two folders up, before anything imports from it
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import pyarrow as pa  # noqa: E402

from capture import Capture  # noqa: E402
from eventlog import open_log  # noqa: E402

SCHEMA = pa.schema([("x", pa.int64()), ("s", pa.string())])


def rows(t: int) -> list[dict]:
    """The records the child sends at time t (the parent checks them)."""
    return [{"x": t * 1000 + i, "s": "v" * (t % 50)} for i in range(t % 7 + 1)]


def main(root: str, encoding: str, segment_bytes: int) -> None:
    log = open_log(root, sync="fsync", segment_bytes=segment_bytes)
    cap = Capture(log, "crash", 0, 1, schema=SCHEMA, encoding=encoding)
    (t,) = cap.frontier
    print(f"start {cap.next_seq} {t}", flush=True)
    while True:
        cap.send(t, rows(t))
        cap.advance_to(t + 1)
        t += 1
        print(f"ack {cap.next_seq - 1} {t}", flush=True)


def warm_up(encoding: str) -> None:
    """Import and run once, on a throwaway memory log, what a capture loads lazily (the file connector, the
    encoders, what the first send pulls in), so that a forked writer starts on its work at once."""
    import connectors.files.log  # noqa: F401

    cap = Capture(open_log(f"memory://crash-warm-{os.getpid()}"), "warm", 0, 1, schema=SCHEMA, encoding=encoding)
    cap.send(0, rows(0))
    cap.advance_to(1)


def serve(root: str, encoding: str, segment_bytes: int) -> None:
    warm_up(encoding)
    print("ready", flush=True)
    for line in sys.stdin:
        fd = os.open(line.strip(), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)  # there even if no line comes
        pid = os.fork()
        if pid == 0:
            try:
                os.dup2(fd, 1)  # its acknowledgements go to the file the test reads after the kill
                os.close(fd)
                main(root, encoding, segment_bytes)
            finally:
                os._exit(1)
        os.close(fd)
        print(f"pid {pid}", flush=True)
        _, status = os.waitpid(pid, 0)
        print(f"exit {os.waitstatus_to_exitcode(status)}", flush=True)


if __name__ == "__main__":
    (serve if sys.argv[4:] == ["--serve"] else main)(sys.argv[1], sys.argv[2], int(sys.argv[3]))
