"""Readiness and its reason (health.py): what /readyz answers."""

from __future__ import annotations

from pgbridge.health import Health


def test_ready_only_while_streaming_with_kafka_and_not_stalled() -> None:
    assert Health(streaming=True).ready
    assert Health(streaming=True).not_ready_reason is None


def test_each_cause_is_named() -> None:
    assert Health().not_ready_reason == "not streaming"
    assert Health(last_error="connection refused").not_ready_reason == "not streaming: connection refused"
    assert Health(standby=True).not_ready_reason is not None
    assert Health(streaming=True, kafka_ok=False).not_ready_reason == "Kafka unreachable"
    stalled = Health(streaming=True, stalled="stalled: 3 records wait for Kafka")
    assert not stalled.ready and stalled.not_ready_reason == "stalled: 3 records wait for Kafka"
