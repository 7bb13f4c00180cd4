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
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

import click

from connectors.files.layout import HEADER_FILES, part_number
from eventlog.antichain import Antichain
from eventlog.errors import EventLogError, InvalidTimeError, InvalidURIError, StreamNotFoundError
from eventlog.time import Time
from eventlog.uri import local_path

if TYPE_CHECKING:  # imported where used: `replay --version` and `--help` import no pyarrow and no rich
    from rich.console import Console

    from eventlog.header import StreamHeader
    from eventlog.log import Log

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


ARGS_META = "replay.args"
"""Key of ``click.Context.meta`` (the root context's) holding the command line as typed, after ``replay``."""


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

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Keep the command line as typed (``ctx.meta[ARGS_META]``): hints show it back, corrected
        (``suggested_command``)."""
        ctx.meta[ARGS_META] = list(args)
        return super().parse_args(ctx, args)

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
            _fail(f"{type(e).__name__}: {e} (run `{_debug_command(ctx)}` for the traceback)", EXIT_LOG_ERROR)


def _debug_command(ctx: click.Context) -> str:
    """The command line as typed, with ``--debug``: what shows the traceback of the error it met."""
    args = ctx.meta.get(ARGS_META)
    if args is None:
        return "replay --debug COMMAND …"
    import shlex

    return shlex.join(["replay", *([] if "--debug" in args else ["--debug"]), *args])


def _silence_stdout() -> None:
    """After a broken pipe, point stdout at /dev/null so the interpreter's final flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout without a file descriptor (tests)
        pass


# -- logs and streams ---------------------------------------------------------------------------------------


def _reparsed(ctx: click.Context, args: list[str]) -> dict[str, Any] | None:
    """The parameters ``ctx``'s command gets from ``args`` (its own arguments), parsed without running it; None
    when they do not parse."""
    try:
        sub = ctx.command.make_context(ctx.info_name, list(args), parent=ctx.parent, resilient_parsing=True)
    except Exception:  # noqa: BLE001 - a trial parse: any failure means "not this one"
        return None
    return sub.params


def suggested_command(changes: dict[str, Any], options: Iterable[str] = ()) -> str | None:
    """The current command line as the user typed it (``ARGS_META``; else its arguments), with the arguments
    named in ``changes`` (click parameter names) given new values and ``options`` added: a command to paste,
    shell-quoted. Each change goes where parsing the result gives the parameter its new value (so a stream
    named like its log is not mistaken for it); an optional argument that was not given is inserted. None
    outside a command."""
    import shlex

    ctx = click.get_current_context(silent=True)
    if ctx is None or ctx.info_name is None or ctx.parent is None:
        return None
    typed = ctx.find_root().meta.get(ARGS_META)
    if typed is not None and ctx.info_name in typed:
        k = typed.index(ctx.info_name) + 1
        head, rest = list(typed[:k]), list(typed[k:])
    else:  # called without the group's parse: the arguments only
        head = [ctx.info_name]
        rest = [str(ctx.params[p.name]) for p in ctx.command.params
                if isinstance(p, click.Argument) and p.name and ctx.params.get(p.name) is not None]
    for name, value in changes.items():
        new, old = str(value), ctx.params.get(name)
        if old is None:
            trials = [rest[:i] + [new] + rest[i:] for i in range(len(rest) + 1)]
        else:
            trials = [rest[:i] + [new] + rest[i + 1:] for i, t in enumerate(rest) if t == str(old)]
        for trial in trials:
            params = _reparsed(ctx, trial)
            if params is not None and str(params.get(name)) == new:
                rest = trial
                break
        else:
            if trials:
                rest = trials[0]
    extra = list(options)
    if extra:
        cut = rest.index("--") if "--" in rest else len(rest)
        rest = rest[:cut] + extra + rest[cut:]
    return shlex.join(["replay", *head, *rest])


def _takes(ctx: click.Context | None, name: str, kind: type) -> bool:
    """Whether the current command has a parameter ``name`` of ``kind`` (``click.Argument``/``click.Option``)."""
    return ctx is not None and any(isinstance(p, kind) and p.name == name for p in ctx.command.params)


