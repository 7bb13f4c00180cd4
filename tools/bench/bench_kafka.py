"""Kafka log vs raw confluent-kafka on the same broker, in the same rounds; and handoff latency.

    tools/kafka-broker start && python tools/bench/bench_kafka.py --bootstrap 127.0.0.1:19092 [--rounds 5]
    python tools/bench/bench_kafka.py --quick --bootstrap HOST:PORT      # 100k records, the whole run < ~90 s

Throughput: N records of 100 B (one ``binary`` column of random bytes) captured into a one-part Kafka
stream (``Capture.send`` of ``--batch`` records at time t, then ``advance_to(t + 1)``) and replayed
(``Replayer`` over the part, counting rows). Format 2.0 writes one Kafka record per event, so a batch of 1000
rows is one record (plus one Progress record per ``advance_to``). Every case creates its own topic (same
replication factor: the broker's default) inside its timing. eventlog's cases open their log and writer inside
their timing too (creating the stream, fencing); the raw producers are made ready before it (``raw_producer``:
an idempotent producer's first ~0.5 s waiting for its producer id is not timed), so the baselines are as
strong as they can be. Every raw producer has eventlog's producer settings (idempotent, ``acks=all``,
``linger.ms=5``; ``connectors/kafka/writer.py``), every raw consumer its reader's consumer settings
(``connectors.kafka.reader.READ_SETTINGS``, ``fetch.wait.max.ms=20``).

**The baselines of the headlines: the raw client shipping the same records** ("batched"). A raw producer
writes each ``--batch``-row batch as ONE record, the batch's Arrow IPC stream written by pyarrow
(``pa.ipc.new_stream`` into a ``BufferOutputStream``, the buffer handed to ``produce``) with the stream's IPC
compression (zstd, eventlog's default: the same bytes on the wire as eventlog's value, minus its metadata), and a
raw consumer reads them back with ``pyarrow.ipc.open_stream`` per record:

* ``raw batched produce, txn per batch``: a transactional producer committing after every batch — the
  durability, atomicity and fencing of eventlog's default ``advance_to``. **Headline 1**: eventlog capture ÷
  this, target ≥ 0.8;
* ``raw batched produce``: pipelined, flushed once at the end (no durability promise until then).
  **Headline 2**: eventlog capture with ``sync="none"`` (the transaction committed at most every 100 ms and at
  close: ``connectors/kafka/writer.py``, "Pipelining") ÷ this, target ≥ 0.8;
* ``raw batched produce, txn every 100 ms``: committing at the first batch boundary at least 100 ms after the
  transaction began, and at the end — exactly what ``sync="none"`` promises (information);
* ``raw batched produce, uncompressed``: pipelined, IPC without compression (pyarrow's default; the bytes of a
  stream created with ``compression="none"``): what a user whose payload does not compress (as this random
  payload) would ship (information);
* ``raw batched consume`` (``assign()``, read_committed, until partition EOF, ``open_stream`` per record) of
  the pipelined topic. **Headline 3**: eventlog replay ÷ this, target ≥ 0.8; and ``raw batched consume,
  uncompressed`` of the uncompressed topic (information).

**Per-record baselines (information).** The same N values of 100 B as N records of a raw producer — ``raw
produce, txn per batch`` (a transaction committed every ``--batch`` records), ``raw produce, ack per batch``
(flushed every ``--batch`` records, no transactions), ``raw produce`` (pipelined), ``raw produce, txn every 100
ms`` — and ``raw consume`` (one Python object per record): what a client that does not batch its rows pays.

Each round runs every case once; within a group, which side runs first alternates from round to round.
Ratios are the median of the per-round ratios (``_common.Samples.ratio``), with best and spread, and the
load average before and after.

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
from typing import Any, Callable, Iterable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
from _common import ROUNDS, Load, Samples, fmt_count_rate, fmt_mb_rate, format_table, headline, verdict  # noqa: E402
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from capture import Capture  # noqa: E402
from connectors.kafka.reader import READ_SETTINGS  # noqa: E402
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


def _new_topic(bootstrap: str) -> str:
    """A new one-partition topic (the broker's default replication factor), created and answered."""
    topic = f"raw{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=-1)])[topic].result()
    return topic


def _produce(p: Producer, topic: str, value: Any) -> None:
    """``p.produce`` of one value, serving delivery reports while the producer's queue is full."""
    while True:
        try:
            p.produce(topic, value=value, partition=0)
            return
        except BufferError:
            p.poll(0.01)


def _produce_batches(p: Producer, batches: Iterable[Any], send: Callable[[Any], None], mode: str,
                     interval: float) -> None:
    """``send(b)`` for each of ``batches``, committing or flushing as ``mode`` says (``raw_produce``'s modes) after
    each, and flushing everything at the end."""
    txn = mode.startswith("txn")
    began = None
    for b in batches:
        if txn and began is None:
            p.begin_transaction()
            began = time.monotonic()
        send(b)
        p.poll(0)
        if mode == "txn" or (mode == "txn-interval" and time.monotonic() - began >= interval):
            p.commit_transaction(30)
            began = None
        elif mode == "acked":
            assert p.flush(30) == 0
    if began is not None:
        p.commit_transaction(30)
    assert p.flush(60) == 0


def raw_produce(bootstrap: str, p: Producer, values: list[bytes], batch: int, mode: str, interval: float = 0.1) -> str:
    """Create a topic and produce ``values`` to it with ``p`` (``raw_producer(bootstrap, mode)``), one record
    each. ``mode``: ``pipelined`` (flush at the end), ``acked`` (flush every ``batch`` values), ``txn`` (a
    transaction committed every ``batch`` values) or ``txn-interval`` (a transaction committed at the first
    batch boundary at least ``interval`` s after it began, and at the end)."""
    topic = _new_topic(bootstrap)

    def send(group: list[bytes]) -> None:
        for v in group:
            _produce(p, topic, v)

    _produce_batches(p, (values[i:i + batch] for i in range(0, len(values), batch)), send, mode, interval)
    return topic


def raw_batched_produce(bootstrap: str, p: Producer, batches: list[pa.RecordBatch], mode: str,
                        options: pa.ipc.IpcWriteOptions, interval: float = 0.1) -> str:
    """Create a topic and produce each of ``batches`` to it as ONE record: the batch's Arrow IPC stream, written
    by pyarrow with ``options`` into a buffer handed to the producer as it is. ``mode`` as ``raw_produce``'s,
    per batch."""
    topic = _new_topic(bootstrap)

    def send(b: pa.RecordBatch) -> None:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, b.schema, options=options) as w:
            w.write_batch(b)
        _produce(p, topic, sink.getvalue())

    _produce_batches(p, batches, send, mode, interval)
    return topic


