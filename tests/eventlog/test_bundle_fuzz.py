"""Fuzzing the native bundle decoder in CI: 100k mutated and random inputs through decode, iter_bundles
and Bundle.payloads(); the only exception allowed is BundleError, and the interpreter must survive.

The inputs come from tools/fuzz_bundle.py (one seeded RNG; set EVENTLOG_FUZZ_SEED to vary it, and use
``python tools/fuzz_bundle.py --seed S --dump INDEX`` to reproduce a failing input).  The native
extension is required: without it these tests fail, they do not skip.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any

from eventlog import bundle as B
from tests.support.paths import TOOLS

SEED = int(os.environ.get("EVENTLOG_FUZZ_SEED", "20240601"))


def _load_driver() -> Any:
    path = TOOLS / "fuzz_bundle.py"
    spec = importlib.util.spec_from_file_location("fuzz_bundle", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["fuzz_bundle"] = mod  # dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


fuzz_bundle = _load_driver()

# Every rule of the decoder is reached by the inputs (so the fuzz is not just bouncing off the magic).
EXPECTED_KINDS = {
    "truncated bundle: N of the N header bytes present",
    "bad magic N (expected N)",
    "unknown BundleType N",
    "RawBundleSize N exceeds the N bytes after the bundle header",
    "MessageListSize N exceeds max_messages N",
    "MessageListSize N needs N bytes of message headers but RawBundleSize is N",
    "EMPTY bundle with MessageListSize N (must be N)",
    "EMPTY bundle with RawBundleSize N (must be N)",
    "BUNDLE bundle with no messages",
    "BARRIER bundle with no messages",
    "LastMessageId N is smaller than MessageListSize N (first id would be below N)",
    "message N: header overruns the bundle (N bytes left)",
    "message N: PayloadSize N exceeds the N bytes left in the bundle",
    "message N: MessageId N, expected N",
    "message N: MessageType N is not allowed in a BUNDLE bundle (need >= N)",
    "message N: MessageType N is not allowed in a BARRIER bundle (need N)",
    "RawBundleSize N is larger than the N bytes of its N messages",
    "N trailing bytes after the bundle",
}


def test_native_decoder_survives_100k_fuzzed_inputs() -> None:
    assert B.native is not None, "eventlog._bundle_native is not built: run `pip install -e .`"
    res = fuzz_bundle.fuzz(100_000, SEED, impl="native")
    assert res.failures == [], res.failures[:5]
    assert res.inputs == 100_000
    assert res.decoded > 1000 and res.bundles > res.decoded  # valid inputs are exercised too
    assert set(res.rejected) == EXPECTED_KINDS
    assert res.seconds < 60, f"fuzzing took {res.seconds:.1f} s"


def test_native_and_reference_agree_on_fuzzed_inputs() -> None:
    assert B.native is not None, "eventlog._bundle_native is not built: run `pip install -e .`"
    res = fuzz_bundle.fuzz(5_000, SEED + 1, impl="both")
    assert res.failures == [], res.failures[:5]
    assert res.inputs == 5_000 and res.decoded > 0


def test_driver_command_line(capsys: Any) -> None:
    assert fuzz_bundle.main(["--count", "2000", "--seed", str(SEED)]) == 0
    out = capsys.readouterr().out
    assert "inputs=2000" in out and "failures=0" in out
    assert fuzz_bundle.main(["--seed", str(SEED), "--dump", "3"]) == 0
    dumped = capsys.readouterr().out.splitlines()
    data, _ = list(fuzz_bundle.inputs(SEED, 4))[3]
    assert dumped[1] == data.hex()
