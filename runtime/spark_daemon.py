"""A PySpark worker daemon that imports the runtime before forking workers.

PySpark forks every Python worker from a daemon process; a worker then imports what its task needs
(pyarrow, numpy, the runtime: about half a second of CPU each). With

    .config("spark.python.daemon.module", "runtime.spark_daemon")

the daemon imports them once and every forked worker starts with them loaded, so the tasks of a new
generation (a restart) start sooner. Optional: the runtime works with the default daemon too.
"""

from __future__ import annotations

import numpy  # noqa: F401
import pyarrow  # noqa: F401
import pyarrow.acero  # noqa: F401 - Table.group_by (keyed aggregates) imports it on first use
import pyarrow.compute  # noqa: F401
import pyarrow.ipc  # noqa: F401

import runtime.spark  # noqa: F401
import runtime.task  # noqa: F401
from pyspark.daemon import manager

if __name__ == "__main__":
    manager()
