"""Building the JVM tap's jar: compiling ``src/`` against one Spark's jars, and the prebuilt jars a package carries.

A jar is ``javac --release 17`` of the Java sources (and a generated ``Build`` class holding their hash) against
the jars of one Spark version, zipped with a manifest that says what it was built from:
``Eventlog-Source-Hash`` (:func:`source_hash` of the sources), ``Eventlog-Spark-Minor`` (``4.2``) and
``Eventlog-Spark-Version`` (the release compiled against). Spark's internals the tap uses (``ArrowWriter``,
``QueryExecution.toRdd``, ``classic.SparkSession``) may change between minors, never within one, so a jar serves
the Spark minor it was compiled for, and only while the sources are the ones it was built from.

**Prebuilt jars.** When the package is built (``setup.py``'s ``build_py``, so ``pip install`` and wheels), and by
``python -m connectors.spark.jvm --maven``, :func:`prebuild` puts ``lib/eventlog-spark-<minor>.jar`` beside
this file for every minor of :data:`MAVEN_SPARK` (Spark's artifacts fetched from Maven Central by ``mvn``, into
``~/.m2``) and for the installed pyspark's minor (its own ``jars`` folder), each only when missing or built from
other sources. Anything missing — no JDK, no Maven, no network — is said once per minor and the build goes on
without that jar: the tap then compiles on first use where it runs, or the Python tap captures.

Standard library only, and no import of the package: ``setup.py`` loads this file by its path in a build
environment that has neither pyspark nor the package's dependencies.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from typing import Callable, Iterable

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCES = os.path.join(HERE, "src")
"""The Java sources (``eventlog/spark/*.java``)."""
LIB = os.path.join(HERE, "lib")
"""Where the prebuilt jars are (inside the package, so that a wheel carries them; git-ignored)."""

MAVEN_SPARK = {"4.2": "4.2.0"}
"""Spark minor → the release on Maven Central the prebuilt jar for that minor is compiled against. A minor newer
than these (4.3, not on Maven Central yet) is built from the installed pyspark's jars. Not built: 4.0 and 4.1 —
the Java compiles against 4.0.4 and 4.1.3, but the package's Spark connector does not import there (its streaming
source needs ``pyspark.sql.streaming.datasource``, new in pyspark 4.2); 3.5 — no ``org.apache.spark.sql.classic``
package and Arrow 12 (no view vectors)."""

JAVA_RELEASE = "17"
PREBUILD_ENV = "EVENTLOG_JVM_PREBUILD"
"""Set to ``0`` to build no prebuilt jar when the package is built (the tap then compiles on first use)."""

_SCALA = "2.13"
_MAVEN_TIMEOUT = 900  # seconds for one resolution (a cold ~/.m2 fetches ~170 jars)
_JAVAC_TIMEOUT = 900


class BuildError(Exception):
    """A jar cannot be built here (no JDK, no Maven, sources that do not compile): one line saying why."""


@dataclasses.dataclass(frozen=True)
class JarInfo:
    """What a jar's manifest says it was built from."""

    source_hash: str
    spark_minor: str
    spark_version: str


def prebuilt_name(minor: str) -> str:
    """The file name of the prebuilt jar for Spark ``minor`` (``"4.2"``)."""
    return f"eventlog-spark-{minor}.jar"


def minor_of(version: str) -> str:
    """``"4.2"`` of a Spark version ``"4.2.0"`` (or ``"4.2.0-preview1"``)."""
    return ".".join(re.split(r"[.-]", version)[:2])


def sources(root: str = SOURCES) -> list[str]:
    """The ``.java`` files below ``root``, sorted."""
    out = []
    for d, _, names in os.walk(root):
        out.extend(os.path.join(d, n) for n in names if n.endswith(".java"))
    return sorted(out)


def source_hash(root: str = SOURCES) -> str:
    """A hash of the Java sources below ``root`` (names and contents): a change makes a new build."""
    h = hashlib.sha256()
    for path in sources(root):
        h.update(os.path.relpath(path, root).encode() + b"\0")
        with open(path, "rb") as f:
            h.update(f.read())
        h.update(b"\0")
    return h.hexdigest()[:16]


def jar_info(jar: str) -> JarInfo | None:
    """What ``jar``'s manifest says it was built from; None for a jar that says nothing (or no readable jar)."""
    try:
        with zipfile.ZipFile(jar) as z:
            text = z.read("META-INF/MANIFEST.MF").decode("utf-8", "replace")
    except (OSError, KeyError, zipfile.BadZipFile):
        return None
    fields = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
    digest, minor = fields.get("Eventlog-Source-Hash"), fields.get("Eventlog-Spark-Minor")
    if not digest or not minor:
        return None
    return JarInfo(digest, minor, fields.get("Eventlog-Spark-Version", ""))


def find_javac() -> str:
    """The Java compiler: ``$EVENTLOG_JAVAC``, ``$JAVA_HOME/bin/javac`` or ``javac`` on the PATH (BuildError if
    none)."""
    explicit = os.environ.get("EVENTLOG_JAVAC")
    if explicit:
        if not (os.path.isfile(explicit) and os.access(explicit, os.X_OK)):
            raise BuildError(f"EVENTLOG_JAVAC={explicit} is not an executable Java compiler")
        return explicit
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "javac"), os.X_OK):
        return os.path.join(home, "bin", "javac")
    found = shutil.which("javac")
    if found is None:
        raise BuildError("no Java compiler (javac) found: install a JDK 17+ or set JAVA_HOME / EVENTLOG_JAVAC")
    return found


def compile_jar(jar: str, classpath: Iterable[str], spark_version: str, *, javac: str | None = None,
                root: str = SOURCES) -> str:
    """Compile the sources below ``root`` against ``classpath`` (jars, or ``folder/*``) for Spark
    ``spark_version`` into ``jar``, replaced atomically (concurrent builders each put a whole jar). BuildError
    when it cannot be built."""
    compiler = javac or find_javac()
    if not (os.path.isfile(compiler) and os.access(compiler, os.X_OK)):
        raise BuildError(f"{compiler} is not an executable Java compiler")
    digest = source_hash(root)
    folder = os.path.dirname(os.path.abspath(jar))
    os.makedirs(folder, exist_ok=True)
    work = tempfile.mkdtemp(prefix=".build-", dir=folder)
    try:
        classes = os.path.join(work, "classes")
        os.makedirs(classes)
        build = os.path.join(work, "Build.java")
        with open(build, "w") as f:
            f.write("package eventlog.spark;\n\n/** Generated at build time. */\nfinal class Build {\n"
                    f"    static final String HASH = \"{digest}\";\n\n    private Build() {{\n    }}\n}}\n")
        argfile = os.path.join(work, "javac.args")  # the class path of ~170 jars is long for one command line
        with open(argfile, "w") as f:
            f.write("-cp\n" + _quote(os.pathsep.join(_expand(classpath))) + "\n")
            f.writelines(_quote(p) + "\n" for p in [*sources(root), build])
        cmd = [compiler, "--release", JAVA_RELEASE, "-nowarn", "-encoding", "UTF-8", "-d", classes, f"@{argfile}"]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=_JAVAC_TIMEOUT)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise BuildError(f"cannot run the Java compiler {compiler}: {e}") from None
        if done.returncode != 0:
            raise BuildError(f"the JVM tap does not compile against Spark {spark_version} ({compiler}):\n"
                             f"{(done.stderr or done.stdout)[-3000:]}")
        tmp_jar = os.path.join(work, "out.jar")
        with zipfile.ZipFile(tmp_jar, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: eventlog\n"
                       f"Eventlog-Source-Hash: {digest}\nEventlog-Spark-Minor: {minor_of(spark_version)}\n"
                       f"Eventlog-Spark-Version: {spark_version}\n\n")
            for d, _, names in sorted(os.walk(classes)):
                for n in sorted(names):
                    p = os.path.join(d, n)
                    z.write(p, os.path.relpath(p, classes))
        os.replace(tmp_jar, jar)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return jar


