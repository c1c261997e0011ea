"""Builds the profiler's LD_PRELOAD interposer (profiler/src/tprof.c) during the
project's normal ``pip install .`` / ``pip install -e .``: no manual make step.

Everything else about the package lives in pyproject.toml. The interposer is
declared as an Extension only so that setuptools compiles and places it
(inside the source tree for editable installs, in the wheel otherwise); it has
no Python init function and is never imported: ``profiler.library_path()``
finds it and ``profiler.env.profiling_env()`` puts it in LD_PRELOAD. It links
only libc/libdl.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "profiler._tprof",
            sources=["profiler/src/tprof.c"],
            depends=["profiler/src/tprof.h"],
            include_dirs=["profiler/src"],
            extra_compile_args=[
                "-O2",
                "-std=gnu11",
                "-fvisibility=hidden",
                "-Wall",
                "-Wextra",
                "-Wno-unused-parameter",
            ],
            libraries=["dl"],
            py_limited_api=False,
        )
    ],
)
