"""Liveness, readiness and streaming, each with its reason (health.py): what /healthz, /readyz and
/streamingz answer (the HTTP side is tests/unit/test_http.py)."""

from __future__ import annotations

from pgbridge.ack.watchdog import STALL_DELIVERY, STALL_SOURCE, Positions, Stall
from pgbridge.health import (
    MIN_WEDGED_S,
    PHASE_SNAPSHOT,
    PHASE_STANDBY,
    PHASE_STARTING,
    PHASE_STREAMING,
    Health,
    wedged_after_s,
)
from pgbridge.lsn import Lsn


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _stall(kind: str, for_s: float) -> Stall:
    return Stall(kind, for_s, Positions(server=Lsn(200), received=Lsn(100), confirmed=Lsn(50), in_flight=3, acked=7))


def test_streaming_is_ready_and_streaming() -> None:
    health = Health(streaming=True)
    assert health.phase == PHASE_STREAMING
    assert health.ready and health.not_ready_reason is None
    assert health.is_streaming and health.not_streaming_reason is None
    assert health.alive


def test_a_standby_is_ready_but_not_streaming() -> None:
    # A healthy standby is doing its job: Ready, so rollouts complete and the PDB counts it.
    health = Health(standby=True)
    assert health.phase == PHASE_STANDBY
    assert health.ready
    assert health.not_streaming_reason == "standby: another replica holds the leader lock"


def test_the_initial_snapshot_is_ready_but_not_streaming() -> None:
    # helm install --wait must not time out during a long initial snapshot.
    health = Health(snapshotting=True)
    assert health.phase == PHASE_SNAPSHOT
    assert health.ready
    assert health.not_streaming_reason == "initial snapshot in progress"
    assert Health(snapshotting=True, kafka_ok=False).not_ready_reason == "Kafka unreachable"


def test_not_connected_is_neither_ready_nor_streaming() -> None:
    assert Health().phase == PHASE_STARTING
    assert Health().not_ready_reason == "starting"
    health = Health(last_error="connection refused")
    assert health.not_ready_reason == "not connected: connection refused"
    assert health.not_streaming_reason == "not connected: connection refused"
    assert health.alive, "connecting (or creating a slot behind a long transaction) is no reason to restart"


def test_kafka_and_a_stall_make_it_unready() -> None:
    assert Health(streaming=True, kafka_ok=False).not_ready_reason == "Kafka unreachable"
    assert Health(streaming=True, kafka_ok=False).not_streaming_reason == "Kafka unreachable"
    stalled = Health(streaming=True, stall=_stall(STALL_SOURCE, 61))
    assert not stalled.ready and stalled.not_ready_reason is not None
    assert stalled.not_ready_reason.startswith("stalled: the server has WAL up to")
    assert stalled.stalled == stalled.not_ready_reason == stalled.not_streaming_reason


def test_a_pipeline_thread_that_stops_beating_is_not_alive() -> None:
    clock = Clock()
    health = Health(streaming=True, wedged_after_s=120, clock=clock)
    health.beat()
    clock.now += 119
    assert health.alive
    clock.now += 1
    assert not health.alive
    assert health.wedged_reason == "wedged: the pipeline thread has not made progress for 120s (streaming)"
    assert not health.ready, "a wedged process is not ready either"
    health.beat()
    assert health.alive and health.ready


def test_the_beat_counts_only_in_phases_whose_loop_beats() -> None:
    clock = Clock()
    for phase in ({"snapshotting": True}, {"standby": True}):
        health = Health(wedged_after_s=120, clock=clock, **phase)  # type: ignore[arg-type]
        health.beat()
        clock.now += 500
        assert not health.alive, phase
    # Connecting, or creating a slot behind a long-running transaction: no loop to beat in.
    starting = Health(wedged_after_s=120, clock=clock)
    starting.beat()
    clock.now += 10_000
    assert starting.alive
    # Before the first beat of a phase (a snapshot still planning its chunks) nothing is judged.
    assert Health(snapshotting=True, wedged_after_s=120, clock=clock).alive


def test_a_delivery_stall_past_the_bound_is_not_alive_a_source_stall_never() -> None:
    health = Health(streaming=True, wedged_after_s=120, stall=_stall(STALL_DELIVERY, 119))
    assert health.alive and not health.ready
    health.stall = _stall(STALL_DELIVERY, 120)
    assert health.wedged_reason is not None
    assert health.wedged_reason.startswith("wedged: stalled: 3 records wait for Kafka")
    # Restarting would make the walsender decode again from the slot's restart LSN.
    assert Health(streaming=True, wedged_after_s=120, stall=_stall(STALL_SOURCE, 10_000)).alive


def test_the_bound_is_twice_the_longest_legitimate_wait() -> None:
    assert wedged_after_s(stall_s=60, delivery_timeout_ms=30_000, standby_retry_s=1) == MIN_WEDGED_S
    assert wedged_after_s(stall_s=300, delivery_timeout_ms=30_000, standby_retry_s=1) == 600
    assert wedged_after_s(stall_s=60, delivery_timeout_ms=180_000, standby_retry_s=1) == 360
    assert wedged_after_s(stall_s=0, delivery_timeout_ms=30_000, standby_retry_s=60) == MIN_WEDGED_S
