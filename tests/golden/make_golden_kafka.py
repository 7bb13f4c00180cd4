"""Writes golden Kafka logs: the golden streams of ``make_golden_logs.py`` captured on a Kafka broker by the code
on ``sys.path``, then every committed record dumped to JSON (run once per format version; the files are committed
and must never change).

    python tests/golden/make_golden_kafka.py --bootstrap 127.0.0.1:19092 --out tests/golden/kafka/1.2 [--restart]

Each file ``<stream>.json`` holds the stream's records in partition order: partition, key, value and headers
(hex), not Kafka offsets (transaction markers take offsets too). ``tests/test_golden_kafka.py`` produces them into
a fresh topic as they are and reads them with today's code. ``--restart`` adds a stream whose part 0 was reopened
by a second writer incarnation (format 1.2 writer epochs) after the first left a committed message at a time it
had not completed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(here)))
sys.path.insert(1, here)

from confluent_kafka import Consumer, TopicPartition  # noqa: E402
from make_golden_logs import CREATED, SCHEMA, rows, write_golden  # noqa: E402

from capture import Capture  # noqa: E402
from eventlog import StreamHeader, open_log  # noqa: E402


def capture(uri: str, restart: bool) -> list[str]:
    log = open_log(uri)
    names = []
    for enc in ("arrow", "avro"):
        names += write_golden(log, enc)
        if restart:
            again = f"golden-{enc}-restart"
            log.create_stream(StreamHeader(again, 1, SCHEMA, "int64", enc, created=CREATED))
            first = Capture(log, again, 0, 1)
            first.send(0, rows(1))
            first.send(1, rows(2))
            first.advance_to(1)  # commits time 1's message without completing time 1: it is void once reopened
            first.abort()
            with Capture(log, again, 0, 1) as cap:  # the next incarnation re-sends time 1 with other records
                cap.send(1, rows(3, 4))
                cap.advance_to(3)
            names.append(again)
    log.close()
    return names


def dump(bootstrap: str, topic: str) -> list[dict]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"golden-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    records = []
    for p in sorted(parts):
        consumer.assign([TopicPartition(topic, p, 0)])
        while True:
            m = consumer.poll(10)
            if m is None:
                raise SystemExit(f"no answer for {topic}[{p}]")
            if m.error():
                if m.error().code() == -191:  # _PARTITION_EOF
                    break
                raise SystemExit(f"{topic}[{p}]: {m.error()}")
            records.append({"partition": p,
                            "key": None if m.key() is None else m.key().hex(),
                            "value": m.value().hex(),
                            "headers": [[k, None if v is None else v.hex()] for k, v in (m.headers() or [])]})
    consumer.close()
    return records


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--restart", action="store_true")
    args = ap.parse_args()
    prefix = f"golden{uuid.uuid4().hex[:8]}"
    names = capture(f"kafka://{args.bootstrap}/{prefix}", args.restart)
    os.makedirs(args.out, exist_ok=True)
    for name in names:
        with open(os.path.join(args.out, f"{name}.json"), "w") as f:
            json.dump(dump(args.bootstrap, f"{prefix}.{name}"), f, indent=1)
            f.write("\n")
        print("wrote", os.path.join(args.out, f"{name}.json"))


if __name__ == "__main__":
    main()