def _folder_of(value: Any) -> tuple[str, str, int | None] | None:
    """``(log folder, stream, part)`` when ``value`` names a local stream's folder (part None) or a part's folder."""
    if not isinstance(value, str):
        return None
    try:
        path = local_path(value)
    except Exception:  # noqa: BLE001 - not a URI at all: no folder
        return None
    if path is None or not os.path.isdir(path):
        return None
    norm = os.path.normpath(os.path.abspath(path))
    parent, name = os.path.split(norm)
    if _is_stream_folder(norm):
        return parent, name, None
    number = part_number(name)
    if number is not None and _is_stream_folder(parent):
        root, stream = os.path.split(parent)
        return root, stream, number
    return None


def _log_hint(root: str, stream: str, part: int | None) -> str:
    """What to pass instead of a stream's or part's folder (one in ``root``): the command line corrected — every
    argument that is such a folder replaced by its log, the stream name added where the command takes one and
    it was not given, ``--part`` where the command has it."""
    ctx = click.get_current_context(silent=True)
    takes_stream = _takes(ctx, "stream", click.Argument)
    what = "pass its log and the stream name" if takes_stream else "pass its log"
    cmd = None
    if ctx is not None:
        changes: dict[str, Any] = {}
        for p in ctx.command.params:
            if isinstance(p, click.Argument) and p.name and p.name != "stream":
                folder = _folder_of(ctx.params.get(p.name))
                if folder is not None:
                    changes[p.name] = folder[0]
        if takes_stream and ctx.params.get("stream") is None:
            changes["stream"] = stream
        options = (["--part", str(part)] if part is not None and _takes(ctx, "part", click.Option)
                   and ctx.params.get("part") is None else [])
        cmd = suggested_command(changes, options) if changes else None
    if cmd is None:
        cmd = f"replay {ctx.info_name if ctx is not None and ctx.info_name else 'COMMAND'} {root}" + \
              (f" {stream}" if takes_stream or ctx is None else "")
    return f"{what}: {cmd}"


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
    if _is_stream_folder(norm):
        return f"{path} is the folder of stream {name!r}, not a log; {_log_hint(parent, name, None)}"
    number = part_number(name)
    if number is not None and _is_stream_folder(parent):
        root, stream = os.path.split(parent)
        return (f"{path} is the folder of part {number} of stream {stream!r}, not a log; "
                f"{_log_hint(root, stream, number)}")
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


class NoLogError(EventLogError):
    """A local log folder that does not exist (``open_uri`` with ``must_exist``): a log error, or what
    ``tail -f`` waits for."""


def open_uri(uri: str, *, must_exist: bool = True, **options: Any) -> Log:
    """Open the log at ``uri`` for the CLI. A malformed URI is a usage error; a local directory that does not
    exist is a log error when ``must_exist`` (reading commands), so a typo is not shown as an empty log. A
    local path that is not a log — a file, a stream's or a part's folder, or (when ``must_exist``) a folder
    holding no stream — is a usage error naming what was expected (``not_a_log``)."""
    from eventlog.log import open_log

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
        raise NoLogError(f"no log at {uri}: {path} is not a directory")
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
        close = close_name(stream, names)
        if close is not None:
            ctx = click.get_current_context(silent=True)
            # the command with the name corrected, where STREAM names a stream of this log alone (diff: of two)
            cmd = (suggested_command({"stream": close}) if ctx is not None and ctx.params.get("stream") == stream
                   and ctx.command.name != "diff" else None)
            hint += f"; did you mean {close!r}?" + (f" {cmd}" if cmd else "")
        raise StreamNotFoundError(f"stream not found in log {log.uri}; {hint}", stream=stream) from None
    except ValueError as e:  # an invalid stream name
        raise click.BadParameter(str(e), param_hint="STREAM") from None


def close_name(name: str, names: list[str]) -> str | None:
    """The one of ``names`` that ``name`` is most likely a typo of, if any."""
    import difflib

    close = difflib.get_close_matches(name, names, n=1, cutoff=0.75)
    return close[0] if close else None


def require_new_stream(log: Log, stream: str, param_hint: str, choose: str) -> None:
    """A usage error unless ``stream`` is a valid name that does not exist in ``log`` yet (commands that create a
    stream: ``copy``, ``gen``); ``choose`` says what to change (``another --to-stream``)."""
    try:
        log.header(stream)
    except StreamNotFoundError:
        return
    except ValueError as e:  # an invalid stream name
        raise click.BadParameter(str(e), param_hint=param_hint) from None
    raise click.UsageError(f"stream {stream!r} already exists in {log.uri}; choose {choose}")


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
            self.fail("sequence ids start at 1: 1 (or beginning) starts at the first event, -N at the last N "
                      "events (-5)", param, ctx)
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
    from rich.console import Console

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
    from rich.console import Console

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
