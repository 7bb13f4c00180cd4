#!/usr/bin/env python3
"""The conformance corpus of the file-log readers: good and damaged copies of file logs, and what the Python
reader makes of each — the outcome every other reader of the format (the JVM reader,
``connectors/spark/jvm/read.py``) must give exactly: the same rows, or an error of the same class naming the
same file (``tests/spark/test_conformance.py``).

    python tools/conformance_corpus.py [SCALE]    # build the corpus in a temporary folder, print each outcome

**Bases.** Streams the JVM reader reads (format 2.x file logs, Arrow encoding, sealed segments):

* the golden logs ``tests/golden/logs-2.0/golden-arrow`` (two parts, int64 times) and ``golden-arrow-product``
  (``product:2``), copied (they never change);
* ``restart``, written here by the Python writer with fixed writer ids and clocks (the same bytes every run):
  two parts of several segments; part 0 has two writer incarnations (a void message of the first, a held one at
  the end), part 1 stops before finishing (later times incomplete);
* ``tapped``, when the caller passes a stream folder the JVM tap wrote (the tap's own bytes; its writer ids and
  write times differ from run to run, its layout does not);
* a copy of ``golden-arrow``, ``restart`` and ``tapped`` without their index files (``…-noindex``): readers find
  the events by the Arrow framing, so damage meets the framing, the message checks and the decoding, where the
  index's checksums would have caught most of it first.

Streams it does not read — the 1.0 golden logs, the 2.0 Avro golden logs — are entries too, undamaged: the JVM
reader must refuse them (``JvmReadUnavailable``) rather than read them.

**Damage.** For each readable base, each damage class of ``tools/fuzz_log.py`` applied to one file of the base
(a copy of the stream per entry), with a few deterministic seeds a class (``random.Random("<base>:<class>:<seed>")``
picks the file and the damage): the byte mutations of a segment or an index (``fuzz_log.MUTATIONS``: flip, byte,
int, truncate, delete, insert, splice, swap; ``mixed``: one to three of them, as ``fuzz_log.mutate`` draws them),
the file actions (``fuzz_log.FILE_ACTIONS``: a segment or an index removed, an index emptied), and the stream
header's (``header-json``: a JSON field edited and re-sealed, ``fuzz_log._mutate_json``; ``header-flip``).

**Expected outcome.** ``replay.dataset(root, stream)`` (the committed view, read through ``CheckedPart`` as every
Python consumer reads): its rows with ``_time``, ``_part``, ``_seq`` are exactly the rows of
``spark.read.format("eventlog").option("incomplete", True)``, whose Spark tasks replay each part through the same
``CheckedPart`` (committed) and add the same columns; for the default read (complete times only) the rows are
further those at times complete at ``connectors.spark.frontier.merged_frontier``, which the data source's planner
computes first (its error comes first). It runs in this process, gives typed errors with their file
(``EventLogError.path``) and takes milliseconds, where the data source needs a Spark job per entry (the test checks
once that both give the same rows on each undamaged base).
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import fuzz_log  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
GOLDEN_2 = ROOT / "tests" / "golden" / "logs-2.0"
GOLDEN_1 = ROOT / "tests" / "golden" / "logs"

READABLE_GOLDEN = ("golden-arrow", "golden-arrow-product")
"""Golden streams the JVM reader reads (format 2.0, Arrow)."""
REFUSED_GOLDEN = ((GOLDEN_1, "golden-arrow"), (GOLDEN_1, "golden-arrow-product"), (GOLDEN_1, "golden-avro"),
                  (GOLDEN_1, "golden-avro-product"), (GOLDEN_2, "golden-avro"), (GOLDEN_2, "golden-avro-product"))
"""Golden streams it does not read (format 1.0; the Avro encoding): it must refuse them."""

BYTE_CLASSES = tuple(fuzz_log.MUTATIONS)
SEEDS = {"golden-arrow": 4, "golden-arrow-product": 3, "restart": 4, "tapped": 3}
"""Seeds of each byte damage class per base (each seed picks a file and a place)."""
NOINDEX_SEEDS = {"golden-arrow": 3, "restart": 4, "tapped": 3}
"""The same for the bases' copies without indexes."""
ACTION_SEEDS = 2
HEADER_CLASSES = ("json", "flip")


