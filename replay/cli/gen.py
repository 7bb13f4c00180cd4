"""``replay gen``: a stream of random records to try things with (as avro-tools' ``random``): every part sends
``--rows`` records at each of ``--times`` times and advances after each, then finishes (or, with
``--unfinished``, stays open at the last time). Values follow ``--seed``: the same seed writes the same records.
"""

from __future__ import annotations

import random
import re
from typing import Any, Callable

import click
import pyarrow as pa

from eventlog.antichain import Antichain
from eventlog.header import ENCODINGS

from ._common import frontier_text, note, open_uri, require_new_stream

TYPES: dict[str, pa.DataType] = {
    "int64": pa.int64(),
    "int32": pa.int32(),
    "float64": pa.float64(),
    "string": pa.string(),
    "bool": pa.bool_(),
    "timestamp": pa.timestamp("ms", tz="UTC"),
    "binary": pa.binary(),
}
"""The field types ``--schema`` names, and their Arrow types (``timestamp``: milliseconds, UTC)."""

DEFAULT_SCHEMA = "id:int64,word:string,value:float64"

WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliett", "kilo",
         "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango", "uniform", "victor",
         "whiskey", "xray", "yankee", "zulu")
"""The values of ``string`` fields (few enough that grouping by them is interesting)."""

TIMESTAMP_BASE_MS = 1_767_225_600_000
"""2026-01-01T00:00:00Z: ``timestamp`` values at time t lie in the second ``t`` seconds after it."""

NULL_SHARE = 0.1
"""The share of nulls in a nullable field (``name:type?``)."""

_FIELD = re.compile(r"\s*([^:,\s][^:,]*?)\s*:\s*([A-Za-z0-9]+)\s*(\?)?\s*")


def parse_schema(text: str) -> pa.Schema:
    """``"name:type,name:type?,…"`` as an Arrow schema (``?``: nullable, with some nulls); ValueError saying
    what is wrong."""
    fields: list[pa.Field] = []
    for item in text.split(","):
        m = _FIELD.fullmatch(item)
        if m is None:
            raise ValueError(f"{item.strip()!r} is not NAME:TYPE (types: {', '.join(TYPES)}; NAME:TYPE? for a "
                             "nullable field)")
        name, type_name, nullable = m.group(1), m.group(2).lower(), m.group(3) is not None
        if type_name not in TYPES:
            raise ValueError(f"unknown type {m.group(2)!r} of field {name!r}: one of {', '.join(TYPES)}")
        if any(f.name == name for f in fields):
            raise ValueError(f"field {name!r} appears twice")
        fields.append(pa.field(name, TYPES[type_name], nullable=nullable))
    return pa.schema(fields)


def _values(t: pa.DataType, rng: random.Random, time_index: int) -> Callable[[], Any]:
    """A function drawing one value of type ``t`` from ``rng`` (``time_index``: the k-th time written)."""
    if t == pa.int64():
        return lambda: rng.randrange(1_000_000)
    if t == pa.int32():
        return lambda: rng.randrange(1_000)
    if t == pa.float64():
        return lambda: round(rng.uniform(0, 1000), 3)
    if t == pa.string():
        return lambda: rng.choice(WORDS)
    if t == pa.bool_():
        return lambda: rng.random() < 0.5
    if pa.types.is_timestamp(t):
        base = TIMESTAMP_BASE_MS + 1000 * time_index
        return lambda: base + rng.randrange(1000)
    if t == pa.binary():
        return lambda: rng.randbytes(rng.randrange(1, 9))
    raise ValueError(f"no values for type {t}")


