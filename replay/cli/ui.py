"""``replay ui``: a web page that watches a log live (streams, parts, frontiers, lag, rates, stalls, a time's
records, the runtime's jobs), with Prometheus metrics on ``/metrics``. docs/ui.md."""

from __future__ import annotations

import click

from eventlog._extras import require

from ._common import note, open_uri


@click.command("ui", short_help="Watch a log live in a web page; Prometheus /metrics.")
@click.argument("uri")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to serve on (another than 127.0.0.1 shows records to whoever reaches it).")
@click.option("--port", "-p", type=click.IntRange(0, 65535), default=8765, show_default=True,
              help="Port to serve on (0: any free port).")
@click.option("--stream", "streams", multiple=True, metavar="NAME", help="Watch only this stream (repeat).")
@click.option("--jobs", "jobs", multiple=True, metavar="CHECKPOINTS",
              help="Also show the runtime's jobs whose checkpoints are here (a path or s3:// URI; repeat).")
@click.option("--stall-after", type=click.FloatRange(min=0.1), default=30.0, show_default=True, metavar="SECONDS",
              help="A part that is not finished and wrote nothing for this long is marked stalled.")
@click.option("--interval", type=click.FloatRange(min=0.05), default=0.5, show_default=True, metavar="SECONDS",
              help="Seconds between two looks at the log while someone watches.")
@click.option("--history", type=click.FloatRange(min=10), default=300.0, show_default=True, metavar="SECONDS",
              help="How much history the charts keep.")
@click.option("--lookback", type=click.IntRange(min=0), default=200, show_default=True, metavar="EVENTS",
              help="Events at the end of each part decoded when the view starts (earlier ones: Progress only).")
def ui(uri: str, host: str, port: int, streams: tuple[str, ...], jobs: tuple[str, ...], stall_after: float,
       interval: float, history: float, lookback: int) -> None:
    """Serve a web page that watches the log at URI live: every stream with its parts — each part's frontier,
    the stream's completed frontier, lag (how long ago the first record of the oldest incomplete time was
    written), records and bytes per second, the part holding the stream back, finished and stalled parts —
    updated by server-sent events after each look at the log, with a few minutes of history as charts. A click
    on a time shows its records. Streams created, finished or trimmed appear, finish or move as it runs.

    The view reads only while someone watches (a page is open, or /metrics was scraped in the last seconds),
    and then only what each part appended. GET /metrics gives Prometheus metrics (eventlog_*). Everything the
    page loads comes from this server. Ctrl-C stops it.

    \b
    Examples:
      replay ui /tmp/cap
      replay ui kafka://127.0.0.1:9092/jobA --port 9300
      replay ui s3://bucket/cap --stream counts --stall-after 120
      replay ui /tmp/out --jobs /tmp/checkpoints     # also the runtime's jobs
    """
    require("prometheus_client", "ui", "replay ui")
    from ._web.pump import Pump
    from ._web.server import ViewServer
    from ._web.watch import LogWatch

    log = open_uri(uri, must_exist=False)
    watch = LogWatch(log, streams=streams, stall_after=stall_after, lookback=lookback, history=history)
    jobs_watch = None
    if jobs:
        from ._web.jobs import JobsWatch

        jobs_watch = JobsWatch(jobs)
    pump = Pump(watch, jobs_watch, interval=interval).start()
    try:
        server = ViewServer(pump, open_uri(uri, must_exist=False), host=host, port=port)
    except OSError as e:
        pump.stop()
        raise click.UsageError(f"cannot serve on {host}:{port}: {e.strerror or e}") from None
    note(f"replay ui: watching {log.uri} at {server.url} (metrics: {server.url}metrics; Ctrl-C stops)")
    click.echo(server.url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
        with pump.lock:
            watch.close()
