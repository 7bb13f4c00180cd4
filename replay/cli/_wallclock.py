"""Wall-clock time on the command line: ``--since-ts`` / ``--until-ts`` values, the write times shown in output,
and the check that a stream records write times at all.

A write time is the ``ts`` of an ``Entry``: milliseconds since the Unix epoch, the writer's clock when it wrote
the event (Kafka: the record timestamp; format 2.0 file and memory logs: ``eventlog.ts`` of each segment's
batch). Format 1.x file segments record none.

Accepted values (``parse_when``), all meaning an instant in UTC unless they carry an offset:

* ISO-8601: ``2026-11-25T10:00:00Z``, ``2026-11-25T10:00:00.250+01:00``, ``2026-11-25 10:00``, a date
  ``2026-11-25`` (its midnight); without a zone the time is **UTC**, not the local time zone;
* ``@SECONDS`` since the epoch, as ``date -d @…``: ``@1764064800``, ``@1764064800.123`` for milliseconds
  (a value of 12 or more digits is refused: it looks like milliseconds);
* milliseconds since the epoch, what Kafka record timestamps and kcat's ``-o s@MS`` count: ``@1764064800123ms``,
  or a bare integer of at least ``BARE_MS_MIN`` (``1764064800123``: 12 digits or more). Other bare integers are
  refused (is ``1764064800`` seconds or milliseconds?), except 8 digits, an ISO-8601 date (``20261125``);
* a duration before now: ``-10m``, ``-2h``, ``-1d``, ``-1h30m``, ``-90s``, ``-500ms``, ``-1w``; and ``now``.
"""

from __future__ import annotations

import datetime as dt
import re
import time as _time
from typing import Any, Iterable

import click

from eventlog.header import StreamHeader
from eventlog.log import Log
from eventlog.parts import CheckedPart

_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_RELATIVE = re.compile(r"-((?:\d+(?:\.\d+)?(?:ms|s|m|h|d|w))+)")
_RELATIVE_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_EPOCH = re.compile(r"@(\d+)(?:\.(\d{1,3}))?")
_EPOCH_MS = re.compile(r"@(\d+)ms")
BARE_MS_MIN = 10**11
"""A bare integer WHEN is milliseconds since the epoch from here on (12 digits: 1973-03-03 and later; as seconds
it would be after the year 5000). Smaller bare integers are refused, so that none is read in the wrong unit."""
_EPOCH_MAX_DIGITS = 11
"""``@`` takes seconds: 11 digits reach the year 5138; a 13-digit value is milliseconds by mistake."""

FORMS_HELP = ("ISO-8601 (2026-11-25T10:00:00Z, 2026-11-25; no zone = UTC), @EPOCH_SECONDS (@1764064800.5), "
              "epoch milliseconds as Kafka and kcat's s@ count (@1764064800500ms, or bare: 1764064800500), "
              "or a duration before now (-10m, -2h, -1d, -1h30m)")
"""The accepted forms, in one line, for option help and error messages."""


def now_ms() -> int:
    """The reader's wall clock in milliseconds since the epoch (what relative values count back from)."""
    return _time.time_ns() // 1_000_000


def parse_when(text: str, now: int | None = None) -> int:
    """Milliseconds since the epoch for a ``--since-ts``/``--until-ts`` value (the forms in the module doc);
    ``now`` is the instant relative values count back from (default: the wall clock). Raises ValueError saying
    what is accepted."""
    s = text.strip()
    if not s:
        raise ValueError(f"empty wall-clock time: write {FORMS_HELP}")
    if s.lower() == "now":
        return now_ms() if now is None else now
    m = _RELATIVE.fullmatch(s)
    if m:
        span = sum(float(n) * _UNITS_MS[u] for n, u in _RELATIVE_PART.findall(m.group(1)))
        return (now_ms() if now is None else now) - round(span)
    if s.startswith("-"):
        raise ValueError(f"{text!r} is not a duration before now: a number and a unit, ms, s, m, h, d or w "
                         "(-10m, -2h, -1d, -1h30m)")
    m = _EPOCH_MS.fullmatch(s)
    if m:
        return int(m.group(1))
    m = _EPOCH.fullmatch(s)
    if m:
        if len(m.group(1)) > _EPOCH_MAX_DIGITS:
            digits = m.group(1).lstrip("0") or "0"
            raise ValueError(f"{text!r}: @ takes seconds since the epoch, and this looks like milliseconds; "
                             f"write @{m.group(1)[:-3]}.{m.group(1)[-3:]} or @{digits}ms")
        return int(m.group(1)) * 1000 + int((m.group(2) or "0").ljust(3, "0"))
    if s.startswith("@"):
        raise ValueError(f"{text!r} is not @SECONDS since the epoch (@1764064800, @1764064800.123) nor "
                         "@MILLISECONDSms (@1764064800123ms)")
    if s.isdigit() and int(s) >= BARE_MS_MIN:  # what Kafka timestamps and kcat's s@MS count
        return int(s)
    if s.isdigit() and len(s) != 8:  # 20261125 is an ISO-8601 date; other bare numbers are ambiguous
        raise ValueError(f"{text!r}: write seconds since the epoch with an @ (@{s}), milliseconds with @ and ms "
                         f"(@{s}ms), or an ISO-8601 time")
    try:
        when = dt.datetime.fromisoformat(s)
    except ValueError:
        raise ValueError(f"{text!r} is not a wall-clock time: write {FORMS_HELP}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    delta = when - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    return delta // dt.timedelta(milliseconds=1)


class WallClockParam(click.ParamType):
    """A ``--since-ts``/``--until-ts`` value (``parse_when``), converted to milliseconds since the epoch.
    Relative values of one command line count back from the same instant."""

    name = "WHEN"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int):
            return value
        now = None
        if ctx is not None:
            now = ctx.find_root().meta.setdefault("replay.now_ms", now_ms())
        try:
            return parse_when(str(value), now)
        except ValueError as e:
            self.fail(str(e), param, ctx)


