"""The JVM tap prebuilt and chosen by default (issue 36, item 1): ``connectors/spark/jvm/build.py`` puts a jar per
Spark minor in the package, ``prepare`` takes the one for the running Spark's minor when it was built from the
package's Java sources, compiles one on first use only where there is none (said once), and ``tap()`` without an
``engine`` captures in the JVM where it can — with no JDK on the machine — and in Python workers otherwise (said
once), writing the log the Python tap writes (the same files, events and records; the ``_time``/``_seq`` buffers
byte for byte)."""

from __future__ import annotations

import importlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

from capture import tap
from connectors.spark import jvm as jvm_mod
from connectors.spark.jvm import JvmTapUnavailable, build

from .conftest import ROOT
from .test_jvm_tap import _plan, captured, verify, words

pytestmark = pytest.mark.spark


def _minor(spark) -> str:
    return build.minor_of(spark.version)


def _jar(path: str, *, minor: str, digest: str, classes_from: str | None = None) -> str:
    """A jar at ``path`` whose manifest says it was built for Spark ``minor`` from sources of hash ``digest``
    (with the classes of the jar ``classes_from``, else none)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: eventlog\n"
                   f"Eventlog-Source-Hash: {digest}\nEventlog-Spark-Minor: {minor}\n"
                   f"Eventlog-Spark-Version: {minor}.0\n\n")
        if classes_from is not None:
            with zipfile.ZipFile(classes_from) as src:
                for name in src.namelist():
                    if name != "META-INF/MANIFEST.MF":
                        z.writestr(name, src.read(name))
    return path


@pytest.fixture(scope="module")
def prebuilt(tmp_path_factory, spark) -> str:
    """A ``lib`` folder holding the prebuilt jar for the running Spark's minor: the package's own where it is up
    to date (``make test`` builds it), else one built now by ``build.py`` (skips only without pyspark's jars and
    a JDK to build it)."""
    lib = str(tmp_path_factory.mktemp("lib"))
    minor = _minor(spark)
    name = build.prebuilt_name(minor)
    own = os.path.join(build.LIB, name)
    if build.up_to_date(own, minor, jvm_mod.source_hash()):
        shutil.copy(own, os.path.join(lib, name))
        return lib
    found = build.pyspark_jars()
    try:
        javac = build.find_javac()
    except build.BuildError as e:
        pytest.skip(f"the package has no prebuilt jar for Spark {minor} and none can be built here: {e}")
    assert found is not None
    build.compile_jar(os.path.join(lib, name), [os.path.join(found[1], "*")], found[0], javac=javac)
    return lib


@pytest.fixture
def said(caplog):
    """``said(logger)``: the warnings said through ``logger`` (``eventlog.jvm``: the choice of jar; ``eventlog.tap``
    and ``eventlog.read``: the engines' fallbacks), each process-once memory cleared first."""
    jvm_mod._said.clear()
    importlib.import_module("capture.tap")._said.clear()
    importlib.import_module("connectors.spark.jvm.read")._said.clear()
    with caplog.at_level(logging.WARNING):
        yield lambda logger: [r.getMessage() for r in caplog.records if r.name == logger]


# -- which jar: the prebuilt one of this minor, built from these sources ---------------------------------------


def test_the_prebuilt_jar_of_the_running_minor_is_chosen_and_none_other(spark, prebuilt, tmp_path, monkeypatch):
    minor, digest = _minor(spark), jvm_mod.source_hash()
    ours = os.path.join(prebuilt, build.prebuilt_name(minor))
    info = build.jar_info(ours)
    assert info is not None and (info.spark_minor, info.source_hash) == (minor, digest)
    monkeypatch.setattr(jvm_mod, "LIB", prebuilt)
    assert jvm_mod.prebuilt_jar(spark.version) == ours
    assert jvm_mod.prebuilt_jar(f"{minor}.99") == ours                  # any release of the minor
    lib = str(tmp_path / "lib")
    monkeypatch.setattr(jvm_mod, "LIB", lib)
    with pytest.raises(JvmTapUnavailable, match=rf"no prebuilt JVM tap for Spark {re.escape(minor)} \(it has none\)"):
        jvm_mod.prebuilt_jar(spark.version)
    _jar(os.path.join(lib, build.prebuilt_name("4.2")), minor="4.2", digest=digest)  # another minor's
    other = "4.1" if minor == "4.2" else "4.2"
    _jar(os.path.join(lib, build.prebuilt_name(minor)), minor=other, digest=digest)  # renamed: says another minor
    with pytest.raises(JvmTapUnavailable, match=rf"no prebuilt JVM tap for Spark {re.escape(minor)}"):
        jvm_mod.prebuilt_jar(spark.version)
    _jar(os.path.join(lib, build.prebuilt_name(minor)), minor=minor, digest="0" * 16)
    with pytest.raises(JvmTapUnavailable, match="built from other Java sources"):
        jvm_mod.prebuilt_jar(spark.version)
    assert not build.up_to_date(os.path.join(lib, build.prebuilt_name(minor)), minor, digest)
    with open(os.path.join(lib, "eventlog-spark-9.9.jar"), "wb") as f:
        f.write(b"not a jar")
    assert build.jar_info(os.path.join(lib, "eventlog-spark-9.9.jar")) is None


def test_minors_and_names():
    assert build.minor_of("4.2.0") == "4.2" and build.minor_of("4.1.0-preview2") == "4.1"
    assert build.prebuilt_name("4.0") == "eventlog-spark-4.0.jar"
    assert set(build.MAVEN_SPARK) <= set(jvm_mod.SUPPORTED_SPARK)
    assert all(build.minor_of(v) == m for m, v in build.MAVEN_SPARK.items())


def test_a_stale_or_foreign_jar_is_compiled_anew_where_a_jdk_is(spark, prebuilt, tmp_path, monkeypatch, said):
    """Sources edited since the build (the manifest's hash differs) or no jar for this minor: ``prepare`` compiles
    one on first use against the installed pyspark, says so once, and uses it; the stale jar is not used."""
    try:
        jvm_mod.find_javac()
    except JvmTapUnavailable as e:
        pytest.skip(f"no JDK: {e.reason}")
    minor = _minor(spark)
    lib, cache = str(tmp_path / "lib"), str(tmp_path / "cache")
    monkeypatch.setattr(jvm_mod, "LIB", lib)
    monkeypatch.setenv("EVENTLOG_JVM_CACHE", cache)
    stale = _jar(os.path.join(lib, build.prebuilt_name(minor)), minor=minor, digest="0" * 16,
                 classes_from=os.path.join(prebuilt, build.prebuilt_name(minor)))
    for _ in range(2):
        jar = jvm_mod._jar_for(spark.version, None)
        assert jar != stale and jar.startswith(cache + os.sep)
        info = build.jar_info(jar)
        assert info is not None and info.source_hash == jvm_mod.source_hash() and info.spark_minor == minor
    jar_said = said("eventlog.jvm")
    assert len(jar_said) == 1 and "built from other Java sources" in jar_said[0], jar_said
    assert "compiled on first use" in jar_said[0]
    os.remove(stale)
    _jar(os.path.join(lib, build.prebuilt_name("4.0" if minor != "4.0" else "4.1")), minor="4.0", digest="x")
    assert jvm_mod._jar_for(spark.version, None) == jar              # compiled already: the cache serves it
    jar_said = said("eventlog.jvm")
    assert len(jar_said) == 2 and f"no prebuilt JVM tap for Spark {minor}" in jar_said[1], jar_said


def test_the_build_goes_on_without_maven_and_skips_what_is_up_to_date(spark, prebuilt, tmp_path, monkeypatch):
    """Maven Central out of reach (offline): the install still succeeds, with the jar of the installed pyspark's
    minor built from its own jars, and says once which minor is not prebuilt; a second build builds nothing."""
    try:
        build.find_javac()
    except build.BuildError as e:
        pytest.skip(f"no JDK: {e}")
    minor = _minor(spark)
    other = "4.0" if minor != "4.0" else "4.1"

    def offline(version):
        raise build.BuildError(f"Maven could not fetch Spark {version}'s jars (offline?): Network is unreachable")

    monkeypatch.setattr(build, "MAVEN_SPARK", {other: f"{other}.9"})
    monkeypatch.setattr(build, "maven_classpath", offline)
    lib, said = str(tmp_path / "lib"), []
    built = build.prebuild(lib, say=said.append)
    assert built == {minor: os.path.join(lib, build.prebuilt_name(minor))}
    assert build.up_to_date(built[minor], minor, build.source_hash())
    assert len(said) == 2 and f"for Spark {other} is not prebuilt" in said[0] and "offline" in said[0], said
    assert f"built the JVM tap for Spark {minor}" in said[1], said
    said.clear()
    assert build.prebuild(lib, maven=False, say=said.append) == built and said == []   # up to date: nothing built


def test_building_ahead_prints_the_jar_prepare_takes(spark, prebuilt, monkeypatch, capsys):
    from connectors.spark.jvm.__main__ import main

    monkeypatch.setattr(jvm_mod, "LIB", prebuilt)   # up to date already: nothing compiled
    assert main([]) == 0
    assert capsys.readouterr().out.strip() == os.path.join(prebuilt, build.prebuilt_name(_minor(spark)))


# -- the default engine --------------------------------------------------------------------------------------


def test_the_default_engine_is_auto_for_the_tap_and_the_reader(monkeypatch):
    from capture.tap import _engine
    from connectors.spark.jvm.read import read_log

    monkeypatch.delenv("EVENTLOG_TAP_ENGINE", raising=False)
    assert _engine(None) == "auto"
    assert _engine("python") == "python"
    monkeypatch.setenv("EVENTLOG_TAP_ENGINE", "python")
    assert _engine(None) == "python"
    import inspect

    assert "else ``\"auto\"``" in inspect.getdoc(read_log)


def test_the_default_tap_runs_in_the_jvm_where_it_can(spark, jvm, log_dir, monkeypatch):
    monkeypatch.delenv("EVENTLOG_TAP_ENGINE", raising=False)
    df = words(spark, 1200, 3)
    out = tap(df, f"{log_dir}/auto", "w", time="t")
    assert "MapInArrow" not in _plan(out)                       # no Python worker on the row path
    assert sorted(out.collect()) == sorted(df.collect())
    tap(df, f"{log_dir}/py", "w", time="t", engine="python").count()
    assert captured(f"{log_dir}/auto", "w") == captured(f"{log_dir}/py", "w")
    assert _log_of(f"{log_dir}/auto/w") == _log_of(f"{log_dir}/py/w")
    verify(f"{log_dir}/auto")


def test_the_default_tap_falls_back_to_python_saying_why_once(spark, log_dir, tmp_path, monkeypatch, said):
    """No prebuilt jar for this minor and no JDK to compile one, or a case the JVM tap does not write: the default
    tap captures in Python workers, and says why once per process."""
    monkeypatch.delenv("EVENTLOG_TAP_ENGINE", raising=False)
    monkeypatch.setattr(jvm_mod, "LIB", str(tmp_path / "lib"))  # nothing prebuilt
    monkeypatch.setenv("EVENTLOG_JAVAC", str(tmp_path / "no-jdk" / "javac"))
    monkeypatch.setenv("EVENTLOG_JVM_CACHE", str(tmp_path / "cache"))
    df = words(spark, 300, 2)
    for name in ("a", "b"):
        out = tap(df, log_dir, name, time="t")
        assert "MapInArrow" in _plan(out)
        out.count()
    tap_said = said("eventlog.tap")
    assert len(tap_said) == 1, tap_said
    assert f"no prebuilt JVM tap for Spark {_minor(spark)}" in tap_said[0] and "Python workers" in tap_said[0]
    assert sum(sum(c.values()) for c in captured(log_dir, "b").values()) == 300
    assert not os.path.exists(tmp_path / "cache") or not any(n.endswith(".jar") for _, _, ns in
                                                             os.walk(tmp_path / "cache") for n in ns)


def test_the_default_tap_falls_back_for_what_the_jvm_tap_does_not_write(spark, jvm, log_dir, monkeypatch, said):
    monkeypatch.delenv("EVENTLOG_TAP_ENGINE", raising=False)
    df = words(spark, 200, 2)
    for name in ("a", "b"):
        out = tap(df, log_dir, name, encoding="avro")
        assert "MapInArrow" in _plan(out)
        out.count()
    tap_said = said("eventlog.tap")
    assert len(tap_said) == 1 and "avro" in tap_said[0] and "Python workers" in tap_said[0], tap_said
    assert sum(sum(c.values()) for c in captured(log_dir, "a").values()) == 200


def test_the_default_reader_reads_in_the_jvm_and_falls_back_for_a_connect_like_session(spark, jvm, log_dir,
                                                                                       monkeypatch, said):
    from connectors.spark.jvm.read import read_log

    monkeypatch.delenv("EVENTLOG_READ_ENGINE", raising=False)
    tap(words(spark, 500, 2), log_dir, "w", time="t").count()
    df = read_log(spark, f"{log_dir}/w")
    assert "PythonScan" not in _plan(df) and "BatchScan" not in _plan(df), _plan(df)
    assert df.count() == 500 and said("eventlog.read") == []

    class Loaded(Exception):
        pass

    class ConnectLike:  # a Spark Connect session has no _jsparkSession; its reader is the data source's
        class read:
            @staticmethod
            def format(name):
                assert name == "eventlog"
                return ConnectLike.read

            @staticmethod
            def options(**opts):
                assert opts["path"] == f"{log_dir}/w"
                return ConnectLike.read

            @staticmethod
            def load():
                raise Loaded

    for _ in range(2):
        with pytest.raises(Loaded):
            read_log(ConnectLike(), f"{log_dir}/w")
    read_said = said("eventlog.read")
    assert len(read_said) == 1 and "classic SparkSession" in read_said[0], read_said


# -- no JDK where the job runs -------------------------------------------------------------------------------

_SCRIPT = r"""
import json, os, shutil, sys
from pyspark.sql import SparkSession
import connectors.spark.jvm as jvm_mod
from capture import tap

lib, log = sys.argv[1], sys.argv[2]
jvm_mod.LIB = lib
assert shutil.which("javac") is None
try:
    jvm_mod.find_javac()
    raise SystemExit("a Java compiler is reachable")
except jvm_mod.JvmTapUnavailable:
    pass
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2").config("spark.driver.memory", "1g").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
df = spark.range(0, 3000, 1, 3).selectExpr("id", "concat('w', cast(id % 7 as string)) as word", "id % 4 as t",
                                           "case when id % 5 = 0 then null else id * 0.5 end as half")
auto = tap(df, log + "/auto", "w", time="t")
plan = auto._jdf.queryExecution().executedPlan().toString()
rows = auto.count()
tap(df, log + "/py", "w", time="t", engine="python").count()
jar = getattr(spark.sparkContext, "_eventlog_jvm_jar", None)
build = spark.sparkContext._jvm.eventlog.spark.JvmTap.build() if jar else None
print("RESULT " + json.dumps({"python_workers": "MapInArrow" in plan, "rows": rows, "jar": jar, "build": build}))
spark.stop()
"""


def _no_jdk_env(tmp_path) -> dict[str, str]:
    """The environment of a machine with a Java runtime and no JDK: ``java`` (``$JAVA_HOME/bin/java``) and every
    other command of the PATH but ``javac``; ``$EVENTLOG_JAVAC`` names nothing; an empty compile cache."""
    java = shutil.which("java")
    if java is None:
        pytest.skip("no Java runtime: Spark cannot start")
    jre = tmp_path / "jre" / "bin"
    jre.mkdir(parents=True)
    (jre / "java").symlink_to(os.path.realpath(java))
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        if not os.path.isdir(folder):
            continue
        for name in os.listdir(folder):
            target = bin_ / name
            if name != "javac" and not target.exists() and not target.is_symlink():
                target.symlink_to(os.path.join(folder, name))
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVENTLOG_")}
    env.update(PATH=str(bin_), JAVA_HOME=str(tmp_path / "jre"), EVENTLOG_JAVAC=str(tmp_path / "no-jdk" / "javac"),
               EVENTLOG_JVM_CACHE=str(tmp_path / "cache"), PYSPARK_PYTHON=sys.executable,
               PYTHONPATH=os.pathsep.join([ROOT, *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]]))
    return env


