"""The distribution built once per session, as a release would build it (``python -m build``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.distribution import Dist, build, source_copy


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    """sdist + wheel (the wheel built from the sdist) of a clean copy of the checkout."""
    root: Path = tmp_path_factory.mktemp("dist")
    return build(source_copy(root / "src"), root / "out")