@dataclasses.dataclass(frozen=True)
class Entry:
    """One corpus entry: a copy of a base stream (``root``/``stream``), damaged by ``damage`` in ``target``."""

    name: str
    root: str
    stream: str
    damage: str
    """``none``, a class of ``fuzz_log.MUTATIONS`` or ``FILE_ACTIONS``, or ``header-json`` / ``header-flip``."""
    target: str | None = None
    """The damaged file, relative to the stream folder."""
    detail: str = ""
    refused: bool = False
    """A stream the JVM reader does not read (it must refuse it)."""

    @property
    def stream_dir(self) -> str:
        return os.path.join(self.root, self.stream)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What a reader gave: ``rows`` (the canonical rows, sorted), or ``error`` (a class name of
    ``eventlog.errors``) with the ``path`` of the file it names (None when it names none) and its ``part``."""

    rows: tuple | None = None
    error: str | None = None
    path: str | None = None
    part: int | None = None
    message: str = ""
    unsealed: tuple[str, ...] = ()
    """With ``rows``: sealed segments the Python reader reads as a torn tail (``torn_sealed_segments``), reading up to
    where their damage starts (FORMAT.md §3.3) although their sealed name promises a whole file (§3.4); a reader
    that holds them to §3.4 raises CorruptLogError naming one of them (or its index) instead."""

    def __str__(self) -> str:
        if self.error is None:
            if self.unsealed:
                return f"{len(self.rows or ())} rows, reading torn sealed segments {self.unsealed}"
            return f"{len(self.rows or ())} rows"
        return f"{self.error} (part {self.part}, file {self.path}): {self.message[:300]}"


# -- canonical rows --------------------------------------------------------------------------------------


def _plain(v: Any) -> Any:
    if isinstance(v, dict):
        return tuple(sorted((k, _plain(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return tuple(_plain(x) for x in v)
    if isinstance(v, float) and math.isnan(v):
        return "NaN"
    return v


def canonical_rows(table: Any) -> tuple:
    """A pyarrow Table's rows as sorted tuples of plain values (lists and structs as tuples), in column order."""
    cols = [table.column(i).to_pylist() for i in range(table.num_columns)]
    rows = [tuple(_plain(c[r]) for c in cols) for r in range(table.num_rows)]
    return tuple(sorted(rows, key=repr))


# -- the Python reader's outcome -------------------------------------------------------------------------


def python_outcome(entry: Entry, *, incomplete: bool = True) -> Outcome:
    """What the Python reader gives for ``entry``: ``replay.dataset``'s rows (with ``incomplete=False``, those at
    times complete at the merged frontier, which is computed first, as the data source's planner does), or its
    error."""
    from connectors.spark import frontier as fr
    from eventlog.errors import EventLogError
    from eventlog.log import open_log
    from replay.dataset import dataset

    log = open_log(entry.root)
    try:
        frontier = None if incomplete else fr.merged_frontier(log, entry.stream)
        table = dataset(log, entry.stream).to_table()
    except EventLogError as e:
        return error_outcome(type(e).__name__, e.path, e.part, str(e))
    finally:
        log.close()
    unsealed = torn_sealed_segments(entry)
    if frontier is not None:
        import pyarrow as pa

        times = table.column("_time").to_pylist()
        keep = [fr.is_complete(tuple(t) if isinstance(t, list) else t, frontier) for t in times]
        table = table.filter(pa.array(keep, pa.bool_()))
    return Outcome(rows=canonical_rows(table), unsealed=unsealed)


def torn_sealed_segments(entry: Entry) -> tuple[str, ...]:
    """The entry's sealed segments the Python reader reads as a torn tail (FORMAT.md §3.3: it stops before bytes
    that are not whole, or cannot be an event, in a part's newest segment): those without their whole suffix, and
    those ``FileLog.check_part`` finds torn-tail bytes in. A sealed name promises a whole file (§3.4), so a reader
    that holds sealed segments to it finds them damaged."""
    from connectors.files import FileLog

    out = set(sealed_without_suffix(entry))
    log = FileLog(entry.root)
    try:
        for part in range(log.header(entry.stream).peers):
            for problem in log.check_part(entry.stream, part):
                name = os.path.basename(problem.path or "")
                if problem.reason.startswith("torn tail") and name.endswith(".arrow") and not name.startswith("_"):
                    out.add(os.path.normpath(problem.path))
    finally:
        log.close()
    return tuple(sorted(out))


def sealed_without_suffix(entry: Entry) -> tuple[str, ...]:
    """The entry's sealed Arrow segments (``<first seq>.arrow``, FORMAT.md §3.4) that do not end with their whole
    suffix: the end-of-stream marker, a footer, its length and ``ARROW1``."""
    from eventlog.encoding.ipc_file import EOS, trailer_length

    out = []
    for rel in _files(entry.stream_dir):
        if not (rel.endswith(".arrow") and not os.path.basename(rel).startswith("_")):
            continue
        path = os.path.join(entry.stream_dir, rel)
        data = Path(path).read_bytes()
        n = trailer_length(data[-16:], len(data))
        if n is None or data[len(data) - n - len(EOS):len(data) - n] != EOS:
            out.append(os.path.normpath(path))
    return tuple(out)


