"""Port helpers shared by the test fixtures that start servers (``tests.support.s3``, ``tests.support.spark_cluster``)."""

from __future__ import annotations

import os
import socket


def port_free(port: int) -> bool:
    """Whether nothing listens on 127.0.0.1:``port`` (a bind succeeds)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def worker_index() -> int:
    """This pytest process's index among pytest-xdist workers (``gw0`` → 0, ``gw1`` → 1; 0 without xdist), so
    fixtures that start servers search for free ports in blocks of their own and two workers never race for
    the same port."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else 0
