"""Kafka log vs raw confluent-kafka on the same broker, in the same run; and handoff latency.

    tools/kafka-broker start && python tools/bench/bench_kafka.py --bootstrap 127.0.0.1:19092

Throughput: N records of 100 B (one ``binary`` column of random bytes) captured into a one-part Kafka
stream (``Capture.send`` of ``--batch`` records at time t, then ``advance_to(t + 1)``, which commits a Kafka
transaction and waits for it) and replayed (``Replayer`` over the part, counting rows). Format 2.0 writes one
Kafka record per event, so a batch of 1000 rows is one record. Baselines, on topics with the same replication
factor (the broker's default), the same N values of 100 B as N records of a raw confluent-kafka producer
(idempotent, ``acks=all``, ``linger.ms=5``):

* ``raw produce``: pipelined, flushed once at the end (no durability promise until then);
* ``raw produce, ack per batch``: flushed after every ``--batch`` records — acknowledged as often as
  ``advance_to`` is called;
* ``raw produce, txn per batch``: a transactional producer committing every ``--batch`` records — the same
  durability and atomicity ``advance_to`` gives (what eventlog does, minus eventlog);

``eventlog capture, sync=none`` pipelines (a commit at most every 100 ms, and at close) and is compared with
the pipelined raw producer;

and ``raw consume`` (``assign()``, read_committed, until partition EOF) for replay. Cases are interleaved round
by round; ratios are ours / raw of the **median** (best in brackets); the target is ≥ 0.8×.

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

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
from _common import Samples, fmt_count_rate, fmt_mb_rate, format_table, verdict  # noqa: E402
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


def raw_produce(bootstrap: str, values: list[bytes], batch: int, mode: str) -> str:
    """``mode``: ``pipelined`` (flush at the end), ``acked`` (flush every ``batch`` values) or ``txn`` (a
    transaction committed every ``batch`` values)."""
    topic = f"raw{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=-1)])[topic].result()
    conf = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5}
    if mode == "txn":
        conf["transactional.id"] = f"bench-{topic}"
    p = Producer(conf)
    if mode == "txn":
        p.init_transactions(30)
    for start in range(0, len(values), batch):
        if mode == "txn":
            p.begin_transaction()
        for v in values[start:start + batch]:
            while True:
                try:
                    p.produce(topic, value=v, partition=0)
                    break
                except BufferError:
                    p.poll(0.01)
        p.poll(0)
        if mode == "txn":
            p.commit_transaction(30)
        elif mode == "acked":
            assert p.flush(30) == 0
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bootstrap", default=os.environ.get("EVENTLOG_KAFKA", "127.0.0.1:19092"))
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--batch", type=int, default=1000, help="records per Capture.send")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--latency-epochs", type=int, default=300)
    p.add_argument("--latency-interval", type=float, default=0.01)
    args = p.parse_args()

    batches = make_batches(args.records, args.size, args.batch)
    values = [v.as_py() for b in batches for v in b.column(0)]
    total_bytes = args.records * args.size
    s = Samples()
    raws = {"raw produce": "pipelined", "raw produce, ack per batch": "acked", "raw produce, txn per batch": "txn"}
    for _ in range(args.reps):
        for name, mode in raws.items():
            topic = s.run(name, lambda mode=mode: raw_produce(args.bootstrap, values, args.batch, mode))
        n = s.run("raw consume", lambda: raw_consume(args.bootstrap, topic))
        assert n == args.records, n
        uri = s.run("eventlog capture", lambda: ours_produce(args.bootstrap, batches))
        n = s.run("eventlog replay", lambda: ours_consume(uri))
        assert n == args.records, n
        uri = s.run("eventlog capture, sync=none", lambda: ours_produce(args.bootstrap, batches, "none"))
        assert ours_consume(uri) == args.records
    rows = []

    def row(name: str, base: str | None) -> list[str]:
        t = s.median(name)
        ratio = s.median(base) / t if base else None
        best = s.best(base) / s.best(name) if base else None
        return [name, fmt_count_rate(args.records, t), fmt_mb_rate(total_bytes, t), f"{t:.2f}", f"{s.spread(name):.0%}",
                f"{ratio:.2f}x ({best:.2f}x)" if ratio else "", verdict(ratio, 0.8) if ratio else ""]

    for raw in raws:
        rows.append(row(raw, None))
    for raw in raws:
        rows.append(row("eventlog capture", raw))
        rows[-1][0] = f"eventlog capture vs {raw}"
    rows.append(row("eventlog capture, sync=none", "raw produce"))
    rows[-1][0] = "eventlog capture, sync=none vs raw produce"
    rows.append(row("raw consume", None))
    rows.append(row("eventlog replay", "raw consume"))
    print(f"{args.records} records of {args.size} B, batches of {args.batch}, {args.reps} interleaved rounds, "
          f"medians (best), broker {args.bootstrap}, load before {os.getloadavg()[0]:.1f}")
    print(format_table(["case", "records/s", "MB/s", "median s", "spread", "vs raw", "≥0.8×"], rows, markdown=True))
    lat = sorted(latency(args.bootstrap, args.latency_epochs, args.latency_interval))
    if lat:
        q = np.quantile(np.array(lat) * 1000, [0.5, 0.99])
        print(f"\nhandoff latency advance_to → completed, {len(lat)} epochs every {args.latency_interval * 1000:.0f} ms: "
              f"p50 {q[0]:.1f} ms, p99 {q[1]:.1f} ms, max {lat[-1] * 1000:.1f} ms")
    print(f"load after {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