def test_with_no_jdk_the_default_tap_runs_the_prebuilt_jar_and_writes_the_python_taps_log(spark, prebuilt,
                                                                                          tmp_path):
    """A fresh driver (its own Spark session) whose machine has a Java runtime but no compiler: the default tap runs
    in the JVM from the prebuilt jar, compiles nothing, and writes the log the Python tap writes (``_log_of``)."""
    log = str(tmp_path / "log")
    done = subprocess.run([sys.executable, "-c", _SCRIPT, prebuilt, log], env=_no_jdk_env(tmp_path), cwd=str(tmp_path),
                          capture_output=True, text=True, timeout=600)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stdout[-3000:] + done.stderr[-5000:]
    result = json.loads(lines[-1][len("RESULT "):])
    assert result == {"python_workers": False, "rows": 3000, "build": jvm_mod.source_hash(),
                      "jar": os.path.join(prebuilt, build.prebuilt_name(_minor(spark)))}
    assert not os.path.exists(tmp_path / "cache")                      # nothing compiled
    assert captured(f"{log}/auto", "w") == captured(f"{log}/py", "w")
    assert _log_of(f"{log}/auto/w") == _log_of(f"{log}/py/w")
    verify(f"{log}/auto")


# -- the same log -----------------------------------------------------------------------------------------------


