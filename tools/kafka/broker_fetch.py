"""Fetch Apache Kafka's broker jars through Maven into a cache outside the repository (standard library only).

The cache is ``$EVENTLOG_KAFKA_CACHE`` or ``${XDG_CACHE_HOME:-~/.cache}/eventlog``; version ``V`` lives in
``kafka-V/libs/`` and is complete once ``kafka-V/COMPLETE`` exists. A complete cache is used as it is: a
second start never runs Maven and never touches the network. The first fetch runs
``mvn dependency:copy-dependencies`` on a generated pom (``pom.xml.in`` beside this file), retried, then adds
the SLF4J binding of the Log4j version Kafka resolved, so the broker's logs are written.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import time

DEFAULT_VERSION = "4.4.0"
_HERE = os.path.dirname(os.path.abspath(__file__))
_ATTEMPTS = 3
_BACKOFF = 2.0  # seconds; the n-th retry waits n times this


class FetchError(Exception):
    """Maven or Java is missing, or the jars could not be fetched; the message is one line for the user."""


def cache_root() -> str:
    """Folder of every cached Kafka version."""
    env = os.environ.get("EVENTLOG_KAFKA_CACHE")
    if env:
        return os.path.abspath(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "eventlog")


def version_dir(version: str) -> str:
    """Folder of one cached Kafka version."""
    return os.path.join(cache_root(), f"kafka-{version}")


def java_binary() -> str:
    """The ``java`` to run Kafka with ($JAVA_HOME/bin/java, else the one on PATH); it must be Java 17+."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.access(java, os.X_OK):
        raise FetchError("Java 17 or newer is needed to run Kafka and none was found (apt-get install -y openjdk-17-jre-headless)")
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60).stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        raise FetchError(f"cannot run {java} -version: {e}") from e
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not m:
        raise FetchError(f"cannot tell the version of {java}: {out.strip()[:200]}")
    major = int(m.group(1)) if m.group(1) != "1" else int(m.group(2) or 0)
    if major < 17:
        raise FetchError(f"Kafka 4 needs Java 17 or newer; {java} is Java {major}")
    return java


def _log(msg: str) -> None:
    print(f"kafka-broker: {msg}", file=sys.stderr, flush=True)


def _mvn(mvn: str, args: list[str], cwd: str, logfile: str, what: str) -> None:
    """Run Maven, retrying transient failures; on the last failure raise with the log's telling line."""
    cmd = [mvn, "-B", "-ntp", "-Dmaven.wagon.http.retryHandler.count=3",
           "-Daether.connector.http.retryHandler.count=3", *args]
    for attempt in range(1, _ATTEMPTS + 1):
        with open(logfile, "ab") as log:
            log.write(f"\n$ {' '.join(cmd)}\n".encode())
            log.flush()
            rc = subprocess.run(cmd, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL).returncode
        if rc == 0:
            return
        if attempt < _ATTEMPTS:
            _log(f"{what}: Maven failed (exit {rc}), retrying ({attempt}/{_ATTEMPTS - 1}) in {_BACKOFF * attempt:.0f} s")
            time.sleep(_BACKOFF * attempt)
    with open(logfile, errors="replace") as f:
        errors = [ln.strip() for ln in f if ln.startswith("[ERROR]")]
    reason = errors[0] if errors else f"exit {rc}"
    raise FetchError(f"{what} failed after {_ATTEMPTS} tries: {reason[:300]} (full log: {logfile})")


def ensure_kafka(version: str = DEFAULT_VERSION) -> str:
    """Return the folder of Kafka ``version``'s jars, fetching them through Maven the first time."""
    if not re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+[A-Za-z0-9.-]*", version):
        raise FetchError(f"not a Kafka version: {version!r}")
    vdir = version_dir(version)
    libs = os.path.join(vdir, "libs")
    done = os.path.join(vdir, "COMPLETE")
    if os.path.exists(done):
        return libs
    os.makedirs(vdir, exist_ok=True)
    with open(os.path.join(vdir, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be fetching the same version
        if os.path.exists(done):
            return libs
        mvn = shutil.which("mvn")
        if not mvn:
            raise FetchError("Maven (mvn) is needed once to fetch Apache Kafka's jars and none was found (apt-get install -y maven)")
        java_binary()
        started = time.monotonic()
        _log(f"fetching Apache Kafka {version} (org.apache.kafka:kafka_2.13) and its dependencies through Maven "
             f"into {vdir} (first time only)")
        with open(os.path.join(_HERE, "pom.xml.in")) as f:
            pom = f.read().replace("@KAFKA_VERSION@", version)
        with open(os.path.join(vdir, "pom.xml"), "w") as f:
            f.write(pom)
        staging = libs + ".partial"
        shutil.rmtree(staging, ignore_errors=True)
        logfile = os.path.join(vdir, "fetch.log")
        _mvn(mvn, ["dependency:copy-dependencies", f"-DoutputDirectory={staging}", "-DincludeScope=runtime"],
             vdir, logfile, f"fetching Kafka {version}")
        jars = os.listdir(staging)
        _log(f"fetched {len(jars)} jars in {time.monotonic() - started:.0f} s")
        if not any(j.startswith(f"kafka_2.13-{version}") for j in jars):
            raise FetchError(f"Maven finished but {staging} holds no kafka_2.13-{version} jar (see {logfile})")
        if not any(j.startswith("log4j-slf4j") for j in jars):
            log4j = next((m.group(1) for j in jars if (m := re.fullmatch(r"log4j-api-(.+)\.jar", j))), None)
            if log4j:
                _log(f"fetching the SLF4J binding of Log4j {log4j} (the broker logs through SLF4J)")
                _mvn(mvn, ["dependency:copy", f"-Dartifact=org.apache.logging.log4j:log4j-slf4j-impl:{log4j}",
                           f"-DoutputDirectory={staging}"], vdir, logfile, "fetching log4j-slf4j-impl")
        shutil.rmtree(libs, ignore_errors=True)
        os.rename(staging, libs)
        with open(done, "w") as f:
            f.write("\n".join(sorted(os.listdir(libs))) + "\n")
        _log(f"Kafka {version} is ready in {libs} ({time.monotonic() - started:.0f} s)")
    return libs
