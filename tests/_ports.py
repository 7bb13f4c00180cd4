"""Port helpers shared by the test fixtures that start servers (``tests._s3``, ``tests._cluster``)."""

from __future__ import annotations

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