WHEN = WallClockParam()


def ts_options(f: Any) -> Any:
    """``--since-ts`` and ``--until-ts`` (passed as ``since_ts``/``until_ts``, ms or None)."""
    f = click.option("--until-ts", "until_ts", type=WHEN, metavar="WHEN",
                     help="Read each part only up to its last event written at or before WHEN (the log as it was "
                          "then).")(f)
    return click.option("--since-ts", "since_ts", type=WHEN, metavar="WHEN",
                        help="Only events written at or after WHEN; earlier ones still count for frontiers. WHEN: "
                             f"{FORMS_HELP}.")(f)


def check_window(since_ts: int | None, until_ts: int | None) -> None:
    """A usage error when ``--until-ts`` lies before ``--since-ts``."""
    if since_ts is not None and until_ts is not None and until_ts < since_ts:
        raise click.BadParameter(f"{ts_iso(until_ts)} is before --since-ts {ts_iso(since_ts)}",
                                 param_hint="'--until-ts'")


def ts_iso(ms: int) -> str:
    """A write time as ISO-8601 in UTC with milliseconds: ``2026-11-25T10:00:00.123Z``."""
    when = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(milliseconds=ms)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


def ts_json(ms: int | None) -> str | None:
    """``ts_iso``, or None for an unknown write time."""
    return None if ms is None else ts_iso(ms)


def written_within(ts: int | None, since_ts: int | None, until_ts: int | None) -> bool:
    """True when write time ``ts`` lies within ``[since_ts, until_ts]`` (open ends: None); an unknown ``ts``
    is within (the option was refused earlier on streams without write times)."""
    if ts is None:
        return True
    return (since_ts is None or ts >= since_ts) and (until_ts is None or ts <= until_ts)


def first_write_time(log: Log, header: StreamHeader, parts: Iterable[int]) -> tuple[int, int, int | None] | None:
    """``(part, seq, ts)`` of the first event of the first of ``parts`` that holds any (one event is read), or None
    when they hold none. A stream records write times for every event or for none (it has one format)."""
    for p in parts:
        st = log.part_stats(header.stream, p)
        if st.events <= 0:
            continue
        with CheckedPart(log, header, p, start=st.first_seq, isolation="uncommitted", track_progress=False) as r:
            entry = r.peek()
            if entry is not None:
                return p, entry.seq, entry.ts
    return None


def no_write_times_reason(header: StreamHeader) -> str:
    """Why a stream's events carry no write time, in words (file and memory logs record them from format 2.0 on,
    Kafka logs always)."""
    v = f"{header.version[0]}.{header.version[1]}"
    return (f"it was written with format {v}, whose segments do not record when an event was written (file and "
            "memory logs record it from format 2.0 on)")


def records_write_times(log: Log, header: StreamHeader, parts: Iterable[int]) -> bool:
    """True when the parts' events carry write times (False also when they hold no event yet)."""
    first = first_write_time(log, header, parts)
    return first is not None and first[2] is not None


def require_write_times(log: Log, header: StreamHeader, parts: Iterable[int], since_ts: int | None,
                        until_ts: int | None) -> None:
    """When ``--since-ts`` or ``--until-ts`` is given (not None): a usage error (exit 2) naming the stream and why
    if the stream records no write times. Nothing when the parts hold no event yet (nothing to select)."""
    if since_ts is None and until_ts is None:
        return
    first = first_write_time(log, header, parts)
    if first is not None and first[2] is None:
        part, seq, _ = first
        option = "--since-ts" if since_ts is not None else "--until-ts"
        raise click.UsageError(
            f"{option} needs the time each event was written, and stream {header.stream!r} in {log.uri} has none "
            f"(part {part}, seq {seq}): {no_write_times_reason(header)}")
