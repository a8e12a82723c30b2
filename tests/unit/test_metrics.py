"""The metric catalogue: every name constant registered exactly once, with the labels dashboards and
alerts use, and series that must exist before the first event already there."""

from __future__ import annotations

import math

from prometheus_client import CollectorRegistry

from pgbridge import metrics as catalogue
from pgbridge.errors import BrokerUnavailable, RegistryUnavailable, SlotInUse, SourceUnavailable
from pgbridge.metrics import (
    LABEL_COMPATIBILITY,
    LABEL_KIND,
    LABEL_OP,
    LABEL_OUTCOME,
    LABEL_STATUS,
    LABEL_TABLE,
    LABEL_TARGET,
    STALL_KINDS,
    TARGET_KAFKA,
    TARGET_POSTGRES,
    TARGET_SCHEMA_REGISTRY,
    EncodeMetrics,
    Metrics,
    reconnect_target,
)

# The label names of each labelled family; every other family has none.
EXPECTED_LABELS: dict[str, tuple[str, ...]] = {
    catalogue.EVENTS_TOTAL: (LABEL_TABLE, LABEL_OP),
    catalogue.EVENT_BYTES_TOTAL: (LABEL_TABLE,),
    catalogue.TRANSACTIONS_TOTAL: (LABEL_OUTCOME,),
    catalogue.RECONNECTS_TOTAL: (LABEL_TARGET,),
    catalogue.SNAPSHOT_ROWS_TOTAL: (LABEL_TABLE,),
    catalogue.SNAPSHOT_ROWS_ESTIMATE: (LABEL_TABLE,),
    catalogue.SLOT_WAL_STATUS: (LABEL_STATUS,),
    catalogue.STALLED: (LABEL_KIND,),
    catalogue.SCHEMA_CHANGES_TOTAL: (LABEL_COMPATIBILITY,),
    catalogue.KAFKA_TRANSACTIONS_TOTAL: (LABEL_OUTCOME,),
    catalogue.OVERSIZE_RECORDS_TOTAL: (LABEL_TABLE,),
}


def _name_constants() -> dict[str, str]:
    """Every ``pgbridge_*`` name constant of the module (the names dashboards and alerts quote)."""
    return {attr: value for attr, value in vars(catalogue).items()
            if attr.isupper() and isinstance(value, str) and value.startswith("pgbridge_")}


def _families(registry: CollectorRegistry) -> dict[str, tuple[str, ...]]:
    """Family name (as written in the constant) → label names of its samples.

    prometheus_client exposes neither the registered collectors nor a family's label names when it
    has no series yet, so this reads its ``_collector_to_names`` and ``_labelnames``.
    """
    families: dict[str, tuple[str, ...]] = {}
    for collector in list(registry._collector_to_names):  # every registered metric object
        describe = getattr(collector, "describe", None)
        assert describe is not None
        for family in describe():
            name = family.name + ("_total" if family.type == "counter" else "")
            assert name not in families, f"{name} registered twice"
            families[name] = tuple(getattr(collector, "_labelnames", ()))
    return families


def test_every_name_constant_is_registered_once_and_nothing_else_is() -> None:
    names = _name_constants()
    assert len(set(names.values())) == len(names), "two constants share a metric name"
    families = set(_families(Metrics().registry))
    unnamed = sorted(families - set(names.values()))
    assert not unnamed, f"registered without a name constant in pgbridge.metrics: {unnamed}"
    unregistered = sorted(set(names.values()) - families)
    assert not unregistered, f"name constants Metrics never registers: {unregistered}"


def test_every_family_has_the_labels_dashboards_use() -> None:
    families = _families(Metrics().registry)
    for name, labels in families.items():
        assert labels == EXPECTED_LABELS.get(name, ()), name


def test_metrics_are_independent_per_registry() -> None:
    """Nothing is registered at import time: two pipelines (or tests) never share a series."""
    first, second = Metrics(), Metrics()
    first.heartbeats.inc()
    assert first.registry.get_sample_value(catalogue.HEARTBEATS_TOTAL) == 1
    assert second.registry.get_sample_value(catalogue.HEARTBEATS_TOTAL) == 0
    shared = CollectorRegistry()
    Metrics(shared)
    assert shared.get_sample_value(catalogue.HEARTBEATS_TOTAL) == 0


def test_series_alerts_need_exist_before_the_first_event() -> None:
    registry = Metrics().registry
    for target in (catalogue.TARGET_POSTGRES, catalogue.TARGET_KAFKA, catalogue.TARGET_SCHEMA_REGISTRY):
        assert registry.get_sample_value(catalogue.RECONNECTS_TOTAL, {LABEL_TARGET: target}) == 0
    assert registry.get_sample_value(catalogue.TRANSACTIONS_TOTAL, {LABEL_OUTCOME: catalogue.OUTCOME_COMMITTED}) == 0
    assert STALL_KINDS == ("source", "delivery")
    for kind in STALL_KINDS:
        assert registry.get_sample_value(catalogue.STALLED, {LABEL_KIND: kind}) == 0


def test_unbounded_slot_gauges_start_at_infinity() -> None:
    registry = Metrics().registry
    safe = registry.get_sample_value(catalogue.SLOT_SAFE_WAL_SIZE_BYTES)
    forecast = registry.get_sample_value(catalogue.SLOT_INVALIDATION_FORECAST_SECONDS)
    assert safe is not None and math.isinf(safe)
    assert forecast is not None and math.isinf(forecast)


def test_latency_buckets_span_sub_millisecond_to_minutes() -> None:
    registry = Metrics().registry
    buckets = [float(sample.labels["le"]) for family in registry.collect()
               if family.name == catalogue.COMMIT_TO_ACK_SECONDS
               for sample in family.samples if sample.name.endswith("_bucket")]
    assert min(buckets) <= 0.001 and 300.0 in buckets and buckets[-1] == math.inf


def test_the_encoder_observer_counts_toast_cache_and_schema_changes() -> None:
    metrics = Metrics()
    observer = EncodeMetrics(metrics)
    observer.toast_cache(True)
    observer.toast_cache(True)
    observer.toast_cache(False)
    observer.schema_changed("public.t", "compatible", None)
    observer.schema_changed("public.t", "incompatible", "field a: int -> long")
    registry = metrics.registry
    assert registry.get_sample_value(catalogue.TOAST_CACHE_HITS_TOTAL) == 2
    assert registry.get_sample_value(catalogue.TOAST_CACHE_MISSES_TOTAL) == 1
    assert registry.get_sample_value(catalogue.SCHEMA_CHANGES_TOTAL, {LABEL_COMPATIBILITY: "compatible"}) == 1
    assert registry.get_sample_value(catalogue.SCHEMA_CHANGES_TOTAL, {LABEL_COMPATIBILITY: "incompatible"}) == 1


def test_a_transient_failure_is_counted_under_the_side_it_was_on() -> None:
    assert reconnect_target(BrokerUnavailable("x")) == TARGET_KAFKA
    assert reconnect_target(RegistryUnavailable("x")) == TARGET_SCHEMA_REGISTRY
    assert reconnect_target(SourceUnavailable("x")) == TARGET_POSTGRES
    assert reconnect_target(SlotInUse("x")) == TARGET_POSTGRES  # a subclass nobody listed: its nearest base
