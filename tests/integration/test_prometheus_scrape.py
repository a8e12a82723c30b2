"""A real Prometheus scrapes a real bridge and evaluates the dashboard's and the alerts' queries.

The deploy tests check the PromQL lexically and the rules with promtool's synthetic series; here
Debian's Prometheus 2.42 (``/usr/bin/prometheus``, `make deps` installs it) scrapes a running pgbridge
(real Postgres, real broker) every second with deploy/prometheus/alerts.yml loaded, and:

- the target is up and every alerting rule evaluates without error (``/api/v1/rules`` health);
- every dashboard query and every alert expression runs through ``/api/v1/query`` without error,
  and each dashboard query whose metrics the bridge exposes returns data;
- ``promtool check metrics`` finds nothing to complain about in the raw ``/metrics`` text.

One Postgres version is enough: this tests the metrics plumbing, not replication.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from tests.deploy.promql import ALERTS, alert_rules, dashboard_queries, load_dashboard, metric_names
from tests.support.bridge import BridgeProcess, bridge_env
from tests.support.broker import Broker
from tests.support.http import get, status
from tests.support.ports import free_port
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

JOB = "pgbridge"
TABLE = "public.orders"
# Grafana's variables, as Grafana would substitute them for this job with a 1 s scrape interval.
GRAFANA_VARIABLES = {"$__rate_interval": "15s", "$job": JOB, "$instance": ".*"}


def _tool(name: str) -> str:
    found = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").is_file() else None)
    if found is None:
        pytest.fail(f"{name} is not installed: it comes with Debian's `prometheus` package "
                    "(apt-get install prometheus; make deps installs it when missing)")
    return found


def _prometheus_config(target: str, rules: Path) -> dict[str, Any]:
    return {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": [{"job_name": JOB, "metrics_path": "/metrics",
                            "static_configs": [{"targets": [target]}]}],
    }


@contextmanager
def _prometheus(tmp_path: Path, target: str) -> Iterator[str]:
    """Prometheus on a free loopback port scraping ``target``; yields its base URL."""
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump(_prometheus_config(target, ALERTS)), encoding="utf-8")
    port = free_port()
    command = [_tool("prometheus"), f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
               f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"]
    # The log file is the child's; this process closes its copy at once, so a failure anywhere
    # below leaves nothing open (an unclosed file would fail a later test as a ResourceWarning).
    with (tmp_path / "prometheus.log").open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    with process:
        try:
            url = f"http://127.0.0.1:{port}"
            wait_until(lambda: process.poll() is not None or status(port, "/-/ready") == 200, timeout=30,
                       message="Prometheus never became ready")
            assert process.poll() is None, (tmp_path / "prometheus.log").read_text(errors="replace")
            yield url
        finally:
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()


def _api(url: str, path: str, **params: str) -> Any:
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    with urllib.request.urlopen(f"{url}/api/v1/{path}{query}", timeout=10) as response:
        body = json.loads(response.read())
    assert body["status"] == "success", body
    return body["data"]


def _query(url: str, expr: str) -> list[Any]:
    """The instant vector (or scalar) of ``expr``; an evaluation error fails with Prometheus's message."""
    try:
        data = _api(url, "query", query=expr)
    except urllib.error.HTTPError as exc:
        pytest.fail(f"Prometheus rejects {expr!r}: {exc.read().decode(errors='replace')}")
    result: list[Any] = data["result"] if data["resultType"] in ("vector", "matrix") else [data["result"]]
    return result


def _substitute(expr: str) -> str:
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    return expr


def _target_up(url: str) -> bool:
    targets = _api(url, "targets")["activeTargets"]
    return any(t["labels"]["job"] == JOB and t["health"] == "up" for t in targets)


def _rules_evaluated(url: str) -> list[dict[str, Any]]:
    rules = [rule for group in _api(url, "rules")["groups"] for rule in group["rules"]]
    return rules if rules and all(rule.get("lastEvaluation", "").startswith("20") for rule in rules) else []


def _exposed_names(text: str) -> set[str]:
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}


def test_prometheus_scrapes_the_bridge_and_runs_every_dashboard_and_alert_query(
        pg_dsn: str, kafka_broker: Broker, topic_prefix: str, tmp_path: Path) -> None:
    # given: a table with rows to snapshot, and a bridge streaming it with its HTTP port open
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY, note text)")
        conn.execute("INSERT INTO orders SELECT g, 'n' FROM generate_series(1, 200) g")
        conn.execute("ANALYZE orders")
    env = bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": TABLE, "PGBRIDGE_SNAPSHOT__MODE": "initial",
                            "PGBRIDGE_POSTGRES__SLOT_CHECK_INTERVAL_S": "0.5"})
    with BridgeProcess(env).start(http=True) as bridge:
        port = bridge.http_port
        assert port is not None
        wait_until(lambda: status(port, "/streamingz") == 200, timeout=60,
                   message=f"the bridge never streamed:\n{bridge.log()[-3000:]}")

        # when: Prometheus scrapes it every second with the alert rules loaded, while rows change
        with _prometheus(tmp_path, f"127.0.0.1:{port}") as url:
            wait_until(lambda: _target_up(url), timeout=20, message="the pgbridge target never came up")
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                for i in range(201, 231):
                    conn.execute("INSERT INTO orders VALUES (%s, 'x')", (i,))
                conn.execute("UPDATE orders SET note = 'y' WHERE id <= 10")
            code, metrics_text = get(port, "/metrics")
            assert code == 200
            exposed = _exposed_names(metrics_text)

            # then: every dashboard query whose metrics the bridge exposes returns data ...
            queries = [_substitute(expr) for expr in dashboard_queries(load_dashboard())]
            expected_data = [expr for expr in queries if metric_names(expr) <= exposed | {"up"}]
            assert len(expected_data) >= 20, f"only {len(expected_data)} dashboard queries can have data"
            for expr in expected_data:
                wait_until(lambda expr=expr: _query(url, expr), timeout=20,  # type: ignore[misc]
                           message=f"no data for the dashboard query {expr!r}")
            assert _query(url, f'pgbridge_events_total{{job="{JOB}", table="{TABLE}", op="c"}}')
            assert _query(url, f'up{{job="{JOB}"}} == 1')
            assert _query(url, "pgbridge_streaming == 1")
            # ... the others (metrics of features this bridge does not use) at least evaluate ...
            for expr in queries:
                _query(url, expr)
            # ... and so does every alert expression, in the rule engine too
            for rule in alert_rules():
                _query(url, rule["expr"])
            evaluated = wait_until(lambda: _rules_evaluated(url), timeout=20,
                                   message="Prometheus never evaluated every rule")
            assert {rule["name"] for rule in evaluated} == {rule["alert"] for rule in alert_rules()}
            broken = {rule["name"]: rule.get("lastError") for rule in evaluated if rule["health"] != "ok"}
            assert not broken, f"rules failing in Prometheus: {broken}"
            firing = {alert["labels"]["alertname"] for alert in _api(url, "alerts")["alerts"]}
            assert not firing, f"a healthy bridge raises alerts: {sorted(firing)}"

        # and: promtool finds nothing to lint in the exposition text
        lint = subprocess.run([_tool("promtool"), "check", "metrics"], input=metrics_text, capture_output=True,
                              text=True, timeout=60, check=False)
        assert lint.returncode == 0 and not lint.stdout.strip(), f"promtool check metrics:\n{lint.stdout}{lint.stderr}"

