"""Every pgbridge metric, defined once on a registry built at start-up and passed around.

Names and label names are constants here so dashboards, alerts and code agree. Nothing is
registered at import time: tests build as many independent ``Metrics`` as they like.
"""

from __future__ import annotations

import logging
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from pgbridge.errors import BrokerUnavailable, RegistryUnavailable, TransientError

log = logging.getLogger(__name__)

EVENTS_TOTAL: Final = "pgbridge_events_total"
EVENT_BYTES_TOTAL: Final = "pgbridge_event_bytes_total"
TRANSACTIONS_TOTAL: Final = "pgbridge_transactions_total"
CONFIRMED_FLUSH_LSN: Final = "pgbridge_confirmed_flush_lsn"
RECEIVED_LSN: Final = "pgbridge_received_lsn"
SERVER_WAL_LSN: Final = "pgbridge_server_wal_lsn"
REPLICATION_LAG_BYTES: Final = "pgbridge_replication_lag_bytes"
COMMIT_TO_ACK_SECONDS: Final = "pgbridge_commit_to_ack_seconds"
BUFFERED_BYTES: Final = "pgbridge_buffered_bytes"
SPILLED_BYTES_TOTAL: Final = "pgbridge_spilled_bytes_total"
KAFKA_DELIVERY_ERRORS_TOTAL: Final = "pgbridge_kafka_delivery_errors_total"
KAFKA_QUEUE_DEPTH: Final = "pgbridge_kafka_queue_depth"
RECONNECTS_TOTAL: Final = "pgbridge_reconnects_total"
SNAPSHOT_ROWS_TOTAL: Final = "pgbridge_snapshot_rows_total"
SNAPSHOT_ROWS_ESTIMATE: Final = "pgbridge_snapshot_rows_estimate"
SNAPSHOT_PAUSED: Final = "pgbridge_incremental_snapshot_paused"
STREAMING: Final = "pgbridge_streaming"
TOAST_CACHE_HITS_TOTAL: Final = "pgbridge_toast_cache_hits_total"
TOAST_CACHE_MISSES_TOTAL: Final = "pgbridge_toast_cache_misses_total"
SCHEMA_CHANGES_TOTAL: Final = "pgbridge_schema_changes_total"
LEADER: Final = "pgbridge_leader"
HEARTBEATS_TOTAL: Final = "pgbridge_heartbeats_total"
SLOT_RETAINED_WAL_BYTES: Final = "pgbridge_slot_retained_wal_bytes"
SLOT_SAFE_WAL_SIZE_BYTES: Final = "pgbridge_slot_safe_wal_size_bytes"
SLOT_WAL_STATUS: Final = "pgbridge_slot_wal_status"
SLOT_FAILOVER_SYNCED: Final = "pgbridge_slot_failover_synced"
SLOT_INVALIDATION_FORECAST_SECONDS: Final = "pgbridge_slot_invalidation_forecast_seconds"
SERVER_WAL_RATE_BYTES: Final = "pgbridge_server_wal_rate_bytes_per_second"
KAFKA_TRANSACTIONS_TOTAL: Final = "pgbridge_kafka_transactions_total"
KAFKA_TRANSACTION_COMMIT_SECONDS: Final = "pgbridge_kafka_transaction_commit_seconds"
KAFKA_TRANSACTION_RECORDS: Final = "pgbridge_kafka_transaction_records"
STALLED: Final = "pgbridge_stalled"
OVERSIZE_RECORDS_TOTAL: Final = "pgbridge_oversize_records_total"

LABEL_TABLE: Final = "table"
LABEL_OP: Final = "op"
LABEL_OUTCOME: Final = "outcome"
LABEL_TARGET: Final = "target"
LABEL_COMPATIBILITY: Final = "compatibility"
LABEL_STATUS: Final = "status"
LABEL_KIND: Final = "kind"

# The stall watchdog's kinds (ack/watchdog.py): both series exist from the start, 0 until stalled.
STALL_KINDS: Final = ("source", "delivery")

TARGET_POSTGRES: Final = "postgres"
TARGET_KAFKA: Final = "kafka"
TARGET_SCHEMA_REGISTRY: Final = "schema_registry"
# ``pgbridge_reconnects_total{target}``: which side a transient failure was on, by its type (the
# nearest class of its MRO listed here); every other transient failure is Postgres's.
RECONNECT_TARGETS: Final[dict[type[TransientError], str]] = {
    BrokerUnavailable: TARGET_KAFKA,
    RegistryUnavailable: TARGET_SCHEMA_REGISTRY,
    TransientError: TARGET_POSTGRES,
}


