"""The ack side's report of progress: what may be confirmed, when Postgres is told, how far behind we are.

```
 positions (keepalive, XLogData, slot check) ─┐
 AckTracker.confirmable(unfinished, server) ──┼─▶ FeedbackPolicy ─▶ standby status update (confirmed LSN)
                                              ├─▶ LSN / lag / queue gauges
 delivery reports (units completed) ──────────┼─▶ commit→ack histogram
                                              └─▶ StallWatchdog ─▶ ``stall`` (readiness, gauge, log)
```
The session calls ``report`` from housekeeping, which runs at least every 100 ms even while the
socket or the producer is stuck, so a stall is noticed within the watchdog's tick.
"""

from __future__ import annotations

import logging
import time
from typing import Protocol

from pgbridge.ack.feedback import FeedbackPolicy
from pgbridge.ack.tracker import AckTracker, Unit
from pgbridge.ack.watchdog import Positions, Stall, StallWatchdog
from pgbridge.lsn import INVALID_LSN, Lsn, format_lsn
from pgbridge.metrics import STALL_KINDS, Metrics

log = logging.getLogger(__name__)


class StatusSender(Protocol):
    """The replication stream, as far as feedback goes."""

    def send_status(self, lsn: Lsn, *, reply_requested: bool = False) -> None: ...


class ConfirmObserver(Protocol):
    """Who must know every LSN sent to Postgres (the slot identity check of source/monitor.py)."""

    def sent(self, lsn: Lsn) -> None: ...


class ProgressReporter:
    """Confirms what Kafka acknowledged, publishes the positions, watches for a stall.

    ``server_lsn`` is the walsender's last keepalive position (``None`` before the first one);
    ``catalog_server_lsn`` is ``pg_current_wal_lsn()`` from the last slot check, which still moves
    when the walsender's socket is stuck, the case a keepalive cannot reveal.
    """

    def __init__(self, tracker: AckTracker, metrics: Metrics, observer: ConfirmObserver, *,
                 status_interval_s: float, stall_s: float) -> None:
        self.tracker = tracker
        self.metrics = metrics
        self.feedback = FeedbackPolicy(status_interval_s)
        self.watchdog = StallWatchdog(stall_s)
        self.server_lsn: Lsn | None = None
        self.received_lsn: Lsn = INVALID_LSN
        self.catalog_server_lsn: Lsn = INVALID_LSN
        self.stall: Stall | None = None
        self._observer = observer

    def received(self, wal_end: Lsn) -> None:
        """An XLogData frame ending at ``wal_end`` was read: the received position only grows (a
        frame re-sent after a reconnect, or out of a streamed block, may end below it)."""
        if wal_end > self.received_lsn:
            self.received_lsn = wal_end

    def report(self, status: StatusSender | None, *, idle: bool, unfinished_lsn: Lsn | None,
               reply_requested: bool, now: float) -> Lsn:
        """One housekeeping pass; returns the LSN that may be confirmed now."""
        tracker = self.tracker
        confirm = tracker.confirmable(unfinished_lsn=unfinished_lsn, server_lsn=self.server_lsn if idle else None)
        if status is not None and self.feedback.due(now, confirm_lsn=confirm, reply_requested=reply_requested):
            # When nothing is outstanding, ask for a keepalive: a busy walsender sends one on its own
            # only every wal_sender_timeout/2, and its position is what lets a quiet slot's confirmed
            # LSN follow a busy server (the heartbeat rule in ack/tracker.py).
            status.send_status(confirm, reply_requested=idle)
            self.feedback.sent(now, confirm)
            self._observer.sent(confirm)
        metrics = self.metrics
        server = max(self.server_lsn or 0, self.received_lsn)
        metrics.confirmed_flush_lsn.set(confirm)
        metrics.received_lsn.set(self.received_lsn)
        metrics.server_wal_lsn.set(server)
        metrics.replication_lag_bytes.set(max(0, server - confirm))
        metrics.queue_depth.set(tracker.in_flight)
        self._watch(now, confirm)
        return confirm

    def _watch(self, now: float, confirm: Lsn) -> None:
        # A keepalive's position is what the walsender has sent (sentPtr): received as much as XLogData.
        received = Lsn(max(self.received_lsn, self.server_lsn or 0))
        positions = Positions(server=Lsn(max(self.catalog_server_lsn, received)), received=received, confirmed=confirm,
                              in_flight=self.tracker.in_flight, acked=self.tracker.delivered_total)
        stall = self.watchdog.observe(now, positions)
        before = self.stall
        self.stall = stall
        if (before.kind if before else None) == (stall.kind if stall else None):
            return  # no change: the gauge and the log speak only on transitions
        for kind in STALL_KINDS:
            self.metrics.stalled.labels(kind).set(1 if stall is not None and stall.kind == kind else 0)
        if stall is not None:
            log.warning("stream stalled", extra={
                "kind": stall.kind, "reason": stall.reason, "for_s": round(stall.for_s, 1),
                "server_lsn": format_lsn(positions.server), "received_lsn": format_lsn(positions.received),
                "confirmed_lsn": format_lsn(positions.confirmed), "in_flight": positions.in_flight})
        else:
            log.info("stream moving again", extra={"received_lsn": format_lsn(positions.received),
                                                   "confirmed_lsn": format_lsn(positions.confirmed)})

    def clear(self) -> None:
        """The session ends: a stall of this session is no longer anyone's state."""
        if self.stall is not None:
            for kind in STALL_KINDS:
                self.metrics.stalled.labels(kind).set(0)
            self.stall = None

    def completed(self, units: list[Unit]) -> None:
        """Units whose every record Kafka acknowledged: observe commit→ack for each transaction."""
        now_us = time.time() * 1_000_000
        for unit in units:
            if unit.commit_ts_us:
                self.metrics.commit_to_ack.observe(max(0.0, (now_us - unit.commit_ts_us) / 1_000_000))

    def final(self, status: StatusSender) -> Lsn:
        """Graceful stop: confirm what was acknowledged, whatever the feedback interval says."""
        confirm = self.tracker.reported_lsn
        status.send_status(confirm)
        self._observer.sent(confirm)
        return confirm
