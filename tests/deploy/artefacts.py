"""What the deployment artefact tests share: the artefacts' paths, the schemas the repository keeps
for them, the tools (a missing one fails, never skips) and the Dockerfile's parsed instructions
(the chart's tests read the image's ENV from them)."""

from __future__ import annotations

import importlib
import json
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
COMPOSE_SPEC = REPO_ROOT / "tests" / "deploy" / "schemas" / "compose-spec.json"
DOCKERFILE = REPO_ROOT / "Dockerfile"
DOCKERIGNORE = REPO_ROOT / ".dockerignore"
COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"
PROMETHEUS_CONFIG = REPO_ROOT / "deploy" / "prometheus" / "prometheus.yml"
EXAMPLE_CONFIG = REPO_ROOT / "deploy" / "pgbridge.example.yaml"
CHART_DIR = REPO_ROOT / "helm" / "pgbridge"
CHART_CI_VALUES = sorted((CHART_DIR / "ci").glob("*.yaml"))
DEPLOYMENT_DOC = REPO_ROOT / "docs" / "deployment.md"

RELEASE = "pgb"
NAMESPACE = "cdc"
# The chart's kubeVersion floor; the newest version is whatever kubernetes-validate ships.
OLDEST_KUBERNETES = "1.28.0"
HTTP_PORT = 8080
SPILL_DIR = "/var/lib/pgbridge/spill"

# The part of the Prometheus Operator's ServiceMonitor CRD (monitoring.coreos.com/v1) the chart
# emits, with the CRD's own types and duration pattern. kubernetes-validate ships no CRD schemas.
_DURATION = r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
_RELABEL_CONFIG: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "action": {"enum": ["replace", "Replace", "keep", "Keep", "drop", "Drop", "hashmod", "HashMod",
                            "labelmap", "LabelMap", "labeldrop", "LabelDrop", "labelkeep", "LabelKeep",
                            "lowercase", "Lowercase", "uppercase", "Uppercase", "keepequal", "KeepEqual",
                            "dropequal", "DropEqual"]},
        "modulus": {"type": "integer", "minimum": 0},
        "regex": {"type": "string"},
        "replacement": {"type": "string"},
        "separator": {"type": "string"},
        "sourceLabels": {"type": "array", "items": {"type": "string", "pattern": "^[a-zA-Z_][a-zA-Z0-9_]*$"}},
        "targetLabel": {"type": "string"},
    },
}
SERVICEMONITOR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63},
                "namespace": {"type": "string"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        },
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["selector", "endpoints"],
            "properties": {
                "selector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
                    },
                },
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string"},
                            "scheme": {"enum": ["http", "https", "HTTP", "HTTPS"]},
                            "interval": {"type": "string", "pattern": _DURATION},
                            "scrapeTimeout": {"type": "string", "pattern": _DURATION},
                            "honorLabels": {"type": "boolean"},
                            "relabelings": {"type": "array", "items": _RELABEL_CONFIG},
                            "metricRelabelings": {"type": "array", "items": _RELABEL_CONFIG},
                        },
                    },
                },
            },
        },
    },
}


# ----------------------------------------------------------------------------------------------
# tools


def require(module: str, pip_name: str) -> ModuleType:
    """Import a test tool, or fail (never skip) saying how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        pytest.fail(f"{module} is not importable ({exc}); install the dev extras or `pip install {pip_name}`")


def executable(name: str, pip_name: str) -> str:
    """A console script of this interpreter's environment, else one on PATH, else fail."""
    beside = Path(sys.executable).parent / name
    if beside.is_file():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} not found next to {sys.executable} nor on PATH; `pip install {pip_name}`")
    return found


def load_settings(config_file: Path | None, environ: dict[str, str]) -> Any:
    config = require("pgbridge.config", "-e .")
    errors = require("pgbridge.errors", "-e .")
    try:
        return config.load_settings(config_file, environ=environ)
    except errors.ConfigError as exc:
        pytest.fail(f"pgbridge rejects this configuration: {exc}")


# ----------------------------------------------------------------------------------------------
# Dockerfile



def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs: comments dropped, continuation lines joined."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        keyword, _, arguments = line.partition(" ")
        instructions.append((keyword.upper(), arguments.strip()))
    assert not pending, "the Dockerfile ends inside a continued line"
    return instructions


def dockerfile_stages() -> list[list[tuple[str, str]]]:
    stages: list[list[tuple[str, str]]] = []
    for keyword, arguments in dockerfile_instructions(DOCKERFILE.read_text(encoding="utf-8")):
        if keyword == "FROM":
            stages.append([])
        elif not stages:
            assert keyword == "ARG", f"{keyword} before the first FROM"
            continue
        stages[-1].append((keyword, arguments))
    return stages


def dockerfile_final_stage() -> list[tuple[str, str]]:
    return dockerfile_stages()[-1]


def exec_form(stage: list[tuple[str, str]], keyword: str) -> list[str]:
    found = [arguments for kw, arguments in stage if kw == keyword]
    assert found, f"the runtime stage has no {keyword}"
    try:
        value = json.loads(found[-1])
    except json.JSONDecodeError:
        pytest.fail(f"{keyword} {found[-1]} is not in exec (JSON array) form")
    assert isinstance(value, list), f"{keyword} must be a JSON array"
    return value


