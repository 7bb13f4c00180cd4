"""Kafka log vs raw confluent-kafka on the same broker, in the same rounds; and handoff latency.

    tools/kafka-broker start && python tools/bench/bench_kafka.py --bootstrap 127.0.0.1:19092 [--rounds 5]
    python tools/bench/bench_kafka.py --quick --bootstrap HOST:PORT      # 100k records, the whole run < ~60 s

Throughput: N records of 100 B (one ``binary`` column of random bytes) captured into a one-part Kafka
stream (``Capture.send`` of ``--batch`` records at time t, then ``advance_to(t + 1)``) and replayed
(``Replayer`` over the part, counting rows). Format 2.0 writes one Kafka record per event, so a batch of 1000
rows is one record (plus one Progress record per ``advance_to``). Every case creates its own topic (same
replication factor: the broker's default) inside its timing. eventlog's cases open their log and writer inside
their timing too (creating the stream, fencing); the raw producers are made ready before it (``raw_producer``:
an idempotent producer's first ~0.5 s waiting for its producer id is not timed), so the baselines are as
strong as they can be. Baselines: the same
N values of 100 B as N records of a raw confluent-kafka producer (idempotent, ``acks=all``, ``linger.ms=5``):

* ``raw produce, txn per batch``: a transactional producer committing every ``--batch`` records — the same
  durability, atomicity and fencing as eventlog's default ``advance_to`` (which commits the part's transaction
  and waits for it). **Headline 1**: eventlog capture ÷ this, target ≥ 0.8;
* ``raw produce, ack per batch``: an idempotent producer flushed after every ``--batch`` records — acknowledged
  as often as ``advance_to`` is called, without transactions (no atomic visibility, no fencing): shown beside
  headline 1, to say what the transactions cost;
* ``raw produce``: pipelined, flushed once at the end (no durability promise until then). **Headline 2**:
  eventlog capture with ``sync="none"`` (the transaction committed at most every 100 ms and at close:
  ``connectors/kafka/writer.py``, "Pipelining") ÷ this, target ≥ 0.8;
* ``raw produce, txn every 100 ms``: a transactional producer committing at most every 100 ms and at the end —
  what ``sync="none"`` promises, for comparison;

and ``raw consume`` (``assign()``, read_committed, until partition EOF) for replay (**headline 3**, eventlog
replay ÷ raw consume, target ≥ 0.8). Each round runs every case once; within a pair, which side runs first
alternates from round to round. Ratios are the median of the per-round ratios (``_common.Samples.ratio``),
with best and spread, and the load average before and after.

Latency: an epoch of 10 records every ``--latency-interval`` seconds; from the moment ``advance_to`` is
called in job A (a thread) to the moment ``completed()`` yields that epoch in job B (another thread,
following the log): p50 / p99 / max.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import uuid
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
from _common import ROUNDS, Load, Samples, fmt_count_rate, fmt_mb_rate, format_table, headline, verdict  # noqa: E402
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from capture import Capture  # noqa: E402
from eventlog import Messages, open_log  # noqa: E402
from replay import Replayer  # noqa: E402

SCHEMA = pa.schema([("payload", pa.binary())])


def make_batches(n: int, size: int, batch: int) -> list[pa.RecordBatch]:
    rng = np.random.default_rng(7)
    data = rng.integers(0, 256, n * size, dtype=np.uint8).tobytes()
    offsets = pa.array(np.arange(0, (n + 1) * size, size, dtype=np.int32))
    arr = pa.BinaryArray.from_buffers(pa.binary(), n, [None, offsets.buffers()[1], pa.py_buffer(data)])
    return [pa.record_batch([arr.slice(i, batch)], schema=SCHEMA) for i in range(0, n, batch)]


def ours_produce(bootstrap: str, batches: list[pa.RecordBatch], sync: str = "fsync") -> str:
    uri = f"kafka://{bootstrap}/bench{uuid.uuid4().hex[:8]}"
    with Capture(open_log(uri, sync=sync), "b", 0, 1, schema=SCHEMA) as cap:
        for t, b in enumerate(batches):
            cap.send(t, b)
            cap.advance_to(t + 1)
    return uri


def ours_consume(uri: str) -> int:
    r = Replayer(open_log(uri), "b", 0, 1)
    return sum(ev.records.num_rows for ev in r if isinstance(ev, Messages))


def raw_producer(bootstrap: str, mode: str) -> Producer:
    """A raw producer for ``raw_produce`` in ``mode``, ready to send (untimed, so the baseline is the strongest
    it can be: eventlog's cases pay their opening inside their timing). Ready means it holds its producer id:
    an idempotent producer waits ~0.5 s for it after it is made (librdkafka asks before a connection is up and
    retries after 500 ms), acknowledged here with one record to a scratch topic; a transactional one
    connects (a metadata request), then ``init_transactions``."""
    conf = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5}
    if mode.startswith("txn"):
        p = Producer({**conf, "transactional.id": f"bench-{uuid.uuid4().hex}"})
        p.list_topics(timeout=10)
        p.init_transactions(30)
        return p
    p = Producer(conf)
    p.produce(_scratch_topic(bootstrap), value=b"", partition=0)
    assert p.flush(30) == 0
    return p


_SCRATCH: dict[str, str] = {}


def _scratch_topic(bootstrap: str) -> str:
    if bootstrap not in _SCRATCH:
        topic = f"rawwarm{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the creation is answered
        admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=-1)])[topic].result()
        _SCRATCH[bootstrap] = topic
    return _SCRATCH[bootstrap]


def raw_produce(bootstrap: str, p: Producer, values: list[bytes], batch: int, mode: str, interval: float = 0.1) -> str:
    """Create a topic and produce ``values`` to it with ``p`` (``raw_producer(bootstrap, mode)``). ``mode``:
    ``pipelined`` (flush at the end), ``acked`` (flush every ``batch`` values), ``txn`` (a transaction committed
    every ``batch`` values) or ``txn-interval`` (a transaction committed at the first batch boundary at least
    ``interval`` s after it began, and at the end)."""
    topic = f"raw{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=-1)])[topic].result()
    txn = mode.startswith("txn")
    began = None
    for start in range(0, len(values), batch):
        if txn and began is None:
            p.begin_transaction()
            began = time.monotonic()
        for v in values[start:start + batch]:
            while True:
                try:
                    p.produce(topic, value=v, partition=0)
                    break
                except BufferError:
                    p.poll(0.01)
        p.poll(0)
        if mode == "txn" or (mode == "txn-interval" and time.monotonic() - began >= interval):
            p.commit_transaction(30)
            began = None
        elif mode == "acked":
            assert p.flush(30) == 0
    if began is not None:
        p.commit_transaction(30)
    assert p.flush(60) == 0
    return topic


def raw_consume(bootstrap: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.partition.eof": True,
                  "enable.auto.commit": False, "isolation.level": "read_committed"})
    c.assign([TopicPartition(topic, 0, 0)])
    n = 0
    while True:
        msgs = c.consume(10000, timeout=0.05)
        if any(m.error() and m.error().code() == KafkaError._PARTITION_EOF for m in msgs):
            n += sum(1 for m in msgs if not m.error())
            break
        n += len(msgs)
    c.close()
    return n


def latency(bootstrap: str, epochs: int, interval: float) -> list[float]:
    uri = f"kafka://{bootstrap}/lat{uuid.uuid4().hex[:8]}"
    schema = pa.schema([("x", pa.int64())])
    cap = Capture(open_log(uri), "l", 0, 1, schema=schema)
    started: dict[int, float] = {}
    done: dict[int, float] = {}

    def follower() -> None:
        r = Replayer(open_log(uri), "l", 0, 1, follow=True, poll_interval=0.001, timeout=30)
        for t, _ in r.completed():
            done[t] = time.perf_counter()

    th = threading.Thread(target=follower)
    th.start()
    time.sleep(1.0)  # let the follower's consumer settle
    for t in range(epochs):
        cap.send(t, [{"x": i} for i in range(10)])
        started[t] = time.perf_counter()
        cap.advance_to(t + 1)
        time.sleep(interval)
    cap.close()
    th.join(60)
    return [done[t] - started[t] for t in range(epochs) if t in done]


RAW = {"raw produce": "pipelined", "raw produce, ack per batch": "acked", "raw produce, txn per batch": "txn",
       "raw produce, txn every 100 ms": "txn-interval"}
"""The raw producer baselines (module doc) and their ``raw_produce`` modes."""


def in_order(rnd: int, *cases: Callable[[], Any]) -> list[Any]:
    """Run ``cases`` in the given order in even rounds, in reverse in odd ones; their results in the given order."""
    out: list[Any] = [None] * len(cases)
    for i in (range(len(cases)) if rnd % 2 == 0 else reversed(range(len(cases)))):
        out[i] = cases[i]()
    return out


def one_round(s: Samples, rnd: int, args: argparse.Namespace, batches: list[pa.RecordBatch], values: list[bytes]) -> None:
    """Every case once; the cases a headline compares run back to back, which first alternating by round."""
    def raw(name: str) -> Callable[[], str]:
        def run() -> str:
            p = raw_producer(args.bootstrap, RAW[name])
            return s.run(name, lambda: raw_produce(args.bootstrap, p, values, args.batch, RAW[name]))
        return run

    def ours(name: str, sync: str) -> Callable[[], str]:
        return lambda: s.run(name, lambda: ours_produce(args.bootstrap, batches, sync))

    _, uri, _ = in_order(rnd, raw("raw produce, txn per batch"), ours("eventlog capture", "fsync"),
                         raw("raw produce, ack per batch"))
    topic, uri_none, _ = in_order(rnd, raw("raw produce"), ours("eventlog capture, sync=none", "none"),
                                  raw("raw produce, txn every 100 ms"))
    n_raw, n_ours = in_order(rnd, lambda: s.run("raw consume", lambda: raw_consume(args.bootstrap, topic)),
                             lambda: s.run("eventlog replay", lambda: ours_consume(uri)))
    assert n_raw == args.records and n_ours == args.records, (n_raw, n_ours)
    assert ours_consume(uri_none) == args.records


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bootstrap", default=os.environ.get("EVENTLOG_KAFKA", "127.0.0.1:19092"))
    p.add_argument("--records", type=int, default=None, help="records per case (1,000,000; --quick: 100,000)")
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--batch", type=int, default=1000, help="records per Capture.send")
    p.add_argument("--rounds", "--reps", dest="rounds", type=int, default=ROUNDS,
                   help=f"interleaved rounds (default {ROUNDS})")
    p.add_argument("--quick", action="store_true", help="small sizes: the whole run in about a minute")
    p.add_argument("--latency-epochs", type=int, default=None, help="epochs of the latency run (300; --quick: 30)")
    p.add_argument("--latency-interval", type=float, default=0.01)
    args = p.parse_args()
    if args.records is None:
        args.records = 100_000 if args.quick else 1_000_000
    if args.latency_epochs is None:
        args.latency_epochs = 30 if args.quick else 300
    load = Load()

    batches = make_batches(args.records, args.size, args.batch)
    values = [v.as_py() for b in batches for v in b.column(0)]
    total_bytes = args.records * args.size
    ours_produce(args.bootstrap, batches[:2])  # warm-up (imports, first connections), not timed
    raw_produce(args.bootstrap, raw_producer(args.bootstrap, "txn"), values[:2 * args.batch], args.batch, "txn")
    s = Samples()
    for rnd in range(args.rounds):
        one_round(s, rnd, args, batches, values)

    pairs = [  # (case, baseline, headline name or None, target)
        ("eventlog capture", "raw produce, txn per batch", "Kafka capture / raw produce, same durability (txn per batch)",
         0.8),
        ("eventlog capture", "raw produce, ack per batch", None, None),
        ("eventlog capture, sync=none", "raw produce", "Kafka capture sync=none / raw produce pipelined", 0.8),
        ("eventlog capture, sync=none", "raw produce, txn every 100 ms", None, None),
        ("eventlog replay", "raw consume", "Kafka replay / raw consume", 0.8),
    ]
    rows = []
    for name in s.names():
        t = s.median(name)
        rows.append([name, fmt_count_rate(args.records, t), fmt_mb_rate(total_bytes, t), f"{t:.3f}", f"{s.best(name):.3f}",
                     f"{s.spread(name):.0%}"])
    ratio_rows = []
    for case, base, _, target in pairs:
        r = s.ratio(case, base)
        ratio_rows.append([f"{case} / {base}", f"{r.median:.2f}x", f"{r.best:.2f}x", f"{r.spread:.0%}",
                           verdict(r.median, target) if target else "info"])
    print(f"{args.records} records of {args.size} B, batches of {args.batch} ({args.records // args.batch} advance_to), "
          f"{args.rounds} interleaved rounds, broker {args.bootstrap}")
    print(format_table(["case", "records/s", "MB/s", "median s", "best s", "spread"], rows, markdown=True))
    print()
    print(format_table(["ratio (per-round, ours / raw speed)", "median", "best", "spread", "≥0.8×"], ratio_rows,
                       markdown=True))
    lat = sorted(latency(args.bootstrap, args.latency_epochs, args.latency_interval)) if args.latency_epochs else []
    if lat:
        q = np.quantile(np.array(lat) * 1000, [0.5, 0.99])
        print(f"\nhandoff latency advance_to → completed, {len(lat)} epochs every {args.latency_interval * 1000:.0f} ms: "
              f"p50 {q[0]:.1f} ms, p99 {q[1]:.1f} ms, max {lat[-1] * 1000:.1f} ms")
    print()
    for case, base, title, target in pairs:
        if title is not None:
            print(headline(title, s.ratio(case, base), target, load))


if __name__ == "__main__":
    main()
