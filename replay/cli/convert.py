"""``replay copy`` (a stream into another log, with another part count, key or encoding) and ``replay export``
(a stream's records into plain Parquet, Arrow, Avro or JSON-lines files for other tools)."""

from __future__ import annotations

import os
import threading
from typing import Any

import click

from eventlog.errors import StreamNotFoundError
from eventlog.events import Messages
from eventlog.header import ENCODINGS
from eventlog.log import Log
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
    stderr_console,
    stream_header,
    time_text,
    uncommitted_option,
    warn,
)
from ._scan import held_notes, merged, merged_frontier, open_cursors, part_ends, summarise_part, total_events
from ._sinks import EXPORT_FORMATS, SUFFIX_FORMATS, open_sink
from ._values import BINARY_ENCODINGS


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
def copy(src: str, dst: str, stream: str, workers: int | None, key: tuple[str, ...], encoding: str | None,
         to_stream: str | None) -> None:
    """Copy STREAM from the log SRC into the log DST with another part count, key partitioning or encoding.
    Times, records and completion are preserved: a copied part is finished only if every source part it
    reads is. DST may be the same log as SRC with --to-stream. The destination stream must not exist.

    \b
    Example:
      replay copy /tmp/cap /tmp/cap2 numbers --workers 2 --encoding avro
      replay copy /tmp/cap /tmp/cap numbers --to-stream numbers-by-n --key n --workers 4
    """
    src_log = open_uri(src)
    header = stream_header(src_log, stream)
    dst_log = open_uri(dst, must_exist=False)
    name = to_stream or stream
    try:
        dst_log.header(name)
        raise click.UsageError(f"stream {name!r} already exists in {dst_log.uri}; choose another --to-stream")
    except StreamNotFoundError:
        pass
    except ValueError as e:  # an invalid stream name
        raise click.BadParameter(str(e), param_hint="'--to-stream'") from None
    missing = [k for k in key if k not in header.schema.names]
    if missing:
        raise click.BadParameter(f"no field {missing[0]!r} in the records ({', '.join(header.schema.names)})",
                                 param_hint="'--key'")
    peers = workers or header.peers
    source_events = total_events(src_log, header, range(header.peers))
    with _CopyWatch(dst, name, peers, source_events):
        out = copy_stream(src_log, dst_log, stream, peers=peers, key=list(key) if key else None, encoding=encoding,
                          dst_stream=name)
    events = sum(dst_log.part_stats(name, p).events for p in range(out.peers))
    note(f"copied {stream!r} ({header.peers} parts, {header.encoding}) from {src_log.uri} to {dst_log.uri} as "
         f"{name!r} ({out.peers} parts, {out.encoding}): {events} events")
    unfinished = _unfinished_parts(dst_log, name, out.peers)
    if unfinished:
        warn(f"the source stream is not finished, so neither are parts {unfinished} of the copy")


def _unfinished_parts(log: Log, stream: str, peers: int) -> list[int]:
    header = log.header(stream)
    return [p for p in range(peers) if not summarise_part(log, header, p, progress_only=True).frontier.is_empty()]


class _CopyWatch:
    """A spinner on stderr (terminals only) counting the events written to the destination while
    ``replay.copy`` runs (it reports no progress itself). It reads the destination through a log object
    of its own, since it polls from another thread."""

    def __init__(self, uri: str, stream: str, peers: int, source_events: int) -> None:
        self._uri, self._stream, self._peers, self._source = uri, stream, peers, source_events
        self._log: Log | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _written(self) -> int:
        try:
            if self._log is None:
                self._log = open_uri(self._uri, must_exist=False)
            return sum(self._log.part_stats(self._stream, p).events for p in range(self._peers))
        except Exception:  # noqa: BLE001 - the stream may not exist yet; the count is only a hint
            return 0

    def _watch(self, status: Any) -> None:
        while not self._stop.wait(0.25):
            status.update(f"copying: {self._written()} events written (source: {self._source} events)")

    def __enter__(self) -> "_CopyWatch":
        console = stderr_console()
        if console.is_terminal:
            self._status = console.status("copying")
            self._status.__enter__()
            self._thread = threading.Thread(target=self._watch, args=(self._status,), daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._status.__exit__(None, None, None)
            if self._log is not None:
                self._log.close()


@click.command("export", short_help="Write records to Parquet, Arrow, Avro or JSON lines.")
@click.argument("uri")
@click.argument("stream")
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--to", "fmt", type=click.Choice(EXPORT_FORMATS),
              help="File format (default: from PATH's suffix: .parquet, .arrow/.feather, .avro, .jsonl).")
@click.option("--incomplete", is_flag=True, help="Also export times that are not complete yet, with every record "
              "read (implies --uncommitted: records a writer may still replace after a crash).")
@click.option("--since", type=TIME, help="Only times t with SINCE <= t.")
@click.option("--until", type=TIME, help="Only times t that are not >= UNTIL.")
@click.option("--bytes", "binary", type=click.Choice(BINARY_ENCODINGS), default="base64", show_default=True,
              help="How binary values are written in jsonl.")
@click.option("--force", is_flag=True, help="Overwrite PATH if it is an existing regular file (never a device, fifo, "
              "directory or a symbolic link to one).")
@uncommitted_option
def export(uri: str, stream: str, path: str, fmt: str | None, incomplete: bool, since: Any, until: Any,
           binary: str, force: bool, isolation: str) -> None:
    """Write the records of STREAM to PATH as a plain file other tools read: Parquet, an Arrow IPC file,
    an Avro container file or JSON lines. Every row is a record with _time (int64, or list<int64> for
    product times), _part and _seq (where it was captured). Only complete times are exported unless
    --incomplete; rows come in replay order (lowest time first).

    \b
    Example:
      replay export /tmp/cap numbers numbers.parquet
      replay export /tmp/cap numbers --to jsonl out.txt --incomplete
    """
    if fmt is None:
        fmt = SUFFIX_FORMATS.get(os.path.splitext(path)[1].lower())
        if fmt is None:
            raise click.BadParameter(f"cannot tell the format from {path!r}: pass --to "
                                     f"{'|'.join(EXPORT_FORMATS)}", param_hint="'--to'")
    check_output_file(path, "PATH", force=force)
    log = open_uri(uri)
    header = stream_header(log, stream)
    since_t, until_t = as_time(since, header, "--since"), as_time(until, header, "--until")
    parts = range(header.peers)
    total = total_events(log, header, parts)
    # completeness from the Progress events first; both passes end where the parts end now (a consistent
    # view of a log that is still being written)
    ends = part_ends(log, header, parts)
    cursors = open_cursors(log, header, parts, ends=ends, progress_only=True)
    try:
        for c in cursors:
            for _ in c.read():
                pass
        frontier = merged_frontier(c.frontier for c in cursors)
    finally:
        for c in cursors:
            c.close()
    sink = open_sink(fmt, path, header, binary)
    cursors = open_cursors(log, header, parts, ends=ends, isolation="uncommitted" if incomplete else isolation)
    times: set = set()
    left_out = 0
    try:
        with progress(f"exporting to {fmt}", total) as advance:
            for cursor, entry in merged(cursors):
                advance(1)
                ev = entry.event
                if not isinstance(ev, Messages):
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
