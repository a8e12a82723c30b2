"""The ack side's progress report (ack/progress.py): feedback only of acknowledged LSNs, gauges, stalls."""

from __future__ import annotations

from pgbridge.ack.progress import ProgressReporter
from pgbridge.ack.tracker import AckTracker
from pgbridge.lsn import Lsn
from pgbridge.metrics import Metrics


class _Stream:
    def __init__(self) -> None:
        self.sent: list[tuple[int, bool]] = []

    def send_status(self, lsn: Lsn, *, reply_requested: bool = False) -> None:
        self.sent.append((lsn, reply_requested))


class _Observer:
    def __init__(self) -> None:
        self.lsns: list[int] = []

    def sent(self, lsn: Lsn) -> None:
        self.lsns.append(lsn)


def _reporter(stall_s: float = 5.0) -> tuple[ProgressReporter, AckTracker, Metrics, _Observer]:
    tracker, metrics, observer = AckTracker(), Metrics(), _Observer()
    return ProgressReporter(tracker, metrics, observer, status_interval_s=1.0, stall_s=stall_s), tracker, metrics, observer


def _gauge(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_only_what_kafka_acknowledged_is_confirmed() -> None:
    reporter, tracker, metrics, observer = _reporter()
    stream = _Stream()
    unit = tracker.open_unit()
    tracker.add_record(unit)
    tracker.seal(unit, Lsn(0x500))
    reporter.received_lsn = Lsn(0x500)
    assert reporter.report(stream, idle=False, unfinished_lsn=None, reply_requested=True, now=0.0) == 0
    tracker.delivered(unit)
    assert reporter.report(stream, idle=False, unfinished_lsn=None, reply_requested=True, now=2.0) == 0x500
    assert stream.sent[-1] == (0x500, False) and observer.lsns[-1] == 0x500
    assert _gauge(metrics, "pgbridge_confirmed_flush_lsn") == 0x500
    assert _gauge(metrics, "pgbridge_replication_lag_bytes") == 0


def test_lag_is_the_server_position_minus_confirmed() -> None:
    reporter, _, metrics, _ = _reporter()
    reporter.server_lsn = Lsn(0x900)
    reporter.received_lsn = Lsn(0x400)
    reporter.report(None, idle=False, unfinished_lsn=None, reply_requested=False, now=0.0)
    assert _gauge(metrics, "pgbridge_server_wal_lsn") == 0x900
    assert _gauge(metrics, "pgbridge_replication_lag_bytes") == 0x900


def test_a_stall_is_reported_once_on_the_gauge_and_cleared_when_acks_move() -> None:
    reporter, tracker, metrics, _ = _reporter(stall_s=5.0)
    unit = tracker.open_unit()
    tracker.add_records(unit, 3)
    for t in range(0, 7):
        reporter.report(None, idle=False, unfinished_lsn=None, reply_requested=False, now=float(t))
    assert reporter.stall is not None and reporter.stall.kind == "delivery"
    assert "3 records wait for Kafka" in reporter.stall.reason
    assert _gauge(metrics, "pgbridge_stalled", kind="delivery") == 1
    assert _gauge(metrics, "pgbridge_stalled", kind="source") == 0
    tracker.delivered(unit)
    reporter.report(None, idle=False, unfinished_lsn=None, reply_requested=False, now=7.0)
    assert reporter.stall is None and _gauge(metrics, "pgbridge_stalled", kind="delivery") == 0


def test_server_wal_seen_by_the_slot_check_and_never_received_is_a_source_stall() -> None:
    reporter, _, metrics, _ = _reporter(stall_s=5.0)
    reporter.received_lsn = Lsn(0x100)
    reporter.catalog_server_lsn = Lsn(0x300)
    for t in range(0, 7):
        reporter.report(None, idle=True, unfinished_lsn=None, reply_requested=False, now=float(t))
    assert reporter.stall is not None and reporter.stall.kind == "source"
    assert _gauge(metrics, "pgbridge_stalled", kind="source") == 1
    reporter.clear()
    assert reporter.stall is None and _gauge(metrics, "pgbridge_stalled", kind="source") == 0


def test_a_keepalive_position_counts_as_received() -> None:
    # an idle slot on a busy server: keepalives move, no XLogData: not stalled
    reporter, _, _, _ = _reporter(stall_s=5.0)
    for t in range(0, 20):
        reporter.catalog_server_lsn = Lsn(0x1000 + t * 0x100)
        reporter.server_lsn = Lsn(0x1000 + t * 0x100)
        reporter.report(None, idle=True, unfinished_lsn=None, reply_requested=False, now=float(t))
        assert reporter.stall is None


def test_commit_to_ack_is_observed_per_transaction_with_a_commit_time() -> None:
    reporter, tracker, metrics, _ = _reporter()
    reporter.completed([tracker.open_unit(commit_ts_us=1), tracker.open_unit()])
    assert _gauge(metrics, "pgbridge_commit_to_ack_seconds_count") == 1
