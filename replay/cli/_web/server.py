"""The HTTP server of ``replay ui`` (the standard library's ``ThreadingHTTPServer``; no framework, no CDN).

Routes (all ``GET``):

* ``/`` — the page, and ``/static/NAME`` its script and style sheet, served from the package (``static/``);
* ``/api/events`` — server-sent events: a ``state`` event at once (the snapshot with each stream's history),
  then one per poll (each stream with its newest history ``sample``, and only the parts that changed since the
  last event: ``parts_delta``), a comment every ``KEEPALIVE`` seconds;
* ``/api/state`` — the newest snapshot as JSON (``?history=1``: with each stream's history);
* ``/api/records?stream=S&time=T&limit=N`` — the first N records at time T (``records.records_at``);
* ``/metrics`` — Prometheus' text format (``metrics.Metrics``);
* ``/healthz`` — ``ok``.

While a page is connected the pump polls the log; once nobody is, it stops (``pump``).
"""

from __future__ import annotations

import json
import os
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit

from eventlog.errors import EventLogError
from eventlog.log import Log
from eventlog.time import Time

from .metrics import CONTENT_TYPE, Metrics
from .pump import Pump
from .records import records_at

STATIC = os.path.join(os.path.dirname(__file__), "static")
"""The page's files, installed with the package."""
_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
KEEPALIVE = 15.0
"""Seconds between two keep-alive comments of an idle event stream."""
MAX_RECORDS = 1000
"""The most records one request for a time's records may ask for."""


def parse_time(text: str, arity: int) -> Time:
    """A time from a query: ``7`` (int64 streams), ``1,2`` or ``[1,2]`` (product times); ValueError otherwise."""
    s = text.strip()
    if arity == 0:
        value = int(s)
        if value < 0:
            raise ValueError("a time is not negative")
        return value
    items = json.loads(s) if s.startswith("[") else [int(x) for x in s.split(",")]
    if not isinstance(items, list) or len(items) != arity or not all(isinstance(x, int) and x >= 0 for x in items):
        raise ValueError(f"a time of this stream is {arity} non-negative integers")
    return tuple(items)


