"""The optional compiled kernels of the hot loop, and the switch that turns them off.

Two stages have a Cython twin of their innermost loop (``decode/_native.pyx``: a TupleData's
columns; ``encode/_native.pyx``: a row of text values into the Avro envelope). The Python code is
the reference: the compiled kernels handle only what they recognise and hand everything else back,
and the tests require both to produce the same objects and bytes. ``pip install`` builds them when
a C compiler is there; without one pgbridge runs the Python code, slower but identical.
``PGBRIDGE_PURE_PYTHON=1`` forces the Python code (to rule the kernels out when chasing a bug).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Final

PURE_PYTHON_ENV: Final = "PGBRIDGE_PURE_PYTHON"
KERNELS: Final = ("pgbridge.decode._native", "pgbridge.encode._native")


def pure_python_forced() -> bool:
    return os.environ.get(PURE_PYTHON_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def load(module: str) -> ModuleType | None:
    """The compiled kernel ``module``, or ``None`` when it is not built or is switched off."""
    if pure_python_forced():
        return None
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


def status() -> dict[str, bool]:
    """Kernel module → whether it is in use (for the start-up log and ``pgbridge check``)."""
    return {module: load(module) is not None for module in KERNELS}