def _raw_consumer(bootstrap: str, topic: str) -> Consumer:
    """A consumer with the settings of eventlog's part readers, assigned ``topic``'s partition 0 from its start."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", **READ_SETTINGS, "fetch.wait.max.ms": 20,
                  "reconnect.backoff.ms": 10})
    c.assign([TopicPartition(topic, 0, 0)])
    return c


def raw_consume(bootstrap: str, topic: str) -> int:
    """Read ``topic`` to its end, one Python message object per record; the number of records."""
    c = _raw_consumer(bootstrap, topic)
    n = 0
    while True:
        msgs = c.consume(10000, timeout=0.05)
        if any(m.error() and m.error().code() == KafkaError._PARTITION_EOF for m in msgs):
            n += sum(1 for m in msgs if not m.error())
            break
        n += len(msgs)
    c.close()
    return n


def raw_batched_consume(bootstrap: str, topic: str) -> int:
    """Read ``topic`` to its end, each record's value opened with ``pyarrow.ipc.open_stream``; the number of rows."""
    c = _raw_consumer(bootstrap, topic)
    rows, done = 0, False
    while not done:
        for m in c.consume(10000, timeout=0.05):
            err = m.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(err.str())
                done = True
                continue
            for b in pa.ipc.open_stream(m.value()):
                rows += b.num_rows
    c.close()
    return rows


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
"""The per-record raw producer baselines (module doc) and their ``raw_produce`` modes."""

ZSTD = pa.ipc.IpcWriteOptions(compression="zstd")
PLAIN = pa.ipc.IpcWriteOptions()
BATCHED = {"raw batched produce": ("pipelined", ZSTD), "raw batched produce, txn per batch": ("txn", ZSTD),
           "raw batched produce, txn every 100 ms": ("txn-interval", ZSTD),
           "raw batched produce, uncompressed": ("pipelined", PLAIN)}
"""The batched raw producer baselines (module doc): their ``raw_batched_produce`` modes and IPC write options."""


