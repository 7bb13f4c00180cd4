"""``replay copy`` (a stream into another log, with another part count, key or encoding) and ``replay export``
(a stream's records into plain Parquet, Arrow, Avro or JSON-lines files for other tools)."""

from __future__ import annotations

import contextlib
import os
from typing import Any, Callable, Iterator

import click

from eventlog.events import Entry, Messages
from eventlog.header import COMPRESSIONS, ENCODINGS
from eventlog.log import Log, PartReader
from eventlog.time import less_equal
from replay.copy import copy as copy_stream

from ._common import (
    TIME,
    as_time,
    check_output_file,
    frontier_text,
    note,
    open_uri,
    progress,
    require_new_stream,
    stream_header,
    time_text,
    uncommitted_option,
    warn,
)
from ._scan import held_notes, merged, merged_frontier, open_cursors, part_ends, summarise_part, total_events
from ._sinks import AVRO_CODECS, EXPORT_FORMATS, SUFFIX_FORMATS, open_sink
from ._values import BINARY_ENCODINGS
from ._wallclock import check_window, require_write_times, ts_options


@click.command("copy", short_help="Copy a stream with other parts, key or encoding.")
@click.argument("src")
@click.argument("dst")
@click.argument("stream")
@click.option("--workers", "-w", type=click.IntRange(min=1),
              help="Parts of the copy (default: the source's). Source part i goes to part i % WORKERS.")
@click.option("--key", multiple=True,
              help="Repartition records by this column (repeat for several) instead of assigning whole parts.")
@click.option("--encoding", type=click.Choice(ENCODINGS), help="Encoding of the copy (default: the source's).")
@click.option("--to-stream", help="Name of the stream in DST (default: STREAM).")
@click.option("--compression", type=click.Choice(sorted({c for cs in COMPRESSIONS.values() for c in cs})),
              help="Compression of the copy: zstd, lz4 or none (arrow); deflate, zstandard or null (avro). Default: "
                   "the source's for an arrow copy of an arrow stream, else the destination log's.")
def copy(src: str, dst: str, stream: str, workers: int | None, key: tuple[str, ...], encoding: str | None,
         to_stream: str | None, compression: str | None) -> None:
    """Copy STREAM from the log SRC into the log DST with another part count, key partitioning or encoding.
    Times, records and completion are preserved: a copied part is finished only if every source part it
    reads is. DST may be the same log as SRC with --to-stream. The destination stream must not exist.

    \b
    Example:
      replay copy /tmp/cap /tmp/cap2 numbers --workers 2 --encoding avro
      replay copy /tmp/cap /tmp/cap numbers --to-stream numbers-by-n --key n --workers 4
      replay copy /tmp/cap /tmp/cap-lz4 numbers --compression lz4
    """
    src_log = open_uri(src)
    header = stream_header(src_log, stream)
    dst_log = open_uri(dst, must_exist=False)
    name = to_stream or stream
    if compression is not None and compression not in COMPRESSIONS[encoding or header.encoding]:
        raise click.BadParameter(f"{compression!r} is not a compression of the {encoding or header.encoding} encoding "
                                 f"({', '.join(COMPRESSIONS[encoding or header.encoding])})",
                                 param_hint="'--compression'")
    require_new_stream(dst_log, name, "'--to-stream'", "another --to-stream")
    missing = [k for k in key if k not in header.schema.names]
    if missing:
        raise click.BadParameter(f"no field {missing[0]!r} in the records ({', '.join(header.schema.names)})",
                                 param_hint="'--key'")
    peers = workers or header.peers
    # each part of the copy reads the source parts it is assigned, or, with --key, every source part
    reads = total_events(src_log, header, range(header.peers)) * (peers if key else 1)
    what = f"copying {stream!r}" + (f" (--key: source read {peers}x)" if key else "")
    with progress(what, reads) as advance, _counting_reads(src_log, stream, advance):
        out = copy_stream(src_log, dst_log, stream, peers=peers, key=list(key) if key else None, encoding=encoding,
                          dst_stream=name, compression=compression)
    events = sum(dst_log.part_stats(name, p).events for p in range(out.peers))
    codec = f", {out.compression}" if out.compression else ""
    note(f"copied {stream!r} ({header.peers} parts, {header.encoding}) from {src_log.uri} to {dst_log.uri} as "
         f"{name!r} ({out.peers} parts, {out.encoding}{codec}): {events} events")
    unfinished = _unfinished_parts(dst_log, name, out.peers)
    if unfinished:
        warn(f"the source stream is not finished, so neither are parts {unfinished} of the copy")


def _unfinished_parts(log: Log, stream: str, peers: int) -> list[int]:
    header = log.header(stream)
    return [p for p in range(peers) if not summarise_part(log, header, p, progress_only=True).frontier.is_empty()]


class _CountedReader:
    """A part reader that calls ``advance(1)`` for every entry it yields; anything else goes to ``reader``."""

    def __init__(self, reader: PartReader, advance: Callable[[int], None]) -> None:
        self._reader, self._advance = reader, advance

    def __iter__(self) -> Iterator[Entry]:
        for entry in self._reader:
            self._advance(1)
            yield entry

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reader, name)

    def __enter__(self) -> "_CountedReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self._reader.close()


