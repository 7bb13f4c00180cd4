#!/usr/bin/env python3
"""Fuzz driver for everything eventlog reads: event bodies of both encodings, whole file-log parts
(segments, index files, stream headers; read and reopened by a writer), stream headers alone and Kafka
record values.

    python tools/fuzz_log.py --count 1000000 --seed 1 --jobs 2       # the long run of docs/reliability.md
    python tools/fuzz_log.py --count 2000 --seed 7 --target files    # one target
    python tools/fuzz_log.py --seed 1 --show 12345                   # what input #12345 is and what it did

Every input comes from ``(seed, index)`` alone, so any finding reproduces with ``--show``. An input may
end in exactly two ways: the reader returns the original events (or, where FORMAT.md allows it, fewer
of them: a torn tail), or it raises an ``EventLogError``. Anything else is a finding:

* ``untyped``   an exception that is not an EventLogError;
* ``wrong``     an event returned that differs from the one written at that sequence id;
* ``hidden``    fewer events returned than written, without an error, where nothing was torn;
* ``lost``      a writer reopening the damaged part deleted events that a reader had returned;
* ``invalid``   a decoded body whose batch fails full Arrow validation or has another schema;
* ``memory``    MemoryError under the worker's address-space limit;
* ``crash`` / ``hang``  the worker process died, or made no progress for ``--hang-seconds``.

Workers run in child processes with an address-space limit; the parent restarts a crashed or hung
worker after the input that killed it, so one run reports every finding.
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing as mp
import os
import random
import resource
import shutil
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TARGETS = ("body", "files", "header", "kafka")
WEIGHTS = {"body": 45, "files": 25, "header": 15, "kafka": 15}
FINDINGS = ("untyped", "wrong", "hidden", "lost", "invalid", "memory", "crash", "hang")
_INTERESTING = [0, 1, 2, 3, 7, 8, 15, 16, 31, 32, 63, 64, 127, 128, 255, 256, 0x7FFF, 0xFFFF, 0x10000,
                0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 1 << 40, (1 << 63) - 1, (1 << 64) - 1]


# ---------------------------------------------------------------------------------------------- corpus


@dataclass
class _Stream:
    """A small stream written once per worker: its header, events and files."""

    name: str
    encoding: str
    header: Any
    entries: list[Any]  # Entry(seq, event) of part 0, in order
    files: dict[str, bytes]  # path relative to the log root -> bytes
    bodies: list[tuple[int, Any, bytes]] = field(default_factory=list)  # (seq, event, standalone body)
    records: list[tuple[bytes, list]] = field(default_factory=list)  # Kafka records: (value, headers), 1.x and 2.0


def _schemas() -> list[tuple[str, Any, str]]:
    import pyarrow as pa

    return [
        ("ints", pa.schema([("k", pa.int64()), ("v", pa.int32())]), "int64"),
        ("strs", pa.schema([("word", pa.string()), ("n", pa.int64(), True), ("b", pa.binary())]), "int64"),
        ("nested", pa.schema([("xs", pa.list_(pa.int64())), ("s", pa.struct([("a", pa.float64()),
                                                                              ("t", pa.string())]))]),
         "product:2"),
        ("flags", pa.schema([("f", pa.bool_()), ("z", pa.null())]), "int64"),
        ("dec", pa.schema([("d", pa.decimal128(12, 3)), ("ts", pa.timestamp("us", tz="UTC"))]), "int64"),
    ]


def _rows(rng: random.Random, name: str, n: int) -> list[dict]:
    import datetime as dt
    import decimal

    out = []
    for i in range(n):
        if name == "ints":
            out.append({"k": rng.getrandbits(40), "v": rng.randint(-5, 5)})
        elif name == "strs":
            out.append({"word": rng.choice(["a", "bb", "ccc", "", "δ" * rng.randint(0, 9)]),
                        "n": rng.choice([None, i]), "b": rng.randbytes(rng.randint(0, 12))})
        elif name == "nested":
            out.append({"xs": [rng.randint(0, 9) for _ in range(rng.randint(0, 4))],
                        "s": {"a": rng.random(), "t": "x" * rng.randint(0, 5)}})
        elif name == "flags":
            out.append({"f": rng.random() < 0.5, "z": None})
        else:
            out.append({"d": decimal.Decimal(rng.randint(-10**9, 10**9)).scaleb(-3),
                        "ts": dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=i)})
    return out


def build_corpus(seed: int, root: str) -> list[_Stream]:
    """Streams of every schema × encoding, captured into a file log under ``root`` (2-3 segments a part)."""
    import pyarrow as pa

    from capture import Capture
    from connectors.files import FileLog
    from connectors.kafka import records as krec
    from eventlog.encoding import codec_for

    rng = random.Random(seed)
    out: list[_Stream] = []
    for encoding in ("arrow", "avro"):
        for name, schema, time_type in _schemas():
            if encoding == "avro" and name == "flags":
                schema = pa.schema([("f", pa.bool_())])  # Avro stores null columns, but keep one simple
            stream = f"{name}-{encoding}"
            log = FileLog(root, sync="none", segment_bytes=600)
            try:
                cap = Capture(log, stream, worker=0, peers=1, schema=schema, encoding=encoding, time=time_type)
            except Exception:  # noqa: BLE001 - a schema an encoding refuses is simply not in the corpus
                continue
            mk = (lambda t: (t, t + 1)) if time_type.startswith("product") else (lambda t: t)
            for t in range(4):
                for _ in range(rng.randint(1, 2)):
                    cap.send(mk(t), pa.Table.from_pylist(_rows(rng, name, rng.randint(1, 6)), schema=schema))
                cap.advance_to(mk(t + 1))
            cap.close()
            entries = list(log.reader(stream, 0))
            files = {}
            base = Path(root)
            for p in sorted((base / stream).rglob("*")):
                if p.is_file() and p.name != ".lock":
                    files[str(p.relative_to(base))] = p.read_bytes()
            header = log.header(stream)
            codec = codec_for(header)
            enc = codec.standalone_encoder()
            bodies = [(e.seq, e.event, bytes(enc.encode(e.seq, e.event))) for e in entries]
            records = []
            for i in range(0, len(bodies), 3):  # format 1.x: bundles of up to three events
                chunk = bodies[i:i + 3]
                kinds = [1 if type(ev).__name__ == "Messages" else 2 for _, ev, _ in chunk]
                kinds = [_bundle_kind(k) for k in kinds]
                records.append((krec.events_record(chunk[0][0], kinds, [b for _, _, b in chunk]), []))
            writer = krec.writer_headers(krec.WriterMark(1, "fuzz"))
            renc = codec.record_encoder()
            for e in entries:  # format 2.0: one record per event
                records.append((renc.encode(e.seq, e.event), krec.event_headers(e.seq, e.event, writer)))
            out.append(_Stream(stream, encoding, header, entries, files, bodies, records))
            log.close()
    return out


def _bundle_kind(k: int) -> int:
    from eventlog import bundle

    return bundle.MSG_EVENT_MESSAGES if k == 1 else bundle.MSG_EVENT_PROGRESS


# --------------------------------------------------------------------------------------------- mutation


def _flip(rng: random.Random, buf: bytearray, pool: list[bytes]) -> str:
    i = rng.randrange(len(buf))
    bit = rng.randrange(8)
    buf[i] ^= 1 << bit
    return f"flip@{i}.{bit}"


def _byte(rng: random.Random, buf: bytearray, pool: list[bytes]) -> str:
    i = rng.randrange(len(buf))
    buf[i] = rng.choice([0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)])
    return f"byte@{i}"


def _int(rng: random.Random, buf: bytearray, pool: list[bytes]) -> str:
    width = rng.choice([1, 2, 4, 8])
    i = rng.randrange(max(1, len(buf) - width))
    v = rng.choice(_INTERESTING) & ((1 << (8 * width)) - 1)
    buf[i:i + width] = v.to_bytes(width, "little")
    return f"int{8 * width}@{i}={v}"


def _truncate(rng: random.Random, buf: bytearray, pool: list[bytes]) -> str:
    cut = rng.randrange(len(buf) + 1) if buf else 0
    del buf[cut:]
    return f"truncate@{cut}"


def _delete(rng: random.Random, buf: bytearray, pool: list[bytes]) -> str:
    i = rng.randrange(len(buf))
    k = rng.randint(1, 16)
    del buf[i:i + k]
    return f"delete@{i}+{k}"


def _insert(rng: random.Random, buf: bytearray, pool: list[bytes]) -> str:
    i = rng.randrange(len(buf) + 1)
    ins = rng.randbytes(rng.randint(1, 16))
    buf[i:i] = ins
    return f"insert@{i}+{len(ins)}"


def _splice(rng: random.Random, buf: bytearray, pool: list[bytes]) -> str | None:
    other = rng.choice(pool)
    if not other:
        return None
    a = rng.randrange(len(other))
    piece = other[a:a + rng.randint(1, 64)]
    i = rng.randrange(len(buf) + 1)
    buf[i:i + len(piece)] = piece
    return f"splice@{i}+{len(piece)}"


def _swap(rng: random.Random, buf: bytearray, pool: list[bytes]) -> str | None:
    if not buf:
        return None
    i = rng.randrange(len(buf))
    j = rng.randrange(len(buf))
    buf[i], buf[j] = buf[j], buf[i]
    return f"swap@{i},{j}"


MUTATIONS: dict[str, Callable[[random.Random, bytearray, list[bytes]], "str | None"]] = {
    "flip": _flip, "byte": _byte, "int": _int, "truncate": _truncate, "delete": _delete, "insert": _insert,
    "splice": _splice, "swap": _swap,
}
"""The damage classes of bytes: each changes ``buf`` in place and returns a short description (None when it
changed nothing). ``mutate`` draws among them; ``tools/conformance_corpus.py`` applies each one by name."""

_DRAW: list[tuple[float, str, Callable[[int, list[bytes]], bool]]] = [
    (0.25, "flip", lambda n, pool: n > 0),
    (0.40, "byte", lambda n, pool: n > 0),
    (0.60, "int", lambda n, pool: n >= 8),
    (0.72, "truncate", lambda n, pool: True),
    (0.80, "delete", lambda n, pool: n > 0),
    (0.88, "insert", lambda n, pool: True),
    (0.95, "splice", lambda n, pool: bool(pool)),
]
"""How ``mutate`` picks a class from one uniform draw: the first row whose bound is above it and whose guard
holds the data's length and pool; ``swap`` when none does."""

