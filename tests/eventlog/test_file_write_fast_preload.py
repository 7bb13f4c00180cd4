"""``open_log`` preloads what pyarrow sets up on first use (pandas, which pyarrow imports the first time it
converts Python or numpy values): the first capture or replay after it imports nothing; ``EVENTLOG_PRELOAD=0``
leaves it out."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.support.paths import ROOT

CHILD = r"""
import json, sys
import numpy as np, pyarrow as pa
from eventlog import open_log
from capture import Capture
before_open = "pandas" in sys.modules
log = open_log(sys.argv[1], sync="none")
after_open = set(sys.modules)
schema = pa.schema([("id", pa.int64()), ("s", pa.string())])
with Capture(log, "s", 0, 1, schema=schema) as cap:
    cap.send(0, [{"id": 1, "s": "a"}])  # from_pylist: pyarrow's first conversion
    cap.send(1, pa.record_batch({"id": pa.array(np.arange(3)), "s": ["x", "y", "z"]}))
    cap.advance_to(2)
rows = sum(e.event.records.num_rows for e in log.reader("s", 0) if hasattr(e.event, "records"))
print(json.dumps({"before_open": before_open, "pandas_after_open": "pandas" in after_open,
                  "new": sorted(set(sys.modules) - after_open), "rows": rows}))
"""


def _run(tmp_path, **env):
    out = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "log")], cwd=ROOT, check=True, text=True,
                         stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT), **env}).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_first_capture_after_open_log_imports_nothing(tmp_path):
    got = _run(tmp_path)
    assert got["rows"] == 4
    assert not got["before_open"] and got["pandas_after_open"]
    assert not [m for m in got["new"] if m.split(".")[0] in ("pandas", "pyarrow", "numpy")], got["new"]


def test_preload_can_be_left_out(tmp_path):
    got = _run(tmp_path, EVENTLOG_PRELOAD="0")
    assert got["rows"] == 4 and not got["pandas_after_open"]
    assert any(m.startswith("pandas") for m in got["new"])  # what the preload saves the first send