def _log_of(stream_dir: str) -> dict:
    """What two engines capturing the same rows write alike, file by file: the header (but its creation time and
    checksum), the segments' and indexes' names, and per event its kind, sequence id, time, row count, the
    ``_time``/``_seq`` buffers as stored (zstd frames built directly: byte for byte) and its records. Not the
    writer's id or write times (each writer's own), nor the stored bytes of the record columns: the JVM tap writes
    Spark's Arrow vectors (a validity bitmap also where a column has no null; buffers unpadded), pyarrow its own."""
    import struct

    import pyarrow as pa
    import pyarrow.ipc as ipc

    from eventlog.encoding import ipc_build
    from eventlog.encoding.ipc_file import footer_blocks, trailer_length

    out: dict = {}
    for folder, _, names in os.walk(stream_dir):
        for name in sorted(names):
            path = os.path.join(folder, name)
            key = os.path.relpath(path, stream_dir)
            with open(path, "rb") as f:
                data = f.read()
            if name == "_header.json":
                doc = json.loads(data)
                doc.pop("created"), doc.pop("checksum")
                out[key] = doc
            elif name.endswith(".arrow"):
                n = trailer_length(data[-10:], len(data))
                schema = data[8:16 + int.from_bytes(data[12:16], "little")]
                events = []
                for b in footer_blocks(data[len(data) - n:len(data) - 10]):
                    message = data[b.offset:b.offset + b.meta_length + b.body_length]
                    batch, meta = ipc.open_stream(pa.py_buffer(schema + message)).read_next_batch_with_custom_metadata()
                    parts = ipc_build.parse(message)
                    buffers = [message[parts.body_start + o:parts.body_start + o + k]
                               for o, k in struct.iter_unpack("<qq", parts.buffers)]
                    events.append(({k: v for k, v in meta.items() if k != b"eventlog.ts"}, batch.num_rows,
                                   buffers[-4:], batch.to_pylist()))
                out[key] = events
            elif name.endswith(".index"):
                out[key] = len(data)
    assert any(k.endswith(".arrow") for k in out), out.keys()
    return out