FILE_ACTIONS = ("removed", "emptied")
"""The damage classes of whole files in ``run_files``: a file removed, an index emptied."""


def mutate(rng: random.Random, data: bytes, pool: list[bytes]) -> tuple[bytes, str]:
    """One to three mutations of ``data``; returns the bytes and a short description."""
    buf = bytearray(data)
    what = []
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        op = rng.random()
        name = next((name for bound, name, ok in _DRAW if op < bound and ok(len(buf), pool)), "swap")
        done = MUTATIONS[name](rng, buf, pool)
        if done is not None:
            what.append(done)
    return bytes(buf), " ".join(what) or "none"


# ---------------------------------------------------------------------------------------------- targets


class Finding(Exception):
    """An input that ended in a way the contract does not allow."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


def _events_equal(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def _check_batch(header: Any, event: Any) -> None:
    if type(event).__name__ != "Messages":
        return
    batch = event.records
    try:
        batch.validate(full=True)
    except Exception as e:  # noqa: BLE001
        raise Finding("invalid", f"returned batch fails validation: {e}") from None
    if not batch.schema.equals(header.schema):
        raise Finding("invalid", "returned batch has another schema than the header")


def run_body(rng: random.Random, corpus: list[_Stream], workdir: str) -> str:
    from eventlog.encoding import codec_for

    s = rng.choice(corpus)
    seq, event, body = rng.choice(s.bodies)
    data, what = mutate(rng, body, [b for _, _, b in s.bodies])
    dec = codec_for(s.header).standalone_decoder()
    got_seq, got = dec.decode(data)
    _check_batch(s.header, got)
    return f"{s.name} seq {seq}: {what}"


def run_header(rng: random.Random, corpus: list[_Stream], workdir: str) -> str:
    from eventlog.header import StreamHeader

    s = rng.choice(corpus)
    raw = s.header.to_json()
    if rng.random() < 0.5:  # mutate the JSON as text: numbers, strings, fields
        data, what = _mutate_json(rng, raw)
    else:
        data, what = mutate(rng, raw, [c.header.to_json() for c in corpus])
    h = StreamHeader.from_json(data, path="header.json")
    if not (isinstance(h.peers, int) and h.peers >= 1):
        raise Finding("wrong", f"header parsed with peers {h.peers!r}")
    return f"{s.name} header: {what}"


def _mutate_json(rng: random.Random, raw: bytes) -> tuple[bytes, str]:
    doc = json.loads(raw)
    key = rng.choice(sorted(doc))
    choice = rng.random()
    if choice < 0.3:
        doc[key] = rng.choice([None, 0, -1, 1 << 40, 2**64, "", "x", [], {}, True, 1.5, "9.9", "product:1000000000",
                               "product:0", "product:-1", "avro", "1.0", "2.0", "1.999999999999"])
    elif choice < 0.5:
        del doc[key]
    elif choice < 0.7 and isinstance(doc[key], str) and doc[key]:
        s = doc[key]
        i = rng.randrange(len(s))
        doc[key] = s[:i] + rng.choice("A/=+0x-") + s[i + 1:]
    elif choice < 0.85:
        doc["peers"] = rng.choice([0, 2, 3, 1 << 20, 1 << 40, -5, "2", 2.0])
    else:
        doc["time"] = rng.choice(["int64", "product:3", "product:1000000000", "product:65", "float", "product:x"])
    if rng.random() < 0.8:  # re-sealed, as a tool that edits a header on purpose would: the field checks answer
        from eventlog.header import header_checksum

        try:
            doc["checksum"] = header_checksum(doc)
        except Exception:  # noqa: BLE001 - a document the checksum cannot even be computed over stays unsealed
            pass
        return json.dumps(doc).encode(), f"json {key} (resealed)"
    return json.dumps(doc).encode(), f"json {key}"


def run_kafka(rng: random.Random, corpus: list[_Stream], workdir: str) -> str:
    """A Kafka record of either framing with its value or one header value mutated, read as a reader does:
    framing, the decoder of that framing, the event checked against the record's headers."""
    from connectors.kafka import records as krec
    from eventlog.encoding import codec_for

    s = rng.choice(corpus)
    value, headers = rng.choice(s.records)
    if headers and rng.random() < 0.25:
        i = rng.randrange(len(headers))
        key, old = headers[i]
        new, what = mutate(rng, old, [h for _, h in headers])
        headers = headers[:i] + [(key, new)] + headers[i + 1:]
        what = f"header {key}: {what}"
    else:
        value, what = mutate(rng, value, [v for v, _ in s.records])
    frame = krec.decode_record(value, headers, 0, stream=s.name, part=0, offset=7)
    if frame.is_header:
        frame.header(path="kafka")
        return f"{s.name} record: {what}"
    codec = codec_for(s.header)
    dec = codec.record_decoder() if frame.version == 2 else codec.standalone_decoder()
    for i, body in enumerate(frame.bodies):
        seq, ev = dec.decode(body)
        krec.check_event(frame, i, seq, ev, stream=s.name, part=0)
        _check_batch(s.header, ev)
    return f"{s.name} record: {what}"


