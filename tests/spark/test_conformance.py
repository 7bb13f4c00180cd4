"""The JVM reader obeys the Python reader's rules, proven on one conformance corpus (``tools/conformance_corpus.py``):
the golden logs, a Python-written stream with restarts, held and void messages and incomplete times, a stream the
JVM tap wrote, copies of each without their indexes, and all of them damaged by every damage class of
``tools/fuzz_log.py``. On each entry the JVM reader (``read_log(engine="jvm")``) gives exactly what the Python
reader gives: the same rows, or an error of the same class naming the same file (and part). A stream it does not
read (format 1.0, the Avro encoding) it refuses (``JvmReadUnavailable``) rather than read.

The one place the two may differ: a *sealed* segment (``<seq>.arrow``, FORMAT.md §3.4) that the Python reader
reads as a torn tail — it stops where the damage starts and returns the rows before, as FORMAT.md §3.3 lets it do
in a part's newest segment; today only a newest segment cut short inside its prefix — is damage to the JVM reader,
which raises CorruptLogError naming that segment (or its index): a sealed name promises a whole file.
``cc.Outcome.unsealed`` lists such segments.

Each entry is read with ``incomplete=True`` (the planner reads only the header: every other check is the JVM
tasks') and with the default read (complete times only: the planner's merged frontier, Python code, reads every
part's Progress events first). One Spark session; one JVM job per read, with one replay worker (``workers=1``), so
that the parts are read in order as the Python reader reads them and the error of the first damaged part is the
one raised. ``EVENTLOG_CONFORMANCE_SCALE`` multiplies the seeds (the corpus of this test: about 200 entries).

Skipped only where no JDK (``javac``) is installed."""

from __future__ import annotations

import collections
import os
import re
import sys
import time
from pathlib import Path

import pytest

from connectors.spark.jvm import jvm_tap
from connectors.spark.jvm.read import read_log
from eventlog.errors import EventLogError

_TOOLS = str(Path(__file__).resolve().parents[2] / "tools")
if _TOOLS not in sys.path:
    sys.path.insert(0, _TOOLS)

import conformance_corpus as cc  # noqa: E402
import fuzz_log  # noqa: E402

pytestmark = pytest.mark.spark

SCALE = int(os.environ.get("EVENTLOG_CONFORMANCE_SCALE", "1"))
"""Times the corpus's seeds (``cc.build``): raise it for a longer sweep."""

_TASK_ERROR = re.compile(r"eventlog\.spark\.CorruptLogException: (\w+): (.*?) \(stream [^,]+, part (\d+)"
                         r"(?:, seq \d+)?(?:, offset -?\d+)?(?:, file ([^)\n]*))?\)")
"""A JVM task's typed error: the Python error's name, the reason, the part and the file."""


def spark_rows(df) -> tuple:
    """A DataFrame's rows as ``cc.canonical_rows`` (collected as Arrow batches, without ``toArrow``'s cast to the
    Spark schema, which refuses a nullable struct of non-nullable fields holding nulls)."""
    import pyarrow as pa

    batches = df._collect_as_arrow()
    return cc.canonical_rows(pa.Table.from_batches(batches)) if batches else ()


def jvm_outcome(spark, entry: cc.Entry, *, incomplete: bool) -> cc.Outcome:
    """What the JVM reader gives for ``entry``: its rows (as ``cc.canonical_rows``), or its error — the planner's
    (eventlog's own, raised on the driver), a task's (``CorruptLogException``: the Python error's name leads its
    message), a refusal (``JvmReadUnavailable``), or anything else by its Java class (``untyped:…``)."""
    try:
        df = read_log(spark, entry.stream_dir, engine="jvm", incomplete=incomplete, workers=1)
        return cc.Outcome(rows=spark_rows(df))
    except EventLogError as e:  # JvmReadUnavailable included
        return cc.error_outcome(type(e).__name__, e.path, e.part, str(e))
    except Exception as e:  # noqa: BLE001 - a task's error, as py4j reports it
        text = str(e)
        m = _TASK_ERROR.search(text)
        if m is not None:
            return cc.error_outcome(m.group(1), m.group(4), int(m.group(3)), m.group(2))
        java = re.search(r"\n(?:Caused by: )?([\w.$]+(?:Exception|Error)): ", text)
        return cc.error_outcome(f"untyped:{java.group(1) if java else type(e).__name__}", None, None, text[-3000:])


def _index_of(segment: str) -> str:
    """The index file of a sealed segment (``part=0/<first>.arrow`` -> ``part=0/_<first>.index``)."""
    d, name = os.path.split(segment)
    return os.path.join(d, "_" + name.split(".")[0] + ".index")


