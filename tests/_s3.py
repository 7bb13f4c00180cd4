"""A real S3-protocol server for the tests: moto's server, started by ``tools/s3-server``.

Test modules load the fixtures with ``pytest_plugins = ["tests._s3"]``:

* ``s3_server`` — one server for the pytest session, started the first time a test asks for it on the first
  free port from 17900 in steps of 10 (from 18200 in pytest-xdist's second worker; or ``$EVENTLOG_S3_PORT``), stopped at the end. While it runs, the
  process environment holds the standard client settings (``AWS_ENDPOINT_URL`` and keys, ``s3-server env``),
  so ``open_log("s3://…")``, pyarrow and boto3 reach it as they would reach any S3 endpoint; ``.env`` is that
  dict, to hand to subprocesses and Spark executors (``spark.executorEnv.*``).
* ``s3_bucket`` — a fresh, empty bucket per test: its ``s3://name`` URI.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import uuid

import pytest

from tests._ports import port_free as _free
from tests._ports import worker_index

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "tools", "s3-server")


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


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    pytest.importorskip("moto.server", reason="moto[server] (the test extra) runs the S3 server")
    fixed = os.environ.get("EVENTLOG_S3_PORT")
    port = int(fixed) if fixed else next(p for p in range(17900 + 300 * worker_index(), 18900, 10) if _free(p))
    data = str(tmp_path_factory.mktemp("s3-server"))
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


@pytest.fixture
def s3_bucket(s3_server) -> str:
    return f"s3://{s3_server.new_bucket()}"
