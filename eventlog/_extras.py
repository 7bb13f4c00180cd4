"""The optional packages of eventlog and the extras that install them (``pip install 'eventlog[kafka]'``).

The core install (the format, file logs, replay and the ``replay`` CLI) imports none of them; each feature
that needs one imports it through ``require``, so a missing package is one ``MissingExtraError`` naming
the extra to install instead of a bare ``ModuleNotFoundError``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import MissingExtraError

_DISTRIBUTIONS = {
    "pyspark": "pyspark",
    "pandas": "pandas",
    "confluent_kafka": "confluent-kafka",
    "matplotlib": "matplotlib",
    "duckdb": "duckdb",
    "prometheus_client": "prometheus-client",
}
"""The PyPI distribution of each optional top-level module (where the names differ)."""


def require(module: str, extra: str, feature: str) -> ModuleType:
    """Import ``module`` and return it; if its package is not installed, raise ``MissingExtraError`` saying
    that ``feature`` needs it and to install ``eventlog[extra]``. An import error inside an installed
    package (a broken installation) is raised unchanged."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        top = module.split(".")[0]
        missing = getattr(e, "name", None)
        if missing is not None and missing.split(".")[0] != top:
            raise
        package = _DISTRIBUTIONS.get(top, top)
        raise MissingExtraError(
            f"{feature} needs {package}, which is not installed: pip install 'eventlog[{extra}]' "
            f"(or 'eventlog[all]')") from e
