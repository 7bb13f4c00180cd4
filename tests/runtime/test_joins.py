"""Operators of several inputs compute what they say, in-process: union, connected streams (stateless and
keyed), windowed and interval joins (inner, left outer), joins with a changing table — against their
definitions computed directly, with inputs of different parallelisms; the plan of a multi-input operator;
the reader's per-input frontiers and barrier alignment across inputs; the buffered-row state format."""

from __future__ import annotations

import random
import time

import pyarrow as pa
import pytest

from runtime import Advance, CheckpointCorruptError, Job, JobGraphError
from runtime.channels.factory import open_channel_store
from runtime.channels.payload import FINISHED_TS, encode_batch
from runtime.channels.reader import BARRIER, DATA, FRONTIER, ChannelReader
from runtime.channels.writer import ChannelWriter, Transfer, WriterSettings
from runtime.checkpoints.rowbuffer import decode_rows, encode_rows
from tests.runtime import join_pipelines as jp


def _run(tmp_path, job: Job, **kw):
    result = job.run(channels=str(tmp_path / "ch"), checkpoints=str(tmp_path / "ck"), checkpoint_interval=0.02,
                     timeout=90, **kw)
    assert result.status == "finished", result.failures
    return result


def _collect(stream, out: list) -> None:
    stream.sink(lambda t, tb: out.extend((t, r) for r in tb.to_pylist()), name="out", parallelism=1)


# -- union and connect ---------------------------------------------------------------------------------


def test_union_of_three_streams_with_different_parallelisms(tmp_path):
    job = Job("union")
    a = job.from_generator(jp.clicks(40), parts=3, parallelism=3, name="a")
    b = job.from_generator(jp.clicks(30, seed=1), parts=2, parallelism=1, name="b")
    c = job.from_generator(jp.clicks(20, seed=2), parts=1, name="c").map(lambda r: r, parallelism=2, name="cm")
    out: list = []
    _collect(a.union(b, c, parallelism=2, name="u").map(lambda r: {**r, "ad": r["ad"] * 10}), out)
    plan = job.plan()
    assert {ch.input for ch in plan.channels if ch.dst == "u"} == {0, 1, 2}
    _run(tmp_path, job)
    want = [(t, {**r, "ad": r["ad"] * 10}) for g, parts in ((jp.clicks(40), 3), (jp.clicks(30, seed=1), 2),
                                                              (jp.clicks(20, seed=2), 1))
            for t, r in jp.rows_of(g, parts)]
    assert jp.norm(out) == jp.norm(want)


def test_connected_streams_map_and_flat_map(tmp_path):
    job = Job("comap")
    imps = job.from_generator(jp.impressions(30), parts=2, name="imps")
    cl = job.from_generator(jp.clicks(30), parts=3, parallelism=1, name="clicks")
    out: list = []
    _collect(imps.connect(cl).flat_map(lambda r: [{"ad": r["ad"], "kind": "imp"}] * 2,
                                       lambda r: [{"ad": r["ad"], "kind": "click"}], parallelism=3), out)
    _run(tmp_path, job)
    want = [(t, {"ad": r["ad"], "kind": "imp"}) for t, r in jp.rows_of(jp.impressions(30), 2)] * 2 + \
        [(t, {"ad": r["ad"], "kind": "click"}) for t, r in jp.rows_of(jp.clicks(30), 3)]
    assert jp.norm(out) == jp.norm(want)


def _on_imp(acc, r):
    return (acc[0] + 1, acc[1]), None


def _on_click(acc, r):
    acc = (acc[0], acc[1] + 1)
    return acc, [{"ad": r["ad"], "imps": acc[0], "clicks": acc[1]}]


