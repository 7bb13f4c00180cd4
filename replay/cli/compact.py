"""``replay compact``: rewrite runs of a file log part's small sealed segments into few large ones (FORMAT.md §11),
keeping every event byte for byte — sequence ids, times, records, write times and writer epochs. Readers running
meanwhile see every event once; a compaction stopped at any step leaves a readable log, and running it again
finishes it.
"""

from __future__ import annotations

import re
from typing import Any

import click

from ._common import check_part, counted, human_bytes, open_uri, print_json, print_rich, stream_header

COMPACT_HELP = """Rewrite runs of small sealed segments of STREAM (every part, or --part P) into compacted segments
of up to --target-size each (default: the log's segment size, 64MiB), byte for byte the same events. The newest
segment of a part (and the one before a segment a writer still appends to) is never compacted, nor segments a trim
already dropped. Each compacted segment is written whole (then its index) before the segments it replaces are
removed, so readers never miss an event, and an interrupted compaction is finished by the next one. File logs only
(local disks, S3, memory): Kafka keeps its own segments (Kafka's log compaction is another thing and is not used).
--dry-run shows what would be merged.

\b
Example:
  replay compact /tmp/cap numbers
  replay compact s3://bucket/logs clicks --part 0 --target-size 256MiB --dry-run
"""

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1000, "kib": 1 << 10, "m": 1 << 20, "mb": 1000**2, "mib": 1 << 20,
          "g": 1 << 30, "gb": 1000**3, "gib": 1 << 30}


def parse_size(text: str) -> int:
    """``64MiB``, ``500k``, ``1g``, ``1048576`` as bytes."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text)
    if m is None or m.group(2).lower() not in _UNITS or int(m.group(1)) < 1:
        raise ValueError(f"not a size: {text!r} (e.g. 64MiB, 500k, 1g, or bytes)")
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


@click.command("compact", short_help="Merge small segments of a file log stream.", help=COMPACT_HELP)
@click.argument("uri")
@click.argument("stream")
@click.option("--part", "part", type=int, default=None, metavar="P", help="Only this part.")
@click.option("--target-size", "target", metavar="SIZE", default=None,
              help="Largest compacted segment (64MiB, 1g, bytes); segments of half of it or more are left alone.")
@click.option("--min-segments", type=click.IntRange(min=2), default=2, show_default=True,
              help="Fewest segments merged into one.")
@click.option("--dry-run", is_flag=True, help="Show what would be merged; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
def compact(uri: str, stream: str, part: int | None, target: str | None, min_segments: int, dry_run: bool,
            as_json: bool) -> None:
    target_bytes = None
    if target is not None:
        try:
            target_bytes = parse_size(target)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--target-size") from None
    log = open_uri(uri)
    header = stream_header(log, stream)
    check_part(header, part)
    run = getattr(log, "compact", None)
    if run is None:
        raise click.UsageError(f"{log.uri} is not a file log: compaction rewrites file segments (Kafka keeps its own "
                               f"segments; Kafka's log compaction is not used)")
    result = run(stream, part, target_bytes=target_bytes, min_segments=min_segments, dry_run=dry_run)
    if as_json:
        print_json(_as_json(result))
        return
    _print(result)


def _as_json(r: Any) -> dict[str, Any]:
    return {"stream": r.stream, "dry_run": r.dry_run, "segments_before": r.segments_before,
            "segments_after": r.segments_after, "events": r.events, "bytes_written": r.bytes_written,
            "parts": [{"part": p.part, "segments_before": p.segments_before, "segments_after": p.segments_after,
                       "leftovers_removed": p.leftovers_removed, "skipped": p.skipped,
                       "merges": [{"first": m.first, "last": m.last, "segments": m.segments,
                                   "bytes_before": m.bytes_before, "bytes_after": m.bytes_after, "runs": m.runs}
                                  for m in p.merges]} for p in r.parts]}


def _print(r: Any) -> None:
    from rich.table import Table

    verb = "would merge" if r.dry_run else "merged"
    table = Table(title=f"{r.stream!r}: {verb} {counted(r.segments_before - r.segments_after, 'segment')} away",
                  title_justify="left")
    for label in ("part", "segments before", "segments after", "merges", "events", "bytes", "note"):
        table.add_column(label, justify="left" if label == "note" else "right")
    for p in r.parts:
        events = sum(m.last - m.first + 1 for m in p.merges)
        size = sum(m.bytes_before if r.dry_run else m.bytes_after for m in p.merges)
        notes = ([p.skipped] if p.skipped else []) + (
            [f"finished an interrupted compaction ({counted(p.leftovers_removed, 'file')})"]
            if p.leftovers_removed else [])
        table.add_row(str(p.part), str(p.segments_before), str(p.segments_after), str(len(p.merges)), str(events),
                      human_bytes(size) if p.merges else "-", "; ".join(notes))
    print_rich(table)


__all__ = ["compact", "parse_size"]
