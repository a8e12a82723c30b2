"""The stall watchdog's rules: stalled only when work waits and nothing moves for the timeout."""

from __future__ import annotations

from pgbridge.ack.watchdog import STALL_DELIVERY, STALL_SOURCE, Positions, StallWatchdog
from pgbridge.lsn import Lsn


def _p(server: int = 100, received: int = 100, confirmed: int = 100, in_flight: int = 0, acked: int = 0) -> Positions:
    return Positions(Lsn(server), Lsn(received), Lsn(confirmed), in_flight, acked)


def _run(dog: StallWatchdog, start: float, end: float, positions: Positions, step: float = 1.0) -> list[str | None]:
    out = []
    t = start
    while t <= end:
        stall = dog.observe(t, positions)
        out.append(None if stall is None else stall.kind)
        t += step
    return out


def test_a_quiet_slot_is_never_stalled() -> None:
    assert set(_run(StallWatchdog(5), 0, 60, _p())) == {None}


def test_an_open_postgres_transaction_holding_confirmed_back_is_not_a_stall() -> None:
    # received beyond confirmed, but nothing waits for Kafka: the transaction is still open upstream
    assert set(_run(StallWatchdog(5), 0, 60, _p(server=200, received=200, confirmed=100))) == {None}


def test_wal_on_the_server_not_received_for_the_timeout_is_a_source_stall() -> None:
    dog = StallWatchdog(5)
    kinds = _run(dog, 0, 10, _p(server=300, received=200))
    assert kinds[:5] == [None] * 5 and kinds[5:] == [STALL_SOURCE] * 6
    stall = dog.observe(11, _p(server=300, received=200))
    assert stall is not None and "300" not in stall.reason and "12C" in stall.reason  # hex LSNs


def test_records_waiting_without_any_ack_for_the_timeout_is_a_delivery_stall() -> None:
    dog = StallWatchdog(5)
    kinds = _run(dog, 0, 10, _p(in_flight=7, acked=3))
    assert kinds[:5] == [None] * 5 and kinds[5:] == [STALL_DELIVERY] * 6


def test_movement_clears_a_stall_at_once_and_restarts_the_clock() -> None:
    dog = StallWatchdog(5)
    _run(dog, 0, 10, _p(server=300, received=200))
    assert dog.observe(11, _p(server=300, received=250)) is None
    assert dog.observe(15, _p(server=300, received=250)) is None
    assert dog.observe(16.5, _p(server=300, received=250)) is not None
    _run(dog, 20, 30, _p(in_flight=2, acked=1))
    assert dog.observe(31, _p(in_flight=2, acked=2)) is None


def test_a_disabled_watchdog_never_reports() -> None:
    assert set(_run(StallWatchdog(0), 0, 100, _p(server=300, received=200, in_flight=5))) == {None}
