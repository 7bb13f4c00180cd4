"""The ``replay`` command line: inspect, follow, compare, verify, copy, export and replay captured streams.

``main`` is the click group behind the ``replay`` console script (and ``python -m replay.cli``). Every
command takes a log URI (``file:///path``, a plain path, ``memory://name`` — in-process only) and reads
it through the ``Log`` interface. See docs/cli.md.

Commands are imported when they run (``_lazy.LazyGroup``): ``COMMANDS`` names each command's module and keeps
its short help for ``replay --help``.
"""

from __future__ import annotations

import click

from eventlog import __version__

from ._common import EXIT_CODES_HELP
from ._lazy import LazyGroup

COMMANDS: dict[str, tuple[str, str]] = {
    # name: ("module:attribute", the command's short_help), in the order of ``replay --help``
    "ls": ("replay.cli.ls:ls", "List the streams of a log."),
    "info": ("replay.cli.info:info", "A stream's header, schema and parts."),
    "cat": ("replay.cli.cat:cat", "Print events and records."),
    "tail": ("replay.cli.cat:tail", "Print the last events; -f follows a live log."),
    "stats": ("replay.cli.stats:stats", "Records and bytes per time and part; part lag."),
    "frontier": ("replay.cli.frontier:frontier", "How the frontiers advanced (table or plot)."),
    "diff": ("replay.cli.diff:diff", "Compare two captures time by time."),
    "plan": ("replay.cli.plan:plan", "A captured query's plan with each operator's stream."),
    "sql": ("replay.cli.sql:sql", "Query streams with SQL (DuckDB)."),
    "verify": ("replay.cli.verify:verify", "Check checksums, continuity, progress rules, torn tails."),
    "copy": ("replay.cli.convert:copy", "Copy a stream with other parts, key or encoding."),
    "export": ("replay.cli.convert:export", "Write records to Parquet, Arrow, Avro, JSON lines or CSV."),
    "import": ("replay.cli.import_:import_", "Write rows of JSON lines, Parquet, Arrow or Avro into a stream."),
    "run": ("replay.cli.run:run", "Replay into a Python function, per worker."),
    "dump": ("replay.cli.dump:dump", "The bytes one event is stored as (hex, raw or JSON)."),
    "seek": ("replay.cli.seek:seek", "The sequence id each part wrote at a wall-clock time."),
    "produce": ("replay.cli.produce:produce", "Append records (JSON lines) to a part by hand; advance or finish it."),
    "gen": ("replay.cli.gen:gen", "Write a stream of random records to try things."),
    "ui": ("replay.cli.ui:ui", "Watch a log live in a web page; Prometheus /metrics."),
    "top": ("replay.cli.top:top", "Per-part frontiers, lag and rates, refreshing in the terminal."),
    "trim": ("replay.cli.trim:trim", "Drop old times of a stream (retention)."),
    "compact": ("replay.cli.compact:compact", "Merge small segments of a file log stream."),
}


@click.group(cls=LazyGroup, lazy_commands=COMMANDS, epilog=EXIT_CODES_HELP,
             context_settings={"help_option_names": ["-h", "--help"]})
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


__all__ = ["COMMANDS", "main"]
