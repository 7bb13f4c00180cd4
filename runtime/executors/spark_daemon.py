"""A PySpark worker daemon that imports the runtime before forking workers.

PySpark forks every Python worker from a daemon process; a worker then imports what its task needs
(pyarrow, numpy, pandas — which ``pyarrow.dataset`` imports, and pyarrow's first ``from_pylist`` /
``record_batch(dict)`` would otherwise — the runtime, and PySpark's own ``pyspark.worker``, which Spark puts
on the path as ``pyspark.zip``: compiled from source in every worker, since a zip holds no bytecode cache),
and PySpark's worker calls ``importlib.invalidate_caches()`` after adding the job's files folder to
``sys.path``, which makes every zip importer on the path re-read its archive's directory (pyspark.zip, py4j,
the spark-core jar). Together about a second of CPU per worker on a loaded machine, while the other tasks
of the same barrier job already run. With

    .config("spark.python.daemon.module", "runtime.executors.spark_daemon")

the daemon does all the importing once and every forked worker starts with it done: the daemon imports
the modules, makes pyarrow load its pandas shim, and then forgets its zip importers
(``sys.path_importer_cache`` is a cache: an import from an archive later makes a new importer, from the
directory ``zipimport`` already read), so the workers' ``invalidate_caches()`` has nothing to re-read.
Optional: the runtime works with the default daemon too, paying the imports in each new worker (Spark
reuses workers, ``spark.python.worker.reuse``, so once per worker process).
"""

from __future__ import annotations

import sys
import zipimport

import numpy  # noqa: F401
import pyarrow
import pyarrow.acero  # noqa: F401 - Table.group_by (keyed aggregates) imports it on first use
import pyarrow.compute  # noqa: F401
import pyarrow.ipc  # noqa: F401
from pyspark.daemon import manager

import runtime.executors.spark  # noqa: F401
import runtime.task  # noqa: F401


def preload() -> None:
    """Import what every worker of a runtime task imports, and drop the zip importers (see the module doc).
    Nothing here starts a thread (the daemon forks after it)."""
    try:
        import pandas  # noqa: F401 - pyarrow.dataset imports it; explicit in case that changes
    except ImportError:
        pass
    import pyspark.worker  # noqa: F401 - what daemon.worker imports in each forked worker

    pyarrow.record_batch({"x": [1]})              # pyarrow's lazy pandas shim, loaded on the first call
    pyarrow.RecordBatch.from_pylist([{"x": 1}])
    for path, finder in list(sys.path_importer_cache.items()):
        if isinstance(finder, zipimport.zipimporter):
            del sys.path_importer_cache[path]


if __name__ == "__main__":
    preload()
    manager()
