"""Shared pieces of the ``replay`` CLI: exit codes, error reporting, opening logs, parsing times, parts and
offsets, the consoles and the progress bar.

Every command reads logs only through the ``Log`` interface (``open_log``), so file, memory and Kafka logs
behave alike.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import stat
import sys
from typing import Any, Callable, Iterable, Iterator

import click
from rich.console import Console

from connectors.files.layout import HEADER_FILES, part_number
from eventlog.antichain import Antichain
from eventlog.errors import EventLogError, InvalidTimeError, InvalidURIError, StreamNotFoundError
from eventlog.header import StreamHeader
from eventlog.log import Log, open_log
from eventlog.time import Time
from eventlog.uri import local_path

EXIT_OK = 0
"""The command did what was asked (``diff``: the captures are equal; ``verify``: no problem found)."""
EXIT_DIFFERENT = 1
"""``diff`` found a difference, or ``verify`` found a problem."""
EXIT_USAGE = 2
"""Bad command line (click's usage errors): unknown option, bad time, part out of range, a path that is not a
log, an output path that is not a regular file, …"""
EXIT_LOG_ERROR = 3
"""The log cannot be read or written: no such log or stream, corrupt data, unsupported version, I/O error."""
EXIT_FN_FAILED = 4
"""``run``: the user function raised (its traceback is printed)."""
EXIT_INTERRUPTED = 130
"""Interrupted (Ctrl-C)."""
EXIT_BROKEN_PIPE = 141
"""The reader of stdout went away (``replay cat … | head``); nothing more is printed."""

EXIT_CODES_HELP = """\b
Exit codes:
  0    ok (diff: equal; verify: no problem)
  1    diff found a difference / verify found a problem
  2    usage error (bad option, time, part or offset; a path that is not a log;
       an output path that is not a regular file)
  3    log error: no such log or stream, corrupt data, unsupported version, I/O
  4    run: the user function raised
  130  interrupted (Ctrl-C)
  141  stdout closed by its reader (e.g. `| head`)"""


def _debug_requested(ctx: click.Context) -> bool:
    root = ctx.find_root()
    return bool(root.params.get("debug"))


def _fail(message: str, code: int) -> None:
    click.echo(f"replay: error: {message}", err=True)
    raise click.exceptions.Exit(code)


class ReplayGroup(click.Group):
    """The command group: turns exceptions into one-line errors with documented exit codes (tracebacks only
    with ``--debug``)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Commands in the order they were added (inspect, read, check, write), not alphabetically."""
        return list(self.commands)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except KeyboardInterrupt:
            if _debug_requested(ctx):
                raise
            click.echo("replay: interrupted", err=True)
            raise click.exceptions.Exit(EXIT_INTERRUPTED) from None
        except BrokenPipeError:
            _silence_stdout()
            raise click.exceptions.Exit(EXIT_BROKEN_PIPE) from None
        except EventLogError as e:
            if _debug_requested(ctx):
                raise
            _fail(str(e), EXIT_LOG_ERROR)
        except OSError as e:
            if _debug_requested(ctx):
                raise
            _fail(f"{e.strerror or e}{f': {e.filename}' if e.filename else ''}", EXIT_LOG_ERROR)
        except Exception as e:  # noqa: BLE001 - the last resort: one line, not a traceback
            if _debug_requested(ctx):
                raise
            _fail(f"{type(e).__name__}: {e} (run `replay --debug …` for the traceback)", EXIT_LOG_ERROR)


def _silence_stdout() -> None:
    """After a broken pipe, point stdout at /dev/null so the interpreter's final flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout without a file descriptor (tests)
        pass


# -- logs and streams ---------------------------------------------------------------------------------------


def _command_name() -> str:
    ctx = click.get_current_context(silent=True)
    return f"replay {ctx.info_name}" if ctx is not None and ctx.info_name else "replay COMMAND"


def _is_stream_folder(path: str) -> bool:
    return any(os.path.isfile(os.path.join(path, h)) for h in HEADER_FILES)


def _looks_like_stream_folder(path: str) -> bool:
    """A stream folder, or one that lost its header but holds part folders (verify reports it)."""
    if _is_stream_folder(path):
        return True
    try:
        return os.path.isdir(path) and any(part_number(n) is not None for n in os.listdir(path))
    except OSError:
        return False


def not_a_log(path: str, *, must_be_log: bool = True) -> str | None:
    """Why the local directory ``path`` cannot be a file log (None when it is one): a stream's folder
    (it holds ``header.json``) or a part's folder, which users pass by mistake; with ``must_be_log``, also
    a folder with entries but no stream folder (an empty folder is an empty log). The reason names what
    was expected."""
    norm = os.path.normpath(os.path.abspath(path))
    parent, name = os.path.split(norm)
    cmd = _command_name()
    if _is_stream_folder(norm):
        return (f"{path} is the folder of stream {name!r}, not a log; pass its log and the stream name: "
                f"{cmd} {parent} {name}")
    number = part_number(name)
    if number is not None and _is_stream_folder(parent):
        root, stream = os.path.split(parent)
        return (f"{path} is the folder of part {number} of stream {stream!r}, not a log; pass its log "
                f"and the stream name: {cmd} {root} {stream}")
    if not must_be_log:
        return None
    try:
        names = [n for n in os.listdir(norm) if not n.startswith((".", "_"))]
    except OSError:
        return None  # reading it reports the error
    if names and not any(_looks_like_stream_folder(os.path.join(norm, n)) for n in names):
        return (f"{path} is not a log: it holds no stream folder (<stream>/{HEADER_FILES[0]}); pass the folder "
                "that holds the stream folders")
    return None


def open_uri(uri: str, *, must_exist: bool = True, **options: Any) -> Log:
    """Open the log at ``uri`` for the CLI. A malformed URI is a usage error; a local directory that does not
    exist is a log error when ``must_exist`` (reading commands), so a typo is not shown as an empty log. A
    local path that is not a log — a file, a stream's or a part's folder, or (when ``must_exist``) a folder
    holding no stream — is a usage error naming what was expected (``not_a_log``)."""
    try:
        log = open_log(uri, **options)
    except InvalidURIError as e:
        raise click.BadParameter(e.reason, param_hint=repr(uri)) from None
    path = local_path(uri)
    if path is None:
        return log
    if os.path.lexists(path) and not os.path.isdir(path):
        raise click.UsageError(f"{path} is not a log: a log is a folder (of stream folders), this is a "
                               f"{_file_kind(path)}")
    if must_exist and not os.path.isdir(path):
        raise EventLogError(f"no log at {uri}: {path} is not a directory")
    if os.path.isdir(path):
        reason = not_a_log(path, must_be_log=must_exist)
        if reason is not None:
            raise click.UsageError(reason)
    return log


def _file_kind(path: str) -> str:
    """What ``path`` is, in words: ``regular file``, ``directory``, ``fifo``, ``device``, ``socket``,
    ``broken symbolic link``."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "broken symbolic link" if os.path.islink(path) else "missing file"
    except OSError as e:
        return f"file that cannot be read ({e.strerror})"
    if stat.S_ISREG(mode):
        return "regular file"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "special file"


def check_output_file(path: str, option: str, *, force: bool | None) -> None:
    """Refuse an output ``path`` the CLI must not write: anything but a regular file (a directory, fifo,
    device or socket, or a symbolic link to one — a fifo would block, a device would be replaced or written
    into). An existing regular file is overwritten only with ``force`` (``force=None``: always, for options
    without ``--force``). Usage errors naming ``option``."""
    if not os.path.lexists(path):
        return
    kind = _file_kind(path)
    if kind != "regular file":
        link = " (through a symbolic link)" if os.path.islink(path) and kind != "broken symbolic link" else ""
        raise click.BadParameter(f"{path} is a {kind}{link}; only regular files are written or overwritten",
                                 param_hint=option)
    if force is False:
        raise click.UsageError(f"{path} exists; pass --force to overwrite it")


def stream_header(log: Log, stream: str) -> StreamHeader:
    """The header of ``stream``; a missing stream is a log error that lists the streams there are."""
    try:
        return log.header(stream)
    except StreamNotFoundError:
        names = log.streams()
        hint = f"it has: {', '.join(names)}" if names else "it has no streams"
        raise StreamNotFoundError(f"stream not found in log {log.uri}; {hint}", stream=stream) from None
    except ValueError as e:  # an invalid stream name
        raise click.BadParameter(str(e), param_hint="STREAM") from None


def check_part(header: StreamHeader, part: int | None) -> int | None:
    """``part`` if it is a part of the stream (or None), else a usage error."""
    if part is not None and not 0 <= part < header.peers:
        raise click.BadParameter(
            f"stream {header.stream!r} has parts 0..{header.peers - 1}, not {part}", param_hint="'--part'"
        )
    return part


# -- times ----------------------------------------------------------------------------------------------------


class TimeParam(click.ParamType):
    """A time on the command line: ``7`` for int64 streams, ``1,2`` (or ``[1,2]``) for product times.
    The value is checked against the stream's time type by ``as_time``."""

    name = "TIME"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, (int, tuple)):
            return value
        text = str(value).strip()
        if (text.startswith("[") and text.endswith("]")) or (text.startswith("(") and text.endswith(")")):
            text = text[1:-1]
        try:
            parts = [int(p) for p in text.split(",")]
        except ValueError:
            self.fail(f"{value!r} is not a time: write an int (7) or a product time (1,2)", param, ctx)
        return parts[0] if len(parts) == 1 and "," not in text else tuple(parts)


