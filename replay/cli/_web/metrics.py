"""The Prometheus metrics of ``replay ui`` (``GET /metrics``): the watch's last state in the standard text format,
made by ``prometheus_client``. Names start with ``eventlog_``; streams and parts are labels (``stream``, ``part``),
jobs ``job`` (and ``task``, ``channel``). docs/ui.md lists every metric with an example alert rule.

Frontiers are gauges of ``int64`` streams only (a product time is not one number): a part's frontier is the time
it has not completed yet, ``+Inf`` once it finished. Records and bytes written are counted by the watch from the
events it read (since the server started, its look back at each part's tail included); events written are the
parts' sequence ids, exact.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

CONTENT_TYPE = CONTENT_TYPE_LATEST
"""The Content-Type of the text format."""


def _frontier_value(part: dict[str, Any]) -> float | None:
    if part["finished"]:
        return math.inf
    return part["frontier_int"]


class _Collector:
    """Turns the snapshot ``state()`` gives (``LogWatch.snapshot`` plus ``jobs``) into metric families."""

    def __init__(self, state: Callable[[], dict[str, Any]]) -> None:
        self._state = state

    def describe(self) -> list[Metric]:
        return []  # the families depend on the log: collected, not described up front

    def collect(self) -> Iterator[Metric]:
        snap = self._state()
        yield from self._streams(snap.get("streams", []))
        yield from self._jobs(snap.get("jobs", []))
        g = GaugeMetricFamily("eventlog_view_poll_seconds", "How long the view's last poll of the log took.")
        g.add_metric([], float(snap.get("poll_ms", 0.0)) / 1000)
        yield g

    @staticmethod
    def _streams(streams: list[dict[str, Any]]) -> Iterator[Metric]:
        sl, pl = ["stream"], ["stream", "part"]
        fam: dict[str, Any] = {
            "part_frontier": GaugeMetricFamily(
                "eventlog_part_frontier", "The part's frontier: the least time it may still send (int64 times; "
                "+Inf when finished).", labels=pl),
            "stream_frontier": GaugeMetricFamily(
                "eventlog_stream_completed_frontier", "The stream's completed frontier: every time before it is "
                "complete (int64 times; +Inf when every part finished).", labels=sl),
            "part_lag": GaugeMetricFamily(
                "eventlog_part_frontier_lag_seconds", "Seconds since the first record of the oldest time the part "
                "has not completed was written (0: no record waits on the part).", labels=pl),
            "stream_lag": GaugeMetricFamily(
                "eventlog_stream_frontier_lag_seconds", "Seconds since the first record of the stream's oldest "
                "incomplete time was written (0: no record waits).", labels=sl),
            "completed_lag": GaugeMetricFamily(
                "eventlog_stream_completed_time_lag_seconds", "For the last time that became complete: seconds "
                "from its first record's write to its completion.", labels=sl),
            "events": CounterMetricFamily(
                "eventlog_part_events_written", "Events the part holds up to its last sequence id.", labels=pl),
            "records": CounterMetricFamily(
                "eventlog_part_records_written", "Records written to the part, as counted by the view since it "
                "started.", labels=pl),
            "bytes": CounterMetricFamily(
                "eventlog_part_bytes_written", "Bytes of records (Arrow in-memory size) written to the part, as "
                "counted by the view since it started.", labels=pl),
            "stored": GaugeMetricFamily(
                "eventlog_part_stored_bytes", "Bytes the part occupies in the log (file logs).", labels=pl),
            "rec_rate": GaugeMetricFamily(
                "eventlog_part_records_per_second", "Records written per second (last seconds).", labels=pl),
            "stalled": GaugeMetricFamily(
                "eventlog_part_stalled", "1 when the part is not finished and wrote nothing for the stall "
                "time (replay ui --stall-after).", labels=pl),
            "stalled_parts": GaugeMetricFamily(
                "eventlog_stream_stalled_parts", "Parts of the stream that are stalled.", labels=sl),
            "finished": GaugeMetricFamily("eventlog_part_finished", "1 when the part finished.", labels=pl),
            "holding": GaugeMetricFamily(
                "eventlog_part_holding_back", "1 when the part holds the stream's frontier back (another "
                "unfinished part is ahead).", labels=pl),
            "idle": GaugeMetricFamily(
                "eventlog_part_idle_seconds", "Seconds since the part's last write.", labels=pl),
        }
        for s in streams:
            name = s["stream"]
            if s["frontier"] is not None and (s["finished"] or s["frontier_int"] is not None):
                fam["stream_frontier"].add_metric([name], math.inf if s["finished"] else float(s["frontier_int"]))
            fam["stream_lag"].add_metric([name], s["lag_s"])
            if s["completed_lag_s"] is not None:
                fam["completed_lag"].add_metric([name], s["completed_lag_s"])
            fam["stalled_parts"].add_metric([name], s["stalled_parts"])
            for p in s["parts"]:
                labels = [name, str(p["part"])]
                if p["frontier"] is not None and (value := _frontier_value(p)) is not None:
                    fam["part_frontier"].add_metric(labels, float(value))
                fam["part_lag"].add_metric(labels, p["lag_s"])
                fam["events"].add_metric(labels, max(0, p["next_seq"] - 1))
                fam["records"].add_metric(labels, p["records"])
                fam["bytes"].add_metric(labels, p["bytes"])
                if p["stored_bytes"] is not None:
                    fam["stored"].add_metric(labels, p["stored_bytes"])
                fam["rec_rate"].add_metric(labels, p["records_per_s"])
                fam["stalled"].add_metric(labels, int(p["stalled"]))
                fam["finished"].add_metric(labels, int(p["finished"]))
                fam["holding"].add_metric(labels, int(p["holding"]))
                if p["idle_s"] is not None:
                    fam["idle"].add_metric(labels, p["idle_s"])
        yield from fam.values()

    @staticmethod
    def _jobs(jobs: list[dict[str, Any]]) -> Iterator[Metric]:
        jl, tl, cl = ["job"], ["job", "task"], ["job", "channel"]
        up = GaugeMetricFamily("eventlog_job_running", "1 while the job runs (its status file is fresh).", labels=jl)
        ck = CounterMetricFamily("eventlog_job_checkpoints_completed", "Checkpoints completed in the job's run.",
                                 labels=jl)
        last_id = GaugeMetricFamily("eventlog_job_last_checkpoint_id", "Id of the last completed checkpoint.",
                                    labels=jl)
        dur = GaugeMetricFamily("eventlog_job_last_checkpoint_duration_seconds",
                                "Trigger-to-completion time of the last checkpoint.", labels=jl)
        size = GaugeMetricFamily("eventlog_job_last_checkpoint_size_bytes",
                                 "State bytes of the last snapshots of the job's tasks.", labels=jl)
        when = GaugeMetricFamily("eventlog_job_last_checkpoint_timestamp_seconds",
                                 "When the last checkpoint completed (seconds since the epoch).", labels=jl)
        restarts = CounterMetricFamily("eventlog_job_restarts", "Restarts of the job after failures in its run.",
                                       labels=jl)
        rin = CounterMetricFamily("eventlog_job_records_read", "Records a task read from its inputs.", labels=tl)
        rout = CounterMetricFamily("eventlog_job_records_written", "Rows a task wrote to its outputs.", labels=tl)
        sent = CounterMetricFamily("eventlog_job_channel_bytes_written", "Bytes written to a channel.", labels=cl)
        acked = CounterMetricFamily("eventlog_job_channel_bytes_read", "Bytes of a channel its reader consumed.",
                                    labels=cl)
        backlog = GaugeMetricFamily("eventlog_job_channel_backlog_bytes",
                                    "Bytes written to a channel and not consumed yet.", labels=cl)
        blocked = CounterMetricFamily("eventlog_job_channel_blocked_seconds",
                                      "Seconds the channel's writer waited on a full ring (backpressure).", labels=cl)
        for j in jobs:
            job = j.get("job", "?")
            up.add_metric([job], int(j.get("status") == "running" and not j.get("stale")))
            c = j.get("checkpoints") or {}
            ck.add_metric([job], c.get("completed_in_run") or 0)
            last_id.add_metric([job], c.get("last_completed") or 0)
            if c.get("last_duration_s") is not None:
                dur.add_metric([job], c["last_duration_s"])
            if c.get("last_size_bytes") is not None:
                size.add_metric([job], c["last_size_bytes"])
            if c.get("last_completed_ms") is not None:
                when.add_metric([job], c["last_completed_ms"] / 1000)
            restarts.add_metric([job], j.get("restart_count") or 0)
            for op in j.get("operators", []):
                for inst in op.get("instances", []):
                    if inst.get("records_in") is not None:
                        rin.add_metric([job, inst["task"]], inst["records_in"])
                    if inst.get("rows_out") is not None:
                        rout.add_metric([job, inst["task"]], inst["rows_out"])
            for ch in j.get("channels", []):
                labels = [job, ch["name"]]
                if ch.get("sent_bytes") is not None:
                    sent.add_metric(labels, ch["sent_bytes"])
                    backlog.add_metric(labels, ch.get("backlog_bytes") or 0)
                acked.add_metric(labels, ch.get("acked_bytes") or 0)
                if ch.get("blocked_s") is not None:
                    blocked.add_metric(labels, ch["blocked_s"])
        yield from (up, ck, last_id, dur, size, when, restarts, rin, rout, sent, acked, backlog, blocked)


class Metrics:
    """The ``/metrics`` page of a view: ``render()`` gives the text format of ``state()`` now."""

    def __init__(self, state: Callable[[], dict[str, Any]]) -> None:
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(_Collector(state))  # type: ignore[arg-type]

    def render(self) -> bytes:
        """The metrics in Prometheus' text format (``CONTENT_TYPE``)."""
        return generate_latest(self._registry)
