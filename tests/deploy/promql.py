"""What the dashboard and the alert rules query, and what pgbridge exports, as sets of names.

Both sides are pure functions so the deploy tests can compare them without a running Prometheus
(the real one runs the same queries in tests/integration/test_prometheus_scrape.py):

- ``metric_names(expr)``: the metric names a PromQL expression selects (a lexical scan: strings,
  label matchers, ranges, grouping clauses and dashboard variables are removed first; an identifier
  followed by ``(`` must be a PromQL function, anything else is a metric name).
- ``exported_names()``: every sample name pgbridge's registry can produce, read from the
  collectors of ``pgbridge.metrics.Metrics`` (not from the source text), with the suffixes Prometheus
  sees: ``_total`` for counters, ``_bucket``/``_sum``/``_count`` for histograms.
- ``dashboard_queries`` / ``alert_rules``: the PromQL of deploy/grafana and deploy/prometheus.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = REPO_ROOT / "deploy" / "grafana" / "pgbridge-dashboard.json"
ALERTS = REPO_ROOT / "deploy" / "prometheus" / "alerts.yml"

# Series Prometheus itself adds to every target.
PROMETHEUS_SERIES = frozenset({"up"})

PROMQL_FUNCTIONS = frozenset({
    "abs", "absent", "absent_over_time", "avg", "avg_over_time", "bottomk", "ceil", "changes",
    "clamp", "clamp_max", "clamp_min", "count", "count_over_time", "count_values", "delta", "deriv",
    "floor", "group", "histogram_quantile", "idelta", "increase", "irate", "label_join",
    "label_replace", "last_over_time", "max", "max_over_time", "min", "min_over_time",
    "predict_linear", "quantile", "quantile_over_time", "rate", "resets", "round", "scalar", "sort",
    "sort_desc", "stddev", "stdvar", "sum", "sum_over_time", "time", "timestamp", "topk", "vector",
})
PROMQL_KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "Inf", "NaN"})

_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def metric_names(expr: str) -> set[str]:
    """Metric names an expression selects; raises ``ValueError`` on a function PromQL does not have."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    text = re.sub(r"\$\{?\w+\}?", " ", text)
    text = re.sub(r"\b\d+(?:\.\d+)?(?:e[+-]?\d+)?\b", " ", text)
    names = set()
    for match in re.finditer(r"(?<![\w.])([A-Za-z_:][\w:]*)\s*(\()?", text):
        identifier, call = match.group(1), match.group(2)
        if call:
            if identifier not in PROMQL_FUNCTIONS:
                raise ValueError(f"unknown PromQL function {identifier} in {expr!r}")
        elif identifier not in PROMQL_KEYWORDS:
            names.add(identifier)
    return names


def exported_names() -> frozenset[str]:
    """Sample names of every collector a fresh ``Metrics`` registers, as Prometheus stores them."""
    from pgbridge.metrics import Metrics

    names: set[str] = set()
    for family in Metrics().registry.collect():
        suffixes = _SUFFIXES.get(family.type)
        if suffixes is None:
            raise ValueError(f"{family.name} is a {family.type}: teach tests/deploy/promql.py its series names")
        names.update(family.name + suffix for suffix in suffixes)
    return frozenset(names)


def load_dashboard(path: Path = DASHBOARD) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a JSON object")
    return data


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, including those nested in collapsed rows."""
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def dashboard_queries(dashboard: dict[str, Any]) -> list[str]:
    """The PromQL of every panel target and of every query variable (``label_values(expr, label)``)."""
    queries = [target["expr"] for panel in panels(dashboard) for target in panel.get("targets", [])]
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") != "query":
            continue
        query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
        match = re.fullmatch(r"label_values\((?:(.+),\s*)?(\w+)\)", query.strip())
        if not match:
            raise ValueError(f"unexpected template query {query!r}")
        if match.group(1):
            queries.append(match.group(1))
    return queries


def alert_rules(path: Path = ALERTS) -> list[dict[str, Any]]:
    """Every alerting rule of every group of a rules file."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    return [rule for group in data["groups"] for rule in group["rules"] if "alert" in rule]
