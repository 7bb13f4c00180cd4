"""``replay sql``: query a log's streams with SQL (DuckDB, the ``sql`` extra), one query, a script or an
interactive shell. Every stream is a view of that name over ``replay.dataset``: the stream's columns with
``_time``, ``_part`` and ``_seq``, the committed records by default. A stream is read when a statement names it;
statements that look at the catalog (``show tables``, ``describe s``) see every stream's columns, no rows read."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import sys
import threading
import time
from typing import Any, Callable, Iterator

import click
import pyarrow as pa

from eventlog._extras import require
from eventlog.errors import EventLogError
from eventlog.log import Log
from replay.dataset import read_dataset

from ._common import (
    EXIT_LOG_ERROR,
    TIME,
    _fail,
    as_time,
    counted,
    frontier_text,
    note,
    open_uri,
    stream_header,
    time_text,
    uncommitted_option,
)
from ._output import FORMATS, default_format, row_writer, terminal_width
from ._values import BINARY_ENCODINGS, RecordConverter

EXIT_QUERY_FAILED = 1
"""DuckDB refused or failed the query (as ``sqlite3`` and ``psql`` exit with 1)."""

_BATCH_ROWS = 10_000
"""Result rows fetched from DuckDB at a time."""

PROMPT = "eventlog> "
"""The interactive shell's prompt; ``CONTINUE`` while a statement goes on over lines (until its ``;``)."""
CONTINUE = "     ...> "

_CATALOG_SCHEMAS = ("information_schema", "pg_catalog")
"""Schemas whose tables describe the catalog: a query of them needs every stream listed, none read."""
_CATALOG_FUNCTIONS = ("duckdb_", "pragma_")
"""Table functions (by prefix) that read the catalog."""
_CATALOG_WORDS = frozenset({*_CATALOG_SCHEMAS, "show", "describe", "desc", "query_table", "query"})
"""Words by which a statement other than a SELECT (``copy``, ``create view``, ``explain``) may look at the
catalog."""
_BY_NAME_FUNCTIONS = ("query_table", "query")
"""Table functions that read tables named in strings: the streams whose names the statement holds are read."""
_METADATA_PRAGMA = re.compile(r"\s*pragma\s+(table_info|show|show_tables|show_tables_expanded|database_list)\b",
                              re.IGNORECASE)
"""PRAGMAs that only describe tables (their data is not read)."""

SHELL_HELP = """\
.help                This help.
.tables [PATTERN]    The tables: every stream of the log, and the tables and views made here
                     (PATTERN as in LIKE, ignoring case: .tables job%).
.schema [TABLE]      The columns of every table, or of TABLE, as CREATE statements.
.mode [FORMAT]       Show or set the output format: table, json, jsonl or csv.
.reload              Read the streams again (new records, new streams) on their next use.
.quit, .exit         Leave the shell (so does Ctrl-D).
Statements end with ";" and may span lines; Ctrl-C drops the statement being typed. Quote stream names that
are not plain identifiers (with . or -, starting with a digit, or a keyword) in double quotes: "jobA.counts".
A stream is read when a statement first names it, then kept: .reload reads it again."""


def _one_line(error: Exception) -> str:
    """DuckDB's message on one line: its lines joined, the caret line under the query left out."""
    lines = [line.strip() for line in str(error).splitlines()]
    return " ".join(line for line in lines if line and set(line) != {"^"})


# -- which streams a statement needs ------------------------------------------------------------------------

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")
_DOUBLE_QUOTED = re.compile(r'"((?:[^"]|"")*)"')
_SINGLE_QUOTED = re.compile(r"'((?:[^']|'')*)'")


def _tokens(text: str) -> set[str]:
    """The names ``text`` could use, lower-cased: its words, double-quoted names and strings, wherever they are
    (inside a string too: ``query('select * from "a.b"')``)."""
    found = {w.lower() for w in _WORD.findall(text)}
    found |= {m.replace('""', '"').lower() for m in _DOUBLE_QUOTED.findall(text)}
    found |= {m.replace("''", "'").lower() for m in _SINGLE_QUOTED.findall(text)}
    return found


