"""The alerting rules, checked by Prometheus's own tool and kept identical in the Helm chart.

- ``promtool test rules tests/deploy/alerts_test.yml``: series in, alerts out (labels and rendered
  annotations), for every alert a case where it fires and one where it must stay silent;
- ``promtool check rules`` on deploy/prometheus/alerts.yml and ``promtool check config`` on the
  compose stack's prometheus.yml (which loads the rules);
- every alert's expression selects only metrics pgbridge exports, and its runbook link points at a
  heading of docs/operations.md;
- the chart's PrometheusRule renders exactly the groups of alerts.yml.

promtool is Debian's ``prometheus`` package (`make test` installs it: tests/deps.sh); missing, the tests fail.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.promql import (
    ALERTS,
    PROMETHEUS_SERIES,
    REPO_ROOT,
    alert_rules,
    exported_names,
    metric_names,
)

ALERTS_TEST = REPO_ROOT / "tests" / "deploy" / "alerts_test.yml"
PROMETHEUS_CONFIG = REPO_ROOT / "deploy" / "prometheus" / "prometheus.yml"
CHART_DIR = REPO_ROOT / "helm" / "pgbridge"
CHART_ALERTS = CHART_DIR / "files" / "alerts.yml"
OPERATIONS_DOC = REPO_ROOT / "docs" / "operations.md"
RUNBOOK_PREFIX = "https://github.com/pgbridge/pgbridge/blob/main/docs/operations.md#"
SEVERITIES = frozenset({"critical", "warning", "info"})


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("promtool is not installed: it comes with Debian's `prometheus` package "
                    "(apt-get install prometheus; make deps installs it when missing)")
    return found


def _run_promtool(*args: str | Path) -> str:
    result = subprocess.run([_promtool(), *map(str, args)], capture_output=True, text=True, timeout=120,
                            check=False, cwd=REPO_ROOT)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"promtool {' '.join(map(str, args))} failed (exit {result.returncode}):\n{output}"
    return output


def _unit_tests() -> list[dict[str, Any]]:
    data = yaml.safe_load(ALERTS_TEST.read_text(encoding="utf-8"))
    tests: list[dict[str, Any]] = data["tests"]
    return tests


def _series_name(series: str) -> str:
    match = re.match(r"\s*([A-Za-z_:][\w:]*)", series)
    assert match, f"input series {series!r} has no metric name"
    return match.group(1)


def _github_anchor(heading: str) -> str:
    """GitHub's heading slug: lower case, punctuation dropped, spaces to dashes."""
    return re.sub(r"\s", "-", re.sub(r"[^\w\- ]", "", heading.strip().lower()))


def test_promtool_unit_tests_pass() -> None:
    output = _run_promtool("test", "rules", ALERTS_TEST)
    assert "SUCCESS" in output, output


def test_promtool_checks_the_rules_file() -> None:
    output = _run_promtool("check", "rules", ALERTS)
    assert f"SUCCESS: {len(alert_rules())} rules found" in output, output


def test_promtool_checks_the_compose_prometheus_config_with_the_rules() -> None:
    output = _run_promtool("check", "config", PROMETHEUS_CONFIG)
    assert "SUCCESS: 1 rule files found" in output, output
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text(encoding="utf-8"))
    assert [(PROMETHEUS_CONFIG.parent / path).resolve() for path in config["rule_files"]] == [ALERTS.resolve()]


def test_unit_tests_load_the_rules_file() -> None:
    data = yaml.safe_load(ALERTS_TEST.read_text(encoding="utf-8"))
    assert [(ALERTS_TEST.parent / path).resolve() for path in data["rule_files"]] == [ALERTS.resolve()]


