"""The core install (``pip install eventlog``, no extras) holds the format, file logs, replay and the CLI, and
nothing else (issue 15 §5).

A wheel of the working tree is built once and installed into a fresh virtual environment (``python -m venv``,
no system site packages) without extras; its dependencies come from PyPI through pip's cache, so this test
needs the network the first time (CI has it; ``-m "not network"`` leaves it out). In that environment the
optional packages — pyspark, pandas, confluent-kafka, matplotlib, duckdb — are not importable, the ``replay``
CLI works on a file log (import, ls, cat, stats, verify, copy to Avro, diff), and every feature whose extra
is missing (``frontier --plot``, ``sql``, ``kafka://`` logs and channels, the Spark data source) fails with one
line naming the extra to install.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from tests.support.paths import ROOT

pytestmark = pytest.mark.network

OPTIONAL = {"pyspark": "spark", "pandas": "spark", "confluent_kafka": "kafka", "matplotlib": "plot", "duckdb": "sql",
            "boto3": "s3"}
"""Each optional module and the extra that installs it."""
CORE = {"pyarrow", "fastavro", "zstandard", "numpy", "click", "rich", "isal"}
"""The core dependencies (distribution names as the wheel's metadata spells them)."""


def _run(cmd: list[str], *, cwd: Path | None = None, timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    """Run ``cmd`` without PYTHONPATH/PYTHONHOME: earlier tests of the session (Spark's workers) point
    PYTHONPATH at the working tree, whose ``eventlog.egg-info`` would make pip see the core as installed and
    the new environment import the tree instead of the wheel."""
    kw.setdefault("env", {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")})
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, **kw)


def _source_copy(dest: Path) -> Path:
    """The working tree's files (tracked and untracked, not ignored) copied to ``dest``: a build there cannot
    pick up stale files of an in-tree ``build/`` folder or the editable install's extension."""
    listed = _run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT)
    assert listed.returncode == 0, listed.stderr
    for name in filter(None, listed.stdout.split("\0")):
        src = ROOT / name
        if src.is_file():  # a tracked file deleted in the working tree is not copied
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


@pytest.fixture(scope="module")
def core_env(tmp_path_factory) -> dict:
    """A fresh venv with eventlog installed without extras: ``{"python", "bin", "wheel", "work"}``."""
    base = tmp_path_factory.mktemp("core-install")
    src = _source_copy(base / "src")
    wheels = base / "wheels"
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(wheels), str(src)])
    assert built.returncode == 0, f"building the wheel failed:\n{built.stdout}\n{built.stderr}"
    (wheel,) = wheels.glob("eventlog-*.whl")
    venv = base / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])  # no --system-site-packages
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    # the project's pip installs into the new environment (pip --python), which saves bootstrapping its own pip
    installed = _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
                      "--disable-pip-version-check", str(wheel)])
    assert installed.returncode == 0, f"pip install of the core failed (needs PyPI or pip's cache):\n{installed.stderr}"
    work = base / "work"
    work.mkdir()
    return {"python": str(python), "bin": venv / "bin", "wheel": wheel, "work": work}


def _replay(env: dict, *args: str) -> subprocess.CompletedProcess:
    """Run the core environment's ``replay`` script in its work folder (no terminal: plain output)."""
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return _run([str(env["bin"] / "replay"), *args], cwd=env["work"], timeout=120, env=clean)


