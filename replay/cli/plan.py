"""``replay plan``: a query captured by configuration (``spark.sql.extensions=eventlog.spark.CaptureExtension``,
docs/spark_capture.md) shown as its physical plan, each operator with the stream holding its output, the
stream's rows, finished parts and frontier; ``--diff`` finds the first operator whose output differs between two
runs. Thin over ``connectors.spark.plan_capture``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from connectors.spark.plan_capture import CapturedPlan, PlanOperator, plan_names, read_plan

from ._common import EXIT_DIFFERENT, frontier_json, frontier_text, open_uri, print_json, print_rich
from .diff import compare_streams


def _tree(plan: CapturedPlan) -> list[tuple[int, PlanOperator]]:
    """The operators from the roots down (as ``explain()`` prints them), with their depth; an operator read by
    two others (a reused exchange) is shown under the first."""
    by_id = {op.id: op for op in plan.operators}
    out: list[tuple[int, PlanOperator]] = []
    seen: set[int] = set()

    def walk(op_id: int, depth: int) -> None:
        op = by_id.get(op_id)
        if op is None or op_id in seen:
            return
        seen.add(op_id)
        out.append((depth, op))
        for c in op.children:
            walk(c, depth + 1)

    for r in plan.roots:
        walk(r, 0)
    for op in plan.operators:  # anything no root reaches (a plan still being captured)
        walk(op.id, 0)
    return out


def _op_json(op: PlanOperator) -> dict[str, Any]:
    doc = dataclasses.asdict(op)
    doc.pop("summary")
    s = op.summary
    doc["rows"] = None if s is None else s.rows
    doc["parts"] = None if s is None else s.parts
    doc["finished_parts"] = None if s is None else s.finished_parts
    doc["frontier"] = None if s is None else frontier_json(s.frontier)
    doc["children"] = list(op.children)
    doc["columns"] = list(op.columns)
    return doc


def _state(op: PlanOperator, streaming: bool = False) -> str:
    if op.stream is None:
        return op.note or ""
    s = op.summary
    if s is None:
        return "not run"
    if streaming and s.frontier:  # each micro-batch a time: the batches before the frontier are complete
        low = min(s.frontier)
        return f"micro-batches before {low} complete" if low else "no micro-batch complete yet"
    return "complete" if not s.frontier else f"{s.finished_parts}/{s.parts} parts finished"


def _print(plan: CapturedPlan, others: list[str]) -> None:
    if plan.streaming_id is not None:
        title = (f"streaming query {plan.query} (id {plan.streaming_id}, plan of micro-batch {plan.batch}, "
                 f"Spark {plan.spark}; each micro-batch is a time of the streams)")
    else:
        title = f"query {plan.query} (execution {plan.execution}, Spark {plan.spark}, {plan.created})"
    table = Table(title=title, title_justify="left")
    for c, just in (("id", "right"), ("operator", "left"), ("stream", "left"), ("rows", "right"),
                    ("frontier", "left"), ("state", "left")):
        table.add_column(c, justify=just)  # type: ignore[arg-type]
    for depth, op in _tree(plan):
        s = op.summary
        table.add_row(str(op.id), Text("  " * depth + op.name), Text(op.stream or "-"),
                      "" if s is None else str(s.rows), "" if s is None else frontier_text(s.frontier),
                      Text(_state(op, plan.streaming_id is not None)))
    print_rich(table)
    if plan.unused_streams:
        click.echo(f"streams of stages the final plan does not use: {', '.join(plan.unused_streams)}")
    if others:
        click.echo(f"other queries in this log: {', '.join(others)}")


def first_divergence(log_a: str, log_b: str, query: str | None = None,
                     query_b: str | None = None) -> tuple[PlanOperator | None, str | None]:
    """The first operator, in plan order (ascending ids: an operator's inputs before it), whose captured
    output differs between the runs in ``log_a`` and ``log_b`` (as ``replay diff`` compares two streams), with
    how; ``(None, None)`` when every operator captured in both is equal. Plans that differ in shape differ at
    the first id whose operator is another (or missing)."""
    a, b = read_plan(log_a, query, summaries=False), read_plan(log_b, query_b or query, summaries=False)
    la, lb = open_uri(log_a), open_uri(log_b)
    ops_b = {op.id: op for op in b.operators}
    for op in a.operators:
        other = ops_b.get(op.id)
        if other is None or other.name != op.name:
            return op, f"the plans differ here: B has {'no operator' if other is None else other.name} as {op.id}"
        if op.stream is None or other.stream is None:
            continue
        has_a, has_b = op.stream in la.streams(), other.stream in lb.streams()
        if has_a != has_b:
            return op, f"only {'A' if has_a else 'B'} ran it"
        if not has_a:
            continue
        why = compare_streams(la, op.stream, lb, other.stream)
        if why is not None:
            return op, why
    extra = [op for op in b.operators if op.id not in {x.id for x in a.operators}]
    if extra:
        return extra[0], f"the plans differ here: A has no operator {extra[0].id}"
    return None, None


@click.command("plan", short_help="A captured query's plan with each operator's stream.")
@click.argument("uri")
@click.argument("query", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
@click.option("--diff", "other", metavar="LOG_B",
              help="Compare with the same query captured in LOG_B: the first operator whose output differs.")
@click.option("--query-b", help="The query's name in LOG_B (default: QUERY, or the last query there).")
def plan(uri: str, query: str | None, as_json: bool, other: str | None, query_b: str | None) -> None:
    """Show QUERY (default: the last query captured into the log at URI) as its physical plan: each operator
    with its id, the stream holding its output (``<query>.<id>-<operator>``, read it with ``replay cat``), the
    stream's rows, frontier and state (complete: every partition's part is finished; "not run": the
    operator's output was never computed). Operators are numbered in plan order: an operator's inputs have
    lower ids.

    With --diff LOG_B, compare each operator captured in both runs, in plan order, and report the first one
    whose output differs (records at a time, or the frontier); exit 1 then, 0 when all are equal.

    \b
    Example:
      replay plan /tmp/cap
      replay plan /tmp/cap q2 --json | jq '.operators[] | {id, name, stream, rows}'
      replay plan /tmp/run1 q1 --diff /tmp/run2
    """
    open_uri(uri)
    if other is not None:
        op, why = first_divergence(uri, other, query, query_b)
        if op is None:
            click.echo("equal: every operator captured in both runs has the same output")
            return
        click.echo(f"first diverging operator: {op.id} {op.name}" + (f" ({op.stream})" if op.stream else ""))
        click.echo(f"  {why}")
        raise click.exceptions.Exit(EXIT_DIFFERENT)
    captured = read_plan(uri, query)
    others = [n for n in plan_names(uri) if n != captured.query]
    if as_json:
        print_json({"query": captured.query, "application": captured.application, "execution": captured.execution,
                    "spark": captured.spark, "created": captured.created, "roots": list(captured.roots),
                    "operators": [_op_json(op) for op in captured.operators],
                    "unused_streams": list(captured.unused_streams), "other_queries": others,
                    "streaming": None if captured.streaming_id is None
                    else {"id": captured.streaming_id, "batch": captured.batch}})
    else:
        _print(captured, others)
