"""Every code block of README.md runs as written (issue 15 §4).

How the blocks run, in the README's order (one test case per step):

* ``python`` blocks: each in its own process of this environment's interpreter. A block that uses names it
  does not define (the replay block uses the quickstart's ``log``) runs in one process together with the
  block before it that defines them: one step.
* ``sh`` blocks: through ``bash -e -o pipefail``, this environment's ``bin`` first on ``PATH``.
* Every step runs in one work folder made of symbolic links to the repository's top-level entries, so
  ``tools/…``, ``examples/…`` and ``.venv/bin/python`` resolve as in a checkout while what the commands
  write there (``counts.parquet``, ``frontier.png``, ``repro.py``, ``summary.txt``) stays out of the
  repository.
* ``make …`` lines are not run (they are the CI, which runs this test); ``test_make_commands_are_the_ones_shown``
  checks the targets exist and do what the README says.
* A block marked ``<!-- readme-test: skip (reason) -->`` is not run; ``test_skipped_blocks_are_listed``
  lists and counts them and checks the files they name exist.

What the test changes, and nothing else:

* Kafka: ``127.0.0.1:19092`` in a block becomes the test broker's address (``kafka_bootstrap``:
  ``$EVENTLOG_KAFKA``, which ``make test`` sets to exactly that address, or the session's own broker). The
  block that starts and stops its own broker (``tools/kafka-broker start`` … ``stop``) gets a private port
  instead, through ``$EVENTLOG_KAFKA_PORT`` (the tool's default port) and the same substitution, so it never
  stops the broker the other tests use.
* Environment: ``PYSPARK_PYTHON`` is this interpreter, as the README says to set it.
* State: the ``/tmp`` paths the README writes (``/tmp/cap``, …) are removed before the run, under a lock
  file so two runs on one machine do not interleave, and the topics of the Kafka prefixes the blocks write
  (``jobA``, ``jobB``, ``rt``) are deleted from the test broker first.
"""

from __future__ import annotations

import ast
import builtins
import fcntl
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.paths import ROOT

pytestmark = pytest.mark.xdist_group("readme")  # one xdist worker, in order (tests/conftest.py)

README = ROOT / "README.md"
README_KAFKA = "127.0.0.1:19092"
"""The broker address the README's blocks use."""
LOCK = Path("/tmp/eventlog-readme-test.lock")
STEP_TIMEOUT = 420
SKIP = re.compile(r"^<!--\s*readme-test:\s*skip\s*\((?P<reason>.+)\)\s*-->$")
EXPECTED_SKIPS = {"Development": 2}
"""Sections and how many of their blocks are marked skip (development runs, the AddressSanitizer build)."""


@dataclass
class Block:
    """A fenced code block of the README."""

    line: int
    lang: str
    code: str
    section: str
    skip: str | None = None


@dataclass
class Step:
    """What runs in one process: one sh block, or python blocks that share names."""

    kind: str
    blocks: list[Block] = field(default_factory=list)

    @property
    def code(self) -> str:
        return "\n".join(b.code for b in self.blocks)

    @property
    def id(self) -> str:
        first = self.blocks[0]
        section = re.sub(r"\W+", "-", first.section.lower()).strip("-")
        return f"L{first.line}-{self.kind}-{section}"


def parse_readme(text: str) -> list[Block]:
    """Every fenced block with its language, first line, section and skip marker."""
    blocks: list[Block] = []
    lines = text.splitlines()
    section, i = "", 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            section = line[3:].strip()
        fence = re.match(r"^```(\w*)\s*$", line)
        if fence:
            start = i
            i += 1
            body: list[str] = []
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            prev = next((lines[k].strip() for k in range(start - 1, -1, -1) if lines[k].strip()), "")
            marker = SKIP.match(prev)
            blocks.append(Block(start + 1, fence.group(1), "\n".join(body) + "\n", section,
                                marker.group("reason") if marker else None))
        i += 1
    return blocks


def _names(code: str) -> tuple[set[str], set[str]]:
    """(names a python block defines, names it uses without defining them)."""
    defined: set[str] = set()
    used: set[str] = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Name):
            (used if isinstance(node.ctx, ast.Load) else defined).add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            defined.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
    return defined, used - defined - set(dir(builtins))


