"""Build of the optional compiled kernels (Cython); everything else is in pyproject.toml.

Each kernel has a pure-Python twin that is always installed and tested, so a machine without a C
compiler still gets a working pgbridge: the extensions are ``optional`` and a failed build is a
warning, not an error. ``pgbridge.native.status()`` (and ``pgbridge check``) says which is in use.
"""

from __future__ import annotations

from Cython.Build import cythonize
from setuptools import Extension, setup

DIRECTIVES = {"language_level": "3", "boundscheck": False, "wraparound": False, "cdivision": True}

setup(
    ext_modules=cythonize(
        [
            Extension("pgbridge.decode._native", ["service/pgbridge/decode/_native.pyx"], optional=True),
            Extension("pgbridge.encode._native", ["service/pgbridge/encode/_native.pyx"], optional=True),
        ],
        compiler_directives=DIRECTIVES,
    ),
)
