"""Packages that import their public names on first use, so that importing a package (or one small module of
it) costs nothing beyond what is used: ``replay --version`` imports no pyarrow, ``replay ls`` no pandas.

A package calls ``lazy_package(__name__, {"Name": ".module", ...})`` in its ``__init__`` (and imports the same
names under ``TYPE_CHECKING`` for type checkers); ``from package import Name`` then imports ``.module`` the first
time (PEP 562). Where a package exports a name its submodule of the same name defines (``replay.verify``, the
function in ``replay/verify.py``), the package attribute stays the exported name after the submodule is imported,
as it was when the package imported every name eagerly.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any, Mapping

_EXPORTS = "_lazy_exports"


class LazyPackage(types.ModuleType):
    """A package module whose public names (``_lazy_exports``: name -> module, relative to the package when it
    starts with a dot) are imported from their modules on first use."""

    def __getattr__(self, name: str) -> Any:
        target = self.__dict__.get(_EXPORTS, {}).get(name)
        if target is None:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(target, self.__name__), name)
        self.__dict__[name] = value
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        # the import system sets ``package.name = submodule`` when it first imports ``package.name``: keep the
        # public name the package exports from that submodule instead (what an eager ``from .name import name``
        # in the package's __init__ left there)
        if (isinstance(value, types.ModuleType) and value.__name__ == f"{self.__name__}.{name}"
                and self.__dict__.get(_EXPORTS, {}).get(name) == f".{name}"):
            value = getattr(value, name)
        super().__setattr__(name, value)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self.__dict__.get(_EXPORTS, ())))


def lazy_package(name: str, exports: Mapping[str, str]) -> None:
    """Make the package ``name`` (its ``__init__`` calls this with ``__name__``) import each public name of
    ``exports`` (name -> module) on first use."""
    module = sys.modules[name]
    module.__dict__[_EXPORTS] = dict(exports)
    module.__class__ = LazyPackage
