"""Build of the optional compiled kernels (Cython); everything else is in pyproject.toml.

Each kernel has a pure-Python twin that is always installed and tested, so a machine without a
working C compiler still gets a working pgbridge: the extensions are ``optional``, and a kernel that
fails to compile is a warning, not a failed install. ``pgbridge.native.status()`` (and the start-up
log line ``replicating``) says which code is in use.
"""

from __future__ import annotations

import sys
from typing import Any

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

DIRECTIVES = {"language_level": "3", "boundscheck": False, "wraparound": False, "cdivision": True}
KERNELS = {
    "pgbridge.decode._native": "service/pgbridge/decode/_native.pyx",
    "pgbridge.encode._native": "service/pgbridge/encode/_native.pyx",
}


def extensions() -> list[Extension]:
    """The kernels, marked optional *after* ``cythonize``: it rebuilds each Extension and drops the
    ``optional`` flag given to the original, which made a compiler failure fail the whole build."""
    built = cythonize([Extension(name, [source]) for name, source in KERNELS.items()],
                      compiler_directives=DIRECTIVES)
    for extension in built:
        extension.optional = True
    return built


class OptionalBuildExt(build_ext):
    """setuptools' build_ext, with one line per kernel that could not be built that says what it
    means (setuptools' own warning names only the compiler's error)."""

    def build_extension(self, ext: Any) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            print(f"WARNING: pgbridge's compiled kernel {ext.name} was not built ({exc}); "
                  "pgbridge will run its pure-Python code, which is correct but slower. "
                  "Install a C compiler (gcc or clang) and reinstall to get the kernels.", file=sys.stderr)
            raise


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
