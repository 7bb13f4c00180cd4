import importlib.util
import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


class build_py_with_jvm_tap(build_py):
    """``build_py`` that first puts the JVM tap's prebuilt jars into ``connectors/spark/jvm/lib`` (package data,
    so wheels and editable installs carry them): ``connectors/spark/jvm/build.py``. Whatever cannot be built (no
    JDK, Maven offline) is said and skipped; the install goes on ($EVENTLOG_JVM_PREBUILD=0 skips it all)."""

    def run(self):
        if os.environ.get("EVENTLOG_JVM_PREBUILD", "1") != "0":
            path = os.path.join(HERE, "connectors", "spark", "jvm", "build.py")
            spec = importlib.util.spec_from_file_location("_eventlog_jvm_build", path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module  # loaded by path: the package's dependencies are not installed yet
            spec.loader.exec_module(module)
            try:
                module.prebuild()
            except Exception as e:  # noqa: BLE001 - a prebuilt jar is an optimisation: never fail the install
                print(f"eventlog: the JVM tap's jars are not prebuilt ({e}); it compiles on first use", file=sys.stderr)
        super().run()


setup(
    cmdclass={"build_py": build_py_with_jvm_tap},
    ext_modules=[
        Extension(
            "eventlog._bundle_native",
            ["eventlog/_bundle_native.c"],
            extra_compile_args=["-O3", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
        ),
        Extension(
            "eventlog.encoding._ipc_native",
            ["eventlog/encoding/_ipc_native.c"],
            extra_compile_args=["-O3", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
        ),
    ],
)
