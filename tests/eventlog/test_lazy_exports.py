"""The packages import their public names on first use (``eventlog._lazy``, issue 35): importing a package costs
nothing it does not use, and every public name is there as before — ``from replay import Replayer``,
``replay.verify`` the function even after ``replay/verify.py`` was imported."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

from tests.support.paths import ROOT

PACKAGES = ["eventlog", "eventlog.parts", "connectors.files", "capture", "replay"]


@pytest.mark.parametrize("package", PACKAGES)
def test_importing_a_package_imports_none_of_its_modules(package):
    code = (f"import json, sys, {package}\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('pyarrow', 'numpy', 'pandas', 'eventlog', 'connectors', 'capture', 'replay'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    loaded = set(json.loads(out.stdout))
    assert not {m for m in loaded if m.split(".")[0] in ("pyarrow", "numpy", "pandas")}, loaded
    parents = {".".join(package.split(".")[:i]) for i in range(1, package.count(".") + 2)}
    assert loaded <= parents | {"eventlog", "eventlog._lazy"}, loaded


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_resolves(package):
    module = importlib.import_module(package)
    exports = module.__dict__["_lazy_exports"]
    assert set(module.__all__) == set(exports), "__all__ and the lazy exports name the same things"
    for name in module.__all__:
        value = getattr(module, name)
        origin = importlib.import_module(exports[name], package)
        assert value is getattr(origin, name), name
        assert name in dir(module)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        module.nope  # noqa: B018
    with pytest.raises(ImportError):
        exec(f"from {package} import nope", {})


def test_a_name_shared_with_its_module_stays_the_name():
    """``replay.verify``, ``replay.copy``, ``replay.dataset`` and ``capture.tap`` are the functions, whether the
    submodule of the same name was imported before the name was asked for or not (as with eager imports)."""
    code = """
import json
import replay.verify, replay.copy, capture.tap   # the submodules first
import replay, capture
first = [callable(replay.verify) and replay.verify.__module__, replay.copy.__module__, capture.tap.__module__]
from replay import dataset
import replay.dataset
print(json.dumps(first + [replay.dataset.__module__, dataset is replay.dataset]))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert json.loads(out.stdout) == ["replay.verify", "replay.copy", "capture.tap", "replay.dataset", True]


def test_submodules_import_as_before():
    from eventlog.parts import committed, rules

    assert committed.__name__ == "eventlog.parts.committed" and rules.__name__ == "eventlog.parts.rules"
    import eventlog.log

    assert eventlog.log.open_log is importlib.import_module("eventlog").open_log
