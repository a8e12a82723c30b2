"""Run a stage's unit tests once with its compiled kernel and once with the Python code.

The compiled kernels (``pgbridge.native``) must behave exactly like the Python code they shadow, so
every decode and encode unit test runs both ways, whatever ``PGBRIDGE_PURE_PYTHON`` says (that
switch is for running the bridge). The ``native`` run fails when the kernel is not built: ``make
test`` builds it, and a silently missing kernel would make the benchmarks measure something else.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from types import ModuleType

import pytest


def compiled(kernel_module: str) -> ModuleType:
    """The built kernel, imported directly; a test failure naming the fix when it is not built."""
    try:
        return importlib.import_module(kernel_module)
    except ImportError:
        pytest.fail(f"the compiled kernel {kernel_module} is not built: run `pip install -e .` with a C compiler")


def kernel_fixture(stage_module: str, kernel_module: str):  # type: ignore[no-untyped-def]
    @pytest.fixture(autouse=True, params=["native", "python"])
    def kernel(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
        stage = importlib.import_module(stage_module)
        monkeypatch.setattr(stage, "_native", compiled(kernel_module) if request.param == "native" else None)
        yield request.param

    return kernel