def disagreement(want: cc.Outcome, got: cc.Outcome) -> str | None:
    """Why ``got`` (the JVM reader's) is not ``want`` (the Python reader's), None when they agree: the same rows,
    or the same error class naming the same file (where the Python error names one) and the same part; where the
    Python reader read a torn sealed segment (``want.unsealed``), CorruptLogError naming it or its index."""
    if want.error is None:
        if want.unsealed:
            named = {p for u in want.unsealed for p in (u, _index_of(u))}
            if got.error == "CorruptLogError" and got.path in named:
                return None
            return f"Python gives {want}, the JVM reader {got} (not CorruptLogError naming one of them)"
        if got.error is not None:
            return f"Python gives {want}, the JVM reader {got}"
        return None if got.rows == want.rows else f"Python gives {want}, the JVM reader {got} (other rows)"
    if got.error != want.error:
        return f"Python gives {want}, the JVM reader {got}"
    if want.path is not None and got.path != want.path:
        return f"both {want.error}, Python naming {want.path}, the JVM reader {got.path}"
    if want.part is not None and got.part is not None and got.part != want.part:
        return f"both {want.error}, Python naming part {want.part}, the JVM reader part {got.part}"
    return None


@pytest.fixture(scope="module")
def corpus(spark, jvm, tmp_path_factory) -> list[cc.Entry]:
    """The corpus, with a stream the JVM tap wrote (2 parts, nulls in a struct column) as a base."""
    tap_log = str(tmp_path_factory.mktemp("tap"))
    df = spark.range(0, 240, 1, 2).selectExpr(
        "id", "concat('w', cast(id % 7 as string)) as word", "id % 3 as t", "array(id, id + 1) as a",
        "if(id % 5 = 0, null, named_struct('x', id, 'y', cast(id as double))) as st")
    jvm_tap(df, tap_log, "tapped", time="t").count()
    return cc.build(str(tmp_path_factory.mktemp("corpus")), tapped=os.path.join(tap_log, "tapped"), scale=SCALE)


def test_the_corpus_holds_every_damage_class(corpus):
    damages = {e.damage for e in corpus}
    assert set(fuzz_log.MUTATIONS) | set(fuzz_log.FILE_ACTIONS) | {"mixed", "header-json", "header-flip"} <= damages
    assert {e.stream for e in corpus if e.refused} == {"golden-arrow", "golden-arrow-product", "golden-avro",
                                                       "golden-avro-product"}


def test_the_python_data_source_gives_the_corpus_rows(spark, corpus):
    """The expected outcome is ``replay.dataset``'s: on each undamaged readable base it gives exactly the rows of
    the Python data source (``read_log(engine="python")``), incomplete times or not. The bases are whole: the
    Python side's ``check_part`` finds nothing in any part (the JVM tap's files included) but the missing indexes
    of the ``-noindex`` copies."""
    from connectors.files import FileLog

    for entry in corpus:
        if entry.damage != "none" or entry.refused:
            continue
        log = FileLog(entry.root)
        problems = [p for part in range(log.header(entry.stream).peers) for p in log.check_part(entry.stream, part)
                    if not (entry.name.endswith("-noindex/none") and "without an index" in p.reason)]
        log.close()
        assert not problems, (entry.name, problems)
        for incomplete in (True, False):
            df = read_log(spark, entry.stream_dir, engine="python", incomplete=incomplete)
            want = cc.python_outcome(entry, incomplete=incomplete)
            assert want.error is None and not want.unsealed, (entry.name, str(want))
            assert spark_rows(df) == want.rows, (entry.name, incomplete)


def test_jvm_reader_agrees_with_the_python_reader_on_the_corpus(spark, corpus):
    t0 = time.monotonic()
    problems = []
    tally: collections.Counter = collections.Counter()
    for entry in corpus:
        if entry.refused:
            want = cc.python_outcome(entry)
            assert want.error is None, (entry.name, str(want))  # the Python reader reads it
            got = jvm_outcome(spark, entry, incomplete=True)
            tally["refused"] += 1
            if got.error != "JvmReadUnavailable":
                problems.append(f"{entry.name}: the JVM reader does not refuse it: {got}")
            continue
        for incomplete in (True, False):
            want = cc.python_outcome(entry, incomplete=incomplete)
            got = jvm_outcome(spark, entry, incomplete=incomplete)
            tally["torn sealed" if want.unsealed else "rows" if want.error is None else want.error] += 1
            why = disagreement(want, got)
            if why is not None:
                problems.append(f"{entry.name} [{entry.target} {entry.detail}] incomplete={incomplete}: {why}")
    print(f"\n{len(corpus)} entries, {sum(tally.values())} reads in {time.monotonic() - t0:.0f} s: {dict(tally)}")
    assert not problems, "\n".join(problems)
    assert tally["rows"] and tally["CorruptLogError"] and tally["LogLimitError"] and tally["SequenceError"], tally