def run_files(rng: random.Random, corpus: list[_Stream], workdir: str) -> str:
    """Write a stream's files with one of them damaged (or removed), read part 0, reopen its writer, read
    again. Returned events must be the written ones; fewer only when the last segment was truncated."""
    from connectors.files import FileLog
    from eventlog.errors import EventLogError

    s = rng.choice(corpus)
    root = os.path.join(workdir, "log")
    shutil.rmtree(root, ignore_errors=True)
    paths = sorted(s.files)
    target = rng.choice(paths)
    segs = [p for p in paths if p.endswith((".arrows", ".arrow", ".avro", ".open"))]
    last_seg = segs[-1] if segs else None
    action = rng.random()
    what = ""
    for p in paths:
        full = os.path.join(root, p)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        data = s.files[p]
        if p == target:
            if action < 0.08:
                what = f"{p}: removed"
                continue
            if action < 0.14 and p.endswith(".index"):
                data, what = b"", f"{p}: emptied"
            else:
                data, m = mutate(rng, data, list(s.files.values()))
                what = f"{p}: {m}"
        with open(full, "wb") as f:
            f.write(data)
    truncated_tail = target == last_seg and ("truncate" in what or "delete" in what or "removed" in what)
    before, error = _read_all(FileLog(root, sync="none"), s, allow_short=truncated_tail, what=what)
    # a writer reopening the part may cut a torn tail, never an event a reader returned
    try:
        log = FileLog(root, sync="none")
        w = log.writer(s.name, 0)
        w.close()
        log.close()
    except EventLogError as e:
        raise (error or e) from None
    after, error2 = _read_all(FileLog(root, sync="none"), s, allow_short=truncated_tail, what=what)
    if before is not None and after is not None and after < before:
        raise Finding("lost", f"{what}: readers saw {before} events before the writer reopened the part, {after} after")
    if error or error2:
        raise (error or error2)  # the damage was reported: the typed outcome
    return f"{s.name} {what}"


