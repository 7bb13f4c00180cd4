"""``replay trim``: drop a stream's old times — those before a time, or complete before a wall-clock instant or
longer than an age ago — whole, and only complete ones (``eventlog.parts.trim``). Readers then start at the
retained frontier; a reader holding a position in what was dropped gets a typed error naming the earliest
position still there.
"""

from __future__ import annotations

from typing import Any

import click

from eventlog.antichain import Antichain
from eventlog.parts.trim import TrimResult
from eventlog.parts.trim import trim as trim_stream
from eventlog.retention import parse_age

from ._common import TIME, as_time, frontier_json, human_bytes, open_uri, print_json, print_rich, stream_header
from ._wallclock import WallClockParam

TRIM_HELP = """Drop the old times of STREAM: every time before --before TIME, or every time complete before
--before-ts WHEN, or complete longer than --older-than AGE ago (7d, 12h, 90m), or the oldest complete times until
the stream holds about --max-bytes N (file logs). Only times complete in every part are
dropped, each whole; a time beyond the completed frontier is clamped to it. The retention mark is recorded first
(readers start at it at once), then the storage that holds only dropped events is removed: whole segments of file
logs, record prefixes of Kafka partitions (each part's last event is always kept). Run it again to finish a trim
that was interrupted. --dry-run shows what would be dropped.

\b
Example:
  replay trim /tmp/cap numbers --before 100
  replay trim /tmp/cap numbers --older-than 7d --dry-run
  replay trim kafka://127.0.0.1:9092/jobs clicks --before-ts 2026-11-01T00:00:00Z
"""




@click.command("trim", short_help="Drop old times of a stream (retention).", help=TRIM_HELP)
@click.argument("uri")
@click.argument("stream")
@click.option("--before", "before", type=TIME, metavar="TIME", help="Drop every time not beyond TIME (7, or 1,2).")
@click.option("--before-ts", "before_ts", type=WallClockParam(), metavar="WHEN",
              help="Drop the times complete before this wall-clock instant (ISO-8601, @SECONDS, -7d).")
@click.option("--older-than", "older_than", metavar="AGE", help="Drop the times complete longer ago than AGE (7d, 12h).")
@click.option("--max-bytes", "max_bytes", type=click.IntRange(min=0), metavar="N",
              help="Drop the oldest complete times until the stream holds about N bytes (file logs).")
@click.option("--dry-run", is_flag=True, help="Show what would be dropped; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
def trim(uri: str, stream: str, before: Any, before_ts: int | None, older_than: str | None, max_bytes: int | None,
         dry_run: bool, as_json: bool) -> None:
    if sum(x is not None for x in (before, before_ts, older_than, max_bytes)) != 1:  # (before the log is opened)
        raise click.UsageError("give one of --before TIME, --before-ts WHEN, --older-than AGE and --max-bytes N")
    age: float | None = None
    if older_than is not None:
        try:
            age = parse_age(older_than)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--older-than") from None
    log = open_uri(uri)
    header = stream_header(log, stream)
    since = Antichain([as_time(before, header, "--before")]) if before is not None else None
    try:
        result = trim_stream(log, stream, since=since, before_ts=before_ts, older_than=age, max_bytes=max_bytes,
                             dry_run=dry_run)
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    if as_json:
        print_json(_as_json(result))
        return
    _print(result, header.stream)


def _as_json(r: TrimResult) -> dict[str, Any]:
    return {"stream": r.stream, "since": frontier_json(r.since),
            "previous": frontier_json(r.previous) if r.previous is not None else None,
            "completed": frontier_json(r.completed), "clamped": r.clamped, "dry_run": r.dry_run,
            "changed": r.changed, "events_removed": r.events_removed, "bytes_removed": r.bytes_removed,
            "parts": [{"part": p.part, "start_before": p.start_before, "start": p.start,
                       "events_removed": p.events_removed, "bytes_removed": p.bytes_removed} for p in r.parts]}


def _frontier(f: Antichain) -> str:
    import json

    return json.dumps(frontier_json(f), separators=(",", ":"))


def _print(r: TrimResult, stream: str) -> None:
    from rich.table import Table

    verb = "would drop" if r.dry_run else "dropped"
    if r.previous is not None and not r.changed:
        title = f"{stream!r}: already trimmed to {_frontier(r.since)} (nothing more to drop)"
    else:
        title = f"{stream!r}: {verb} the times not beyond {_frontier(r.since)}"
    table = Table(title=title, title_justify="left")
    for label in ("part", "first seq before", "first seq now" if not r.dry_run else "first seq after",
                  "events removed", "bytes removed"):
        table.add_column(label, justify="right")
    for p in r.parts:
        table.add_row(str(p.part), str(p.start_before), str(p.start), str(p.events_removed) if not r.dry_run else "-",
                      human_bytes(p.bytes_removed) if p.bytes_removed is not None and not r.dry_run else "-")
    print_rich(table)
    if r.clamped:
        click.echo(f"note: only complete times are dropped; the stream's completed frontier is {_frontier(r.completed)}",
                   err=True)


__all__ = ["trim"]