def random_batch(schema: pa.Schema, rows: int, rng: random.Random, time_index: int) -> pa.RecordBatch:
    """``rows`` random records of ``schema``, drawn from ``rng`` column by column (deterministic for a seed)."""
    columns = []
    for f in schema:
        draw = _values(f.type, rng, time_index)
        if f.nullable:
            values = [None if rng.random() < NULL_SHARE else draw() for _ in range(rows)]
        else:
            values = [draw() for _ in range(rows)]
        columns.append(pa.array(values, type=f.type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def gen_times(n: int, product: bool) -> list[tuple[Any, Any]]:
    """The ``n`` times written, each with the frontier to advance to after it (None after the last).

    int64: 0, 1, …, n-1, advancing to t+1. ``product`` (product:2): an iteration inside epochs, two rounds an
    epoch: (0,0), (0,1), (1,0), (1,1), …; after (e,0) the frontier is {(e,1), (e+1,0)} (the next round, or the
    next epoch), after (e,1) it is {(e+1,0)}."""
    out: list[tuple[Any, Any]] = []
    for k in range(n):
        t: Any
        after: Any
        if not product:
            t, after = k, k + 1
        else:
            e, r = divmod(k, 2)
            t = (e, r)
            after = [(e, 1), (e + 1, 0)] if r == 0 else [(e + 1, 0)]
        out.append((t, after if k < n - 1 else None))
    return out


@click.command("gen", short_help="Write a stream of random records to try things.")
@click.argument("uri")
@click.argument("stream")
@click.option("--parts", "-p", type=click.IntRange(min=1), default=2, show_default=True, help="Parts (peers).")
@click.option("--times", "-t", "n_times", type=click.IntRange(min=1), default=10, show_default=True,
              help="Times written: 0..TIMES-1 (with --product: (0,0), (0,1), (1,0), …).")
@click.option("--rows", "-r", type=click.IntRange(min=0), default=5, show_default=True,
              help="Records per part per time.")
@click.option("--schema", "schema_text", default=DEFAULT_SCHEMA, show_default=True, metavar="NAME:TYPE,…",
              help="The record fields; types: int64, int32, float64, string, bool, timestamp (ms, UTC), binary; "
                   "NAME:TYPE? for a nullable field with some nulls.")
@click.option("--encoding", type=click.Choice(ENCODINGS), default="arrow", show_default=True,
              help="Encoding of the stream.")
@click.option("--seed", type=int, help="Seed of the values: the same seed writes the same records (default: a "
              "random seed, printed on stderr).")
@click.option("--unfinished", is_flag=True, help="Leave every part open at the last time (its records not "
              "committed yet, readers waiting) instead of finishing it: `replay produce` may add to it.")
@click.option("--product", is_flag=True, help="Product times (product:2): an epoch and a round, two rounds an epoch.")
def gen(uri: str, stream: str, parts: int, n_times: int, rows: int, schema_text: str, encoding: str,
        seed: int | None, unfinished: bool, product: bool) -> None:
    """Write STREAM into the log URI with random records, to try commands on (as avro-tools' random): each of
    --parts parts sends --rows records at each of --times times and advances its frontier after each, then
    finishes (--unfinished: stays open at the last time). The same --seed writes the same records. The
    stream must not exist yet.

    \b
    Example:
      replay gen /tmp/try numbers
      replay gen /tmp/try events --parts 4 --times 100 --rows 50 --seed 7 \\
          --schema "user:int64,name:string,at:timestamp,ok:bool,score:float64?"
      replay gen /tmp/try open --unfinished && replay ls /tmp/try
    """
    from eventlog.parts.capture import Capture

    try:
        schema = parse_schema(schema_text)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="'--schema'") from None
    log = open_uri(uri, must_exist=False)
    require_new_stream(log, stream, "STREAM", "another name")
    if seed is None:
        seed = random.SystemRandom().randrange(2**32)
    rng = random.Random(seed)
    times = gen_times(n_times, product)
    time_type = "product:2" if product else "int64"
    frontier = Antichain()
    for p in range(parts):
        cap = Capture(log, stream, p, parts, schema=schema, encoding=encoding, time=time_type)
        try:
            for k, (t, after) in enumerate(times):
                batch = random_batch(schema, rows, rng, k)
                cap.send(t, batch)
                if after is not None:
                    cap.advance_to(after)
                elif not unfinished:
                    cap.close()
            frontier = cap.frontier
        finally:
            cap.abort()  # after close(): nothing; --unfinished: the part stays open
    state = (f"parts left open at frontier {frontier_text(frontier)} (--unfinished)" if unfinished
             else "parts finished")
    note(f"wrote {stream!r} into {log.uri}: {parts} parts x {n_times} times x {rows} records = "
         f"{parts * n_times * rows} records ({encoding}, {time_type} times, seed {seed}); {state}")
