"""Build the JVM tap ahead of use and print the jar's path: ``python -m connectors.spark.jvm``.

By default the jar for the installed pyspark's Spark minor, from its jars, into the package's prebuilt jars
(``lib/``; into the cache of jars compiled on first use where ``lib/`` is not writable) — what a developer runs
after editing the Java sources. ``--maven`` also builds the minors Maven Central serves (``build.MAVEN_SPARK``),
as the package build does. Exit 1, saying why, when the installed pyspark's jar cannot be built (no JDK, sources
that do not compile); a Maven minor that cannot be built is said and skipped.
"""

from __future__ import annotations

import argparse
import os
import sys

from connectors.spark import jvm as _jvm

from . import JvmTapUnavailable, _pyspark, jar_path
from . import build as _build


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m connectors.spark.jvm", description=__doc__.split("\n\n")[0])
    parser.add_argument("--maven", action="store_true",
                        help="also build the Spark minors served by Maven Central (needs mvn and the network)")
    args = parser.parse_args(argv)
    try:
        version, _ = _pyspark()
    except JvmTapUnavailable as e:
        print(f"the JVM tap cannot be built here: {e}", file=sys.stderr)
        return 1
    minor = _build.minor_of(version)
    lib = _jvm.LIB
    lib_writable = os.access(lib if os.path.isdir(lib) else os.path.dirname(lib), os.W_OK)
    if not lib_writable:  # an installed package's folder: the cache serves this machine alike
        try:
            print(jar_path())
        except JvmTapUnavailable as e:
            print(f"the JVM tap cannot be built here: {e}", file=sys.stderr)
            return 1
        return 0
    said: list[str] = []

    def say(message: str) -> None:
        said.append(message)
        print(f"eventlog: {message}", file=sys.stderr, flush=True)

    built = _build.prebuild(lib, maven=args.maven, local=True, say=say)
    if minor not in built:
        print(f"the JVM tap cannot be built here for Spark {minor}: {said[-1] if said else 'see above'}",
              file=sys.stderr)
        return 1
    print(built[minor])
    return 0


if __name__ == "__main__":
    sys.exit(main())