def reconnect_target(error: Exception) -> str:
    """The ``target`` label a transient failure is counted under (``RECONNECT_TARGETS``); anything
    else that ends a session transiently (a Postgres connection lost mid-query) is Postgres."""
    for kind in type(error).__mro__:
        target = RECONNECT_TARGETS.get(kind)
        if target is not None:
            return target
    return TARGET_POSTGRES

# pg_replication_slots.wal_status values; exactly one of them is 1 at a time.
WAL_STATUSES: Final = ("reserved", "extended", "unreserved", "lost")

OUTCOME_COMMITTED: Final = "committed"
OUTCOME_ABORTED: Final = "aborted"
OUTCOME_PREPARED: Final = "prepared"
OUTCOME_ROLLED_BACK: Final = "rolled_back"

# Commit→ack latency spans sub-millisecond (idle, small transactions) to minutes (broker outage).
_LATENCY_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                           10.0, 30.0, 60.0, 120.0, 300.0)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.events = Counter(EVENTS_TOTAL, "Change events published, by table and op",
                              [LABEL_TABLE, LABEL_OP], registry=r)
        self.event_bytes = Counter(EVENT_BYTES_TOTAL, "Bytes of encoded key+value published, by table",
                                   [LABEL_TABLE], registry=r)
        self.transactions = Counter(TRANSACTIONS_TOTAL, "Source transactions by outcome",
                                    [LABEL_OUTCOME], registry=r)
        self.confirmed_flush_lsn = Gauge(CONFIRMED_FLUSH_LSN, "LSN last confirmed to Postgres",
                                         registry=r)
        self.received_lsn = Gauge(RECEIVED_LSN, "Highest WAL position received from Postgres",
                                  registry=r)
        self.server_wal_lsn = Gauge(SERVER_WAL_LSN, "Server WAL end reported by the walsender",
                                    registry=r)
        self.replication_lag_bytes = Gauge(REPLICATION_LAG_BYTES,
                                           "Server WAL end minus confirmed LSN", registry=r)
        self.commit_to_ack = Histogram(COMMIT_TO_ACK_SECONDS,
                                       "Seconds from source commit to Kafka acknowledgement of the "
                                       "whole transaction", buckets=_LATENCY_BUCKETS, registry=r)
        self.buffered_bytes = Gauge(BUFFERED_BYTES, "Bytes of buffered transactions held in memory",
                                    registry=r)
        self.spilled_bytes = Counter(SPILLED_BYTES_TOTAL, "Bytes written to spill files", registry=r)
        self.delivery_errors = Counter(KAFKA_DELIVERY_ERRORS_TOTAL, "Kafka delivery failures",
                                       registry=r)
        self.queue_depth = Gauge(KAFKA_QUEUE_DEPTH, "Records handed to Kafka and not yet acknowledged",
                                 registry=r)
        self.reconnects = Counter(RECONNECTS_TOTAL, "Reconnects after a transient failure",
                                  [LABEL_TARGET], registry=r)
        self.snapshot_rows = Counter(SNAPSHOT_ROWS_TOTAL, "Rows read by snapshots", [LABEL_TABLE],
                                     registry=r)
        self.snapshot_rows_estimate = Gauge(SNAPSHOT_ROWS_ESTIMATE, "Estimated rows to snapshot",
                                            [LABEL_TABLE], registry=r)
        self.snapshot_paused = Gauge(SNAPSHOT_PAUSED, "1 while a pause-snapshot signal holds incremental snapshots",
                                     registry=r)
        self.streaming = Gauge(STREAMING, "1 while streaming with Postgres and Kafka reachable",
                               registry=r)
        self.leader = Gauge(LEADER, "1 while this replica holds the leader lock (active), 0 on a standby",
                            registry=r)
        self.heartbeats = Counter(HEARTBEATS_TOTAL, "Heartbeat messages written with "
                                  "pg_logical_emit_message", registry=r)
        self.slot_retained_wal = Gauge(SLOT_RETAINED_WAL_BYTES, "WAL the slot keeps on the server: "
                                       "current WAL position minus the slot's restart_lsn", registry=r)
        self.slot_safe_wal_size = Gauge(SLOT_SAFE_WAL_SIZE_BYTES, "WAL that may still be written before "
                                        "the slot is invalidated (+Inf without max_slot_wal_keep_size)",
                                        registry=r)
        self.slot_wal_status = Gauge(SLOT_WAL_STATUS, "1 for the slot's current wal_status",
                                     [LABEL_STATUS], registry=r)
        self.slot_failover_synced = Gauge(
            SLOT_FAILOVER_SYNCED, "1 when the slot is a failover slot (Postgres 17+) that survives "
            "a failover: synced on this server, or synchronized_standby_slots names only standby slots with "
            "a standby streaming (source/monitor.py SlotState.failover_protected); else 0", registry=r)
        self.slot_invalidation_forecast = Gauge(
            SLOT_INVALIDATION_FORECAST_SECONDS, "Seconds until the slot would be invalidated if "
            "confirmation stopped now, at the current WAL rate (+Inf: no limit or no WAL traffic)",
            registry=r)
        self.server_wal_rate = Gauge(SERVER_WAL_RATE_BYTES, "Server WAL written per second, smoothed",
                                     registry=r)
        self.stalled = Gauge(STALLED, "1 while the stream is stalled (watchdog.stall_s without progress): "
                             "kind=source (the server has WAL not received), kind=delivery (records wait "
                             "for Kafka, none acknowledged)", [LABEL_KIND], registry=r)
        self.slot_safe_wal_size.set(float("inf"))
        self.slot_invalidation_forecast.set(float("inf"))
        for target in (TARGET_POSTGRES, TARGET_KAFKA, TARGET_SCHEMA_REGISTRY):
            self.reconnects.labels(target)
        for outcome in (OUTCOME_COMMITTED,):
            self.transactions.labels(outcome)
        for kind in STALL_KINDS:
            self.stalled.labels(kind).set(0)
        self.toast_cache_hits = Counter(TOAST_CACHE_HITS_TOTAL, "Unchanged TOASTed values filled from the "
                                        "local cache (toast policy cache)", registry=r)
        self.toast_cache_misses = Counter(TOAST_CACHE_MISSES_TOTAL, "Unchanged TOASTed values the local cache "
                                          "did not hold, published as markers", registry=r)
        self.schema_changes = Counter(SCHEMA_CHANGES_TOTAL, "New writer schemas of a table, by whether a "
                                      "consumer holding the previous one can read them", [LABEL_COMPATIBILITY],
                                      registry=r)
        self.kafka_transactions = Counter(KAFKA_TRANSACTIONS_TOTAL, "Kafka transactions (exactly-once mode) "
                                          "by outcome: committed or aborted", [LABEL_OUTCOME], registry=r)
        self.kafka_transaction_commit = Histogram(KAFKA_TRANSACTION_COMMIT_SECONDS, "Time commit_transaction "
                                                  "took (exactly-once mode)", buckets=_LATENCY_BUCKETS, registry=r)
        self.kafka_transaction_records = Histogram(KAFKA_TRANSACTION_RECORDS, "Records per committed Kafka "
                                                   "transaction (exactly-once mode)",
                                                   buckets=(1, 10, 100, 1_000, 10_000, 100_000, 1_000_000), registry=r)
        self.oversize_records = Counter(OVERSIZE_RECORDS_TOTAL, "Records Kafka refused as too large, by "
                                        "table (kafka.oversize_policy: stopped at, or dead-lettered)",
                                        [LABEL_TABLE], registry=r)


class EncodeMetrics:
    """The encoder's observer (``encode.envelope.EncodeObserver``): counts, and logs schema changes."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def toast_cache(self, hit: bool) -> None:
        (self._metrics.toast_cache_hits if hit else self._metrics.toast_cache_misses).inc()

    def schema_changed(self, table: str, compatibility: str, reason: str | None) -> None:
        self._metrics.schema_changes.labels(compatibility).inc()
        if reason is None:
            log.info("table schema changed; the new writer schema is compatible",
                     extra={"table": table, "compatibility": compatibility})
        else:
            log.warning("table schema changed incompatibly: consumers holding the previous schema cannot "
                        "read new records; publishing anyway",
                        extra={"table": table, "compatibility": compatibility, "reason": reason})
