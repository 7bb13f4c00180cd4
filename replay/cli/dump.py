"""``replay dump``: the bytes one event is stored as (kcat's raw value output), for a bug report or a look with
other tools: a hex dump on the terminal, the raw bytes into a file or a pipe, or JSON with base64."""

from __future__ import annotations

import base64
import sys

import click

from ._common import check_output_file, check_part, note, open_uri, print_json, stream_header


def _hexdump(data: bytes, width: int = 16) -> str:
    """``xxd``-style lines: the offset, the bytes in hex, the printable ones as text."""
    lines = []
    for at in range(0, len(data), width):
        chunk = data[at:at + width]
        hexes = " ".join(chunk[i:i + 2].hex() for i in range(0, len(chunk), 2))
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{at:08x}: {hexes:<{width * 5 // 2}} {text}")
    return "\n".join(lines)


def _where(found: dict) -> str:
    if "path" in found:
        return f"{found['path']} byte {found.get('offset', '?')}"
    if "record" in found:
        return f"kafka record {found['record']}"
    return "an unknown place"


@click.command("dump", short_help="The bytes one event is stored as (hex, raw or JSON).")
@click.argument("uri")
@click.argument("stream")
@click.argument("part", type=click.IntRange(min=0))
@click.argument("seq", type=click.IntRange(min=1))
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the raw bytes to this file.")
@click.option("--raw", is_flag=True, help="Write the raw bytes to stdout (a pipe or a file, not a terminal).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: where, length, headers, base64 bytes.")
@click.option("--force", is_flag=True, help="Overwrite OUTPUT if it is an existing regular file.")
def dump(uri: str, stream: str, part: int, seq: int, output: str | None, raw: bool, as_json: bool,
         force: bool) -> None:
    """Print or save the bytes event SEQ of PART is stored as, unchecked and undecoded: a file log's event body
    (an Arrow IPC message or an Avro block, at its byte offset in its segment), or the value of the Kafka
    record that holds it (with the record's headers). Where it lies goes to stderr. Damaged events are dumped
    as they are: attach the bytes to a bug report (-o FILE), or look at them with other tools.

    \b
    Example:
      replay dump /tmp/cap numbers 0 7              # hex dump
      replay dump /tmp/cap numbers 0 7 -o event.bin  # the raw bytes, for a bug report
      replay dump kafka://127.0.0.1:19092/jobA numbers 2 15 --json
    """
    if sum((output is not None, raw, as_json)) > 1:
        raise click.UsageError("choose one of -o/--output, --raw and --json")
    if raw and sys.stdout.isatty():
        raise click.UsageError("--raw writes binary bytes: redirect stdout (> event.bin) or use -o FILE")
    if output is not None:
        check_output_file(output, "OUTPUT", force=force)
    log = open_uri(uri)
    header = stream_header(log, stream)
    check_part(header, part)
    found = log.stored(stream, part, seq)
    if found is None:
        import shlex

        from eventlog.errors import EventLogError

        stats = log.part_stats(stream, part)
        raise EventLogError(f"no whole event {seq} is stored (its events: seq {stats.first_seq} to "
                            f"{stats.next_seq - 1}; `{shlex.join(['replay', 'verify', uri, stream])}` says what is "
                            "damaged)", stream=stream, part=part, seq=seq)
    place = _where(found.where)
    if as_json:
        print_json({"stream": stream, "part": part, "seq": seq, "encoding": header.encoding, **found.where,
                    "length": len(found.data),
                    "headers": [[k, None if v is None else base64.b64encode(v).decode()] for k, v in found.headers],
                    "base64": base64.b64encode(found.data).decode()})
        return
    note(f"{stream!r} part {part} seq {seq}: {len(found.data)} bytes at {place} ({header.encoding})")
    for k, v in found.headers:
        note(f"  header {k}: {v!r}")
    if output is not None:
        with open(output, "wb") as f:
            f.write(found.data)
        note(f"wrote {output}")
    elif raw:
        sys.stdout.buffer.write(found.data)
        sys.stdout.flush()
    else:
        click.echo(_hexdump(found.data))