def _expand(classpath: Iterable[str]) -> list[str]:
    """``classpath`` with each ``folder/*`` replaced by the folder's jars (javac does not expand a wildcard read
    from an @file)."""
    out: list[str] = []
    for entry in classpath:
        if os.path.basename(entry) == "*":
            folder = os.path.dirname(entry)
            out.extend(os.path.join(folder, n) for n in sorted(os.listdir(folder)) if n.endswith(".jar"))
        else:
            out.append(entry)
    return out


def _first_lines(text: str, n: int = 4) -> str:
    """The first ``n`` lines of ``text``, for a message said at build time."""
    lines = text.strip().splitlines()
    return "\n".join(lines[:n]) + ("\n…" if len(lines) > n else "")


def _quote(arg: str) -> str:
    """``arg`` as one argument of a javac @file."""
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'


def pyspark_jars() -> tuple[str, str] | None:
    """``(version, jars folder)`` of the pyspark importable here, or None."""
    try:
        import pyspark
    except ImportError:
        return None
    jars = os.path.join(os.path.dirname(os.path.abspath(pyspark.__file__)), "jars")
    return (pyspark.__version__, jars) if os.path.isdir(jars) else None


_POM = """<?xml version="1.0" encoding="UTF-8"?>
<!-- Generated by connectors/spark/jvm/build.py: the class path to compile the JVM tap against Spark {version}. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.eventlog</groupId>
  <artifactId>jvm-tap-classpath</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
{dependencies}
  </dependencies>
</project>
"""


