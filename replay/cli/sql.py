"""``replay sql``: query a log's streams with SQL (DuckDB, the ``sql`` extra). Each stream the query names is
a view of that name over ``replay.dataset``: the stream's columns with ``_time``, ``_part`` and ``_seq``, the
committed records by default. Only the streams the query names are read."""

from __future__ import annotations

import json
from typing import Any, Iterator

import click
import pyarrow as pa

from eventlog._extras import require
from eventlog.log import Log
from replay.dataset import read_dataset

from ._common import (
    EXIT_LOG_ERROR,
    TIME,
    _fail,
    as_time,
    frontier_text,
    note,
    open_uri,
    stream_header,
    time_text,
    uncommitted_option,
)
from ._output import FORMATS, default_format, row_writer
from ._values import BINARY_ENCODINGS, RecordConverter

EXIT_QUERY_FAILED = 1
"""DuckDB refused or failed the query (as ``sqlite3`` and ``psql`` exit with 1)."""

_BATCH_ROWS = 10_000
"""Result rows fetched from DuckDB at a time."""


def _one_line(error: Exception) -> str:
    """DuckDB's message on one line: its lines joined, the caret line under the query left out."""
    lines = [line.strip() for line in str(error).splitlines()]
    return " ".join(line for line in lines if line and set(line) != {"^"})


def _table_names(tree: Any) -> Iterator[str]:
    """The names of the tables a query's syntax tree (``json_serialize_sql``) reads."""
    if isinstance(tree, dict):
        if tree.get("type") == "BASE_TABLE" and isinstance(tree.get("table_name"), str):
            yield tree["table_name"]
        for value in tree.values():
            yield from _table_names(value)
    elif isinstance(tree, list):
        for value in tree:
            yield from _table_names(value)


def _streams_used(con: Any, query: str, streams: list[str]) -> list[str]:
    """The streams ``query`` reads: the tables its syntax tree names (DuckDB's parser alone, nothing bound),
    matched as DuckDB matches names (ignoring case). A statement the parser cannot serialise (not a SELECT)
    reads every stream whose name its text holds."""
    tree = json.loads(con.execute("select json_serialize_sql(?)", [query]).fetchone()[0])
    if tree.get("error"):
        text = query.lower()
        return [s for s in streams if s.lower() in text]
    named = {n.lower() for n in _table_names(tree)}
    return [s for s in streams if s.lower() in named]


def _register(con: Any, log: Log, names: list[str], since: Any, until: Any, isolation: str, incomplete: bool) -> None:
    """Each named stream as a view over ``replay.read_dataset``: complete times only unless ``incomplete``, saying
    on stderr what was left out (as ``replay export`` does)."""
    for name in names:
        header = stream_header(log, name)
        read = read_dataset(log, name, since=as_time(since, header, "--since"), until=as_time(until, header, "--until"),
                            isolation=isolation, incomplete=incomplete)
        con.register(name, read.dataset)
        if read.left_out_rows:
            times = read.left_out_times
            shown = ", ".join(time_text(t) for t in times[:5]) + (", …" if len(times) > 5 else "")
            note(f"stream {name!r}: left out {read.left_out_rows} records at {len(times)} time(s) not complete yet "
                 f"({shown}; stream frontier {frontier_text(read.frontier)}); --incomplete includes them")


def _unique(names: list[str]) -> list[str]:
    """Column names made unique (a repeated ``a`` becomes ``a_2``, ``a_3``…), so every column has a key."""
    seen: set[str] = set()
    out = []
    for name in names:
        new, k = name, 1
        while new in seen:
            k += 1
            new = f"{name}_{k}"
        seen.add(new)
        out.append(new)
    return out


class _ExecutionError(Exception):
    """DuckDB failed while the result was read (Arrow's stream interface raises it as an ``OSError``)."""


def _batches(reader: pa.RecordBatchReader) -> Iterator[pa.RecordBatch]:
    it = iter(reader)
    while True:
        try:
            batch = next(it)
        except StopIteration:
            return
        except OSError as e:
            raise _ExecutionError(str(e)) from None
        yield batch


def _print(reader: pa.RecordBatchReader, fmt: str, binary: str) -> None:
    names = _unique(reader.schema.names)
    schema = pa.schema([f.with_name(n) for f, n in zip(reader.schema, names)])
    converter = RecordConverter(schema, binary)
    nested = fmt in ("table", "csv")  # rows as {"record": row}: a column named like "updates" stays a value
    writer = row_writer(fmt, [(f"record.{n}", n) for n in names])
    try:
        for batch in _batches(reader):
            for row in converter.rows(batch):
                writer.write({"record": row} if nested else row)
    finally:
        writer.close()


@click.command("sql", short_help="Query streams with SQL (DuckDB).")
@click.argument("uri")
@click.argument("query")
@click.option("--since", type=TIME, help="Only records at times t with SINCE <= t (product times: 1,2).")
@click.option("--until", type=TIME, help="Only records at times t that are not >= UNTIL.")
@uncommitted_option
@click.option("--incomplete", is_flag=True, help="Also query times that are not complete yet (default: only the "
              "times every part has passed, what export and the Spark sources give; stderr says what was left out).")
@click.option("--format", "fmt", type=click.Choice(FORMATS),
              help="Output format (default: table on a terminal, jsonl when piped).")
@click.option("--bytes", "binary", type=click.Choice(BINARY_ENCODINGS), default="base64", show_default=True,
              help="How binary values are written.")
def sql(uri: str, query: str, since: Any, until: Any, isolation: str, incomplete: bool, fmt: str | None,
        binary: str) -> None:
    """Run the SQL QUERY (DuckDB) over the streams of the log URI: each stream is a view named after it,
    with its columns and _time (int64, or a list for product times), _part and _seq; quote names with . or -
    ("a.b"). Only the streams the query names are read: their committed records (unless --uncommitted) at
    times complete in every part (unless --incomplete; stderr says what was left out).
    A table on a terminal, JSON lines when piped. Needs DuckDB: pip install 'eventlog[sql]'.

    Exit 1 when DuckDB refuses or fails the query (its error on one line), 3 on a log or I/O error or
    without DuckDB.

    \b
    Examples:
      replay sql /tmp/cap "select _time, count(*) from counts group by 1 order by 1"
      replay sql /tmp/cap "select word, sum(count) from counts group by 1" --since 3 --format csv
      replay sql /tmp/cap "select * from \\"jobA.counts\\" a join totals b using (_time)"
    """
    duckdb = require("duckdb", "sql", "replay sql")  # MissingExtraError (exit 3) names the extra, as for --plot
    log = open_uri(uri)
    con = duckdb.connect()
    try:
        used = _streams_used(con, query, log.streams())
        _register(con, log, used, since, until, isolation, incomplete)
        relation = con.sql(query)
        if relation is not None:
            _print(relation.to_arrow_reader(_BATCH_ROWS), fmt or default_format(), binary)
    except (duckdb.Error, _ExecutionError) as e:
        message = _one_line(e)
        if isinstance(e, duckdb.CatalogException):
            streams = log.streams()
            message += f" (streams in {log.uri}: {', '.join(streams) if streams else 'none'})"
        _fail(f"SQL: {message}", EXIT_LOG_ERROR if message.startswith("IO Error") else EXIT_QUERY_FAILED)
    finally:
        con.close()
