"""Building and installing pgbridge as a user does: ``python -m build``, fresh virtualenvs, pip.

The packaging tests never install into the development venv: each install gets a new venv made by
the interpreter running the tests, so what they see is what a user's clean machine sees (pip
resolves the dependencies from the index; its cache only makes that faster).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

REPO_ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = REPO_ROOT / "pyproject.toml"
CONSTRAINTS = REPO_ROOT / "constraints.txt"
# Build and install steps are minutes at most, even on a loaded 2-core machine.
STEP_TIMEOUT_S = 600
# What a checkout holds but a source tree to build from must not: local venvs and build leftovers
# (an in-place build's .so and generated .c would hide a broken sdist).
_NOT_SOURCE = shutil.ignore_patterns(".git", ".venv*", "build", "dist", "*.egg-info", "__pycache__",
                                     ".*_cache", ".hypothesis", "*.so", "_native.c")


def pyproject() -> dict[str, Any]:
    return tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))


def runtime_requirements() -> list[Requirement]:
    return [Requirement(text) for text in pyproject()["project"]["dependencies"]]


def floor(requirement: Requirement) -> str:
    """The version a ``>=`` bound names; a runtime dependency without one has no tested minimum."""
    floors = [spec.version for spec in requirement.specifier if spec.operator == ">="]
    if len(floors) != 1:
        raise AssertionError(f"{requirement} must declare exactly one lower bound (>=)")
    return floors[0]


def minimum_versions() -> dict[str, str]:
    """Runtime dependency -> its declared floor."""
    return {req.name: floor(req) for req in runtime_requirements()}


def minimum_constraints() -> str:
    """A pip constraints file pinning every runtime dependency to its declared floor."""
    return "".join(f"{name}=={version}\n" for name, version in minimum_versions().items())


def dependency_group(name: str) -> list[str]:
    """The requirements of a PEP 735 group, included groups expanded."""
    out: list[str] = []
    for item in pyproject()["dependency-groups"][name]:
        out.extend(dependency_group(item["include-group"]) if isinstance(item, dict) else [item])
    return out


def source_copy(destination: Path) -> Path:
    """The checkout without venvs and build output, as a fresh clone would have it."""
    shutil.copytree(REPO_ROOT, destination, ignore=_NOT_SOURCE)
    return destination


def clean_env(**extra: str) -> dict[str, str]:
    """The environment for a child build or venv: nothing of the test venv's Python path."""
    env = {key: value for key, value in os.environ.items()
           if key not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"} and not key.startswith("PGBRIDGE_")}
    env.update(extra)
    return env


Echo = Callable[[str], None]


def run(command: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None,
        timeout: float = STEP_TIMEOUT_S, echo: Echo | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``command``; on failure the assertion carries its whole output.

    With ``echo`` its output (stderr merged into stdout) is also handed on line by line as it comes,
    so a step of minutes (the unit suite in another virtualenv) shows its progress in ``make test``.
    """
    if echo is None:
        done = subprocess.run(command, cwd=cwd, env=env or clean_env(), capture_output=True, text=True,
                              timeout=timeout, check=False)
    else:
        done = _run_echoing(command, cwd=cwd, env=env or clean_env(), timeout=timeout, echo=echo)
    assert done.returncode == 0, (f"{' '.join(command)} exited {done.returncode}\n"
                                  f"--- stdout\n{done.stdout[-8000:]}\n--- stderr\n{done.stderr[-8000:]}")
    return done


def _run_echoing(command: list[str], *, cwd: Path | None, env: dict[str, str], timeout: float,
                 echo: Echo) -> subprocess.CompletedProcess[str]:
    """``run`` passing each output line to ``echo``; killed after ``timeout`` like ``subprocess.run``."""
    lines: list[str] = []
    timed_out = threading.Event()
    with subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True) as child:

        def kill() -> None:
            timed_out.set()
            child.kill()

        killer = threading.Timer(timeout, kill)
        killer.start()
        try:
            assert child.stdout is not None
            for line in child.stdout:
                lines.append(line)
                echo(line)
            returncode = child.wait()
        finally:
            killer.cancel()
    assert not timed_out.is_set(), f"{' '.join(command)} timed out after {timeout:g}s:\n{''.join(lines)[-8000:]}"
    return subprocess.CompletedProcess(command, returncode, "".join(lines), "")


@dataclass(frozen=True)
class Dist:
    sdist: Path
    wheel: Path


def build(source: Path, out: Path, echo: Echo | None = None) -> Dist:
    """``python -m build``: the sdist, then a wheel built *from that sdist* (build's default)."""
    if echo is not None:
        echo("packaging: python -m build: the sdist, then the wheel from it (kernels compiled)\n")
    run([sys.executable, "-m", "build", "--outdir", str(out), str(source)], cwd=source)
    sdists, wheels = sorted(out.glob("pgbridge-*.tar.gz")), sorted(out.glob("pgbridge-*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, sorted(p.name for p in out.iterdir())
    return Dist(sdist=sdists[0], wheel=wheels[0])


@dataclass(frozen=True)
class Venv:
    root: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def bin(self, name: str) -> Path:
        return self.root / "bin" / name

    def pip(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return run([str(self.python), "-m", "pip", "--disable-pip-version-check", *args], env=env)

    def version_of(self, distribution: str) -> str:
        done = run([str(self.python), "-c",
                    f"import importlib.metadata as m; print(m.version({distribution!r}))"])
        return done.stdout.strip()


def fresh_venv(path: Path) -> Venv:
    """A new virtualenv with the interpreter running the tests, and nothing installed but pip."""
    run([sys.executable, "-m", "venv", str(path)])
    return Venv(path)
