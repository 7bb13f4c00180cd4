"""The ``replay`` command line: inspect, follow, compare, verify, copy, export and replay captured streams.

``main`` is the click group behind the ``replay`` console script (and ``python -m replay.cli``). Every
command takes a log URI (``file:///path``, a plain path, ``memory://name`` — in-process only) and reads
it through the ``Log`` interface. See docs/cli.md.
"""

from __future__ import annotations

import click

from eventlog import __version__

from ._common import EXIT_CODES_HELP, ReplayGroup
from .cat import cat, tail
from .convert import copy, export
from .diff import diff
from .dump import dump
from .frontier import frontier
from .gen import gen
from .import_ import import_
from .info import info
from .ls import ls
from .produce import produce
from .run import run
from .seek import seek
from .sql import sql
from .stats import stats
from .verify import verify


@click.group(cls=ReplayGroup, epilog=EXIT_CODES_HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show Python tracebacks instead of one-line errors.")
@click.version_option(__version__, prog_name="replay (eventlog)")
def main(debug: bool) -> None:
    """Inspect and replay eventlog captures (timely dataflow's Progress/Messages model).

    \b
    URIs: file:///path or a plain path (file log), kafka://host:port/prefix (Kafka),
  s3://bucket/prefix (file log on S3: AWS_ENDPOINT_URL and keys from the environment),
  memory://name (in-process log).
    Times: 7 for int64 streams, 1,2 for product times (JSON arrays in output).

    \b
    Example session:
      replay ls /tmp/cap
      replay info /tmp/cap numbers
      replay cat /tmp/cap numbers -n 20
      replay verify /tmp/cap
    """


for _command in (ls, info, cat, tail, stats, frontier, diff, sql, verify, copy, export, import_, run, dump, seek,
                 produce, gen):
    main.add_command(_command)

__all__ = ["main"]
