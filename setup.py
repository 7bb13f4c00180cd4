from setuptools import Extension, setup

setup(
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
    ]
)