TIME = TimeParam()


def as_time(value: "int | tuple[int, ...] | None", header: StreamHeader, option: str) -> Time | None:
    """``value`` (from ``TimeParam``) as a time of the stream's time type, or a usage error naming ``option``."""
    if value is None:
        return None
    tt = header.time_type
    if tt.arity == 1 and isinstance(value, int):
        value = (value,)
    try:
        return tt.check(value)
    except InvalidTimeError as e:
        raise click.BadParameter(e.reason, param_hint=f"'{option}'") from None


def time_json(t: Time) -> "int | list[int]":
    """A time as it appears in JSON output: an int, or an array for product times."""
    return list(t) if isinstance(t, tuple) else t


def time_text(t: Time) -> str:
    """A time for text output: ``7`` or ``[1,2]``."""
    return json.dumps(time_json(t), separators=(",", ":"))


def frontier_json(f: Antichain) -> list:
    """A frontier as a JSON array of times (empty: the part or stream is finished)."""
    return [time_json(t) for t in f]


def frontier_text(f: Antichain) -> str:
    """A frontier for text output: ``[5]``, ``[[1,2],[2,0]]``, or ``[] finished``."""
    return json.dumps(frontier_json(f), separators=(",", ":")) + ("" if f else " finished")


# -- offsets --------------------------------------------------------------------------------------------------