def error_outcome(name: str, path: str | None, part: int | None, message: str) -> Outcome:
    return Outcome(error=name, path=os.path.normpath(path) if path else None, part=part, message=message)


# -- bases -----------------------------------------------------------------------------------------------


def write_restart(root: str, stream: str = "restart") -> None:
    """The ``restart`` base: two parts of several sealed segments (1 KiB segments); part 0 has two writer
    incarnations — the first leaves a message at time 3 it never completes (void), the second re-sends time 3,
    finishes times up to 5 and leaves a message at time 6 held (never committed) — and part 1 stops holding
    time 4, so times from 4 on are incomplete. Written with fixed writer ids, write times and creation time, so
    its bytes are the same on every run."""
    import itertools
    from unittest import mock

    import pyarrow as pa

    from eventlog.encoding import arrow_file
    from eventlog.header import StreamHeader
    from eventlog.log import open_log
    from eventlog.writer_mark import WriterMark

    schema = pa.schema([("n", pa.int64(), False), ("word", pa.string()), ("xs", pa.list_(pa.int32()))])
    log = open_log(root, segment_bytes=1024)
    log.create_stream(StreamHeader(stream, 2, schema, "int64", "arrow", created="2026-11-22T00:00:00.000Z"))
    clock = itertools.count(1_795_000_000_000)
    with mock.patch.object(WriterMark, "new", staticmethod(lambda epoch: WriterMark(epoch, f"{epoch:016x}"))), \
            mock.patch.object(arrow_file, "now_ms", lambda: next(clock)):  # the same bytes every time
        _capture_restart(log, stream, schema)
    log.close()


def _capture_restart(log: Any, stream: str, schema: Any) -> None:
    from capture import Capture

    def rows(part: int, t: int, k: int) -> list[dict]:
        return [{"n": 1000 * part + 10 * t + i, "word": None if i % 3 == 2 else f"w{part}-{t}-{i}",
                 "xs": list(range(i % 4))} for i in range(k)]

    cap = Capture(log, stream, 0, 2, schema=schema)
    for t in range(3):
        cap.send(t, rows(0, t, 3))
        cap.advance_to(t + 1)
    cap.send(3, rows(0, 3, 2))
    cap.abort()  # the first incarnation ends holding time 3: its message at 3 is void
    cap = Capture(log, stream, 0, 2, schema=schema)
    for t in range(3, 6):
        cap.send(t, rows(0, 100 + t, 2))
        cap.advance_to(t + 1)
    cap.send(6, rows(0, 6, 1))  # never committed: held by every committed reader
    cap.abort()
    cap = Capture(log, stream, 1, 2, schema=schema)
    for t in range(4):
        cap.send(t, rows(1, t, 4))
        cap.advance_to(t + 1)
    cap.abort()  # part 1 holds time 4


def _files(stream_dir: str) -> list[str]:
    """The stream folder's files, relative to it, sorted (the lock files left out)."""
    out = []
    for d, _, names in os.walk(stream_dir):
        for n in names:
            if n != ".lock":
                out.append(os.path.relpath(os.path.join(d, n), stream_dir))
    return sorted(out)


def _is_segment(rel: str) -> bool:
    return rel.endswith((".arrow", ".avro", ".arrows"))


def _is_index(rel: str) -> bool:
    return rel.endswith(".index")


def _is_header(rel: str) -> bool:
    return os.path.basename(rel) in ("_header.json", "header.json")


def _damage(rng: random.Random, data: bytes, damage: str, pool: list[bytes]) -> tuple[bytes, str] | None:
    """``data`` damaged by one byte class (None when the class changed nothing)."""
    buf = bytearray(data)
    what = fuzz_log.MUTATIONS[damage](rng, buf, pool)
    if what is None or bytes(buf) == data:
        return None
    return bytes(buf), what


@dataclasses.dataclass(frozen=True)
class Base:
    """A readable stream the corpus damages: ``label`` names it in entry names, ``stream_dir`` is its folder."""

    label: str
    stream_dir: str
    seeds: int
    """Seeds of each byte damage class (each seed picks a file and a place)."""

    @property
    def stream(self) -> str:
        return os.path.basename(self.stream_dir)


