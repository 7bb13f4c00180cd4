"""The records of one time of a stream, for the page's click on a time: the first ``limit`` of them, with the
stream's schema, as ``replay cat URI STREAM --since T --until T+1`` shows them (values as ``cat`` writes JSON).

A part that has completed the time shows its committed records (what ``cat`` shows); a part that has not yet
shows what it wrote at the time so far, marked uncommitted (what ``cat --uncommitted`` shows). Each part is read
from the first event the watch saw at the time (``LogWatch.time_seqs``), else from the part's first event, and
at most ``max_events`` events of each part are looked at: reading never runs over a whole long log.
"""

from __future__ import annotations

from typing import Any

from eventlog.events import Messages
from eventlog.header import StreamHeader
from eventlog.log import Log
from eventlog.time import Time

from .._common import frontier_json, time_json
from .._scan import PartCursor
from .._values import RecordConverter

MAX_EVENTS = 20_000
"""Events of one part looked at, at most, for one time's records."""


def records_at(log: Log, header: StreamHeader, t: Time, *, limit: int = 50, starts: dict[int, int] | None = None,
               max_events: int = MAX_EVENTS) -> dict[str, Any]:
    """The first ``limit`` records at time ``t`` of every part (module doc) as a JSON-ready dict: ``schema``,
    ``rows`` (``part``, ``seq``, ``committed``, ``record``), ``records`` counted, ``truncated``, and per part
    whether it completed ``t``."""
    convert = RecordConverter(header.schema)
    rows: list[dict[str, Any]] = []
    counted = 0
    truncated = False
    parts = []
    for p in range(header.peers):
        stats = log.part_stats(header.stream, p)
        start = max(stats.first_seq, (starts or {}).get(p, stats.first_seq))
        # where the part stands now, from its Progress events alone
        with PartCursor(log, header, p, start=start, end=stats.next_seq, progress_only=True) as probe:
            for _ in probe.read():
                pass
            frontier = probe.frontier
        done = not frontier.less_equal(t)
        isolation = "committed" if done else "uncommitted"
        looked = 0
        with PartCursor(log, header, p, start=start, end=stats.next_seq, isolation=isolation) as cursor:
            for entry in cursor.read():
                looked += 1
                ev = entry.event
                if isinstance(ev, Messages) and ev.time == t:
                    counted += ev.records.num_rows
                    room = limit - len(rows)
                    if room > 0:
                        for record in convert.rows(ev.records.slice(0, room)):
                            rows.append({"part": p, "seq": entry.seq, "committed": done, "record": record})
                if looked >= max_events:
                    truncated = truncated or cursor.next_seq < stats.next_seq
                    break
        parts.append({"part": p, "complete": done, "frontier": frontier_json(frontier)})
    return {"stream": header.stream, "time": time_json(t), "limit": limit, "records": counted, "shown": len(rows),
            "truncated": truncated, "schema": [{"name": f.name, "type": str(f.type), "nullable": f.nullable}
                                               for f in header.schema],
            "rows": rows, "parts": parts}
