"""The oldest releases pyproject.toml allows really work: the unit suite on exactly those versions.

A floor that is never installed is a guess (``confluent-kafka>=2.5`` allowed releases on which
``pgbridge run`` failed at import). This installs the wheel with every runtime dependency pinned to
its declared floor and runs tests/unit there, with a tenth of the property tests' examples
(Hypothesis profile ``floor``, tests/conftest.py): the question here is whether the code works on
those releases; the suite's own run of tests/unit explores the properties.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.version import Version

from tests.support.distribution import (
    REPO_ROOT,
    Dist,
    Echo,
    clean_env,
    dependency_group,
    fresh_venv,
    minimum_constraints,
    minimum_versions,
    run,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]


def test_the_unit_suite_passes_on_the_declared_minimum_versions(dist: Dist, tmp_path: Path, live: Echo) -> None:
    constraints = tmp_path / "minimum.txt"
    constraints.write_text(minimum_constraints(), encoding="utf-8")
    live("\nminimum versions: a virtualenv with the wheel and every runtime dependency at its floor\n")
    venv = fresh_venv(tmp_path / "venv")
    installed = venv.pip("install", "-c", str(constraints), str(dist.wheel), *dependency_group("test"))
    # An extra the floor release does not have installs nothing, with only this warning.
    assert "does not provide the extra" not in installed.stdout + installed.stderr
    installed_versions = {name: Version(venv.version_of(name)) for name in minimum_versions()}
    assert installed_versions == {name: Version(v) for name, v in minimum_versions().items()}
    live("minimum versions: the unit suite there\n")
    suite = run([str(venv.python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "--hypothesis-profile", "floor",
                 "tests/unit"],
                cwd=REPO_ROOT, env=clean_env(), timeout=1200,
                echo=lambda line: live(f"minimum versions | {line}"))  # told apart from the suite's own lines
    assert " passed" in suite.stdout
