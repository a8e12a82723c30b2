"""What the published metadata promises, read from the files a release is built from (no build).

The build itself, the installs and the minimum versions are exercised in test_distribution.py and
test_minimum_versions.py; these checks are the cheap half, run in milliseconds.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.version import Version

import pgbridge
from tests.support.distribution import (
    CONSTRAINTS,
    REPO_ROOT,
    dependency_group,
    floor,
    minimum_constraints,
    minimum_versions,
    pyproject,
    runtime_requirements,
)

OWN_PACKAGES = {"pgbridge", "pgbridge_spark", "__future__"}


def _pins() -> dict[str, str]:
    pins = {}
    for line in CONSTRAINTS.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt line {line!r} is not name==version"
            pins[Requirement(name).name.lower().replace("_", "-")] = version
    return pins


def _private_imports(path: Path) -> list[str]:
    """Imports of a third-party module's private parts (a ``_``-prefixed module or name)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        modules: list[tuple[str, list[str]]]
        if isinstance(node, ast.Import):
            modules = [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [(node.module, [alias.name for alias in node.names])]
        else:
            continue
        for module, names in modules:
            top = module.split(".")[0]
            if top in OWN_PACKAGES or top in sys.stdlib_module_names:
                continue
            if any(part.startswith("_") for part in module.split(".")) or any(n.startswith("_") for n in names):
                found.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno} {module} {names}")
    return found


def test_no_module_imports_a_private_part_of_a_dependency() -> None:
    # Private modules move between releases (schema_registry.common._httpx_compat exists only from
    # confluent-kafka 2.16): importing one breaks `pgbridge run` on every other release we allow.
    sources = sorted((REPO_ROOT / "service").rglob("*.py")) + sorted((REPO_ROOT / "spark").rglob("*.py"))
    assert sources
    private = [hit for path in sources for hit in _private_imports(path)]
    assert private == []


def test_every_runtime_dependency_declares_the_floor_the_minimum_versions_run_installs() -> None:
    requirements = runtime_requirements()
    assert {req.name for req in requirements} >= {"psycopg", "confluent-kafka", "fastavro", "pydantic"}
    pins = minimum_versions()
    assert minimum_constraints().splitlines() == [f"{name}=={v}" for name, v in pins.items()]
    for req in requirements:
        assert pins[req.name] == floor(req)
        assert Version(floor(req)) in req.specifier, f"{req}: its own floor is outside its range"


def test_constraints_pin_every_dependency_inside_the_declared_ranges() -> None:
    pins = _pins()
    meta = pyproject()
    declared = [Requirement(text) for text in meta["project"]["dependencies"]]
    declared += [Requirement(text) for extra in meta["project"]["optional-dependencies"].values()
                 for text in extra if not text.startswith("pgbridge")]
    declared += [Requirement(text) for text in dependency_group("dev")]
    for req in declared:
        name = req.name.lower().replace("_", "-")
        assert name in pins, f"constraints.txt does not pin {req.name} (make constraints)"
        assert Version(pins[name]) in req.specifier, f"constraints.txt pins {name}=={pins[name]} outside {req}"
    assert pins["psycopg-binary"] == pins["psycopg"], "psycopg[binary] needs the same psycopg-binary"
    assert "pgbridge" not in pins


def test_the_version_is_written_once() -> None:
    meta = pyproject()
    assert "version" not in meta["project"] and "version" in meta["project"]["dynamic"]
    assert meta["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "pgbridge.__version__"}
    written = [path.relative_to(REPO_ROOT).as_posix()
               for root in ("service", "spark") for path in (REPO_ROOT / root).rglob("*.py")
               if re.search(r"^__version__\s*=", path.read_text(encoding="utf-8"), re.MULTILINE)]
    assert written == ["service/pgbridge/__init__.py"]
    Version(pgbridge.__version__)  # a valid PEP 440 version
    chart = yaml.safe_load((REPO_ROOT / "helm" / "pgbridge" / "Chart.yaml").read_text(encoding="utf-8"))
    assert chart["appVersion"] == pgbridge.__version__, "the chart's appVersion is not the package's version"


def test_the_license_is_the_apache_2_text_that_pyproject_declares() -> None:
    meta = pyproject()["project"]
    assert meta["license"] == "Apache-2.0"
    text = (REPO_ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text and "APPENDIX: How to apply the Apache License" in text
    # An SPDX expression and a License :: classifier together are rejected by the build backend.
    assert not [c for c in meta["classifiers"] if c.startswith("License ::")]


def test_the_project_names_its_urls_and_classifiers() -> None:
    meta = pyproject()["project"]
    assert {"Homepage", "Source", "Issues", "Documentation"} <= set(meta["urls"])
    assert all(url.startswith("https://") for url in meta["urls"].values())
    classifiers = set(meta["classifiers"])
    assert {"Programming Language :: Python :: 3 :: Only", "Programming Language :: Python :: 3.11",
            "Operating System :: POSIX :: Linux", "Typing :: Typed"} <= classifiers
    oldest = min(Version(c.rsplit(" ", 1)[1]) for c in classifiers
                 if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c))
    assert meta["requires-python"] == f">={oldest}"


def test_development_tools_are_dependency_groups_never_published_extras() -> None:
    meta = pyproject()
    extras = meta["project"]["optional-dependencies"]
    assert "dev" not in extras
    published = {Requirement(text).name for texts in extras.values() for text in texts}
    tools = {Requirement(text).name for text in dependency_group("dev")}
    assert {"pytest", "ruff", "mypy", "build"} <= tools
    assert published & tools == set()


def test_make_install_ci_and_the_image_install_the_constraints() -> None:
    makefile = (REPO_ROOT / "Makefile").read_text(encoding="utf-8")
    install = re.search(r"^\$\(STAMP\):.*?(?=^\S)", makefile, re.MULTILINE | re.DOTALL)
    assert install is not None
    assert re.search(r"pip install .*-c constraints\.txt .*--group dev", install.group(0)), install.group(0)
    assert "constraints.txt" in install.group(0).splitlines()[0], "the venv is not rebuilt when the pins change"
    assert "make test" in (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8")  # make test -> make install
    dockerfile = (REPO_ROOT / "Dockerfile").read_text(encoding="utf-8").replace("\\\n", " ")
    installs = [line for line in dockerfile.splitlines() if "pip install" in line]
    assert installs and all(re.search(r"-c \S*constraints\.txt", line) for line in installs), installs
    assert "!constraints.txt" in (REPO_ROOT / ".dockerignore").read_text(encoding="utf-8").split()


def test_ci_runs_what_a_newcomer_runs_make_test_and_nothing_else() -> None:
    # make test installs what it needs itself (tests/deps.sh), so a fresh clone passes as CI does;
    # CI may only install make, which make cannot do.
    lines = [line.strip() for line in (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    commands = [line for line in lines if line and not line.startswith("#")
                and not line.startswith(("set ", "cd ", "export ", "if ", "fi"))]
    assert commands == ["apt-get update -q && apt-get install -y -q make", "make test"], commands
    makefile = (REPO_ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^test: deps\b", makefile, re.MULTILINE), "make test does not install the system packages"


def test_release_wheels_are_built_for_linux_x86_64_and_aarch64() -> None:
    wheels = pyproject()["tool"]["cibuildwheel"]
    assert set(wheels["linux"]["archs"]) == {"x86_64", "aarch64"}
    assert "pgbridge --help" in wheels["test-command"]
    script = (REPO_ROOT / ".ci" / "wheels").read_text(encoding="utf-8")
    assert "cibuildwheel" in script and "--sdist" in script
