"""A Ctrl-C at the SQL shell's prompt is acted on even when it lands before the prompt's wait for a key begins.

Python's readline waits in ``select`` and runs signal handlers only when that wait is interrupted; a Ctrl-C noted
just before it starts left the shell waiting for a key (the terminal test's stall). Here the shell's thread waits
in a C ``read`` that Python does not interrupt, the signal having been taken by another thread (the same state:
Python knows of the signal, the waiting thread was never interrupted): the shell's watcher must send it again."""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import threading
import time

import pytest

from replay.cli.sql import _Interrupts

SAFETY = 30.0
"""Seconds after which the test unblocks the read itself (a stall: the test fails, never hangs)."""


class _Con:
    def __init__(self) -> None:
        self.interrupts = 0

    def interrupt(self) -> None:
        self.interrupts += 1


@pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="needs POSIX threads' signals")
def test_a_ctrl_c_noted_before_the_wait_begins_still_interrupts_the_prompt() -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are set from the main thread")
    libc = ctypes.CDLL(None, use_errno=True)
    r, w = os.pipe()
    con = _Con()
    before = signal.getsignal(signal.SIGINT)  # pytest-xdist's workers ignore SIGINT
    it = _Interrupts(con)
    waiting = threading.Event()
    release = threading.Event()

    def ctrl_c_elsewhere() -> None:
        waiting.wait(SAFETY)
        release.wait(0.2)  # let the shell's thread reach its read
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)  # handled on this thread, as if it beat the wait
        if not release.wait(SAFETY):
            os.write(w, b"x")  # never interrupted: unblock the read so the test fails instead of hanging

    helper = threading.Thread(target=ctrl_c_elsewhere, daemon=True)
    helper.start()
    buf = ctypes.create_string_buffer(1)
    interrupted = False
    try:
        waiting.set()
        ctypes.set_errno(0)
        try:
            libc.read(r, buf, 1)  # the GIL let go; no Python code runs on this thread until it returns
            time.sleep(SAFETY)  # Python runs the pending handler at its next instruction (or this sleep's signal)
        except KeyboardInterrupt:
            interrupted = True
        read_errno = ctypes.get_errno()
    finally:
        release.set()
        helper.join()
        it.close()
        os.close(r)
        os.close(w)
    assert interrupted
    assert read_errno == errno.EINTR, "the read ended with the test's own byte: the Ctrl-C stalled the prompt"
    assert con.interrupts == 0  # at the prompt: nothing of DuckDB's is interrupted
    assert signal.getsignal(signal.SIGINT) == before  # close() puts the handler back