def _read_all(log: Any, s: _Stream, *, allow_short: bool, what: str) -> tuple[int | None, Exception | None]:
    """Events read from part 0 (checked against the originals), or None and the EventLogError reading raised."""
    from eventlog.errors import EventLogError

    n = 0
    try:
        header = log.header(s.name)
        for e in log.reader(s.name, 0):
            if e.seq > len(s.entries):
                raise Finding("wrong", f"{what}: returned seq {e.seq} beyond the {len(s.entries)} written")
            want = s.entries[e.seq - 1].event
            if e.seq != n + 1:
                raise Finding("wrong", f"{what}: returned seq {e.seq} after {n}")
            _check_batch(header, e.event)
            if not _events_equal(e.event, want):
                raise Finding("wrong", f"{what}: seq {e.seq} differs from the event written")
            n += 1
    except EventLogError as e:
        return None, e
    finally:
        log.close()
    if n < len(s.entries) and not allow_short:
        raise Finding("hidden", f"{what}: {n} of {len(s.entries)} events returned, no error")
    return n, None


RUNNERS: dict[str, Callable[[random.Random, list[_Stream], str], str]] = {
    "body": run_body, "files": run_files, "header": run_header, "kafka": run_kafka,
}


def choose_target(rng: random.Random, targets: tuple[str, ...]) -> str:
    return rng.choices(targets, weights=[WEIGHTS[t] for t in targets])[0]