class _Needs:
    """What a query's syntax tree (``json_serialize_sql``) needs: the tables it reads, whether it looks at the
    catalog (``show tables``, ``describe s``, ``information_schema``, ``duckdb_tables()``), and whether it names
    tables in strings (``query_table('s')``)."""

    def __init__(self) -> None:
        self.tables: set[str] = set()
        self.catalog = False
        self.by_name = False

    def walk(self, tree: Any) -> None:
        if isinstance(tree, list):
            for value in tree:
                self.walk(value)
            return
        if not isinstance(tree, dict):
            return
        kind = tree.get("type")
        if kind == "SHOW_REF" and tree.get("show_type") != "SUMMARY":
            self.catalog = True  # describe/show: the columns, not the rows
            return
        if kind == "BASE_TABLE" and isinstance(tree.get("table_name"), str):
            if str(tree.get("schema_name", "")).lower() in _CATALOG_SCHEMAS:
                self.catalog = True
            else:
                self.tables.add(tree["table_name"].lower())
        if kind == "TABLE_FUNCTION":
            name = str((tree.get("function") or {}).get("function_name", "")).lower()
            self.catalog |= name.startswith(_CATALOG_FUNCTIONS) or name in _BY_NAME_FUNCTIONS
            self.by_name |= name in _BY_NAME_FUNCTIONS
        for value in tree.values():
            self.walk(value)


def _statement_needs(con: Any, statement: str, streams: list[str]) -> tuple[list[str], bool]:
    """The streams one statement reads and whether it looks at the catalog (then every stream must be listed).
    The names its syntax tree reads (DuckDB's parser alone, nothing bound) are matched as DuckDB matches names
    (ignoring case). A statement the parser cannot serialise (not a SELECT: copy, create, pragma…) reads every
    stream whose name it holds as a word, quoted name or string, and looks at the catalog when it holds words
    that do; describing statements read none."""
    tree = json.loads(con.execute("select json_serialize_sql(?)", [statement]).fetchone()[0])
    if tree.get("error"):
        if _METADATA_PRAGMA.match(statement):
            return [], True
        held = _tokens(statement)
        catalog = bool(held & _CATALOG_WORDS) or any(w.startswith(_CATALOG_FUNCTIONS) for w in held)
        return [s for s in streams if s.lower() in held], catalog
    needs = _Needs()
    needs.walk(tree)
    named = needs.tables | (_tokens(statement) if needs.by_name else set())
    return [s for s in streams if s.lower() in named], needs.catalog


# -- statements in a script ---------------------------------------------------------------------------------

_DOLLAR_TAG = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)?\$")


def split_statements(text: str) -> tuple[list[tuple[str, int]], str, bool]:
    """The complete statements of ``text`` (each ended by a ``;`` outside strings, quoted names and comments) as
    ``(statement, offset of its first character)``, the text after the last one, and whether that text holds
    more than blanks and comments (a statement begun, or a comment or string left open)."""
    statements: list[tuple[str, int]] = []
    i, n, start, first = 0, len(text), 0, -1
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
            continue
        if text.startswith("--", i):
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                return statements, text[start:], True
            i = end + 2
            continue
        if c == ";":
            if first >= 0:
                statements.append((text[first:i], first))
            i += 1
            start, first = i, -1
            continue
        if first < 0:
            first = i
        if c in "'\"":
            j = i + 1
            while True:
                j = text.find(c, j)
                if j < 0:
                    return statements, text[start:], True
                if text.startswith(c, j + 1):  # a doubled quote stands for itself
                    j += 2
                    continue
                break
            i = j + 1
        elif c == "$" and (tag := _DOLLAR_TAG.match(text, i)):
            end = text.find(tag.group(0), tag.end())
            if end < 0:
                return statements, text[start:], True
            i = end + len(tag.group(0))
        else:
            i += 1
    return statements, text[start:], first >= 0


# -- a connection over the log's streams --------------------------------------------------------------------


class _ExecutionError(Exception):
    """DuckDB failed while the result was read (Arrow's stream interface raises it as an ``OSError``)."""