class OffsetParam(click.ParamType):
    """Where to start reading each part: ``beginning``, ``end``, a sequence id ``N`` or ``-N`` (the last N
    events). Converts to ``("beginning"|"end"|"seq"|"last", n)``."""

    name = "OFFSET"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, tuple):
            return value
        text = str(value).strip().lower()
        if text in ("beginning", "start", "first"):
            return ("beginning", 0)
        if text in ("end", "latest"):
            return ("end", 0)
        try:
            n = int(text)
        except ValueError:
            self.fail(f"{value!r} is not an offset: beginning, end, N (a sequence id) or -N (the last N events)",
                      param, ctx)
        if n == 0:
            self.fail("sequence ids start at 1; use -N for the last N events", param, ctx)
        return ("seq", n) if n > 0 else ("last", -n)


OFFSET = OffsetParam()


def start_seq(offset: tuple[str, int], first_seq: int, next_seq: int) -> int:
    """The sequence id to start reading a part at, for an ``OffsetParam`` value and the part's range."""
    kind, n = offset
    if kind == "beginning":
        return first_seq
    if kind == "end":
        return next_seq
    if kind == "seq":
        return max(n, first_seq)
    return max(first_seq, next_seq - n)


# -- consoles and progress ------------------------------------------------------------------------------------


