"""``replay verify``: check a log end to end — headers, checksums, sequence continuity, the progress rules,
torn tails — and what the log's own check of its storage finds (a file log's segments, indexes and folder
layout, on the local disk or S3; every record of a Kafka log). A thin shell over ``replay.verify``: it prints
the library's report as tables or JSON and turns it into an exit code."""

from __future__ import annotations

import functools
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from eventlog.errors import StreamNotFoundError
from eventlog.log import Log
from replay.verify import KINDS, MAX_PROBLEMS_PER_PART, PartReport, Problem, VerifyReport
from replay.verify import verify as verify_log

from ._common import EXIT_DIFFERENT, frontier_text, open_uri, print_json, print_rich, progress, stream_header, warn

__all__ = ["KINDS", "MAX_PROBLEMS_PER_PART", "PartReport", "Problem", "verify"]


@click.command("verify", short_help="Check checksums, continuity, progress rules, torn tails.")
@click.argument("uri")
@click.argument("stream", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
def verify(uri: str, stream: str | None, as_json: bool) -> None:
    """Check every stream of the log at URI (or only STREAM): headers; every event's checksum and decoding
    (every record batch is validated); sequence ids without gaps; the progress rules (counts never
    negative, capabilities never added behind the part's frontier, no Messages behind the part's frontier,
    nothing after the part finished); torn tails; and what the log's own check of its storage finds: for file
    logs (local, S3, memory) the files of each part (index against segment) and the folder layout (every
    segment with its index, part folders and segments matching the header's peers and encoding); for Kafka
    logs every record of every partition (records that do not decode or whose headers lie, header records,
    writers, gaps, duplicates with other content).

    Every problem is reported with where it is (stream, part, seq, offset, file or Kafka record), and verify
    goes on: after damage it resumes reading behind it, an unreadable header is a problem of that stream only.
    Exit 0 when nothing is wrong, 1 when problems were found, 2 when URI is not a log (a stream's or a
    part's folder, a file, a folder without streams). A log being written may show a torn tail at the end
    of a part while an event is half written.

    \b
    Example:
      replay verify /tmp/cap
      replay verify /tmp/cap numbers --json | jq '.problems[]'
    """
    log = open_uri(uri)
    try:
        report = verify_log(log, stream, progress=functools.partial(progress, "verifying"))
    except (StreamNotFoundError, ValueError):
        if stream is None:
            raise
        stream_header(log, stream)  # a log error naming the streams there are (or a usage error for a bad name)
        raise
    if as_json:
        print_json(report.to_json())
    else:
        _print_report(log, report)
    if not report.streams and report.ok:
        warn(f"no streams in log {log.uri}")
    if not report.ok:
        raise click.exceptions.Exit(EXIT_DIFFERENT)


def _print_report(log: Log, report: VerifyReport) -> None:
    out: list[Any] = []
    if report.parts:
        table = Table(title=f"log {log.uri}", title_justify="left")
        for c in ("stream", "part", "events", "last seq", "frontier", "status"):
            table.add_column(c, justify="right" if c in ("part", "events", "last seq") else "left")
        for r in report.parts:
            status = Text("ok", style="green") if not r.problems else Text(
                f"{len(r.problems)} problem(s)" + (" (stopped reading: more may follow)" if r.truncated else ""),
                style="red")
            notes = ([f"{r.void} void (a writer restarted mid-time)"] if r.void else []) + (
                [f"{r.held} held back (times not complete)"] if r.held else []) + (
                [f"{r.duplicates} duplicate(s) dropped"] if r.duplicates else []) + (
                [f"{len(r.notes)} compaction leftover(s)"] if r.notes else [])
            if notes:
                status.append(", " + ", ".join(notes), style="dim")
            f = frontier_text(r.frontier) if r.frontier is not None else "unknown"
            table.add_row(Text(r.stream), str(r.part), str(r.events), str(r.last_seq), Text(f), status)
        out.append(table)
    for p in report.problems:
        out.append(Text.assemble(("PROBLEM ", "bold red"), (f"{p.kind}: ", "bold"), p.message,
                                 (f" ({p.where()})" if p.where() else "", "dim")))
    for p in [*(d for r in report.parts for d in r.dropped), *report.notes]:
        out.append(Text.assemble(("NOTE ", "bold"), (f"{p.kind}: ", "bold"), p.message,
                                 (f" ({p.where()})" if p.where() else "", "dim")))
    summary = f"verified {len(report.headers)} stream(s), {len(report.parts)} part(s), {report.events} event(s): "
    out.append(Text(summary + (f"{len(report.problems)} problem(s)" if report.problems else "ok"),
                    style="bold red" if report.problems else "bold green"))
    print_rich(*out)