def test_wheel_metadata_core_and_extras(core_env):
    """The wheel requires only the core packages; each extra brings its own, ``all`` brings every extra."""
    with zipfile.ZipFile(core_env["wheel"]) as z:
        (meta_name,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        java = [n for n in z.namelist() if n.startswith("connectors/spark/jvm/src/") and n.endswith(".java")]
        assert len(java) >= 5, "the JVM tap's Java sources ship in the wheel (built against the user's pyspark)"
        meta = Parser().parsestr(z.read(meta_name).decode())
    core, extras = set(), {}
    for req in meta.get_all("Requires-Dist"):
        name = req.split(";")[0].split("[")[0].split("<")[0].split(">")[0].split("=")[0].strip().lower()
        if "extra ==" in req:
            extra = req.split("extra ==")[1].strip().strip("'\"")
            extras.setdefault(extra, set()).add(req.split(";")[0].strip().lower())
        else:
            core.add(name)
    assert core == CORE
    assert set(meta.get_all("Provides-Extra")) == {"spark", "kafka", "plot", "sql", "s3", "ui", "all", "test", "lint"}
    assert {r.split("<")[0].split(">")[0] for r in extras["spark"]} == {"pyspark", "pandas"}
    assert {r.split("<")[0].split(">")[0] for r in extras["kafka"]} == {"confluent-kafka"}
    assert {r.split("<")[0].split(">")[0] for r in extras["plot"]} == {"matplotlib"}
    assert {r.split("<")[0].split(">")[0] for r in extras["sql"]} == {"duckdb"}
    assert {r.split("<")[0].split(">")[0] for r in extras["s3"]} == {"boto3"}
    assert {r.split("<")[0].split(">")[0] for r in extras["ui"]} == {"prometheus_client"}
    assert extras["all"] == {"eventlog[kafka,plot,s3,spark,sql,ui]"}


def test_optional_packages_are_not_installed_and_the_core_imports(core_env):
    code = (
        "import importlib.util, json, sys\n"
        f"absent = [m for m in {sorted(OPTIONAL)!r} if importlib.util.find_spec(m) is None]\n"
        "import eventlog, capture, replay, replay.cli, runtime, connectors.files, connectors.memory\n"
        "print(json.dumps({'absent': absent, 'prefix': sys.prefix, 'base': sys.base_prefix,\n"
        "                  'eventlog': eventlog.__file__}))\n"
    )
    out = _run([core_env["python"], "-c", code], cwd=core_env["work"])
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["absent"] == sorted(OPTIONAL), f"installed with the core: {set(OPTIONAL) - set(doc['absent'])}"
    assert doc["prefix"] != doc["base"]  # a virtual environment, not the base interpreter
    assert doc["eventlog"].startswith(doc["prefix"])  # the installed wheel, not the working tree


def test_cli_on_a_file_log(core_env):
    work = core_env["work"]
    rows = [{"t": t, "word": w, "n": i} for i, (t, w) in enumerate([(0, "spark"), (0, "kafka"), (1, "arrow"),
                                                                      (2, "spark"), (2, "avro")])]
    (work / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    imported = _replay(core_env, "import", "in.jsonl", "log", "words", "--time", "t")
    assert imported.returncode == 0, imported.stderr
    assert "5 rows" in imported.stdout + imported.stderr

    ls = _replay(core_env, "ls", "log", "--json")
    assert ls.returncode == 0, ls.stderr
    assert '"words"' in ls.stdout and '"finished"' in ls.stdout

    cat = _replay(core_env, "cat", "log", "words")
    assert cat.returncode == 0, cat.stderr
    lines = [json.loads(line) for line in cat.stdout.splitlines()]
    records = [(line["time"], line["record"]) for line in lines if line["kind"] == "messages"]
    assert records == [(r["t"], {"word": r["word"], "n": r["n"]}) for r in rows]

    stats = _replay(core_env, "stats", "log", "words", "--json")
    assert stats.returncode == 0, stats.stderr
    assert sum(t["records"] for t in json.loads(stats.stdout)["times"]) == 5

    verify = _replay(core_env, "verify", "log")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "ok" in verify.stdout

    copied = _replay(core_env, "copy", "log", "log-avro", "words", "--encoding", "avro")  # fastavro + zstandard
    assert copied.returncode == 0, copied.stderr
    same = _replay(core_env, "diff", "log", "log-avro", "words")
    assert same.returncode == 0, same.stdout + same.stderr

    (work / "other.jsonl").write_text("".join(json.dumps({**r, "n": r["n"] + (r["t"] == 2)}) + "\n" for r in rows))
    assert _replay(core_env, "import", "other.jsonl", "log-other", "words", "--time", "t").returncode == 0
    differ = _replay(core_env, "diff", "log", "log-other", "words")
    assert differ.returncode == 1, differ.stdout + differ.stderr


def test_missing_extras_name_the_extra(core_env):
    work = core_env["work"]
    (work / "one.jsonl").write_text('{"t": 0, "x": 1}\n')
    assert _replay(core_env, "import", "one.jsonl", "plotlog", "s", "--time", "t").returncode == 0

    plot = _replay(core_env, "frontier", "plotlog", "s", "--plot", "f.png")
    assert plot.returncode == 3
    assert plot.stderr.strip() == ("replay: error: replay frontier --plot needs matplotlib, which is not installed: "
                                   "pip install 'eventlog[plot]' (or 'eventlog[all]')")
    assert not (work / "f.png").exists()

    sql = _replay(core_env, "sql", "plotlog", "select count(*) from s")
    assert sql.returncode == 3
    assert sql.stderr.strip() == ("replay: error: replay sql needs duckdb, which is not installed: "
                                  "pip install 'eventlog[sql]' (or 'eventlog[all]')")

    kafka = _replay(core_env, "ls", "kafka://127.0.0.1:9/jobA")
    assert kafka.returncode == 3
    assert "kafka:// logs needs confluent-kafka" in kafka.stderr and "pip install 'eventlog[kafka]'" in kafka.stderr
    assert len(kafka.stderr.strip().splitlines()) == 1

    code = (
        "import json\n"
        "from eventlog import MissingExtraError, open_log\n"
        "said = {}\n"
        "def expect(name, fn):\n"
        "    try:\n"
        "        fn()\n"
        "    except MissingExtraError as e:\n"
        "        said[name] = [str(e), isinstance(e, ImportError)]\n"
        "expect('open_log', lambda: open_log('kafka://127.0.0.1:9/jobA'))\n"
        "expect('spark', lambda: __import__('connectors.spark'))\n"
        "from runtime.channels.factory import open_channel_store\n"
        "expect('channels', lambda: open_channel_store('kafka://127.0.0.1:9/rt', 'job'))\n"
        "import pyarrow.fs as pafs\n"
        "from connectors.files.storage import S3Storage\n"
        "fs = pafs.S3FileSystem(endpoint_override='127.0.0.1:9', scheme='http', anonymous=True, region='us-east-1')\n"
        "expect('s3', lambda: S3Storage(fs).create_exclusive('bucket/key', b'x'))\n"
        "print(json.dumps(said))\n"
    )
    out = _run([core_env["python"], "-c", code], cwd=work)
    assert out.returncode == 0, out.stderr
    said = json.loads(out.stdout)
    assert said["open_log"] == ["kafka:// logs needs confluent-kafka, which is not installed: pip install "
                                "'eventlog[kafka]' (or 'eventlog[all]')", True]
    assert "pip install 'eventlog[spark]'" in said["spark"][0] and "pyspark" in said["spark"][0]
    assert "pip install 'eventlog[kafka]'" in said["channels"][0]
    assert said["s3"] == ["writing logs to S3 (conditional writes) needs boto3, which is not installed: pip install "
                          "'eventlog[s3]' (or 'eventlog[all]')", True]
