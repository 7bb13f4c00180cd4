"""Real S3-protocol servers for the tests: moto's server, and S3Proxy's, started by ``tools/s3-server``.

The fixtures are in ``tests/conftest.py``:

* ``s3_server`` — one server for the pytest session, started the first time a test asks for it on the first
  free port from 17900 in steps of 10 (from 18200 in pytest-xdist's second worker; or ``$EVENTLOG_S3_PORT``), stopped at the end. While it runs, the
  process environment holds the standard client settings (``AWS_ENDPOINT_URL`` and keys, ``s3-server env``),
  so ``open_log("s3://…")``, pyarrow and boto3 reach it as they would reach any S3 endpoint; ``.env`` is that
  dict, to hand to subprocesses and Spark executors (``spark.executorEnv.*``).
* ``s3_bucket`` — a fresh, empty bucket per test: its ``s3://name`` URI.
* ``s3proxy_server`` — S3Proxy (``tools/s3-server --impl s3proxy``: Java 17+, its jars fetched through Maven
  once into the cache of ``tools/kafka-broker``), one for the session, on the first free port from 18900 in
  steps of 10 (from 19000 in pytest-xdist's second worker; or ``$EVENTLOG_S3PROXY_PORT``). A second, less
  capable store on purpose: it ignores conditional writes (``If-None-Match: *`` overwrites) and rejects the
  default flexible checksums of boto3 and pyarrow. Its settings are NOT put into the process environment (the
  ``s3_server`` fixture owns it): pass ``.endpoint`` or ``.env`` (which holds
  ``AWS_REQUEST_CHECKSUM_CALCULATION=when_required`` and ``AWS_RESPONSE_CHECKSUM_VALIDATION=when_required``)
  explicitly, or make boto3 clients with :func:`boto3_client`.

This module holds what they are made of: :class:`S3Server`, :func:`running_s3_server` and :func:`boto3_client`.
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
PORT_VARIABLES = {"moto": "EVENTLOG_S3_PORT", "s3proxy": "EVENTLOG_S3PROXY_PORT"}


def candidate_ports(impl: str) -> range:
    """The ports this pytest process tries for an ``impl`` server, in steps of 10: moto from 17900 (a block of
    300 per pytest-xdist worker, below 18900), S3Proxy from 18900 (a block of 100 per worker)."""
    w = worker_index()
    if impl == "moto":
        return range(17900 + 300 * w, 18900, 10)
    return range(18900 + 100 * w, 19000 + 100 * w, 10)


def boto3_client(env: dict[str, str]):  # noqa: ANN201 - a boto3 S3 client
    """A boto3 S3 client for the server whose client settings are ``env`` (``S3Server.env``), whatever the
    process environment holds; checksums only when an operation requires them (as S3Proxy needs)."""
    import boto3
    from botocore.config import Config

    return boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"], region_name=env["AWS_REGION"],
                        config=Config(request_checksum_calculation="when_required",
                                      response_checksum_validation="when_required"))


class S3Server:
    """A running server: ``impl`` (``moto`` or ``s3proxy``), ``port``, ``endpoint``, ``env`` (client settings),
    ``new_bucket()``, ``stop()``."""

    def __init__(self, port: int, data: str, env: dict[str, str], impl: str = "moto") -> None:
        self.port, self.data, self.env, self.impl = port, data, env, impl
        self.endpoint = env["AWS_ENDPOINT_URL"]
        self._n = itertools.count()

    def new_bucket(self) -> str:
        """Create an empty bucket; returns its name."""
        name = f"t{next(self._n)}-{uuid.uuid4().hex[:8]}"
        if self.impl == "s3proxy":  # boto3 told to leave out the checksums S3Proxy rejects
            boto3_client(self.env).create_bucket(Bucket=name)
            return name
        import pyarrow.fs as pafs

        fs = pafs.S3FileSystem(endpoint_override=f"127.0.0.1:{self.port}", scheme="http",
                               access_key=self.env["AWS_ACCESS_KEY_ID"], secret_key=self.env["AWS_SECRET_ACCESS_KEY"],
                               region=self.env["AWS_REGION"], allow_bucket_creation=True)
        fs.create_dir(name)
        return name

    def stop(self) -> None:
        """Stop the server (a test of what clients see when the store is gone); the fixture is unusable after."""
        subprocess.run([sys.executable, TOOL, "stop", "--port", str(self.port), "--data", self.data],
                       capture_output=True, timeout=60, check=False)


def _tool(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True, timeout=timeout, check=False)


@contextlib.contextmanager
def running_s3_server(data: str, impl: str = "moto", export: bool | None = None) -> Iterator[S3Server]:
    """Start an ``impl`` server (``moto`` or ``s3proxy``) keeping its pid and log in ``data``, on the first free
    port of this pytest process's block for that kind (:func:`candidate_ports`), or ``$EVENTLOG_S3_PORT`` /
    ``$EVENTLOG_S3PROXY_PORT``; stop it after. With ``export`` (the default for moto only) its client settings
    are in the process environment while it runs."""
    fixed = os.environ.get(PORT_VARIABLES[impl])
    candidates = candidate_ports(impl)
    port = int(fixed) if fixed else next((p for p in candidates if port_free(p)), None)
    if port is None:
        raise RuntimeError(f"no free port for the {impl} S3 server in {candidates.start}..{candidates.stop - 1}")
    proc = _tool("start", "--impl", impl, "--port", str(port), "--data", data, timeout=900)  # S3Proxy's first fetch
    if proc.returncode != 0:
        raise RuntimeError(f"tools/s3-server start --impl {impl} --port {port} failed: {proc.stderr.strip()[-2000:]}")
    env = dict(line.removeprefix("export ").split("=", 1)
               for line in _tool("env", "--impl", impl, "--port", str(port), "--data", data).stdout.splitlines()
               if "=" in line)
    if export is None:
        export = impl == "moto"
    saved = {k: os.environ.get(k) for k in env} if export else {}
    if export:
        os.environ.update(env)
    try:
        yield S3Server(port, data, env, impl)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        _tool("stop", "--port", str(port), "--data", data)