def is_make_only(block: Block) -> bool:
    """An sh block of ``make`` commands (and comments) only."""
    commands = [ln.strip() for ln in block.code.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    return bool(commands) and all(c.split()[0] == "make" for c in commands)


def plan(blocks: list[Block]) -> list[Step]:
    """The steps that run the README's runnable blocks, in order."""
    steps: list[Step] = []
    for b in blocks:
        if b.skip is not None or (b.lang == "sh" and is_make_only(b)):
            continue
        if b.lang == "python":
            _, free = _names(b.code)
            last = steps[-1] if steps else None
            if free and last is not None and last.kind == "python" and free <= _names(last.code)[0]:
                last.blocks.append(b)
                continue
            steps.append(Step("python", [b]))
        elif b.lang == "sh":
            steps.append(Step("sh", [b]))
        else:
            raise AssertionError(f"README.md line {b.line}: a ```{b.lang} block; the test runs python and sh")
    return steps


BLOCKS = parse_readme(README.read_text())
STEPS = plan(BLOCKS)


def _tmp_paths(blocks: list[Block]) -> set[str]:
    """The /tmp folders and files the blocks name, as paths or in file:// URIs (``/tmp/cap``, ``/tmp/out``…)."""
    return {m for b in blocks for m in re.findall(r"(?<!\w)/tmp/[\w.-]+", b.code)}


def _kafka_prefixes(blocks: list[Block]) -> set[str]:
    return {m for b in blocks for m in re.findall(re.escape(f"kafka://{README_KAFKA}/") + r"([\w-]+)", b.code)}


def _starts_own_broker(step: Step) -> bool:
    return "tools/kafka-broker start" in step.code


def _free_port_pair() -> int:
    """A port p with p and p+1 free (a one-node cluster: clients on p, its controller on p+1), below the
    kernel's ephemeral range (32768-60999 here): a port picked there can be taken by any outgoing connection of
    another test in the seconds before the broker binds it (a CI run lost its controller port that way).
    Each pytest-xdist worker searches a block of its own (``tests.support.ports``)."""
    import random

    from tests.support.ports import port_free, worker_index

    base = 23000 + 400 * worker_index()
    candidates = list(range(base, base + 400, 2))
    random.shuffle(candidates)
    for port in candidates:
        if port_free(port) and port_free(port + 1):
            return port
    raise AssertionError(f"no two free consecutive ports in {base}..{base + 399}")


def _delete_topics(bootstrap: str, prefixes: set[str]) -> None:
    """Delete the topics ``<prefix>.*`` on the test broker and wait until they are gone."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 60
    while True:
        topics = [t for t in admin.list_topics(timeout=30).topics if any(t.startswith(p + ".") for p in prefixes)]
        if not topics:
            return
        assert time.monotonic() < deadline, f"topics still there: {topics}"
        for future in admin.delete_topics(topics, operation_timeout=30).values():
            try:
                future.result()
            except Exception:  # noqa: BLE001 - already being deleted; the listing above is the judge
                pass
        time.sleep(0.5)


def _remove(paths: set[str]) -> None:
    for p in paths:
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p)
        elif os.path.lexists(p):
            os.unlink(p)


@pytest.fixture(scope="session")
def readme_run(tmp_path_factory, kafka_bootstrap):
    """The work folder, the environment and the broker address of the run; holds the lock and the README's
    /tmp paths, cleared, until the session ends. Session-scoped, not module-scoped: under pytest-xdist a worker
    may run other files' tests between this file's (they stay on one worker, in order), and a module fixture
    set up again would clear what the earlier blocks wrote for the later ones."""
    runnable = [b for s in STEPS for b in s.blocks]
    with LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _remove(_tmp_paths(runnable))
        shared = {p for s in STEPS if not _starts_own_broker(s) for p in _kafka_prefixes(s.blocks)}
        _delete_topics(kafka_bootstrap, shared)
        work = tmp_path_factory.mktemp("readme-work")
        for entry in ROOT.iterdir():
            if entry.name != ".git":
                (work / entry.name).symlink_to(entry)
        env = {k: v for k, v in os.environ.items() if k not in ("EVENTLOG_KAFKA_PORT",)}
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        env["PYSPARK_PYTHON"] = sys.executable
        scripts = tmp_path_factory.mktemp("readme-scripts")
        yield {"work": work, "env": env, "kafka": kafka_bootstrap, "scripts": scripts, "failed": []}
        _remove(_tmp_paths(runnable))


def _report(step: Step, code: str, proc: subprocess.CompletedProcess) -> str:
    where = ", ".join(f"README.md line {b.line}" for b in step.blocks)
    return (f"{where} ({step.blocks[0].section}) exited {proc.returncode}\n--- code as run ---\n{code}"
            f"--- stdout (tail) ---\n{proc.stdout[-3000:]}\n--- stderr (tail) ---\n{proc.stderr[-5000:]}")


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.parametrize("step", STEPS, ids=[s.id for s in STEPS])
def test_readme_block_runs(step: Step, readme_run):
    env = dict(readme_run["env"])
    broker = readme_run["kafka"]
    own_port = None
    if _starts_own_broker(step):
        own_port = _free_port_pair()
        env["EVENTLOG_KAFKA_PORT"] = str(own_port)
        broker = f"127.0.0.1:{own_port}"
    code = step.code.replace(README_KAFKA, broker)  # the only change made to a block's text
    if step.kind == "python":
        script = readme_run["scripts"] / f"{step.id}.py"
        script.write_text(code)
        cmd = [sys.executable, "-u", str(script)]
    else:
        cmd = ["bash", "-e", "-o", "pipefail", "-c", code]
    try:
        proc = subprocess.run(cmd, cwd=readme_run["work"], env=env, capture_output=True, text=True,
                              timeout=STEP_TIMEOUT, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        said = [(x.decode(errors="replace") if isinstance(x, bytes) else x or "") for x in (e.stdout, e.stderr)]
        proc = subprocess.CompletedProcess(cmd, f"timeout after {STEP_TIMEOUT} s", *said)
    finally:
        if own_port is not None:  # the block stops its broker itself; this is for a block that failed first
            subprocess.run([sys.executable, str(ROOT / "tools" / "kafka-broker"), "stop", "--port", str(own_port)],
                           capture_output=True, timeout=120)
    assert proc.returncode == 0, _report(step, code, proc)


def test_every_block_is_run_checked_or_listed():
    """Each block is in exactly one step, is a make-only block, or is marked skip; python blocks that
    depend on earlier ones found them."""
    in_steps = [b.line for s in STEPS for b in s.blocks]
    make_only = [b.line for b in BLOCKS if b.skip is None and b.lang == "sh" and is_make_only(b)]
    skipped = [b.line for b in BLOCKS if b.skip is not None]
    assert sorted(in_steps + make_only + skipped) == [b.line for b in BLOCKS]
    assert make_only, "the README's first block shows make demo / make test"
    for s in STEPS:
        if s.kind == "python":
            defined: set[str] = set()
            for b in s.blocks:
                names, free = _names(b.code)
                assert free <= defined, f"README.md line {b.line} uses {sorted(free - defined)}, defined nowhere before"
                defined |= names
    quick = next(s for s in STEPS if s.blocks[0].section == "Quickstart")
    assert [b.section for b in quick.blocks] == ["Quickstart", "Replay with another worker count"]


def test_skipped_blocks_are_listed():
    """Only the known blocks are skipped, each with a reason; the files and targets they name exist."""
    skipped = [b for b in BLOCKS if b.skip is not None]
    for b in skipped:
        print(f"skipped: README.md line {b.line} ({b.section}): {b.skip}")
    counts: dict[str, int] = {}
    for b in skipped:
        counts[b.section] = counts.get(b.section, 0) + 1
    assert counts == EXPECTED_SKIPS
    assert all(len(b.skip) > 20 for b in skipped)
    targets = _make_targets()
    for b in skipped:
        for path in re.findall(r"(?:\.venv/bin/python|python) ((?:tools|tests|examples)/[\w/.*-]+\.py|setup\.py)",
                               b.code):
            assert list(ROOT.glob(path)), f"README.md line {b.line}: {path} does not exist"
        for target in re.findall(r"^make (\S+)", b.code, re.M):
            assert target in targets, f"README.md line {b.line}: make {target}: no such target"
        for glob in re.findall(r"(tests/(?:\w+/)*test_\w+\*?\.py)", b.code):
            assert list(ROOT.glob(glob)), glob


def _make_targets() -> dict[str, str]:
    """Makefile targets and their recipes (prerequisites line included)."""
    targets: dict[str, str] = {}
    current = None
    for line in (ROOT / "Makefile").read_text().splitlines():
        m = re.match(r"^([\w$().-]+):(?!=)(.*)$", line)
        if m:
            current = m.group(1)
            targets[current] = m.group(2) + "\n"
        elif line.startswith("\t") and current:
            targets[current] += line + "\n"
        elif not line.strip():
            current = None
    return targets


def test_make_commands_are_the_ones_shown():
    """The make lines are not run here (they are the CI); they name real targets that do what the README says."""
    targets = _make_targets()
    shown = [(b, ln.split()) for b in BLOCKS if b.lang == "sh"
             for ln in b.code.splitlines() if ln.strip().startswith("make ")]
    assert {words[1] for _, words in shown} >= {"demo", "test"}
    for b, words in shown:
        assert words[1] in targets, f"README.md line {b.line}: make {words[1]}: no such target"
        for var in (w.split("=")[0] for w in words[2:] if "=" in w and not w.startswith("#")):
            assert f"$({var})" in (ROOT / "Makefile").read_text(), f"make {words[1]}: {var} is not used"
    stamp = targets["$(STAMP)"]
    assert '-m pip install --quiet -e ".[all,test,lint]"' in stamp  # "installs eventlog" with every extra
    assert "$(STAMP)" in targets["demo"] and "$(STAMP)" in targets["test"]
    assert "examples/demo.py --log ./demo-log" in targets["demo"]
    assert "tools/kafka-broker start" in targets["test"] and "-m pytest" in targets["test"]
    assert "tools/kafka-broker stop" in targets["test"]


def _fake_checkout(tmp_path: Path, venv: bool) -> tuple[Path, Path]:
    """A folder with this repository's tools/ and, if ``venv``, a ``.venv/bin/python`` that records how it
    was called and then runs the real interpreter."""
    shutil.copytree(ROOT / "tools", tmp_path / "tools", ignore=shutil.ignore_patterns("__pycache__"))
    called = tmp_path / "venv-called"
    if venv:
        fake = tmp_path / ".venv" / "bin" / "python"
        fake.parent.mkdir(parents=True)
        fake.write_text(f'#!/bin/sh\necho "$@" > {called}\nexec {sys.executable} "$@"\n')
        fake.chmod(0o755)
    return tmp_path / "tools" / "kafka-broker", called


def _as_old_python(tool: Path, *args: str) -> subprocess.CompletedProcess:
    """Run the launcher as Python 3.6 would: this interpreter with ``sys.version_info`` saying 3.6."""
    code = ("import runpy, sys\n"
            "sys.version_info = (3, 6, 15, 'final', 0)\n"
            f"sys.argv = [{str(tool)!r}, *{list(args)!r}]\n"
            f"runpy.run_path({str(tool)!r}, run_name='__main__')\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_kafka_broker_runs_directly_under_the_system_python3(tmp_path):
    """``tools/kafka-broker …`` as the README writes it: its ``#!/usr/bin/env python3`` finds the system
    python3 when no environment is active; the tool needs only its standard library."""
    port = str(_free_port_pair())
    system_path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                                  if not p.startswith(str(Path(sys.executable).parent)))
    found = shutil.which("python3", path=system_path)
    assert found is not None, "no python3 outside this environment on PATH"
    proc = subprocess.run([str(ROOT / "tools" / "kafka-broker"), "status", "--port", port], cwd=tmp_path,
                          env={**os.environ, "PATH": system_path, "TMPDIR": str(tmp_path)},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3, proc.stdout + proc.stderr  # status of a cluster that was never started
    assert f"not running on port {port}" in proc.stdout


def test_kafka_broker_reexecutes_under_the_venv_when_python_is_too_old(tmp_path):
    tool, called = _fake_checkout(tmp_path, venv=True)
    port = str(_free_port_pair())
    proc = _as_old_python(tool, "status", "--port", port)
    assert called.read_text().split() == [str(tool), "status", "--port", port]
    assert proc.returncode == 3 and f"not running on port {port}" in proc.stdout, proc.stderr


def test_kafka_broker_without_venv_and_too_old_a_python_says_what_to_do(tmp_path):
    tool, called = _fake_checkout(tmp_path, venv=False)
    proc = _as_old_python(tool, "start")
    assert proc.returncode == 2 and not called.exists()
    assert proc.stderr.startswith("kafka-broker: error: needs Python 3.8 or later;")
    assert "make venv" in proc.stderr
