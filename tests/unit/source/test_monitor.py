"""Slot monitor: readings of pg_replication_slots, the invalidation forecast and the identity rules."""

from __future__ import annotations

import math

import pytest
from prometheus_client import generate_latest

from pgbridge.errors import SlotError
from pgbridge.lsn import Lsn
from pgbridge.metrics import Metrics
from pgbridge.source.monitor import (
    SlotIdentity,
    SlotMonitor,
    invalidation_forecast_s,
    slot_state_from_row,
)

PG15_ROW = {"slot_name": "s", "plugin": "pgoutput", "active": True, "active_pid": 42, "wal_status": "reserved",
            "safe_wal_size": 1_000_000, "restart_lsn": "0/1000", "confirmed_flush_lsn": "0/2000",
            "catalog_xmin": "750"}


def test_a_pg15_row_gives_retained_wal_against_the_server_position() -> None:
    state = slot_state_from_row(PG15_ROW, "0/5000", "1GB")
    assert state.retained_wal_bytes == 0x5000 - 0x1000
    assert state.confirmed_flush_lsn == 0x2000
    assert state.safe_wal_size == 1_000_000
    assert not state.invalidated


def test_unlimited_keep_size_reads_as_no_safe_size() -> None:
    state = slot_state_from_row({**PG15_ROW, "safe_wal_size": None}, "0/5000", "-1")
    assert state.safe_wal_size is None


@pytest.mark.parametrize("extra", [{"wal_status": "lost"}, {"invalidation_reason": "wal_removed"},
                                   {"conflicting": True, "wal_status": "reserved"}])
def test_lost_invalidated_or_conflicting_slots_count_as_invalidated(extra: dict[str, object]) -> None:
    assert slot_state_from_row({**PG15_ROW, **extra}, "0/5000", "1GB").invalidated


def test_forecast_divides_headroom_by_wal_rate() -> None:
    assert invalidation_forecast_s(1000, 10.0) == 100.0
    assert invalidation_forecast_s(None, 10.0) == math.inf
    assert invalidation_forecast_s(1000, 0.0) == math.inf


def test_monitor_publishes_metrics_and_smooths_the_wal_rate() -> None:
    metrics = Metrics()
    monitor = SlotMonitor("s", metrics, interval_s=10, walsender_pid=42)
    monitor.observe(slot_state_from_row(PG15_ROW, "0/5000", "1GB"), now=0.0)
    monitor.observe(slot_state_from_row(PG15_ROW, "0/6000", "1GB"), now=2.0)
    assert monitor.wal_rate == pytest.approx(0x1000 / 2)
    text = generate_latest(metrics.registry).decode()
    assert "pgbridge_slot_retained_wal_bytes 20480.0" in text
    assert "pgbridge_slot_safe_wal_size_bytes 1e+06" in text
    assert 'pgbridge_slot_wal_status{status="reserved"} 1.0' in text
    assert 'pgbridge_slot_wal_status{status="lost"} 0.0' in text
    assert f"pgbridge_slot_invalidation_forecast_seconds {1_000_000 / (0x1000 / 2)}" in text


def test_an_invalidated_slot_stops_the_monitor() -> None:
    monitor = SlotMonitor("s", Metrics(), interval_s=10, walsender_pid=42)
    with pytest.raises(SlotError, match="invalidated"):
        monitor.observe(slot_state_from_row({**PG15_ROW, "wal_status": "lost"}, "0/5000", "1GB"), now=0.0)


def test_a_slot_taken_by_another_pid_stops_the_monitor() -> None:
    monitor = SlotMonitor("s", Metrics(), interval_s=10, walsender_pid=41)
    with pytest.raises(SlotError, match="pid 42"):
        monitor.observe(slot_state_from_row(PG15_ROW, "0/5000", "1GB"), now=0.0)


def test_a_slot_dropped_after_streaming_is_refused_until_a_new_term() -> None:
    identity = SlotIdentity()
    identity.missing("s")  # first start: creating the slot is fine
    identity.streaming()
    with pytest.raises(SlotError, match="dropped"):
        identity.missing("s")
    identity.new_term()
    identity.missing("s")


def test_a_slot_ahead_of_what_we_confirmed_was_moved_by_someone_else() -> None:
    identity = SlotIdentity()
    identity.verify_on_open("s", Lsn(0x9000))  # nothing sent yet: any position is fine
    identity.sent(Lsn(0x5000))
    identity.sent(Lsn(0x4000))  # never goes backwards
    identity.verify_on_open("s", Lsn(0x5000))
    identity.verify_on_open("s", Lsn(0x4800))  # our last status may not have arrived
    with pytest.raises(SlotError, match="advanced, or dropped and re-created"):
        identity.verify_on_open("s", Lsn(0x5001))