def _maven_run(work: str, artifacts: list[tuple[str, str, str]], version: str) -> list[str]:
    deps = "\n".join(f"    <dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version>"
                     "</dependency>" for g, a, v in artifacts)
    with open(os.path.join(work, "pom.xml"), "w") as f:
        f.write(_POM.format(version=version, dependencies=deps))
    out = os.path.join(work, "classpath.txt")
    mvn = shutil.which("mvn")
    if mvn is None:
        raise BuildError("Maven (mvn) is not installed, so Spark's jars cannot be fetched from Maven Central")
    cmd = [mvn, "-B", "-ntp", "-q", "-Daether.connector.http.retryHandler.count=3", "dependency:build-classpath",
           f"-Dmdep.outputFile={out}", "-DincludeScope=compile"]
    try:
        done = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=_MAVEN_TIMEOUT,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BuildError(f"cannot run Maven: {e}") from None
    if done.returncode != 0 or not os.path.isfile(out):
        lines = (done.stdout + done.stderr).splitlines()
        errors = [ln.strip() for ln in lines if ln.startswith("[ERROR]")] or lines[-1:] or [f"exit {done.returncode}"]
        raise BuildError(f"Maven could not fetch Spark {version}'s jars (offline?): {errors[0][:300]}")
    with open(out) as f:
        return [p for p in f.read().strip().split(os.pathsep) if p]


def maven_classpath(version: str) -> list[str]:
    """The compile class path of ``spark-sql_2.13:version`` (and the ``arrow-compression`` of its Arrow, which
    Spark 4.0 does not depend on), resolved by Maven into its local repository (``~/.m2``)."""
    spark = ("org.apache.spark", f"spark-sql_{_SCALA}", version)
    work = tempfile.mkdtemp(prefix="eventlog-jvm-maven-")
    try:
        cp = _maven_run(work, [spark], version)
        if not any(os.path.basename(p).startswith("arrow-compression-") for p in cp):
            arrow = [m.group(1) for p in cp if (m := re.fullmatch(r"arrow-vector-(.+)\.jar", os.path.basename(p)))]
            if not arrow:
                raise BuildError(f"Spark {version}'s class path from Maven has no arrow-vector jar")
            cp = _maven_run(work, [spark, ("org.apache.arrow", "arrow-compression", arrow[0])], version)
        return cp
    finally:
        shutil.rmtree(work, ignore_errors=True)


def up_to_date(jar: str, minor: str, digest: str) -> bool:
    """Whether ``jar`` exists and was built for Spark ``minor`` from sources of hash ``digest``."""
    info = jar_info(jar) if os.path.isfile(jar) else None
    return info is not None and info.spark_minor == minor and info.source_hash == digest


def prebuild(lib: str = LIB, *, maven: bool = True, local: bool = True,
             say: Callable[[str], None] | None = None) -> dict[str, str]:
    """Build the prebuilt jars into ``lib`` that are missing or built from other sources: one per minor of
    :data:`MAVEN_SPARK` (``maven``) and one for the installed pyspark's minor from its jars (``local``).
    Returns ``{minor: jar}`` of the jars ``lib`` now holds up to date; what cannot be built is said through
    ``say`` (stderr by default) and skipped, never raised."""
    tell = say or (lambda m: print(f"eventlog: {m}", file=sys.stderr, flush=True))
    digest = source_hash()
    plans: dict[str, tuple[str, Callable[[], list[str]]]] = {}
    if maven:
        for minor, version in MAVEN_SPARK.items():
            plans[minor] = (version, lambda v=version: maven_classpath(v))
    installed = pyspark_jars() if local else None
    if installed is not None:  # its own jars: no network, and a minor Maven may not serve yet
        version, jars = installed
        plans[minor_of(version)] = (version, lambda j=jars: [os.path.join(j, "*")])
    done: dict[str, str] = {}
    javac: str | None = None
    for minor, (version, classpath) in sorted(plans.items()):
        jar = os.path.join(lib, prebuilt_name(minor))
        if up_to_date(jar, minor, digest):
            done[minor] = jar
            continue
        if javac is None:
            try:
                javac = find_javac()
            except BuildError as e:  # no JDK: none will build
                tell(f"no JVM tap is prebuilt ({e}); where the tap runs it compiles on first use (a JDK there), "
                     "else the Python tap captures")
                break
        try:
            compile_jar(jar, classpath(), version, javac=javac)
        except BuildError as e:
            tell(f"the JVM tap for Spark {minor} is not prebuilt ({_first_lines(str(e))}); where it runs on Spark {minor} it compiles "
                 "on first use (a JDK there), else the Python tap captures")
            continue
        tell(f"built the JVM tap for Spark {minor} (against Spark {version}): {jar}")
        done[minor] = jar
    return done


__all__ = ["LIB", "MAVEN_SPARK", "PREBUILD_ENV", "SOURCES", "BuildError", "JarInfo", "compile_jar", "find_javac",
           "jar_info", "maven_classpath", "minor_of", "prebuild", "prebuilt_name", "pyspark_jars", "source_hash",
           "sources", "up_to_date"]