def test_keyed_connect_shares_state_per_key_per_completed_time(tmp_path):
    """Per key, impressions count up and each click reports the impressions up to its time (all of its
    time's impressions: input 0 goes first) and its rank among the key's clicks; rescaled from a checkpoint
    midway (the per-key values move by key group)."""
    def build(par: int, gate: str) -> tuple[Job, list]:
        job = Job("coproc")
        imps = job.from_generator(jp._gated(jp.impressions(60, delay=0.001), gate), parts=2, name="imps")
        cl = job.from_generator(jp._gated(jp.clicks(60, delay=0.001), gate), parts=3, parallelism=1, name="clicks")
        out: list = []
        _collect(imps.key_by("ad").connect(cl.key_by("ad")).process(_on_imp, _on_click, zero=lambda: (0, 0),
                                                                    parallelism=par, name="co"), out)
        return job, out

    gate = tmp_path / "gate"
    gate.write_text("30")
    job, first = build(2, str(gate))
    r = job.run(channels=str(tmp_path / "ch"), checkpoints=str(tmp_path / "ck"), checkpoint_interval=0.05,
                stop_after_checkpoints=2, timeout=90)
    assert r.status == "stopped"
    gate.write_text("60")
    job, second = build(3, str(gate))
    _run(tmp_path, job)
    imps = jp.rows_of(jp.impressions(60), 2)
    want = []
    seen: dict = {}
    for t, c in sorted(jp.rows_of(jp.clicks(60), 3), key=lambda x: x[0]):
        n = seen[c["ad"]] = seen.get(c["ad"], 0) + 1
        want.append((t, {"ad": c["ad"], "imps": sum(1 for ti, i in imps if i["ad"] == c["ad"] and ti <= t),
                         "clicks": n}))
    # the first run's sink delivered what its last checkpoint covered, the second the rest: exactly once
    assert jp.norm(first + second) == jp.norm(want)
    assert first and second


def test_process_needs_keyed_inputs_and_graph_errors():
    job = Job("errors")
    a = job.from_generator(jp.clicks(4), parts=1, name="a")
    b = job.from_generator(jp.clicks(4), parts=1, name="b")
    with pytest.raises(JobGraphError, match="keyed inputs"):
        a.connect(b).process(_on_imp, _on_click)
    with pytest.raises(JobGraphError, match="at least one"):
        a.union()
    with pytest.raises(JobGraphError, match="how must be"):
        a.key_by("ad").join(b.key_by("ad"), how="outer")
    with pytest.raises(JobGraphError, match="lower bound"):
        a.key_by("ad").join(b.key_by("ad")).interval(3, 1)
    with pytest.raises(JobGraphError, match="another job"):
        a.union(Job("other").from_generator(jp.clicks(4), parts=1))
    a.union(a, name="self").sink(lambda t, tb: None)
    b.sink(lambda t, tb: None)
    with pytest.raises(JobGraphError, match="reads operator 'a' through two inputs"):
        job.plan()


def test_plan_of_a_join_keys_each_input_by_its_own_key():
    job = Job("plan")
    a = job.from_generator(jp.impressions(4), parts=2, parallelism=2, name="a")
    b = job.from_generator(jp.clicks(4), parts=3, parallelism=3, name="b").map(lambda r: {"ad_id": r["ad"]},
                                                                              parallelism=3, name="bm")
    a.key_by("ad").join(b.key_by("ad_id")).window(3, parallelism=4, name="j").sink(lambda t, tb: None, name="s")
    plan = job.plan(chaining=True)
    chans = [c for c in plan.channels if c.dst == "j"]
    assert len(chans) == 2 * 4 + 3 * 4
    assert {(c.src, c.input) for c in chans} == {("a", 0), ("bm", 1)}
    task_a = next(t for t in plan.tasks if t.node == "a")
    task_b = next(t for t in plan.tasks if t.chain[-1] == "bm")
    assert task_a.routing == {"j": "key"} and task_b.routing == {"j": "key"}
    assert job.nodes["j"].key_of("bm") == "ad_id" and job.nodes["j"].key_of("a") == "ad"
    assert next(t for t in plan.tasks if t.node == "j").chain == ["j", "s"]   # the join heads a chain


# -- joins against their definitions -------------------------------------------------------------------


@pytest.mark.parametrize("how", ["inner", "left"])
def test_window_join_equals_its_definition(tmp_path, how):
    job = Job("wjoin")
    imps = job.from_generator(jp.impressions(60), parts=2, parallelism=2, name="imps")
    cl = job.from_generator(jp.clicks(60), parts=3, parallelism=1, name="clicks")
    out: list = []
    _collect(imps.key_by("ad").join(cl.key_by("ad"), how=how).window(5, parallelism=3, schema=jp.WINDOW_OUT), out)
    result = _run(tmp_path, job)
    want = jp.window_join(jp.rows_of(jp.impressions(60), 2), jp.rows_of(jp.clicks(60), 3), 5, how)
    assert jp.norm(out) == want
    assert len(want) > 50
    join = next(s for k, s in result.tasks.items() if k.startswith("join") or "window" in k)
    # what a checkpoint cost the join's task: its largest snapshot, time encoding snapshots, time aligning
    assert join["state_bytes_max"] >= join["state_bytes"] > 0 and join["snapshot_s"] > 0 and join["align_s"] >= 0
    assert 0 < join["cpu_s"] and all(s["cpu_s"] > 0 for s in result.tasks.values())