def broker_count(bootstrap: str) -> int:
    """How many brokers the cluster at ``bootstrap`` has (its metadata)."""
    return len(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).brokers)


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

    def batched(name: str) -> Callable[[], str]:
        mode, options = BATCHED[name]

        def run() -> str:
            p = raw_producer(args.bootstrap, mode)
            return s.run(name, lambda: raw_batched_produce(args.bootstrap, p, batches, mode, options))
        return run

    def ours(name: str, sync: str) -> Callable[[], str]:
        return lambda: s.run(name, lambda: ours_produce(args.bootstrap, batches, sync))

    def consume(name: str, fn: Callable[[str, str], int], topic: str) -> Callable[[], int]:
        return lambda: s.run(name, lambda: fn(args.bootstrap, topic))

    skip: Callable[[], None] = lambda: None  # noqa: E731 - a per-record case left out (--no-per-record)

    def info(name: str) -> Callable[[], str | None]:
        return raw(name) if args.per_record else skip

    uri = in_order(rnd, batched("raw batched produce, txn per batch"), ours("eventlog capture", "fsync"),
                   info("raw produce, txn per batch"), info("raw produce, ack per batch"))[1]
    topic, uri_none, plain, _ = in_order(rnd, batched("raw batched produce"), ours("eventlog capture, sync=none", "none"),
                                         batched("raw batched produce, uncompressed"),
                                         batched("raw batched produce, txn every 100 ms"))
    raw_topic = in_order(rnd, info("raw produce"), info("raw produce, txn every 100 ms"))[0]
    rows = in_order(rnd, consume("raw batched consume", raw_batched_consume, topic),
                    lambda: s.run("eventlog replay", lambda: ours_consume(uri)),
                    consume("raw batched consume, uncompressed", raw_batched_consume, plain))
    if raw_topic is not None:
        rows.append(s.run("raw consume", lambda: raw_consume(args.bootstrap, raw_topic)))
    assert rows == [args.records] * len(rows), rows
    assert ours_consume(uri_none) == args.records


PAIRS: list[tuple[str, str, str | None]] = [  # (case, baseline, headline name or None: information)
    ("eventlog capture", "raw batched produce, txn per batch",
     "Kafka capture / raw batched produce, same durability (txn per batch)"),
    ("eventlog capture, sync=none", "raw batched produce", "Kafka capture sync=none / raw batched produce pipelined"),
    ("eventlog replay", "raw batched consume", "Kafka replay / raw batched consume (open_stream per record)"),
    ("eventlog capture, sync=none", "raw batched produce, txn every 100 ms", None),
    ("eventlog capture, sync=none", "raw batched produce, uncompressed", None),
    ("eventlog replay", "raw batched consume, uncompressed", None),
    ("eventlog capture", "raw produce, txn per batch", None),
    ("eventlog capture", "raw produce, ack per batch", None),
    ("eventlog capture, sync=none", "raw produce", None),
    ("eventlog capture, sync=none", "raw produce, txn every 100 ms", None),
    ("eventlog replay", "raw consume", None),
]
"""The ratios printed: the headlines (target ≥ 0.8×) against the batched baselines, then information rows."""
TARGET = 0.8


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
    p.add_argument("--no-per-record", dest="per_record", action="store_false",
                   help="skip the per-record raw baselines (information rows)")
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
    raw_batched_consume(args.bootstrap, raw_batched_produce(args.bootstrap, raw_producer(args.bootstrap, "txn"),
                                                            batches[:2], "txn", ZSTD))
    s = Samples()
    for rnd in range(args.rounds):
        one_round(s, rnd, args, batches, values)

    rows = []
    for name in s.names():
        t = s.median(name)
        rows.append([name, fmt_count_rate(args.records, t), fmt_mb_rate(total_bytes, t), f"{t:.3f}", f"{s.best(name):.3f}",
                     f"{s.spread(name):.0%}"])
    ratio_rows = []
    for case, base, title in PAIRS:
        if s.count(base):
            r = s.ratio(case, base)
            ratio_rows.append([f"{case} / {base}", f"{r.median:.2f}x", f"{r.best:.2f}x", f"{r.spread:.0%}",
                               verdict(r.median, TARGET) if title else "info"])
    brokers = broker_count(args.bootstrap)
    print(f"{args.records} records of {args.size} B, batches of {args.batch} ({args.records // args.batch} advance_to), "
          f"{args.rounds} interleaved rounds, {brokers} broker(s) {args.bootstrap}")
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
    for case, base, title in PAIRS:
        if title is not None:
            print(headline(f"{title}, {brokers} broker{'s' if brokers > 1 else ''}", s.ratio(case, base), TARGET, load))


if __name__ == "__main__":
    main()
