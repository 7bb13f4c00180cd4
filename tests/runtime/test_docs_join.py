"""The worked join example of docs/runtime.md ("Several inputs") runs as written and checks its own result."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.support.paths import ROOT

MARK = "<!-- runtime-join-example -->"


def _example() -> str:
    text = (ROOT / "docs" / "runtime.md").read_text()
    assert MARK in text, "docs/runtime.md lost its join example"
    block = re.search(r"```python\n(.*?)```", text[text.index(MARK):], re.S)
    assert block is not None
    return block.group(1)


def test_the_join_example_of_the_runtime_docs_runs(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", _example()], cwd=str(tmp_path), env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.fullmatch(r"\d+ attributed clicks, \d+ impressions without one\n", done.stdout), done.stdout