class ViewServer:
    """Serves a view of a log: the page, its event stream, records, metrics (module doc). ``records_log`` is a
    ``Log`` of the same URI for reading a time's records (the pump's own is busy polling)."""

    def __init__(self, pump: Pump, records_log: Log, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.pump = pump
        self.records_log = records_log
        self.metrics = Metrics(lambda: pump.latest(max_age=pump.interval * 2))
        self._records_lock = threading.Lock()
        self.httpd = _Server((host, port), _handler(self))
        bound, bound_port = self.httpd.server_address[:2]
        self.host = bound if isinstance(bound, str) else bytes(bound).decode()
        self.port: int = bound_port
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """Where the page is."""
        host = f"[{self.host}]" if ":" in str(self.host) else self.host
        return f"http://{host}:{self.port}/"

    def start(self) -> "ViewServer":
        """Serve on a thread (``serve_forever`` serves on the caller's)."""
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="replay-ui-http", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve until ``close`` (or Ctrl-C)."""
        self.httpd.serve_forever()

    def close(self) -> None:
        """Stop serving and polling."""
        self.pump.stop()
        self.httpd.shutdown()
        self.httpd.server_close()

    # -- what the routes answer ----------------------------------------------------------------------------

    def state(self, history: bool) -> dict[str, Any]:
        snap = dict(self.pump.latest(max_age=self.pump.interval * 2))
        if history:
            with self.pump.lock:
                snap["history"] = {s["stream"]: self.pump.watch.history_of(s["stream"]) for s in snap["streams"]}
        return snap

    def records(self, query: dict[str, list[str]]) -> tuple[int, dict[str, Any]]:
        stream = (query.get("stream") or [""])[0]
        self.pump.latest(max_age=60.0)  # the watch has looked at the log at least once
        with self.pump.lock:
            header = self.pump.watch.header(stream)
        if header is None:
            return HTTPStatus.NOT_FOUND, {"error": f"no stream {stream!r} is watched"}
        try:
            t = parse_time((query.get("time") or [""])[0], header.time_type.arity)
            limit = max(1, min(MAX_RECORDS, int((query.get("limit") or ["50"])[0])))
        except (ValueError, TypeError) as e:
            return HTTPStatus.BAD_REQUEST, {"error": f"bad time or limit: {e}"}
        with self.pump.lock:
            starts = self.pump.watch.time_seqs(stream, t)
        try:
            with self._records_lock:
                return HTTPStatus.OK, records_at(self.records_log, header, t, limit=limit, starts=starts)
        except (EventLogError, OSError) as e:
            return HTTPStatus.INTERNAL_SERVER_ERROR, {"error": str(e)}


def _changed_parts(snap: dict[str, Any], sent: dict[str, dict[int, dict[str, Any]]]) -> dict[str, Any]:
    """``snap`` with each stream's ``parts`` cut to those that changed since the parts in ``sent`` (which it
    updates), and ``parts_delta`` set: the page merges them by part number. A part's ``idle_s`` grows by itself,
    so it alone is no change (the page counts idle time from ``last_write_ms``)."""
    streams = []
    for s in snap["streams"]:
        before = sent.setdefault(s["stream"], {})
        changed = []
        for p in s["parts"]:
            old = before.get(p["part"])
            if old is None or any(old[k] != v for k, v in p.items() if k != "idle_s"):
                changed.append(p)
                before[p["part"]] = p
        streams.append({**s, "parts": changed, "parts_delta": True})
    for gone in set(sent) - {s["stream"] for s in snap["streams"]}:
        del sent[gone]
    return {**snap, "streams": streams}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def _handler(view: ViewServer) -> Callable[..., BaseHTTPRequestHandler]:
    class Handler(_Handler):
        server_view = view

    return Handler


class _Handler(BaseHTTPRequestHandler):
    server_view: ViewServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass  # no access log on the terminal

    def _send(self, code: int, body: bytes, content_type: str, cache: bool = False) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "max-age=60" if cache else "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        self.wfile.write(body)

    def _json(self, code: int, doc: Any) -> None:
        self._send(code, json.dumps(doc, separators=(",", ":")).encode(), "application/json")

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        url = urlsplit(self.path)
        path, query = url.path, parse_qs(url.query)
        view = self.server_view
        try:
            if path in ("/", "/index.html"):
                self._static("index.html")
            elif path.startswith("/static/"):
                self._static(path[len("/static/"):])
            elif path == "/api/events":
                self._events()
            elif path == "/api/state":
                self._json(HTTPStatus.OK, view.state(history=(query.get("history") or ["0"])[0] == "1"))
            elif path == "/api/records":
                code, doc = view.records(query)
                self._json(code, doc)
            elif path == "/metrics":
                self._send(HTTPStatus.OK, view.metrics.render(), CONTENT_TYPE)
            elif path == "/healthz":
                self._send(HTTPStatus.OK, b"ok\n", "text/plain; charset=utf-8")
            else:
                self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain; charset=utf-8")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the browser went away

    def _static(self, name: str) -> None:
        if name not in os.listdir(STATIC):  # only the package's own files: no path reaches outside
            self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain; charset=utf-8")
            return
        with open(os.path.join(STATIC, name), "rb") as f:
            body = f.read()
        self._send(HTTPStatus.OK, body, _TYPES.get(os.path.splitext(name)[1], "application/octet-stream"))

    def _events(self) -> None:
        view = self.server_view
        pump = view.pump
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        sent: dict[str, dict[int, dict[str, Any]]] = {}
        with pump.watching():
            first = view.state(history=True)
            _changed_parts(first, sent)
            self._event("state", first)
            version = first.get("version", 0)
            while True:
                snap = pump.wait_newer(version, KEEPALIVE)
                if snap is None:
                    if pump.stopped:
                        return
                    self.wfile.write(b": keep-alive\n\n")
                    self.wfile.flush()
                    continue
                version = snap["version"]
                self._event("update", _changed_parts(snap, sent))

    def _event(self, kind: str, doc: Any) -> None:
        data = json.dumps(doc, separators=(",", ":"))
        self.wfile.write(f"event: {kind}\ndata: {data}\n\n".encode())
        self.wfile.flush()