def test_every_alert_has_a_firing_and_a_silent_unit_test() -> None:
    rules = {rule["alert"]: rule for rule in alert_rules()}
    firing: set[str] = set()
    silent: set[str] = set()
    for test in _unit_tests():
        series = {_series_name(item["series"]) for item in test["input_series"]}
        for case in test.get("alert_rule_test", []):
            name = case["alertname"]
            assert name in rules, f"{test['name']!r} tests {name}, which alerts.yml does not define"
            if case.get("exp_alerts"):
                firing.add(name)
                for alert in case["exp_alerts"]:
                    assert alert.get("exp_annotations"), f"{test['name']!r}: check {name}'s rendered annotations"
            else:
                # silence only means something when the series the alert reads are there
                wanted = metric_names(rules[name]["expr"])
                assert series & wanted, f"{test['name']!r}: a silent case of {name} without any of {sorted(wanted)}"
                silent.add(name)
    assert not set(rules) - firing, f"alerts without a firing case: {sorted(set(rules) - firing)}"
    assert not set(rules) - silent, f"alerts without a silent case: {sorted(set(rules) - silent)}"


def test_alerts_query_only_metrics_pgbridge_exports() -> None:
    exported = exported_names()
    for rule in alert_rules():
        names = metric_names(rule["expr"])
        assert names, f"{rule['alert']} selects no metric"
        unknown = names - exported - PROMETHEUS_SERIES
        assert not unknown, f"{rule['alert']} uses {sorted(unknown)}, which service/pgbridge/metrics.py does not define"


def test_every_alert_has_severity_annotations_and_a_runbook_in_operations_md() -> None:
    anchors = {_github_anchor(line.lstrip("#")) for line in OPERATIONS_DOC.read_text(encoding="utf-8").splitlines()
               if line.startswith("#")}
    names = [rule["alert"] for rule in alert_rules()]
    assert len(names) == len(set(names)), "alert names must be unique"
    for rule in alert_rules():
        name = rule["alert"]
        assert re.fullmatch(r"Pgbridge[A-Z]\w+", name), f"{name}: alerts are named Pgbridge<What>"
        assert rule["labels"]["severity"] in SEVERITIES, f"{name}: severity {rule['labels'].get('severity')}"
        annotations = rule["annotations"]
        assert {"summary", "description", "runbook_url"} <= annotations.keys(), f"{name}: annotations {annotations}"
        assert "{{" in annotations["summary"] + annotations["description"], f"{name}: say the value or the instance"
        url = annotations["runbook_url"]
        assert url == RUNBOOK_PREFIX + name.lower(), f"{name}: runbook_url {url}"
        assert name.lower() in anchors, f"docs/operations.md has no heading `### {name}` (the runbook)"


# ----------------------------------------------------------------------------------------------
# Helm: the same rules as a PrometheusRule


def _render(values: dict[str, Any]) -> list[dict[str, Any]]:
    try:
        import helm_python as helm
    except ImportError as exc:
        pytest.fail(f"helm_python is not importable ({exc}); `pip install helm-python-sdk`")
    with helm.Chart.load(str(CHART_DIR)) as chart:
        rendered: dict[str, str] = chart.render(values, name="pgb", namespace="cdc")
    return [document for path, text in sorted(rendered.items()) if path.endswith(".yaml")
            for document in yaml.safe_load_all(text) if document]


def test_chart_carries_a_byte_identical_copy_of_the_rules() -> None:
    assert CHART_ALERTS.read_bytes() == ALERTS.read_bytes(), (
        "helm/pgbridge/files/alerts.yml differs from deploy/prometheus/alerts.yml: "
        "cp deploy/prometheus/alerts.yml helm/pgbridge/files/alerts.yml"
    )


def test_chart_prometheusrule_is_off_by_default() -> None:
    assert not [d for d in _render({}) if d["kind"] == "PrometheusRule"]


def test_chart_prometheusrule_renders_the_rules_of_alerts_yml() -> None:
    values = yaml.safe_load((CHART_DIR / "ci" / "prometheusrule-values.yaml").read_text(encoding="utf-8"))
    rules = [d for d in _render(values) if d["kind"] == "PrometheusRule"]
    assert len(rules) == 1, f"expected one PrometheusRule, rendered {len(rules)}"
    rule = rules[0]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rule["metadata"]["labels"]["app.kubernetes.io/instance"] == "pgb"
    assert rule["spec"]["groups"] == yaml.safe_load(ALERTS.read_text(encoding="utf-8"))["groups"]
