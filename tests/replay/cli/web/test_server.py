"""Issue 34: the ``replay ui`` server — server-sent events that follow a writer, a time's records, Prometheus
metrics, the page's files served from the package (nothing from elsewhere), and no reading while nobody watches."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.support.cli import ENV

from .conftest import get, get_json, stream_of, wait_for

pytest.importorskip("prometheus_client", reason="prometheus_client (the ui extra) makes /metrics")


class Events:
    """The server-sent events of ``/api/events``, read on a thread."""

    def __init__(self, url: str) -> None:
        import threading

        self.events: list[tuple[str, dict]] = []
        self._resp = urllib.request.urlopen(url + "api/events", timeout=60)
        assert self._resp.headers["Content-Type"] == "text/event-stream"
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        kind, data = None, []
        try:
            for raw in self._resp:
                line = raw.decode().rstrip("\n")
                if line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("data: "):
                    data.append(line[6:])
                elif line == "" and kind is not None:
                    self.events.append((kind, json.loads("\n".join(data))))
                    kind, data = None, []
        except (OSError, ValueError):
            pass

    def latest(self) -> dict | None:
        """The newest snapshot with every stream's parts: updates carry only the parts that changed
        (``parts_delta``), merged here by part number as the page does."""
        if not self.events:
            return None
        parts: dict[str, dict[int, dict]] = {}
        for _, snap in self.events:
            for s in snap["streams"]:
                kept = parts.setdefault(s["stream"], {})
                kept.update({p["part"]: p for p in s["parts"]})
        last = self.events[-1][1]
        return {**last, "streams": [{**s, "parts": [parts[s["stream"]][p] for p in sorted(parts[s["stream"]])]}
                                    for s in last["streams"]]}

    def close(self) -> None:
        self._resp.close()


def test_events_follow_a_writer(tmp_path, serve, writers):
    uri = str(tmp_path / "log")
    w = writers(uri, "live", 2)
    w.write(0, 0)
    w.write(1, 0)
    server = serve(uri)
    events = Events(server.url)
    try:
        first = wait_for("the first event", lambda: events.events and events.events[0])
        assert first[0] == "state" and "history" in first[1]
        assert stream_of(first[1], "live")["frontier"] == [1]
        w.write(0, 1)
        w.write(1, 1)
        snap = wait_for("an update with frontier 2", lambda: (s := events.latest()) and
                        (x := stream_of(s, "live")) and x["frontier"] == [2] and s)
        assert events.events[-1][0] == "update" and snap["version"] > first[1]["version"]
        assert events.events[-1][1]["streams"][0]["parts_delta"]
        w.write(0, 2)
        w.finish(0)
        snap = wait_for("part 0 finished", lambda: (s := events.latest()) and
                        stream_of(s, "live")["parts"][0]["finished"] and s)
        assert stream_of(snap, "live")["holding"] == []  # one unfinished part left: nobody holds back alone
        w.finish(1)
        wait_for("the stream finished", lambda: stream_of(events.latest(), "live")["finished"])
        # nothing more is written: once the rates settled, updates carry no part (idle time growing is no change)
        wait_for("an update without parts", lambda: events.events[-1][1]["streams"][0]["parts"] == [])
        assert stream_of(events.latest(), "live")["finished"]  # the parts sent before still stand
    finally:
        events.close()


def test_state_and_a_times_records(tmp_path, serve, writers):
    uri = str(tmp_path / "log")
    w = writers(uri, "live", 2)
    for t in range(3):
        w.write(0, t, n=4)
    w.write(1, 0, n=4)
    w.caps[1].send(1, [{"n": 7, "word": "open"}])  # written, not committed: part 1 has not completed time 1
    w.caps[1].flush()
    server = serve(uri)
    snap = get_json(server.url + "api/state?history=1")
    s = stream_of(snap, "live")
    assert s["frontier"] == [1] and "live" in snap["history"]
    doc = get_json(server.url + "api/records?stream=live&time=2&limit=3")
    assert doc["records"] == 4 and doc["shown"] == 3 and doc["time"] == 2
    assert [f["name"] for f in doc["schema"]] == ["n", "word"] and doc["schema"][0]["type"] == "int64"
    assert [r["record"] for r in doc["rows"]] == [{"n": 2000 + i, "word": "t2p0"} for i in range(3)]
    assert all(r["committed"] and r["part"] == 0 for r in doc["rows"])
    doc = get_json(server.url + "api/records?stream=live&time=1")
    assert doc["records"] == 5
    rows = {(r["part"], r["record"]["n"]): r["committed"] for r in doc["rows"]}
    assert rows[(1, 7)] is False and rows[(0, 1000)] is True  # part 1's record is shown, marked uncommitted
    assert {p["part"]: p["complete"] for p in doc["parts"]} == {0: True, 1: False}
    assert get(server.url + "api/records?stream=live&time=x")[0] == 400
    assert get(server.url + "api/records?stream=nope&time=1")[0] == 404


def test_metrics_in_the_prometheus_text_format(tmp_path, serve, writers):
    from prometheus_client.parser import text_string_to_metric_families

    uri = str(tmp_path / "log")
    w = writers(uri, "handoff", 2)
    for t in range(3):
        w.write(0, t)
    w.write(1, 0)
    w.finish(0)
    server = serve(uri)
    status, ctype, body = get(server.url + "metrics")
    assert status == 200 and ctype.startswith("text/plain") and "version=" in ctype
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    assert all(name.startswith("eventlog_") for name in families)
    values = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples}
    assert values[("eventlog_part_frontier", (("part", "0"), ("stream", "handoff")))] == float("inf")
    assert values[("eventlog_part_frontier", (("part", "1"), ("stream", "handoff")))] == 1
    assert values[("eventlog_stream_completed_frontier", (("stream", "handoff"),))] == 1
    assert values[("eventlog_part_finished", (("part", "0"), ("stream", "handoff")))] == 1
    assert values[("eventlog_part_records_written_total", (("part", "0"), ("stream", "handoff")))] == 9
    assert values[("eventlog_part_events_written_total", (("part", "1"), ("stream", "handoff")))] == 2
    assert values[("eventlog_part_stalled", (("part", "1"), ("stream", "handoff")))] == 0
    assert ("eventlog_stream_frontier_lag_seconds", (("stream", "handoff"),)) in values
    assert ("eventlog_part_frontier_lag_seconds", (("part", "1"), ("stream", "handoff"))) in values
    assert families["eventlog_part_records_written"].type == "counter"
    assert families["eventlog_part_frontier"].type == "gauge"


def test_the_page_loads_only_the_packages_own_files(tmp_path, serve):
    from replay.cli._web.server import STATIC

    server = serve(str(tmp_path / "empty"))
    status, ctype, page = get(server.url)
    assert status == 200 and ctype.startswith("text/html")
    for name in os.listdir(STATIC):
        status, _, body = get(server.url + "static/" + name)
        assert status == 200 and body == open(os.path.join(STATIC, name), "rb").read()
        text = body.decode()
        # nothing from a CDN or any other host: the only URL in the assets is the SVG namespace
        assert [u for u in re.findall(r"https?://[^\s\"'`)]+", text) if u != "http://www.w3.org/2000/svg"] == []
    for path in ("static/../server.py", "static/%2e%2e/server.py", "static/nope.js", "nope"):
        assert get(server.url + path)[0] == 404
    assert get(server.url + "healthz")[2] == b"ok\n"


def test_nothing_is_read_while_nobody_watches(tmp_path):
    """The pump polls only while a page is connected or a request came lately; then it stops reading."""
    from eventlog import open_log
    from replay.cli._web.pump import Pump
    from replay.cli._web.watch import LogWatch

    pump = Pump(LogWatch(open_log(str(tmp_path / "log"))), interval=0.02, idle_after=0.3).start()
    try:
        time.sleep(0.3)
        assert pump.polls == 0  # nobody asked
        pump.latest()
        assert pump.polls >= 1

        def settled() -> bool:
            before = pump.polls
            time.sleep(0.5)
            return pump.polls == before

        wait_for("the pump to stop polling", settled)
        start = pump.polls
        with pump.watching():
            wait_for("polls while watched", lambda: pump.polls >= start + 3)
        wait_for("the pump to stop again", settled)
    finally:
        pump.stop()


def test_replay_ui_prints_its_url_and_serves(tmp_path, writers):
    uri = str(tmp_path / "log")
    w = writers(uri, "live", 1)
    w.write(0, 0)
    proc = subprocess.Popen([sys.executable, "-m", "replay.cli", "ui", uri, "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        url = proc.stdout.readline().strip()  # type: ignore[union-attr]
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/", url), url
        snap = wait_for("the state", lambda: (s := get_json(url + "api/state")) and s["streams"] and s)
        assert stream_of(snap, "live")["frontier"] == [1]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert "watching" in proc.stderr.read()  # type: ignore[union-attr]
