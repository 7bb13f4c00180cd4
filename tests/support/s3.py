"""A real S3-protocol server for the tests: moto's server, started by ``tools/s3-server``.

The fixtures are in ``tests/conftest.py``:

* ``s3_server`` — one server for the pytest session, started the first time a test asks for it on the first
  free port from 17900 in steps of 10 (from 18200 in pytest-xdist's second worker; or ``$EVENTLOG_S3_PORT``), stopped at the end. While it runs, the
  process environment holds the standard client settings (``AWS_ENDPOINT_URL`` and keys, ``s3-server env``),
  so ``open_log("s3://…")``, pyarrow and boto3 reach it as they would reach any S3 endpoint; ``.env`` is that
  dict, to hand to subprocesses and Spark executors (``spark.executorEnv.*``).
* ``s3_bucket`` — a fresh, empty bucket per test: its ``s3://name`` URI.

This module holds what they are made of: :class:`S3Server` and :func:`running_s3_server`.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import subprocess
import sys
import uuid
from typing import Iterator

from tests.support.paths import TOOLS
from tests.support.ports import port_free, worker_index

TOOL = str(TOOLS / "s3-server")


class S3Server:
    """A running moto server: ``endpoint``, ``env`` (client settings), ``new_bucket()``."""

    def __init__(self, port: int, data: str, env: dict[str, str]) -> None:
        self.port, self.data, self.env = port, data, env
        self.endpoint = env["AWS_ENDPOINT_URL"]
        self._n = itertools.count()

    def new_bucket(self) -> str:
        """Create an empty bucket; returns its name."""
        import pyarrow.fs as pafs

        name = f"t{next(self._n)}-{uuid.uuid4().hex[:8]}"
        fs = pafs.S3FileSystem(endpoint_override=f"127.0.0.1:{self.port}", scheme="http",
                               access_key=self.env["AWS_ACCESS_KEY_ID"], secret_key=self.env["AWS_SECRET_ACCESS_KEY"],
                               region=self.env["AWS_REGION"], allow_bucket_creation=True)
        fs.create_dir(name)
        return name

    def stop(self) -> None:
        """Stop the server (a test of what clients see when the store is gone); the fixture is unusable after."""
        subprocess.run([sys.executable, TOOL, "stop", "--port", str(self.port), "--data", self.data],
                       capture_output=True, timeout=60, check=False)


def _tool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True, timeout=120, check=False)


@contextlib.contextmanager
def running_s3_server(data: str) -> Iterator[S3Server]:
    """Start a server keeping its objects in ``data`` (on the first free port of this pytest process's block,
    or ``$EVENTLOG_S3_PORT``), put its client settings in the process environment while it runs, stop it after."""
    fixed = os.environ.get("EVENTLOG_S3_PORT")
    port = int(fixed) if fixed else next(p for p in range(17900 + 300 * worker_index(), 18900, 10) if port_free(p))
    proc = _tool("start", "--port", str(port), "--data", data)
    if proc.returncode != 0:
        raise RuntimeError(f"tools/s3-server start --port {port} failed: {proc.stderr.strip()[-2000:]}")
    env = dict(line.removeprefix("export ").split("=", 1)
               for line in _tool("env", "--port", str(port)).stdout.splitlines() if "=" in line)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield S3Server(port, data, env)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        _tool("stop", "--port", str(port), "--data", data)