def print_rich(*renderables: Any) -> None:
    """Print rich tables or text on stdout, each on lines of its own: styled to the terminal's width on a
    terminal; otherwise plain, at their natural width (not squeezed into 80 columns), without trailing spaces."""
    out = sys.stdout
    if out.isatty():
        Console(file=out, highlight=False).print(*renderables, sep="\n")
        return
    buf = io.StringIO()
    Console(file=buf, width=400, no_color=True, highlight=False, soft_wrap=False, color_system=None).print(
        *renderables, sep="\n")
    out.write("".join(line.rstrip() + "\n" for line in buf.getvalue().splitlines()))
    out.flush()


def stderr_console() -> Console:
    """A console on stderr (progress bars, notes)."""
    return Console(file=sys.stderr, highlight=False)


def note(message: str) -> None:
    """A one-line remark on stderr (never on stdout)."""
    click.echo(message, err=True)


def warn(message: str) -> None:
    """A one-line warning on stderr."""
    click.echo(f"replay: warning: {message}", err=True)


@contextlib.contextmanager
def progress(description: str, total: int | None) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr while the block runs, disabled when stderr is not a terminal; yields
    ``advance(n)``. It shows done/total, the time elapsed and, with a ``total``, the time remaining."""
    console = stderr_console()
    if not console.is_terminal:
        yield lambda n=1: None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TextColumn("eta"), TimeRemainingColumn(), console=console, transient=True,
    ) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n=1: bar.advance(task, n)


def human_bytes(n: int | None) -> str:
    """``n`` bytes as ``12.3 KiB``; ``-`` when unknown (None: a log that cannot tell cheaply, as Kafka)."""
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def total_bytes(sizes: "Iterable[int | None]") -> int | None:
    """The sum of sizes, None if any is unknown."""
    sizes = list(sizes)
    return None if any(s is None for s in sizes) else sum(sizes)  # type: ignore[arg-type]


def print_json(doc: Any) -> None:
    """Write one JSON document to stdout."""
    click.echo(json.dumps(doc, indent=2, ensure_ascii=False))


DEFAULT_LIMIT = 50
"""Rows a table of ``stats`` and ``frontier`` shows by default (``--limit``)."""


def limit_option(what: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--limit N``: at most N rows per table (0: every row; default ``DEFAULT_LIMIT``); ``what`` says which
    rows are kept. ``--json`` is not limited."""
    return click.option(
        "--limit", type=click.IntRange(min=0), default=DEFAULT_LIMIT, show_default=True, metavar="N",
        help=f"Rows per table: {what}; 0 shows every row. A last line on stderr says how many were left out. "
             "--json always has every row.")


def counted(n: int, singular: str, plural: str | None = None) -> str:
    """``1 earlier time``, ``3 earlier times``."""
    return f"{n} {singular if n == 1 else plural or singular + 's'}"


def left_out_note(left_out: "Iterable[str]", limit: int, more: str = "") -> None:
    """The line after a table cut by ``--limit``: what was left out and how to see it (stderr, like every
    note: a piped table stays plain). ``left_out`` are phrases such as ``"1950 earlier times"`` (empty ones
    are skipped); nothing is printed when there are none. ``more`` adds to the hint."""
    phrases = [p for p in left_out if p]
    if phrases:
        note(f"not shown (--limit {limit}): {', '.join(phrases)}; --limit 0 shows every row{more}, --json lists them all")


def uncommitted_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--uncommitted``: show every event as read (FORMAT.md §1.1), passed as ``isolation``."""
    return click.option(
        "--uncommitted", "isolation", flag_value="uncommitted", default="committed",
        help="Show every event as read, including messages not (yet) committed: those at times their part has "
             "not completed, and those a crashed writer left that a restarted one replaced (default: committed "
             "reads, FORMAT.md §1.1).")(f)