class StatementError(Exception):
    """A statement of a script or the shell failed: its message on one line and the exit code it stands for."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


class Session:
    """A DuckDB connection over the streams of a log. Every stream is a view named after it; it holds no rows
    (only the stream's columns, for ``show tables`` and ``describe``) until a statement names it: then the stream
    is read (``replay.read_dataset``: complete times unless ``incomplete``, a note on stderr of what was left
    out) and kept for the statements after. Streams are listed only for statements that look at the catalog."""

    def __init__(self, duckdb: Any, log: Log, *, since: Any = None, until: Any = None,
                 isolation: str = "committed", incomplete: bool = False) -> None:
        self.duckdb = duckdb
        self.log = log
        self.con = duckdb.connect()
        self._since, self._until, self._isolation, self._incomplete = since, until, isolation, incomplete
        self.streams = log.streams()
        self.read: set[str] = set()
        """The streams read (their views hold their rows)."""
        self.listed: set[str] = set()
        """The streams registered as views without rows (their columns only)."""
        self._keywords: set[str] | None = None

    def close(self) -> None:
        self.con.close()

    def prepare(self, text: str) -> None:
        """Make ready what the statements of ``text`` need: the streams they read, read; every stream listed if
        one of them looks at the catalog."""
        pieces, rest, begun = split_statements(text)
        used: set[str] = set()
        catalog = False
        for statement in [s for s, _ in pieces] + ([rest] if begun else []):
            names, looks = _statement_needs(self.con, statement, self.streams)
            used.update(names)
            catalog |= looks
        self._read([s for s in self.streams if s in used and s not in self.read])
        if catalog:
            self.list_streams()

    def _read(self, names: list[str]) -> None:
        """Each stream as a view over ``replay.read_dataset``: complete times only unless ``incomplete``, saying
        on stderr what was left out (as ``replay export`` does)."""
        for name in names:
            header = stream_header(self.log, name)
            read = read_dataset(self.log, name, since=as_time(self._since, header, "--since"),
                                until=as_time(self._until, header, "--until"), isolation=self._isolation,
                                incomplete=self._incomplete)
            self.con.register(name, read.dataset)
            self.read.add(name)
            self.listed.discard(name)
            if read.left_out_rows:
                times = read.left_out_times
                shown = ", ".join(time_text(t) for t in times[:5]) + (", …" if len(times) > 5 else "")
                note(f"stream {name!r}: left out {read.left_out_rows} records at {len(times)} time(s) not complete "
                     f"yet ({shown}; stream frontier {frontier_text(read.frontier)}); --incomplete includes them")

    def list_streams(self) -> None:
        """Register every stream not read yet as a view with its columns and no rows (reading headers only)."""
        from replay.dataset import dataset_schema

        for name in self.streams:
            if name in self.read or name in self.listed:
                continue
            try:
                schema = dataset_schema(stream_header(self.log, name))
            except EventLogError as e:
                note(f"stream {name!r} is not a table: {e}")
                continue
            self.con.register(name, schema.empty_table())
            self.listed.add(name)

    def reload(self) -> None:
        """Read the log's streams again: the list of streams, and the streams read so far at once (a view made
        over one sees its new rows)."""
        again = sorted(self.read)
        self.streams = self.log.streams()
        for name in self.read | self.listed:
            self.con.unregister(name)
        listed, self.read, self.listed = bool(self.listed), set(), set()
        self._read([s for s in again if s in self.streams])
        if listed:
            self.list_streams()

    def failure(self, error: Exception) -> StatementError:
        """DuckDB's error on one line (a table that is no stream also lists the streams), with its exit code."""
        message = _one_line(error)
        if isinstance(error, self.duckdb.CatalogException):
            message += f" (streams in {self.log.uri}: {', '.join(self.streams) if self.streams else 'none'})"
        return StatementError(f"SQL: {message}", EXIT_LOG_ERROR if message.startswith("IO Error") else
                              EXIT_QUERY_FAILED)

    def run(self, statement: str, fmt: str, binary: str) -> int | None:
        """Run one statement (or several, DuckDB printing the last's result) and print its result; the rows
        printed, None for a statement without a result. ``StatementError`` when DuckDB refuses or fails it."""
        try:
            self.prepare(statement)
            relation = self.con.sql(statement)
            if relation is None:
                return None
            return _print(relation.to_arrow_reader(_BATCH_ROWS), fmt, binary)
        except (self.duckdb.Error, _ExecutionError) as e:
            raise self.failure(e) from None

    # -- for the dot-commands

    def quote(self, name: str) -> str:
        """``name`` as SQL writes it: as it is when a plain identifier, else in double quotes."""
        if self._keywords is None:
            rows = self.con.execute("select keyword_name from duckdb_keywords() where keyword_category = 'reserved'")
            self._keywords = {r[0].lower() for r in rows.fetchall()}
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) and name.lower() not in self._keywords:
            return name
        return '"' + name.replace('"', '""') + '"'

    def tables(self, pattern: str | None = None) -> list[str]:
        """The names of the tables and views (every stream, and those made here), sorted ignoring case."""
        self.list_streams()
        rows = self.con.execute(
            "select distinct table_name from information_schema.tables where table_schema not in "
            "('information_schema', 'pg_catalog') and table_name ilike ? order by lower(table_name), table_name",
            [pattern or "%"]).fetchall()
        return [r[0] for r in rows]

    def schema(self, table: str | None = None) -> list[str]:
        """CREATE statements with the columns of every table, or of ``table`` (a name or a quoted name)."""
        names = self.tables()
        if table is not None:
            wanted = table[1:-1].replace('""', '"') if len(table) > 1 and table[0] == table[-1] == '"' else table
            names = [n for n in names if n.lower() == wanted.lower()]
            if not names:
                raise StatementError(f"no table {table}; .tables lists them", EXIT_QUERY_FAILED)
        out = []
        for name in names:
            view = self.con.execute("select sql from duckdb_views() where not internal and view_name = ? and "
                                    "coalesce(sql, '') <> ''", [name]).fetchall()
            if view:
                out.append(view[0][0].strip())
                continue
            columns = self.con.execute(
                "select column_name, data_type from information_schema.columns where table_name = ? and "
                "table_schema not in ('information_schema', 'pg_catalog') order by ordinal_position", [name])
            listed = ", ".join(f"{self.quote(c)} {t}" for c, t in columns.fetchall())
            out.append(f"CREATE TABLE {self.quote(name)}({listed});")
        return out


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