@pytest.mark.parametrize("how", ["inner", "left"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_interval_join_equals_its_definition_on_random_inputs(tmp_path, how, seed):
    """A property test over random bounds, rates, parallelisms: the interval join's output is what a plain
    evaluation of its definition gives (here: pandas, a cross join filtered by key and bounds)."""
    pd = pytest.importorskip("pandas")
    rng = random.Random(seed)
    lower = rng.randint(-4, 2)
    upper = lower + rng.randint(0, 5)
    li, ri = rng.randint(20, 60), rng.randint(20, 60)
    lt, rt = rng.randint(1, 5), rng.randint(1, 5)
    job = Job("ijoin")
    imps = job.from_generator(jp.impressions(li, per_time=lt, seed=seed), parts=2, parallelism=rng.randint(1, 2),
                              name="imps")
    cl = job.from_generator(jp.clicks(ri, per_time=rt, seed=seed), parts=3, parallelism=rng.randint(1, 3),
                            name="clicks")
    out: list = []
    _collect(imps.key_by("ad").join(cl.key_by("ad"), how=how).interval(lower, upper, parallelism=rng.randint(1, 3),
                                                                        schema=jp.INTERVAL_OUT), out)
    _run(tmp_path, job)
    left = pd.DataFrame([{**r, "tl": t} for t, r in jp.rows_of(jp.impressions(li, per_time=lt, seed=seed), 2)])
    right = pd.DataFrame([{**r, "tr": t} for t, r in jp.rows_of(jp.clicks(ri, per_time=rt, seed=seed), 3)])
    m = left.merge(right, on="ad")
    m = m[(m.tr >= m.tl + lower) & (m.tr <= m.tl + upper)]
    want = [(max(int(x.tl), int(x.tr)), {"ad": int(x.ad), "imp": x.imp, "cost": int(x.cost), "click": x.click})
            for x in m.itertuples()]
    if how == "left":
        lonely = left[~left.imp.isin(set(m.imp))]
        want += [(int(x.tl), {"ad": int(x.ad), "imp": x.imp, "cost": int(x.cost), "click": None})
                 for x in lonely.itertuples()]
    assert jp.norm(out) == jp.norm(want)
    assert jp.norm(want) == jp.interval_join(jp.rows_of(jp.impressions(li, per_time=lt, seed=seed), 2),
                                             jp.rows_of(jp.clicks(ri, per_time=rt, seed=seed), 3), lower, upper, how)


@pytest.mark.parametrize("how", ["inner", "left"])
def test_join_with_a_changing_table_takes_the_latest_row_as_of_each_time(tmp_path, how):
    """Prices start at time 1, so the impressions at time 0 find none (left outer: nulls)."""
    job = Job("tjoin")
    imps = job.from_generator(jp.impressions(80), parts=2, parallelism=2, name="imps")
    table = job.from_generator(jp.prices(40, start=1), parts=2, parallelism=1, name="prices")
    out: list = []
    _collect(imps.join_table(table, key="ad", how=how, parallelism=3, schema=jp.TABLE_OUT), out)
    _run(tmp_path, job)
    want = jp.table_join(jp.rows_of(jp.impressions(80), 2), jp.rows_of(jp.prices(40, start=1), 2), how)
    assert jp.norm(out) == want
    assert any(r[1][3] == ("price", None) for r in want) == (how == "left")


def test_table_join_waits_for_the_tables_frontier(tmp_path):
    """The table's source moves its time (Advance) long after the records: no record is joined before the
    table is complete up to its time, so a late price update still counts."""
    def table(part: int, offset: int):
        for i in range(offset, 4):
            if i == 0:
                yield 0, [{"ad": 1, "price": 1}]
            elif i == 1:
                time.sleep(0.3)
                yield Advance(5)
            elif i == 2:
                yield 5, [{"ad": 1, "price": 2}]
            else:
                yield Advance(100)

    def records(part: int, offset: int):
        for i in range(offset, 10):
            yield i, [{"ad": 1, "x": i}]

    job = Job("tlate")
    recs = job.from_generator(records, parts=1, name="recs")
    t = job.from_generator(table, parts=1, name="table")
    out: list = []
    _collect(recs.key_by("ad").join_table(t.key_by("ad")), out)
    _run(tmp_path, job)
    assert sorted((t, r["x"], r["price"]) for t, r in out) == [(i, i, 1 if i < 5 else 2) for i in range(10)]


# -- the reader: inputs, frontiers, alignment ----------------------------------------------------------


def _drain(reader, until, timeout: float = 10.0) -> list:
    out: list = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out += reader.poll()
        if until(out):
            return out
        time.sleep(0.002)
    raise AssertionError(f"the reader did not get there in {timeout} s; got {out[-5:]}")


def test_reader_tracks_each_inputs_frontier_and_aligns_barriers_across_inputs(tmp_path):
    """Input 0 has two channels, input 1 one. Data events say their input; frontier events carry the meet
    and each input's frontier; a barrier on input 0 holds that channel's later records back until input 1
    delivered the barrier too."""
    store = open_channel_store(str(tmp_path / "ch"), "job")
    names = ["a.0-j.0", "a.1-j.0", "b.0-j.0"]
    store.prepare(1, names)
    transfer = Transfer(WriterSettings(bundle_messages=1))
    ws = [ChannelWriter(n, store.appender(1, i, n), transfer) for i, n in enumerate(names)]
    transfer.start()
    reader = ChannelReader(store.tail(1, list(enumerate(names))), [(0, names[0], 0, 0), (1, names[1], 0, 0),
                                                                    (2, names[2], 0, 1)])
    batch = pa.record_batch({"x": [1]})
    ws[0].write(encode_batch(3, batch))
    ws[0].advance(10)
    ws[1].advance(20)
    ws[2].write(encode_batch(4, batch))
    ws[2].advance(7)
    ev = _drain(reader, lambda ev: any(e[0] == FRONTIER and [list(f) for f in e[2]] == [[10], [7]] for e in ev))
    assert sorted((e[1], e[3]) for e in ev if e[0] == DATA) == [(3, 0), (4, 1)]
    assert list(reader.frontier) == [7] and [list(f) for f in reader.input_frontiers()] == [[10], [7]]
    # alignment: input 0's channels deliver barrier 1, then more data; input 1's barrier comes later
    assert reader.align_seconds == 0
    for w in ws[:2]:
        w.barrier(1)
    ws[0].write(encode_batch(12, batch))
    time.sleep(0.2)
    early = reader.poll() + reader.poll()
    assert not any(e[0] in (DATA, BARRIER) for e in early)
    time.sleep(0.1)                         # aligning: input 0 delivered barrier 1 at the polls above
    ws[2].write(encode_batch(8, batch))
    ws[2].barrier(1)
    rest = _drain(reader, lambda ev: any(e[0] == DATA and e[1] == 12 for e in ev))
    order = [(e[0], e[1]) for e in rest if e[0] != FRONTIER]
    assert order == [(DATA, 8), (BARRIER, 1), (DATA, 12)]
    assert reader.align_seconds >= 0.1      # from input 0's barrier (seen at the polls) to input 1's
    for w in ws:
        w.advance(FINISHED_TS)
    _drain(reader, lambda ev: reader.frontier.is_empty())
    assert [list(f) for f in reader.input_frontiers()] == [[], []]
    transfer.drain(5)
    reader.close()
    store.close()


def test_a_join_output_waits_for_the_slower_input(tmp_path):
    """The input frontier of a join is the meet of its inputs': while the clicks' source sits idle at time 3
    (no data, no progress), no window past it is emitted, however far the impressions went."""
    marks: list = []

    def slow_clicks(part: int, offset: int):
        for i in range(offset, 3):
            if i < 2:
                yield i + 2, [{"ad": 1, "click": f"c{i}"}]
            else:
                deadline = time.monotonic() + 0.5
                while time.monotonic() < deadline:
                    yield None
                    time.sleep(0.01)
                marks.append(time.monotonic())
                yield Advance(100)

    job = Job("meet")
    imps = job.from_generator(jp.impressions(200, per_time=1), parts=1, name="imps")
    cl = job.from_generator(slow_clicks, parts=1, name="clicks")
    out: list = []
    imps.key_by("ad").join(cl.key_by("ad"), how="left").window(2, schema=jp.WINDOW_OUT).sink(
        lambda t, tb: out.extend((time.monotonic(), t) for _ in range(tb.num_rows)), name="out")
    _run(tmp_path, job)
    assert marks and {t for _, t in out} >= {1, 3, 5, 199}
    assert all(t <= 3 for at, t in out if at < marks[0])    # nothing past the idle input's time before it moved


# -- state ---------------------------------------------------------------------------------------------


def test_buffered_rows_round_trip_and_damage_is_a_typed_error():
    rows = pa.table({"ad": [1, 2, None], "s": ["a", None, "c"], "l": [[1], [], None]})
    keys = [rows.column("ad").combine_chunks()]
    table = encode_rows(rows, pa.array([5, 6, 7], pa.int64()), keys, 16)
    assert table.column_names == ["group", "slot", "k0", "value"]
    times, ks, back = decode_rows(table, n_keys=1, operator="j", path="x")
    assert times.tolist() == [5, 6, 7] and ks[0].to_pylist() == [1, 2, None] and back.equals(rows)
    with pytest.raises(CheckpointCorruptError, match="columns"):
        decode_rows(table.drop_columns(["k0"]), n_keys=1, operator="j", path="x")
    with pytest.raises(CheckpointCorruptError, match="'slot'"):
        decode_rows(table.set_column(1, "slot", pa.array([1, None, 2], pa.int64())), n_keys=1, operator="j",
                    path="x")
    bad = table.set_column(3, pa.field("value", pa.string()), pa.array(["x", "y", "z"]))
    with pytest.raises(CheckpointCorruptError):
        decode_rows(bad, n_keys=1, operator="j", path="x")


@pytest.mark.spark
def test_window_join_gives_structured_streamings_result_set(tmp_path, runtime_spark):
    """The same impressions and clicks through Structured Streaming's stream-stream inner join (watermarks,
    equal key and equal 5-second event-time window) and through the runtime's windowed inner join (time =
    seconds, window 5): the same set of (impression, click, window) rows."""
    import pyarrow.parquet as pq

    imps, cl = jp.rows_of(jp.impressions(80), 2), jp.rows_of(jp.clicks(80), 3)
    for name, rows in (("imps", imps), ("clicks", cl)):
        (tmp_path / name).mkdir()
        table = pa.Table.from_pylist([{**r, "ts": t * 1_000_000} for t, r in rows])
        table = table.set_column(table.schema.get_field_index("ts"), "ts", table.column("ts").cast(pa.timestamp("us", tz="UTC")))
        pq.write_table(table, str(tmp_path / name / "part-0.parquet"))
    spark = runtime_spark
    from pyspark.sql.functions import expr

    def side(name: str, prefix: str):
        df = spark.read.parquet(str(tmp_path / name))
        stream = spark.readStream.schema(df.schema).parquet(str(tmp_path / name))
        cols = [f"{c} as {prefix}{c}" for c in df.columns]
        return (stream.selectExpr(*cols).withWatermark(f"{prefix}ts", "10 seconds")
                .withColumn(f"{prefix}win", expr(f"window({prefix}ts, '5 seconds')")))

    joined = side("imps", "l_").join(side("clicks", "r_"), expr("l_ad = r_ad AND l_win = r_win")).selectExpr(
        "l_imp as imp", "r_click as click", "unix_seconds(l_win.start) as window_start")
    q = (joined.writeStream.format("memory").queryName("ss_join").outputMode("append")
         .option("checkpointLocation", str(tmp_path / "ss_ck")).trigger(availableNow=True).start())
    q.awaitTermination(240)
    ss = {(r["imp"], r["click"], r["window_start"]) for r in spark.sql("select * from ss_join").collect()}

    job = Job("ssjoin")
    a = job.from_generator(jp.impressions(80), parts=2, name="imps")
    b = job.from_generator(jp.clicks(80), parts=3, parallelism=1, name="clicks")
    out: list = []
    _collect(a.key_by("ad").join(b.key_by("ad")).window(5, parallelism=2), out)
    _run(tmp_path, job)
    ours = {(r["imp"], r["click"], r["window_start"]) for _t, r in out}
    assert len(ours) == len(out) and len(ss) > 100
    assert ours == ss
