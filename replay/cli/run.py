"""``replay run``: replay a captured stream into a user function, one completed time at a time, as each
replay worker would see it — to reproduce a bug on captured input."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import os
import sys
import traceback
from typing import Any, Callable

import click

from replay.replayer import Replayer

from ._common import EXIT_FN_FAILED, TIME, as_time, note, open_uri, stream_header, time_json, time_text
from ._values import jsonable


def load_function(spec: str) -> Callable[..., Any]:
    """The callable named by ``module:function`` (a module importable from the current directory or
    ``sys.path``) or ``path/to/file.py:function``; ``function`` may be dotted (``module:Class.method``)."""
    if ":" not in spec:
        raise click.BadParameter(f"{spec!r} is not module:function", param_hint="'--fn'")
    target, _, attr = spec.rpartition(":")
    try:
        if target.endswith(".py") or os.sep in target:
            name = "_replay_fn_" + os.path.splitext(os.path.basename(target))[0]
            module_spec = importlib.util.spec_from_file_location(name, target)
            if module_spec is None or module_spec.loader is None:
                raise ImportError(f"cannot load {target}")
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[name] = module
            module_spec.loader.exec_module(module)
        else:
            if os.getcwd() not in sys.path and "" not in sys.path:
                sys.path.insert(0, os.getcwd())
            module = importlib.import_module(target)
    except (ImportError, OSError) as e:
        raise click.BadParameter(f"cannot import {target!r}: {e}", param_hint="'--fn'") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise click.BadParameter(f"{target!r} has no attribute {attr!r}", param_hint="'--fn'")
        obj = getattr(obj, part)
    if not callable(obj):
        raise click.BadParameter(f"{spec} is not callable", param_hint="'--fn'")
    return obj


def wants_worker(fn: Callable[..., Any]) -> bool:
    """True when ``fn`` takes a third positional argument (or ``*args``): it is then called with the
    worker index too."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    if any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in params):
        return True
    positional = [p for p in params if p.kind in (inspect.Parameter.POSITIONAL_ONLY,
                                                  inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 3


@click.command("run", short_help="Replay into a Python function, per worker.")
@click.argument("uri")
@click.argument("stream")
@click.option("--fn", "fn_spec", required=True, metavar="MODULE:FUNCTION",
              help="The function to call: module:function, or path/to/file.py:function.")
@click.option("--workers", "-w", type=click.IntRange(min=1), default=1, show_default=True,
              help="Replay workers (the stream's parts are shared among them).")
@click.option("--worker", "only", type=int, help="Run only this worker's share (0..WORKERS-1).")
@click.option("--key", multiple=True,
              help="Repartition records by this column (repeat for several) instead of assigning whole parts.")
@click.option("--since", type=TIME, help="Only times t with SINCE <= t.")
@click.option("--until", type=TIME, help="Only times t that are not >= UNTIL.")
@click.pass_context
def run(ctx: click.Context, uri: str, stream: str, fn_spec: str, workers: int, only: int | None,
        key: tuple[str, ...], since: Any, until: Any) -> None:
    """Replay STREAM into a Python function, time by time: for each replay worker in turn (0, 1, …), the
    function is called once per completed time with all of that worker's records at that time, in time
    order, as fn(time, table) — or fn(time, table, worker) when it takes a third argument. time is an
    int (a tuple for product times); table a pyarrow.Table with the stream's schema (possibly empty when
    the worker has no records at a time other workers have).

    A value the function returns (other than None) is printed as a JSON line {"worker", "time",
    "result"}. If it raises, its traceback is printed with the time and worker, and the exit code is 4.

    \b
    Example (repro.py holds `def check(time, table): assert table.num_rows < 100, time`):
      replay run /tmp/cap numbers --workers 3 --fn repro.py:check
      replay run /tmp/cap numbers --workers 3 --worker 1 --fn mypkg.jobs:process
    """
    if only is not None and not 0 <= only < workers:
        raise click.BadParameter(f"worker {only} is not in 0..{workers - 1}", param_hint="'--worker'")
    log = open_uri(uri)
    header = stream_header(log, stream)
    missing = [k for k in key if k not in header.schema.names]
    if missing:
        raise click.BadParameter(f"no field {missing[0]!r} in the records ({', '.join(header.schema.names)})",
                                 param_hint="'--key'")
    since_t, until_t = as_time(since, header, "--since"), as_time(until, header, "--until")
    fn = load_function(fn_spec)
    with_worker = wants_worker(fn)
    mode = "repartition" if key else "assign"
    debug = bool(ctx.find_root().params.get("debug"))
    for j in [only] if only is not None else range(workers):
        calls = records = 0
        with Replayer(log, stream, j, workers, mode=mode, key=list(key) if key else None, since=since_t,
                      until=until_t) as r:
            for t, table in r.completed():
                try:
                    result = fn(t, table, j) if with_worker else fn(t, table)
                except Exception as e:
                    if debug:
                        raise
                    traceback.print_exception(type(e), e, e.__traceback__.tb_next if e.__traceback__ else None,
                                              file=sys.stderr)
                    click.echo(f"replay: error: {fn_spec} raised {type(e).__name__} at time {time_text(t)} "
                               f"(worker {j} of {workers}, {table.num_rows} records)", err=True)
                    raise click.exceptions.Exit(EXIT_FN_FAILED) from None
                calls += 1
                records += table.num_rows
                if result is not None:
                    click.echo(json.dumps({"worker": j, "time": time_json(t), "result": jsonable(result)},
                                          ensure_ascii=False, separators=(",", ":")))
        note(f"worker {j} of {workers}: {calls} times, {records} records (parts {r.parts})")
