"""What the golden logs hold (``tests/golden``: file logs of each format version and Kafka records), stated
literally: the golden tests of file and Kafka logs compare what today's code reads with these; and the runtime's
channel bundle vectors (``tests/golden/bundles``)."""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
from typing import Any

from eventlog import Messages, Progress
from tests.support.paths import GOLDEN_BUNDLES

UTC = dt.timezone.utc


def row(i, name, tags, loc):
    """Golden record ``i``."""
    return {"id": i, "name": name, "ts": dt.datetime(2026, 1, 1, 0, 0, i, tzinfo=UTC), "tags": tags, "loc": loc}


ROWS = {
    1: row(1, "n1", ["a"], {"lat": 0.5, "lon": -0.25}),
    2: row(2, None, ["a", "b"], {"lat": 1.0, "lon": -0.5}),
    3: row(3, "n3", [], None),
    4: row(4, None, ["a"], {"lat": 2.0, "lon": -1.0}),
    5: row(5, "n5", ["a", "b"], {"lat": 2.5, "lon": -1.25}),
    6: row(6, None, [], {"lat": 3.0, "lon": -1.5}),
    7: row(7, "n7", ["a"], {"lat": 3.5, "lon": -1.75}),
    8: row(8, None, ["a", "b"], {"lat": 4.0, "lon": -2.0}),
    9: row(9, "n9", [], {"lat": 4.5, "lon": -2.25}),
}

EXPECTED = {
    ("", 0): [("M", 0, [1, 2]), ("P", ((0, -1), (2, 1))), ("M", 2, [3]), ("M", 5, [4, 5, 6]), ("P", ((2, -1),))],
    ("", 1): [("M", 1, [7]), ("P", ((0, -1), (4, 1))), ("P", ((4, -1),))],
    ("-product", 0): [
        ("M", (0, 1), [8]),
        ("P", (((0, 0), -1), ((0, 2), 1), ((1, 0), 1))),
        ("M", (1, 1), [9]),
        ("P", (((0, 2), -1), ((1, 0), -1))),
    ],
}


def as_tuples(events):
    """Events as comparable tuples: ``("M", time, records)`` and ``("P", updates)``."""
    out = []
    for e in events:
        if isinstance(e, Messages):
            out.append(("M", e.time, e.records.to_pylist()))
        else:
            assert isinstance(e, Progress)
            out.append(("P", e.updates))
    return out


# -- bundle vectors (tests/golden/bundles) ---------------------------------------------------------------------


def _load_make_vectors() -> Any:
    spec = importlib.util.spec_from_file_location("make_vectors", GOLDEN_BUNDLES / "make_vectors.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


make_vectors = _load_make_vectors()
"""``tests/golden/bundles/make_vectors.py``, the script that wrote the vectors (its parser reads them)."""


def bundle_vector(name: str) -> tuple[bytes, dict[str, Any]]:
    """The bytes of vector ``name`` and its expected decode."""
    data = make_vectors.parse_hex((GOLDEN_BUNDLES / f"{name}.hex").read_text())
    expected = json.loads((GOLDEN_BUNDLES / f"{name}.json").read_text())
    return data, expected
