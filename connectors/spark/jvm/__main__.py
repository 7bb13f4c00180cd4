"""Build the JVM tap's jar now (against the installed pyspark) and print its path:
``python -m connectors.spark.jvm``. Exit 1, saying why, when it cannot be built (no JDK, another Spark)."""

from __future__ import annotations

import sys

from . import JvmTapUnavailable, jar_path


def main() -> int:
    try:
        print(jar_path())
    except JvmTapUnavailable as e:
        print(f"the JVM tap cannot be built here: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
