"""The Grafana dashboard queries only what pgbridge exports, and shows every metric it exports.

Names on the code side come from pgbridge's own registry (``tests/deploy/promql.py``), so a renamed
or removed metric fails here instead of leaving an empty panel. That every query also runs on a real
Prometheus against a real bridge is tests/integration/test_prometheus_scrape.py.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.deploy.promql import (
    PROMETHEUS_SERIES,
    dashboard_queries,
    exported_names,
    load_dashboard,
    metric_names,
    panels,
)

# Panels the operations issue asks for by name: the metric each must show.
REQUIRED_PANEL_METRICS = {
    "slot retained WAL": "pgbridge_slot_retained_wal_bytes",
    "safe_wal_size": "pgbridge_slot_safe_wal_size_bytes",
    "invalidation forecast": "pgbridge_slot_invalidation_forecast_seconds",
    "spill": "pgbridge_spilled_bytes_total",
    "per-table events": "pgbridge_events_total",
    "commit→ack histogram": "pgbridge_commit_to_ack_seconds_bucket",
    "Kafka transactions": "pgbridge_kafka_transactions_total",
    "stalled": "pgbridge_stalled",
}


def _dashboard() -> dict[str, Any]:
    try:
        return load_dashboard()
    except ValueError as exc:
        pytest.fail(f"deploy/grafana/pgbridge-dashboard.json is not a JSON dashboard: {exc}")


def _used_names(dashboard: dict[str, Any]) -> dict[str, set[str]]:
    """Query -> the metric names it selects."""
    used = {}
    for expr in dashboard_queries(dashboard):
        try:
            used[expr] = metric_names(expr)
        except ValueError as exc:
            pytest.fail(str(exc))
    return used


def test_dashboard_queries_only_metrics_pgbridge_exports() -> None:
    exported = exported_names()
    for expr, names in _used_names(_dashboard()).items():
        assert names, f"{expr!r} selects no metric"
        unknown = names - exported - PROMETHEUS_SERIES
        assert not unknown, f"{expr!r} uses {sorted(unknown)}, which service/pgbridge/metrics.py does not define"


def test_dashboard_shows_every_exported_metric() -> None:
    used = set().union(*_used_names(_dashboard()).values())
    for name in sorted(exported_names()):
        base = re.sub(r"_(?:bucket|sum|count)$", "", name)
        if name.endswith(("_sum", "_count")) and base + "_bucket" in used:
            continue  # a histogram is shown through its buckets
        assert name in used, f"no panel shows {name}"


def test_dashboard_has_the_panels_operations_asked_for() -> None:
    used = set().union(*_used_names(_dashboard()).values())
    for panel, metric in REQUIRED_PANEL_METRICS.items():
        assert metric in used, f"no {panel} panel ({metric})"


def test_dashboard_has_the_operational_panels() -> None:
    dashboard = _dashboard()
    exprs = [target["expr"] for panel in panels(dashboard) for target in panel.get("targets", [])]
    joined = "\n".join(exprs)
    for quantile in ("0.5", "0.99"):
        assert re.search(rf"histogram_quantile\({quantile},[^\n]*pgbridge_commit_to_ack_seconds_bucket", joined), (
            f"no p{quantile[2:] or 50} commit-to-ack panel"
        )
    assert re.search(r"rate\(pgbridge_events_total[^\n]*\)", joined)
    assert re.search(r"sum by \(table, op\)", joined), "throughput should be broken down by table and op"
    panel_ids = [panel["id"] for panel in panels(dashboard)]
    assert len(panel_ids) == len(set(panel_ids)), "panel ids must be unique"
    for panel in panels(dashboard):
        assert {"h", "w", "x", "y"} <= panel["gridPos"].keys()
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}"
            assert panel.get("description"), f"panel {panel['title']!r} has no description"
    assert dashboard["uid"] == "pgbridge"


def test_dashboard_panels_do_not_overlap() -> None:
    cells: dict[tuple[int, int], str] = {}
    for panel in panels(_dashboard()):
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, f"{panel['title']!r} is wider than the dashboard"
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"{panel['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = panel["title"]


def test_promql_metric_name_extraction() -> None:
    expr = ('histogram_quantile(0.99, sum by (le) (rate(pgbridge_commit_to_ack_seconds_bucket'
            '{job=~"$job", instance=~"a.b"}[$__rate_interval])))')
    assert metric_names(expr) == {"pgbridge_commit_to_ack_seconds_bucket"}
    assert metric_names("pgbridge_received_lsn - pgbridge_confirmed_flush_lsn offset 5m") == {
        "pgbridge_received_lsn", "pgbridge_confirmed_flush_lsn"}
    assert metric_names("a / b > 1e9\nand on (job) c unless d > Inf") == {"a", "b", "c", "d"}
    with pytest.raises(ValueError, match="unknown PromQL function"):
        metric_names("no_such_function(pgbridge_received_lsn)")
    assert metric_names("up == 1") == {"up"}


def test_exported_names_follow_the_registry() -> None:
    exported = exported_names()
    assert "pgbridge_events_total" in exported  # a counter, with its suffix
    assert {"pgbridge_commit_to_ack_seconds_bucket", "pgbridge_commit_to_ack_seconds_count"} <= exported
    assert "pgbridge_replication_lag_bytes" in exported  # a gauge, as named
    assert "pgbridge_events" not in exported and "pgbridge_commit_to_ack_seconds" not in exported