def damaged_copies(base: Base, work: str, scale: int = 1) -> list[Entry]:
    """The damaged copies of ``base`` (module doc), each a log folder under ``work``; ``scale`` times the seeds."""
    files = _files(base.stream_dir)
    contents = {f: Path(base.stream_dir, f).read_bytes() for f in files}
    pool = list(contents.values())
    segments = [f for f in files if _is_segment(f)]
    indexes = [f for f in files if _is_index(f)]
    header = next(f for f in files if _is_header(f))
    plan: list[tuple[str, int]] = [(c, s) for c in (*BYTE_CLASSES, "mixed") for s in range(base.seeds * scale)]
    plan += [(a, s) for a in fuzz_log.FILE_ACTIONS for s in range(ACTION_SEEDS * scale)
             if indexes or a != "emptied"]
    plan += [(f"header-{c}", s) for c in HEADER_CLASSES for s in range(scale) if indexes]  # once a stream
    out = []
    for damage, seed in plan:
        rng = random.Random(f"{base.label}:{damage}:{seed}")
        if damage.startswith("header-"):
            target = header
        elif damage == "emptied":
            target = rng.choice(indexes)
        else:
            target = rng.choice(segments + indexes)
        data = contents[target]
        for _attempt in range(8):  # a class that changed nothing (a swap of equal bytes) draws again
            if damage == "removed":
                new, what = None, "removed"
            elif damage == "emptied":
                new, what = b"", "emptied"
            elif damage == "header-json":
                new, what = fuzz_log._mutate_json(rng, data)
            elif damage == "mixed":  # what the fuzzer draws: one to three byte mutations
                new, what = fuzz_log.mutate(rng, data, pool)
                if new == data:
                    continue
            else:
                got = _damage(rng, data, damage.removeprefix("header-"), pool)
                if got is None:
                    continue
                new, what = got
            break
        else:
            continue
        root = os.path.join(work, f"{base.label}.{damage}.{seed}")
        shutil.copytree(base.stream_dir, os.path.join(root, base.stream))
        path = os.path.join(root, base.stream, target)
        if new is None:
            os.remove(path)
        else:
            Path(path).write_bytes(new)
        out.append(Entry(f"{base.label}/{damage}#{seed}", root, base.stream, damage, target, what))
    return out


def _without_indexes(stream_dir: str, to: str) -> str:
    """A copy of ``stream_dir`` under ``to`` without its index files (readers find the events by framing)."""
    dest = os.path.join(to, os.path.basename(stream_dir))
    shutil.copytree(stream_dir, dest, ignore=shutil.ignore_patterns("*.index", ".lock"))
    return dest


def build(work: str, *, tapped: str | None = None, scale: int = 1) -> list[Entry]:
    """The whole corpus under ``work`` (a fresh folder): the refused golden streams, each readable base
    undamaged and its damaged copies (``scale`` times the seeds). ``tapped``: a stream folder written by the JVM
    tap, a base too. Each base also has a copy without its indexes: damage there meets the framing and the
    decoding, where the index's checksums would have caught most of it first."""
    entries: list[Entry] = []
    for root, stream in REFUSED_GOLDEN:
        version = "1.0" if root == GOLDEN_1 else "2.0"
        entries.append(Entry(f"{stream}@{version}", str(root), stream, "none", refused=True))
    bases_dir = os.path.join(work, "bases")
    bases = []
    for stream in READABLE_GOLDEN:
        shutil.copytree(GOLDEN_2 / stream, os.path.join(bases_dir, stream))
        bases.append(Base(stream, os.path.join(bases_dir, stream), SEEDS[stream]))
    write_restart(bases_dir)
    bases.append(Base("restart", os.path.join(bases_dir, "restart"), SEEDS["restart"]))
    if tapped is not None:
        dest = os.path.join(bases_dir, os.path.basename(tapped))
        shutil.copytree(tapped, dest, ignore=shutil.ignore_patterns(".lock"))
        bases.append(Base("tapped", dest, SEEDS["tapped"]))
    for b in list(bases):
        if b.label in NOINDEX_SEEDS:
            dest = _without_indexes(b.stream_dir, os.path.join(work, "noindex"))
            bases.append(Base(f"{b.label}-noindex", dest, NOINDEX_SEEDS[b.label]))
    for b in bases:
        entries.append(Entry(f"{b.label}/none", os.path.dirname(b.stream_dir), b.stream, "none"))
        entries += damaged_copies(b, os.path.join(work, "copies"), scale)
    return entries


def main(argv: Iterable[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    work = tempfile.mkdtemp(prefix="eventlog-conformance-")
    try:
        for e in build(work, scale=int(args[0]) if args else 1):
            got = python_outcome(e)
            print(f"{e.name:40s} {e.target or '':45s} {e.detail[:30]:30s} {got}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