def _print(reader: pa.RecordBatchReader, fmt: str, binary: str) -> int:
    """Print the rows of ``reader`` as ``cat`` does; the number of rows."""
    names = _unique(reader.schema.names)
    schema = pa.schema([f.with_name(n) for f, n in zip(reader.schema, names)])
    converter = RecordConverter(schema, binary)
    nested = fmt in ("table", "csv")  # rows as {"record": row}: a column named like "updates" stays a value
    writer = row_writer(fmt, [(f"record.{n}", n) for n in names])
    rows = 0
    try:
        for batch in _batches(reader):
            for row in converter.rows(batch):
                writer.write({"record": row} if nested else row)
                rows += 1
    finally:
        writer.close()
    return rows


# -- scripts and the interactive shell ----------------------------------------------------------------------


class _Quit(Exception):
    """``.quit`` or ``.exit``."""


class Shell:
    """Runs SQL a line at a time, as ``sqlite3`` and ``duckdb`` do: statements end with ``;`` and may span
    lines; a line starting with ``.`` between statements is a dot-command. An error prints one line on stderr
    and the next statement runs (``bail`` stops at it). ``source`` names the input in errors (``<stdin>:3:``),
    None in the interactive shell."""

    def __init__(self, session: Session, fmt: str, binary: str, *, source: str | None = None,
                 interactive: bool = False, bail: bool = False) -> None:
        self.session = session
        self.fmt = fmt
        self.binary = binary
        self.source = source
        self.interactive = interactive
        self.bail = bail
        self.failed = 0
        """The exit code of the worst failure so far (0: none)."""
        self.interrupts: _Interrupts | None = None
        """What stops a running statement on Ctrl-C (the shell on a terminal)."""
        self._buffer = ""
        self._start = 1
        """The line number of the buffer's first line."""
        self._line = 0

    @property
    def pending(self) -> bool:
        """Whether a statement is being typed (the prompt is ``CONTINUE``)."""
        return split_statements(self._buffer)[2]

    def _error(self, message: str, code: int, line: int | None = None) -> None:
        where = f"{self.source}:{line}: " if self.source is not None and line is not None else ""
        click.echo(f"replay: error: {where}{message}", err=True)
        self.failed = max(self.failed, code)
        if self.bail:
            raise _Quit

    def feed(self, line: str) -> bool:
        """Take one line (its newline optional); False once ``.quit`` was given (or ``bail`` met an error)."""
        self._line += 1
        try:
            if not self.pending and line.strip().startswith("."):
                self._buffer = ""
                self._dot(line.strip())
                return True
            if not self._buffer.strip():
                self._buffer, self._start = "", self._line
            self._buffer += line if line.endswith("\n") else line + "\n"
            statements, rest, _ = split_statements(self._buffer)
            for statement, offset in statements:
                self._statement(statement, self._start + self._buffer.count("\n", 0, offset))
            if statements:
                self._start += self._buffer.count("\n", 0, len(self._buffer) - len(rest))
                self._buffer = rest
        except _Quit:
            return False
        return True

    def finish(self) -> None:
        """At the end of the input: run a last statement left without its ``;``."""
        statements, rest, begun = split_statements(self._buffer)
        self._buffer = ""
        if begun:
            try:
                self._statement(rest, self._start + rest[:len(rest) - len(rest.lstrip())].count("\n"))
            except _Quit:
                pass

    def drop(self) -> None:
        """Forget the statement being typed (Ctrl-C)."""
        self._buffer = ""

    def _statement(self, statement: str, line: int) -> None:
        try:
            with self.interrupts.running() if self.interrupts is not None else contextlib.nullcontext():
                rows = self.session.run(statement, self.fmt, self.binary)
        except StatementError as e:
            self._error(str(e), e.code, line)
            return
        except (EventLogError, click.ClickException) as e:  # a stream that cannot be read, --since of another kind
            message = e.format_message() if isinstance(e, click.ClickException) else str(e)
            self._error(message, EXIT_LOG_ERROR if isinstance(e, EventLogError) else 2, line)
            return
        if self.interactive and rows is not None and self.fmt == "table":
            click.echo(f"({counted(rows, 'row')})")

    def _dot(self, line: str) -> None:
        try:
            words = shlex.split(line, posix=False)
        except ValueError:
            words = line.split()
        command, args = words[0].lower(), words[1:]
        if command in (".quit", ".exit", ".q"):
            raise _Quit
        if command == ".help":
            click.echo(SHELL_HELP)
        elif command == ".tables":
            self._columns([self.session.quote(n) for n in self.session.tables(args[0] if args else None)])
        elif command == ".schema":
            try:
                for create in self.session.schema(args[0] if args else None):
                    click.echo(create)
            except StatementError as e:
                self._error(str(e), e.code, self._line)
        elif command == ".mode":
            if not args:
                click.echo(self.fmt)
            elif args[0].lower() in FORMATS:
                self.fmt = args[0].lower()
            else:
                self._error(f"unknown format {args[0]}: use one of {', '.join(FORMATS)}", EXIT_QUERY_FAILED,
                            self._line)
        elif command == ".reload":
            self.session.reload()
        else:
            self._error(f"unknown command {command}: .help lists them", EXIT_QUERY_FAILED, self._line)

    @staticmethod
    def _columns(names: list[str]) -> None:
        """``names`` in columns across the terminal, as ``sqlite3`` lists tables."""
        if not names:
            return
        width = max(len(n) for n in names) + 2
        per_line = max(1, (terminal_width() or 80) // width)
        for i in range(0, len(names), per_line):
            click.echo("".join(n.ljust(width) for n in names[i:i + per_line]).rstrip())


def history_path() -> str:
    """Where the shell keeps its history: ``$XDG_STATE_HOME/eventlog/sql_history`` when ``XDG_STATE_HOME`` is
    set, else ``~/.eventlog_sql_history``."""
    state = os.environ.get("XDG_STATE_HOME")
    if state:
        return os.path.join(state, "eventlog", "sql_history")
    return os.path.join(os.path.expanduser("~"), ".eventlog_sql_history")


def interact(shell: Shell, read_line: Callable[[str], str] = input) -> None:
    """The interactive shell: prompt, read a line (``read_line(prompt)``, EOFError at the end), feed it, until
    ``.quit`` or Ctrl-D. Ctrl-C drops the statement being typed or stops the one running."""
    while True:
        try:
            line = read_line(CONTINUE if shell.pending else PROMPT)
        except EOFError:
            click.echo()
            shell.finish()
            return
        except KeyboardInterrupt:
            click.echo()
            shell.drop()
            continue
        try:
            if not shell.feed(line):
                return
        except KeyboardInterrupt:
            shell.drop()
            click.echo("replay: error: interrupted", err=True)


def _readline_history() -> Callable[[], None]:
    """Load the shell's history into readline (where there is one); returns what saves it."""
    try:
        import readline
    except ImportError:  # no readline (Windows): input() without history
        return lambda: None
    path = history_path()
    try:
        readline.read_history_file(path)
    except OSError:
        pass
    readline.set_history_length(1000)

    def save() -> None:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            readline.write_history_file(path)
        except OSError as e:
            note(f"replay sql: history not saved to {path}: {e.strerror or e}")

    return save


@click.command("sql", short_help="Query streams with SQL (DuckDB).")
@click.argument("uri")
@click.argument("query", required=False)
@click.option("-f", "--file", "script", type=click.File("r", encoding="utf-8"), metavar="SCRIPT",
              help="Run the SQL statements of SCRIPT (- for stdin) instead of QUERY.")
@click.option("--bail", is_flag=True, help="Stop a script at its first failing statement (default: go on, "
              "exit 1 at the end).")
@click.option("--since", type=TIME, help="Only records at times t with SINCE <= t (product times: 1,2).")
@click.option("--until", type=TIME, help="Only records at times t that are not >= UNTIL.")
@uncommitted_option
@click.option("--incomplete", is_flag=True, help="Also query times that are not complete yet (default: only the "
              "times every part has passed, what export and the Spark sources give; stderr says what was left out).")
@click.option("--format", "fmt", type=click.Choice(FORMATS),
              help="Output format (default: table on a terminal, jsonl when piped).")
@click.option("--bytes", "binary", type=click.Choice(BINARY_ENCODINGS), default="base64", show_default=True,
              help="How binary values are written.")
def sql(uri: str, query: str | None, script: Any, bail: bool, since: Any, until: Any, isolation: str,
        incomplete: bool, fmt: str | None, binary: str) -> None:
    """Run the SQL QUERY (DuckDB) over the streams of the log URI: each stream is a view named after it,
    with its columns and _time (int64, or a list for product times), _part and _seq; `show tables` and
    `describe STREAM` list and describe them. Quote a stream name in double quotes unless it is a plain
    identifier: "jobA.counts", "to-do", "2024x", "order" (a keyword), also in strings that name tables
    (pragma table_info('"jobA.counts"')). A stream is read when a statement names
    it: its committed records (unless --uncommitted) at times complete in every part (unless --incomplete;
    stderr says what was left out). A table on a terminal, JSON lines when piped.

    Without QUERY: an interactive shell when stdin is a terminal (statements end with ;, .help lists the
    dot-commands, .quit or Ctrl-D leaves, history in ~/.eventlog_sql_history or
    $XDG_STATE_HOME/eventlog/sql_history); else the statements on stdin
    run one after the other, as with sqlite3 and duckdb (-f SCRIPT runs a file). A failing statement prints its
    error on one line and the next one runs (--bail stops); the exit code then is 1 (3 for an I/O error).
    Needs DuckDB: pip install 'eventlog[sql]'.

    Exit 1 when DuckDB refuses or fails the query (its error on one line), 3 on a log or I/O error or
    without DuckDB.

    \b
    Examples:
      replay sql /tmp/cap "select _time, count(*) from counts group by 1 order by 1"
      replay sql /tmp/cap "select word, sum(count) from counts group by 1" --since 3 --format csv
      replay sql /tmp/cap "select * from \\"jobA.counts\\" a join totals b using (_time)"
      replay sql /tmp/cap "show tables"
      replay sql /tmp/cap                       # the shell: eventlog> describe counts;
      replay sql /tmp/cap < report.sql
    """
    if query is not None and script is not None:
        raise click.UsageError("give QUERY or --file, not both")
    duckdb = require("duckdb", "sql", "replay sql")  # MissingExtraError (exit 3) names the extra, as for --plot
    log = open_uri(uri)
    session = Session(duckdb, log, since=since, until=until, isolation=isolation, incomplete=incomplete)
    try:
        if query is not None:
            try:
                session.run(query, fmt or default_format(), binary)
            except StatementError as e:
                _fail(str(e), e.code)
            return
        if script is None and sys.stdin.isatty():
            _shell(session, fmt, binary)
            return
        stream = script if script is not None else sys.stdin
        name = "<stdin>" if script is None or script.name in ("-", "<stdin>") else script.name
        shell = Shell(session, fmt or default_format(), binary, source=name, bail=bail)
        for line in stream:
            if not shell.feed(line):
                break
        else:
            shell.finish()
        if shell.failed:
            raise click.exceptions.Exit(shell.failed)
    finally:
        session.close()


class _Interrupts:
    """Ctrl-C while a statement runs stops it: DuckDB runs without returning to Python (no KeyboardInterrupt
    until it is done), so the signal is also written to a pipe (``signal.set_wakeup_fd``) that a thread watches,
    which calls ``con.interrupt()`` until the statement ends (an interrupt before DuckDB runs a query is lost);
    DuckDB then fails the statement as interrupted, and the shell goes on.

    Ctrl-C at the prompt drops the line being typed. Python's readline waits for a key in ``select`` and checks
    for signals only when that wait is interrupted: a Ctrl-C that lands between the prompt being written and the
    wait beginning is noted and never acted on, and the shell sits there until a key is pressed (the stall a
    terminal test met under load). So the watcher checks that each Ctrl-C reached the prompt's handler
    (``_taken``) and, when it has not within ``NUDGE`` seconds, sends the signal to the shell's thread again, which
    interrupts the wait; Python runs the handler once for both."""

    NUDGE = 0.1
    """Seconds a Ctrl-C at the prompt is given to reach its handler before the signal is sent again."""
    TRIES = 5
    """Times the signal is sent again for one Ctrl-C."""

    def __init__(self, con: Any) -> None:
        self._con = con
        self._idle = threading.Event()
        self._idle.set()
        self._main = threading.get_ident()  # the shell's thread: signal handlers run on it
        self._delivered = 0  # Ctrl-Cs delivered (the watcher's count, its own signals left out)
        self._taken = 0  # Ctrl-Cs whose Python handler ran (at the prompt or while a statement ran)
        self._resent = 0  # signals the watcher sent itself and has not read back from the pipe yet
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._old_fd = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        self._old_handler = signal.signal(signal.SIGINT, self._at_prompt)
        self._thread = threading.Thread(target=self._watch, name="replay-sql-interrupt", daemon=True)
        self._thread.start()

    def _at_prompt(self, signum: int, frame: object) -> None:
        self._taken += 1
        raise KeyboardInterrupt

    def _while_running(self, signum: int, frame: object) -> None:
        self._taken += 1  # DuckDB is interrupted by the watcher, not by an exception

    def _watch(self) -> None:
        while True:
            try:
                signals = os.read(self._read, 64)
            except OSError:
                return
            if not signals:  # close(): the write end is closed
                return
            for sig in signals:
                if sig != int(signal.SIGINT):
                    continue
                if self._resent:  # one of ours: the Ctrl-C it carried is being seen to already
                    self._resent -= 1
                    continue
                self._delivered += 1
                if not self._idle.is_set():
                    while True:
                        self._con.interrupt()
                        if self._idle.wait(0.05):
                            break
                else:
                    self._see_taken()

    def _see_taken(self) -> None:
        """Wait for the Ctrl-C just delivered at the prompt to reach its handler; send the signal to the shell's
        thread again while it has not (it is waiting in ``select`` that the first one did not interrupt)."""
        for _ in range(self.TRIES):
            waited = 0.0
            while waited < self.NUDGE:
                if self._taken >= self._delivered or not self._idle.is_set():
                    return
                time.sleep(0.01)
                waited += 0.01
            self._resent += 1
            try:
                signal.pthread_kill(self._main, signal.SIGINT)
            except (OSError, ValueError):  # the shell's thread is gone
                self._resent -= 1
                return
        self._delivered = self._taken  # coalesced Ctrl-Cs: Python ran the handler once for several

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """While a statement runs, Ctrl-C interrupts DuckDB (not Python)."""
        old = signal.signal(signal.SIGINT, self._while_running)
        self._idle.clear()
        try:
            yield
        finally:
            self._idle.set()
            signal.signal(signal.SIGINT, old)

    def close(self) -> None:
        signal.signal(signal.SIGINT, self._old_handler)
        signal.set_wakeup_fd(self._old_fd)
        os.close(self._write)
        self._thread.join()
        os.close(self._read)


def _shell(session: Session, fmt: str | None, binary: str) -> None:
    """The interactive shell on the terminal, with readline's editing and history where there is readline."""
    save = _readline_history()
    n = len(session.streams)
    click.echo(f"eventlog SQL shell (DuckDB {session.duckdb.__version__}) on {session.log.uri}: "
               f"{counted(n, 'stream')}, each a table. Enter \".help\" for usage hints.")
    shell = Shell(session, fmt or default_format(), binary, interactive=True)
    shell.interrupts = _Interrupts(session.con)
    try:
        interact(shell)
    finally:
        shell.interrupts.close()
        save()
