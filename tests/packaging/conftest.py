"""The distribution built once per session, as a release would build it (``python -m build``), and
a way for these minute-long steps to show their progress in ``make test`` as the other tests do."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.support.distribution import Dist, Echo, build, source_copy


@pytest.fixture(scope="session")
def live(pytestconfig: pytest.Config) -> Echo:
    """Write a line to the terminal now, past pytest's output capture (as its live logging does).

    On a pytest-xdist worker (make test) there is no terminal reporter, and standard output is the
    channel to the controller: the line goes to standard error, which the worker shares with it."""
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")
    terminal = pytestconfig.pluginmanager.getplugin("terminalreporter")
    worker = os.environ.get("PYTEST_XDIST_WORKER")

    def echo(text: str) -> None:
        if capture is None:
            return
        with capture.global_and_fixture_disabled():
            if worker is not None:
                sys.stderr.write(text)
                sys.stderr.flush()
            elif terminal is not None:
                terminal.write(text, flush=True)

    return echo


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory, live: Echo) -> Dist:
    """sdist + wheel (the wheel built from the sdist) of a clean copy of the checkout."""
    root: Path = tmp_path_factory.mktemp("dist")
    return build(source_copy(root / "src"), root / "out", echo=live)
