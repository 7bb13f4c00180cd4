"""Hypothesis strategies: random Arrow schemas and batches, random valid capture schedules (and running them)."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from hypothesis import strategies as st

from capture import Capture
from eventlog import Antichain, ChangeBatch
from eventlog.time import TimeType

_LEAF_TYPES = [
    pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(),
    pa.float32(), pa.float64(), pa.bool_(), pa.string(), pa.large_string(), pa.binary(), pa.large_binary(),
    pa.timestamp("s"), pa.timestamp("ms"), pa.timestamp("us", tz="UTC"), pa.timestamp("ns"),
    pa.date32(), pa.time64("us"), pa.null(),
]

_names = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True)


def arrow_types(depth: int = 2) -> st.SearchStrategy[pa.DataType]:
    """Leaf types, structs and lists nested up to ``depth``."""
    leaf = st.sampled_from(_LEAF_TYPES)
    if depth <= 0:
        return leaf

    inner = arrow_types(depth - 1)
    structs = st.lists(st.tuples(_names, inner, st.booleans()), min_size=1, max_size=3, unique_by=lambda x: x[0]).map(
        lambda fs: pa.struct([pa.field(n, t, nullable=nl or pa.types.is_null(t)) for n, t, nl in fs])
    )
    # (pyarrow builds invalid arrays from Python lists of list<null>, so list items are never null-typed)
    lists = inner.filter(lambda t: not pa.types.is_null(t)).map(pa.list_)
    return st.one_of(leaf, leaf, structs, lists)


@st.composite
def schemas(draw: st.DrawFn) -> pa.Schema:
    """A random schema of 1-5 fields (nullable or not)."""
    fields = draw(st.lists(st.tuples(_names, arrow_types(), st.booleans()), min_size=1, max_size=5,
                           unique_by=lambda x: x[0]))
    return pa.schema([pa.field(n, t, nullable=nl or pa.types.is_null(t)) for n, t, nl in fields])


def _value(t: pa.DataType, nullable: bool) -> st.SearchStrategy:
    T = pa.types
    if T.is_null(t):
        return st.none()
    if T.is_boolean(t):
        s: st.SearchStrategy = st.booleans()
    elif T.is_integer(t):
        bits = t.bit_width
        lo, hi = (0, 2**bits - 1) if T.is_unsigned_integer(t) else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
        s = st.integers(lo, hi)
    elif T.is_float32(t):
        s = st.floats(width=32, allow_nan=False)
    elif T.is_floating(t):
        s = st.floats(allow_nan=False)
    elif T.is_string(t) or T.is_large_string(t):
        s = st.text(max_size=12)
    elif T.is_binary(t) or T.is_large_binary(t):
        s = st.binary(max_size=12)
    elif T.is_timestamp(t) or T.is_time64(t):
        s = st.integers(0, 2**40) if T.is_timestamp(t) else st.integers(0, 86_400_000_000 - 1)
    elif T.is_date32(t):
        s = st.integers(-100_000, 100_000)
    elif T.is_struct(t):
        fields = [t.field(i) for i in range(t.num_fields)]
        s = st.fixed_dictionaries({f.name: _value(f.type, f.nullable) for f in fields})
    elif T.is_list(t):
        s = st.lists(_value(t.value_type, True), max_size=3)
    else:  # pragma: no cover - the strategies above only make these types
        raise AssertionError(t)
    return st.one_of(st.none(), s) if nullable else s


@st.composite
def batches(draw: st.DrawFn, schema: pa.Schema, min_rows: int = 1, max_rows: int = 6) -> pa.RecordBatch:
    """A batch of ``schema`` with random values."""
    n = draw(st.integers(min_rows, max_rows))
    cols = []
    for f in schema:
        vals = draw(st.lists(_value(f.type, f.nullable), min_size=n, max_size=n))
        cols.append(pa.array(vals, type=f.type))
    return pa.RecordBatch.from_arrays(cols, schema=schema)


@dataclass
class Step:
    """One capture call: ``send(time, batch)``, ``advance(frontier)`` or ``close``."""

    op: str
    time: object = None
    batch: pa.RecordBatch | None = None
    frontier: tuple = ()

    def apply(self, cap) -> None:  # noqa: ANN001 - a Capture
        """Make this call on ``cap``."""
        if self.op == "send":
            cap.send(self.time, self.batch)
        elif self.op == "advance":
            cap.advance_to(list(self.frontier))
        else:
            cap.close()


@st.composite
def schedules(draw: st.DrawFn, schema: pa.Schema, time_type: TimeType, max_steps: int = 12) -> list[Step]:
    """A random valid schedule for one part: sends at times in advance of the frontier, forward advances,
    and a final close (unless the schedule is left open)."""
    k = time_type.arity
    frontier: list = [time_type.minimum]
    steps: list[Step] = []

    def bump(t: object) -> object:
        if k == 0:
            return t + draw(st.integers(0, 3))  # type: ignore[operator]
        return tuple(c + draw(st.integers(0, 2)) for c in t)  # type: ignore[union-attr]

    for _ in range(draw(st.integers(0, max_steps))):
        if draw(st.booleans()):
            base = draw(st.sampled_from(frontier))
            steps.append(Step("send", bump(base), draw(batches(schema))))
        else:
            new = [bump(draw(st.sampled_from(frontier))) for _ in range(draw(st.integers(1, 2 if k else 1)))]
            frontier = list(Antichain(new))
            steps.append(Step("advance", frontier=tuple(frontier)))
    if draw(st.integers(0, 4)):
        steps.append(Step("close"))
    return steps


def run_capture(log, schema: pa.Schema, time_type: TimeType, plans: list[list[Step]], encoding: str) -> None:
    """Capture stream ``s`` of ``log``: part ``p`` runs the schedule ``plans[p]`` (``schedules``) and is left open
    (aborted)."""
    for part, steps in enumerate(plans):
        cap = Capture(log, "s", part, len(plans), schema=schema, encoding=encoding, time=time_type.name)
        for s in steps:
            s.apply(cap)
        cap.abort()  # a schedule without close leaves the part open


def expected_events(steps: list[Step], time_type: TimeType) -> list:
    """The events a Capture must write for ``steps`` (timely's rules, restated independently)."""
    from eventlog import Messages, Progress

    out: list = []
    frontier = (time_type.minimum,)
    for s in steps:
        if s.op == "send":
            out.append(Messages(s.time, s.batch))
            continue
        new = () if s.op == "close" else s.frontier
        if set(new) != set(frontier):
            cb = ChangeBatch([(t, -1) for t in frontier] + [(t, 1) for t in new])
            out.append(Progress(cb.consolidated()))
        frontier = new
    return out


def avro_long(n: int) -> bytes:
    """An Avro long (zigzag varint), for tests that build Avro bytes by hand."""
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | 0x80 if n else b)
        if not n:
            return bytes(out)
