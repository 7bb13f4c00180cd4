"""Fixtures of the ``replay ui`` / ``replay top`` tests: a view served in-process on a free port, and parts written
by hand while it watches."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any, Callable

import pyarrow as pa
import pytest

from capture import Capture
from eventlog import open_log

SCHEMA = pa.schema([("n", pa.int64()), ("word", pa.string())])

DEADLINE = 60.0
"""Seconds a test waits for a condition (a busy machine must not fail a test: behaviour, not timing)."""


def wait_for(what: str, condition: Callable[[], Any], deadline: float = DEADLINE) -> Any:
    """Poll ``condition`` until it is truthy (returns it) or fail after ``deadline`` seconds naming ``what``."""
    end = time.monotonic() + deadline
    while True:
        got = condition()
        if got:
            return got
        if time.monotonic() > end:
            pytest.fail(f"not within {deadline:g} s: {what}")
        time.sleep(0.05)


def records(t: int, part: int, n: int = 3) -> list[dict]:
    """The records part ``part`` writes at time ``t``."""
    return [{"n": 1000 * t + 10 * part + i, "word": f"t{t}p{part}"} for i in range(n)]


class Writers:
    """Open writers of a stream's parts, written by hand: ``write(part, t)`` sends at t and advances to t + 1."""

    def __init__(self, uri: str, stream: str, peers: int) -> None:
        self.log = open_log(uri)
        self.caps = [Capture(self.log, stream, p, peers, schema=SCHEMA, sync="flush") for p in range(peers)]

    def write(self, part: int, t: int, n: int = 3) -> None:
        cap = self.caps[part]
        cap.send(t, records(t, part, n))
        cap.advance_to(t + 1)

    def finish(self, part: int) -> None:
        self.caps[part].close()

    def close(self) -> None:
        for cap in self.caps:
            cap.close()


@pytest.fixture
def writers():
    """``writers(uri, stream, peers)``: open writers, closed (parts finished) at the end of the test."""
    made: list[Writers] = []

    def make(uri: str, stream: str, peers: int) -> Writers:
        w = Writers(uri, stream, peers)
        made.append(w)
        return w

    yield make
    for w in made:
        w.close()


@pytest.fixture
def serve():
    """``serve(uri, **watch options)``: a ``ViewServer`` on 127.0.0.1 and a free port, polling every 0.1 s; closed
    at the end of the test. ``jobs=(locations…)`` adds the runtime's jobs."""
    pytest.importorskip("prometheus_client", reason="prometheus_client (the ui extra) makes /metrics")
    from replay.cli._web.jobs import JobsWatch
    from replay.cli._web.pump import Pump
    from replay.cli._web.server import ViewServer
    from replay.cli._web.watch import LogWatch

    servers = []

    def make(uri: str, *, jobs: tuple[str, ...] = (), interval: float = 0.1, **options: Any):
        watch = LogWatch(open_log(uri), **options)
        pump = Pump(watch, JobsWatch(jobs) if jobs else None, interval=interval).start()
        server = ViewServer(pump, open_log(uri), port=0).start()
        servers.append(server)
        return server

    yield make
    for s in servers:
        s.close()
        s.pump.watch.close()


def get(url: str) -> tuple[int, str, bytes]:
    """``(status, content type, body)`` of a GET."""
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read()


def get_json(url: str) -> Any:
    status, _, body = get(url)
    assert status == 200, body
    return json.loads(body)


def stream_of(snap: dict, name: str) -> dict | None:
    return next((s for s in snap["streams"] if s["stream"] == name), None)