@contextlib.contextmanager
def _counting_reads(log: Log, stream: str, advance: Callable[[int], None]) -> Iterator[None]:
    """While the block runs, the events ``log`` (the CLI's own log object) yields from ``stream`` advance the
    progress bar: ``replay.copy`` reports no progress itself, and the source events it reads, known up front
    from ``part_stats``, give the bar its total and ETA."""
    plain = log.reader

    def reader(name: str, part: int, start: int = 1, *, progress_only: bool = False) -> Any:
        r = plain(name, part, start, progress_only=progress_only)
        return _CountedReader(r, advance) if name == stream and not progress_only else r

    log.reader = reader  # type: ignore[method-assign]
    try:
        yield
    finally:
        del log.reader  # the class's method again


@click.command("export", short_help="Write records to Parquet, Arrow, Avro, JSON lines or CSV.")
@click.argument("uri")
@click.argument("stream")
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--to", "fmt", type=click.Choice(EXPORT_FORMATS),
              help="File format (default: from PATH's suffix: .parquet, .arrow/.feather, .avro, .jsonl, .csv).")
@click.option("--codec", type=click.Choice(AVRO_CODECS), help="Block codec of an Avro file (default deflate).")
@click.option("--incomplete", is_flag=True, help="Also export times that are not complete yet, with every record "
              "read (implies --uncommitted: records a writer may still replace after a crash).")
@click.option("--since", type=TIME, help="Only times t with SINCE <= t.")
@click.option("--until", type=TIME, help="Only times t that are not >= UNTIL.")
@ts_options
@click.option("--bytes", "binary", type=click.Choice(BINARY_ENCODINGS), default="base64", show_default=True,
              help="How binary values are written in jsonl and csv.")
@click.option("--force", is_flag=True, help="Overwrite PATH if it is an existing regular file (never a device, fifo, "
              "directory or a symbolic link to one).")
@uncommitted_option
def export(uri: str, stream: str, path: str, fmt: str | None, codec: str | None, incomplete: bool, since: Any,
           until: Any, since_ts: int | None, until_ts: int | None, binary: str, force: bool, isolation: str) -> None:
    """Write the records of STREAM to PATH as a plain file other tools read: Parquet, an Arrow IPC file,
    an Avro container file, JSON lines or CSV. Every row is a record with _time (int64, or list<int64> for
    product times; in CSV 1;2), _part and _seq (where it was captured). Only complete times are exported unless
    --incomplete; rows come in replay order (lowest time first). --since-ts keeps the records written since
    then; --until-ts exports the stream as it was then (complete times and committed records at that moment).

    \b
    Example:
      replay export /tmp/cap numbers numbers.parquet
      replay export /tmp/cap numbers --to jsonl out.txt --incomplete
      replay export /tmp/cap numbers last-hour.parquet --since-ts -1h
      replay export /tmp/cap numbers numbers.avro --codec zstandard
    """
    if fmt is None:
        fmt = SUFFIX_FORMATS.get(os.path.splitext(path)[1].lower())
        if fmt is None:
            raise click.BadParameter(f"cannot tell the format from {path!r}: pass --to "
                                     f"{'|'.join(EXPORT_FORMATS)}", param_hint="'--to'")
    if codec is not None and fmt != "avro":
        raise click.BadParameter(f"--codec is the block codec of Avro files; {fmt} files have none here",
                                 param_hint="'--codec'")
    check_output_file(path, "PATH", force=force)
    check_window(since_ts, until_ts)
    log = open_uri(uri)
    header = stream_header(log, stream)
    since_t, until_t = as_time(since, header, "--since"), as_time(until, header, "--until")
    parts = range(header.peers)
    require_write_times(log, header, parts, since_ts, until_ts)
    total = total_events(log, header, parts)
    # completeness from the Progress events first; both passes end where the parts end now (a consistent
    # view of a log that is still being written)
    ends = part_ends(log, header, parts)
    cursors = open_cursors(log, header, parts, ends=ends, progress_only=True, until_ts=until_ts)
    try:
        for c in cursors:
            for _ in c.read():
                pass
        frontier = merged_frontier(c.frontier for c in cursors)
    finally:
        for c in cursors:
            c.close()
    sink = open_sink(fmt, path, header, binary, codec)
    cursors = open_cursors(log, header, parts, ends=ends, isolation="uncommitted" if incomplete else isolation,
                           since_ts=since_ts, until_ts=until_ts)
    times: set = set()
    left_out = 0
    try:
        with progress(f"exporting to {fmt}", total) as advance:
            for cursor, entry in merged(cursors):
                advance(1)
                ev = entry.event
                if not isinstance(ev, Messages) or not cursor.in_window(entry):
                    continue
                t = ev.time
                if (since_t is not None and not less_equal(since_t, t)) or (
                        until_t is not None and less_equal(until_t, t)):
                    continue
                if not incomplete and frontier.less_equal(t):
                    left_out += ev.records.num_rows
                    continue
                sink.write(ev.records, t, cursor.part, entry.seq)
                times.add(t)
        blocked = [(c.part, t) for c in cursors if c.committed is not None
                   for t in c.committed.held_committed_times() if incomplete or not frontier.less_equal(t)]
        if blocked:
            part, t = blocked[0]
            raise click.ClickException(
                f"part {part} holds records at time {time_text(t)} that are committed but wait behind a message its "
                "writer has not committed (the writer is live or crashed mid-time): the export would miss them. "
                "Run it again once the writer continues, or with --uncommitted.")
        held = held_notes(cursors)
        sink.close()
    except BaseException:
        sink.abort()
        raise
    finally:
        for c in cursors:
            c.close()
    note(f"exported {sink.rows} records at {len(times)} times to {path} ({fmt})")
    for line in held:
        note(line)
    if left_out:
        note(f"left out {left_out} records at times not complete yet (stream frontier {frontier_text(frontier)}); "
             "--incomplete exports them too")
