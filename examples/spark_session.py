"""How the examples start Spark: the master from ``--master`` or ``$SPARK_MASTER`` (default local mode), extra
settings from ``--conf KEY=VALUE``, Python workers on this interpreter that import this project.

    .venv/bin/python examples/demo.py --master spark://127.0.0.1:17077
    SPARK_MASTER=spark://127.0.0.1:17077 .venv/bin/python examples/runtime_wordcount.py --spark

Local mode's Python workers inherit the driver's environment (``PYSPARK_PYTHON``, ``PYTHONPATH``). On a
cluster the executors get ``spark.executorEnv.PYTHONPATH`` = this project's folder, which works when every
host sees it at the same path (a shared disk, as with ``tools/spark-cluster``); on hosts that do not, ship
the environment instead (``--conf spark.archives=eventlog-env.tar.gz#environment`` with
``PYSPARK_PYTHON=./environment/bin/python``; see docs/deploy.md).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

ROOT = str(Path(__file__).resolve().parent.parent)


def add_spark_options(parser: argparse.ArgumentParser, default_local: str) -> None:
    """Add ``--master`` (default ``$SPARK_MASTER``, else ``default_local``) and repeatable ``--conf KEY=VALUE``."""
    parser.add_argument("--master", default=os.environ.get("SPARK_MASTER") or default_local,
                        help=f"Spark master URL (default $SPARK_MASTER, else {default_local}); e.g. "
                             "spark://127.0.0.1:17077 for tools/spark-cluster")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting (repeatable), e.g. spark.archives=env.tar.gz#environment")


def start_spark(app: str, master: str, settings: dict[str, Any], confs: list[str] = ()):
    """A SparkSession on ``master`` with ``settings`` and ``confs`` (``KEY=VALUE`` strings from ``--conf``,
    applied last); see the module doc for the Python environment."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if ROOT not in paths:   # local mode: the Python workers inherit this
        os.environ["PYTHONPATH"] = os.pathsep.join([ROOT, *paths])
    from pyspark.sql import SparkSession

    conf = {k: str(v) for k, v in settings.items()}
    if not master.startswith("local"):
        conf.setdefault("spark.executorEnv.PYTHONPATH", ROOT)
    for item in confs:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--conf needs KEY=VALUE, got {item!r}")
        conf[key] = value
    builder = SparkSession.builder.master(master).appName(app)
    for key, value in conf.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
