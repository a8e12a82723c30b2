"""Run a stage's unit tests once with its compiled kernel and once with the Python code.

The compiled kernels (``pgbridge.native``) must behave exactly like the Python code they shadow, so
every decode and encode unit test runs both ways. The ``native`` run fails, rather than skips, when
the kernel is not built: ``make test`` builds it, and a silently missing kernel would make the
benchmarks measure something else. ``PGBRIDGE_PURE_PYTHON=1`` (the Python-only run) skips it.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator

import pytest

from pgbridge import native


def kernel_fixture(stage_module: str, kernel_module: str):  # type: ignore[no-untyped-def]
    @pytest.fixture(autouse=True, params=["native", "python"])
    def kernel(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
        stage = importlib.import_module(stage_module)
        if request.param == "python":
            monkeypatch.setattr(stage, "_native", None)
        elif native.pure_python_forced():
            pytest.skip(f"{native.PURE_PYTHON_ENV} is set: the Python code only")
        elif stage._native is None:
            pytest.fail(f"the compiled kernel {kernel_module} is not built: run `pip install -e .` "
                        "with a C compiler (or set PGBRIDGE_PURE_PYTHON=1 to test the Python code only)")
        yield request.param

    return kernel