def run_one(seed: int, index: int, corpus: list[_Stream], workdir: str, targets: tuple[str, ...]) -> tuple[str, str, str]:
    """``(target, outcome, detail)`` of input ``index``: outcome is ``ok``, an error class name, or a finding."""
    from eventlog.errors import EventLogError

    rng = random.Random(f"{seed}:{index}")
    target = choose_target(rng, targets)
    try:
        detail = RUNNERS[target](rng, corpus, workdir)
        return target, "ok", detail
    except Finding as f:
        return target, f.kind, f.detail
    except EventLogError as e:
        return target, "typed:" + type(e).__name__, _short(e)
    except MemoryError:
        return target, "memory", "MemoryError"
    except Exception as e:  # noqa: BLE001 - the finding we are looking for
        tb = traceback.extract_tb(e.__traceback__)[-1]
        return target, "untyped", f"{type(e).__name__}: {_short(e)} at {Path(tb.filename).name}:{tb.lineno}"


def _short(e: BaseException) -> str:
    s = str(e).replace("\n", " ")
    return s if len(s) < 200 else s[:197] + "..."


# ------------------------------------------------------------------------------------------- processes


def _worker(seed: int, start: int, stop: int, targets: tuple[str, ...], mem_gib: float,
            counter: Any, conn: Any) -> None:
    if mem_gib > 0:
        lim = int(mem_gib * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
    import logging
    import warnings

    logging.getLogger("eventlog").setLevel(logging.CRITICAL)
    warnings.simplefilter("ignore")
    workdir = tempfile.mkdtemp(prefix="eventlog-fuzz-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    try:
        corpus = build_corpus(seed, os.path.join(workdir, "corpus"))
        outcomes: collections.Counter = collections.Counter()
        findings: list[tuple[int, str, str, str]] = []
        for i in range(start, stop):
            counter.value = i
            target, outcome, detail = run_one(seed, i, corpus, workdir, targets)
            kind = outcome.split(":")[0]
            outcomes[(target, outcome if kind != "typed" else "typed")] += 1
            if outcome in FINDINGS and len(findings) < 200:
                findings.append((i, target, outcome, detail))
        counter.value = stop
        conn.send((dict(outcomes), findings))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def fuzz(seed: int, count: int, jobs: int, chunk: int, targets: tuple[str, ...], mem_gib: float,
         hang_seconds: float, progress: bool) -> tuple[collections.Counter, list[tuple[int, str, str, str]]]:
    """Run inputs ``0 … count-1`` in ``jobs`` worker processes; returns outcome counts and findings."""
    ctx = mp.get_context("spawn")
    todo = [(a, min(a + chunk, count)) for a in range(0, count, chunk)]
    outcomes: collections.Counter = collections.Counter()
    findings: list[tuple[int, str, str, str]] = []
    running: list[dict] = []
    t0 = time.monotonic()
    done = 0

    def launch(a: int, b: int) -> None:
        counter = ctx.Value("q", a, lock=False)
        parent, child = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_worker, args=(seed, a, b, targets, mem_gib, counter, child), daemon=True)
        p.start()
        running.append({"p": p, "a": a, "b": b, "counter": counter, "conn": parent, "last": a,
                        "seen": time.monotonic()})

    while todo or running:
        while todo and len(running) < jobs:
            launch(*todo.pop(0))
        time.sleep(0.2)
        for r in list(running):
            p, now = r["p"], time.monotonic()
            if r["conn"].poll():
                got, found = r["conn"].recv()
                outcomes.update({tuple(k) if isinstance(k, list) else k: v for k, v in got.items()})
                findings += found
                p.join()
                running.remove(r)
                done += r["b"] - r["a"]
                continue
            cur = r["counter"].value
            if cur != r["last"]:
                r["last"], r["seen"] = cur, now
            dead = not p.is_alive()
            hung = now - r["seen"] > hang_seconds + (120 if cur == r["a"] else 0)  # corpus build first
            if dead or hung:
                if hung:
                    p.kill()
                p.join()
                kind = "hang" if hung else "crash"
                detail = f"exit code {p.exitcode}" if dead else f"no progress for {hang_seconds:.0f}s"
                findings.append((cur, "?", kind, detail))
                outcomes[("?", kind)] += 1
                running.remove(r)
                done += cur + 1 - r["a"]
                if cur + 1 < r["b"]:
                    todo.insert(0, (cur + 1, r["b"]))
        if progress:
            rate = done / max(time.monotonic() - t0, 1e-9)
            print(f"\r{done}/{count} inputs, {rate:,.0f}/s, findings {len(findings)}", end="", file=sys.stderr)
    if progress:
        print(file=sys.stderr)
    return outcomes, findings


def report(outcomes: collections.Counter, findings: list, count: int, seed: int, elapsed: float) -> str:
    lines = [f"fuzz_log: {count} inputs, seed {seed}, {elapsed:.0f} s"]
    per_target: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for (target, outcome), n in outcomes.items():
        per_target[target][outcome] += n
    for target in sorted(per_target):
        c = per_target[target]
        lines.append(f"  {target:7s} " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
    bad = collections.Counter(f[2] for f in findings)
    lines.append("findings: " + (", ".join(f"{k} {v}" for k, v in sorted(bad.items())) or "none"))
    for i, target, kind, detail in findings[:40]:
        lines.append(f"  #{i} {target} {kind}: {detail}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=max(1, min(2, os.cpu_count() or 1)))
    ap.add_argument("--chunk", type=int, default=5_000, help="inputs per worker process")
    ap.add_argument("--target", action="append", choices=TARGETS, help="only these targets (repeatable)")
    ap.add_argument("--mem-gib", type=float, default=4.0, help="address-space limit of a worker (0: none)")
    ap.add_argument("--hang-seconds", type=float, default=30.0)
    ap.add_argument("--show", type=int, help="run input INDEX here, in this process, and print what it did")
    ap.add_argument("--json", action="store_true", help="print the outcome counts as JSON")
    args = ap.parse_args(argv)
    targets = tuple(args.target or TARGETS)
    if args.show is not None:
        workdir = tempfile.mkdtemp(prefix="eventlog-fuzz-")
        try:
            corpus = build_corpus(args.seed, os.path.join(workdir, "corpus"))
            print(run_one(args.seed, args.show, corpus, workdir, targets))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        return 0
    t0 = time.monotonic()
    outcomes, findings = fuzz(args.seed, args.count, args.jobs, args.chunk, targets, args.mem_gib,
                              args.hang_seconds, progress=sys.stderr.isatty())
    print(report(outcomes, findings, args.count, args.seed, time.monotonic() - t0))
    if args.json:
        print(json.dumps({f"{t}/{o}": n for (t, o), n in sorted(outcomes.items())}))
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
