"""``python -m build`` and ``pip install`` as a user runs them, on fresh virtualenvs.

The sdist must build into a wheel on a machine that has only it (the kernels' Cython sources
inside, their generated C not), the wheel must carry the compiled kernels and no sources, and a
machine without a working C compiler must still get a working pgbridge running its Python code.
"""

from __future__ import annotations

import email
import tarfile
import zipfile
from pathlib import Path

import pytest

import pgbridge
from tests.support.distribution import CONSTRAINTS, Dist, Venv, clean_env, fresh_venv, run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

KERNEL_SOURCES = {"service/pgbridge/decode/_native.pyx", "service/pgbridge/encode/_native.pyx"}
KERNELS = ("pgbridge/decode/_native", "pgbridge/encode/_native")
NATIVE_STATUS = "from pgbridge import native; print(sorted(native.status().values()))"


def _sdist_members(dist: Dist) -> set[str]:
    with tarfile.open(dist.sdist) as archive:
        return {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}


def _wheel_members(dist: Dist) -> set[str]:
    with zipfile.ZipFile(dist.wheel) as archive:
        return set(archive.namelist())


def _wheel_metadata(dist: Dist) -> email.message.Message:
    with zipfile.ZipFile(dist.wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return email.message_from_bytes(archive.read(name))


def _cli(venv: Venv, *args: str) -> str:
    return run([str(venv.bin("pgbridge")), *args], env=clean_env()).stdout


def test_the_sdist_holds_the_kernel_sources_and_the_license_but_no_generated_code(dist: Dist) -> None:
    members = _sdist_members(dist)
    assert members >= KERNEL_SOURCES | {"setup.py", "pyproject.toml", "LICENSE", "README.md", "MANIFEST.in"}
    assert not [m for m in members if m.endswith((".c", ".so"))]


def test_the_wheel_holds_the_compiled_kernels_and_the_license_but_no_kernel_sources(dist: Dist) -> None:
    members = _wheel_members(dist)
    for kernel in KERNELS:
        assert [m for m in members if m.startswith(kernel) and m.endswith(".so")], f"{kernel} not compiled"
    assert not [m for m in members if m.endswith((".pyx", ".c"))]
    assert [m for m in members if m.endswith(".dist-info/licenses/LICENSE")]
    assert "pgbridge/py.typed" in members and "pgbridge/schemas/envelope.avsc" in members


def test_the_wheel_metadata_says_version_license_urls_and_no_development_extra(dist: Dist) -> None:
    metadata = _wheel_metadata(dist)
    assert metadata["Version"] == pgbridge.__version__
    assert metadata["License-Expression"] == "Apache-2.0"
    assert any(url.startswith("Source, https://") for url in metadata.get_all("Project-URL", []))
    assert "Programming Language :: Python :: 3.11" in metadata.get_all("Classifier", [])
    assert set(metadata.get_all("Provides-Extra", [])) == {"demo", "spark"}
    assert not [r for r in metadata.get_all("Requires-Dist", []) if r.startswith(("pytest", "ruff", "mypy"))]


def test_the_sdist_installs_on_a_fresh_venv_and_the_cli_runs(dist: Dist, tmp_path: Path) -> None:
    venv = fresh_venv(tmp_path / "venv")
    venv.pip("install", "-c", str(CONSTRAINTS), str(dist.sdist))
    assert "Postgres logical replication (pgoutput) to Kafka" in _cli(venv, "--help")
    assert _cli(venv, "--version").strip() == f"pgbridge {pgbridge.__version__}"
    assert venv.version_of("pgbridge") == pgbridge.__version__
    status = run([str(venv.python), "-c", NATIVE_STATUS], env=clean_env()).stdout.strip()
    assert status == "[True, True]", "the sdist's install did not build the compiled kernels"


def test_without_a_working_c_compiler_the_install_warns_and_runs_the_python_code(
        dist: Dist, tmp_path: Path) -> None:
    venv = fresh_venv(tmp_path / "venv")
    # CC=false: a compiler that exists and fails every compile, like a broken or missing toolchain.
    installed = venv.pip("install", "-v", "-c", str(CONSTRAINTS), str(dist.sdist), env=clean_env(CC="false"))
    output = installed.stdout + installed.stderr
    for kernel in ("pgbridge.decode._native", "pgbridge.encode._native"):
        assert f"WARNING: pgbridge's compiled kernel {kernel} was not built" in output
    assert "pure-Python code" in output
    status = run([str(venv.python), "-c", NATIVE_STATUS], env=clean_env()).stdout.strip()
    assert status == "[False, False]"
    assert "Postgres logical replication (pgoutput) to Kafka" in _cli(venv, "--help")
    # The whole row path imports without the kernels (the unit suite runs the Python code both ways).
    run([str(venv.python), "-c", "import pgbridge.pipeline, pgbridge.check, pgbridge.cli"], env=clean_env())
