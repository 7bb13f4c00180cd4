"""``replay info``: a stream's header, its schema, and per part the sequence range, size and frontier."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from ._common import (
    frontier_json,
    frontier_text,
    human_bytes,
    open_uri,
    print_json,
    print_rich,
    progress,
    stream_header,
    warn,
)
from ._scan import merged_frontier, summarise_part, total_events


@click.command("info", short_help="A stream's header, schema and parts.")
@click.argument("uri")
@click.argument("stream")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
def info(uri: str, stream: str, as_json: bool) -> None:
    """Show STREAM of the log at URI: its header (format version, peers, time type, encoding, creation
    time), its record schema, and per part the first and last sequence ids, events, segments, bytes and
    frontier. Frontiers come from the Progress events only (Messages are not decoded).

    \b
    Example:
      replay info /tmp/cap numbers
      replay info /tmp/cap numbers --json | jq '.parts[] | {part, last_seq, frontier}'
    """
    log = open_uri(uri)
    header = stream_header(log, stream)
    peers = range(header.peers)
    with progress("reading progress", total_events(log, header, peers)) as advance:
        parts = [summarise_part(log, header, p, progress_only=True, advance=advance) for p in peers]
    frontier = merged_frontier(p.frontier for p in parts)
    mark = log.retention(stream)
    history = log.schema_history(stream)
    doc: dict[str, Any] = {
        "stream": header.stream,
        "version": f"{header.version[0]}.{header.version[1]}",
        "peers": header.peers,
        "time": header.time_type.name,
        "encoding": header.encoding,
        "compression": header.arrow_compression if header.encoding == "arrow" else header.compression,
        "created": header.created,
        "fields": [{"name": f.name, "type": str(f.type), "nullable": f.nullable} for f in header.schema],
        "metadata": {k.decode(errors="replace"): v.decode(errors="replace")
                     for k, v in (header.schema.metadata or {}).items()},
        "frontier": frontier_json(frontier),
        "retained": None if mark is None else {"since": frontier_json(mark.since), "trimmed": mark.trimmed},
        "schema_versions": None if history is None else [
            {"fields": [{"name": f.name, "type": str(f.type), "nullable": f.nullable} for f in schema],
             "parts": {str(p): [s for s, v in runs if v == i] for p, runs in sorted(history.switches.items())
                       if any(v == i for _, v in runs)}}
            for i, schema in enumerate(history.versions)],
        "parts": [
            {
                "part": p.part,
                "first_seq": p.stats.first_seq,
                "last_seq": p.last_seq,
                "events": p.events,
                "segments": p.stats.segments,
                "bytes": p.stats.bytes,
                "frontier": frontier_json(p.frontier),
                "finished": p.frontier.is_empty(),
                "tail_problem": p.tail_problem,
            }
            for p in parts
        ],
    }
    if as_json:
        print_json(doc)
    else:
        _print_tables(doc, header.schema.metadata or {}, [frontier_text(p.frontier) for p in parts],
                      frontier_text(frontier))
    for p in parts:
        if p.tail_problem:
            warn(f"part {p.part} ends in a torn tail: {p.tail_problem}")


def _print_tables(doc: dict[str, Any], metadata: dict, part_frontiers: list[str], frontier: str) -> None:
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    for key, value in (
        ("stream", doc["stream"]), ("format", f"eventlog {doc['version']}"), ("peers", str(doc["peers"])),
        ("time", doc["time"]),
        ("encoding", f"{doc['encoding']}, {doc['compression'] or 'the log’s default codec'} compression"),
        ("created", doc["created"]), ("frontier", frontier),
    ):
        head.add_row(key, Text(value))
    if doc["schema_versions"]:  # the schema changed (FORMAT.md §12): the table below is the current one
        n = len(doc["schema_versions"])
        head.add_row("schemas", Text(f"{n} versions; records of earlier ones are read as the current one (below)"))
    if doc["retained"] is not None:  # a trim dropped the times before this frontier (FORMAT.md §10)
        since = json.dumps(doc["retained"]["since"], separators=(",", ":"))
        head.add_row("retained", Text(f"times from {since} on (older ones trimmed {doc['retained']['trimmed']})"))
    schema = Table(title="schema", title_justify="left")
    for c in ("field", "type", "nullable"):
        schema.add_column(c)
    for f in doc["fields"]:
        schema.add_row(Text(f["name"]), Text(f["type"]), "yes" if f["nullable"] else "no")
    parts = Table(title="parts", title_justify="left")
    for c in ("part", "first seq", "last seq", "events", "segments", "bytes", "frontier"):
        parts.add_column(c, justify="left" if c == "frontier" else "right")
    for p, f in zip(doc["parts"], part_frontiers):
        parts.add_row(str(p["part"]), str(p["first_seq"]), str(p["last_seq"]), str(p["events"]), str(p["segments"]),
                      human_bytes(p["bytes"]), Text(f + (" (torn tail)" if p["tail_problem"] else "")))
    meta = [Text("schema metadata: " + ", ".join(f"{k}={v}" for k, v in doc["metadata"].items()))] if metadata else []
    print_rich(head, schema, *meta, parts)
