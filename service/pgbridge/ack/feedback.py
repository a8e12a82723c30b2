"""When to send a standby status update: on an interval, when asked, and soon after progress.

The walsender disconnects a client that stays silent for ``wal_sender_timeout``; a keepalive with
the reply flag set means it is about to. Progress is reported promptly (but at most every
``min_gap_s``) so ``confirmed_flush_lsn`` trails Kafka acknowledgements by well under a second.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class FeedbackPolicy:
    interval_s: float
    min_gap_s: float = 0.2
    _last_sent_at: float = float("-inf")
    _last_sent_lsn: int = -1

    def due(self, now: float, *, confirm_lsn: int, reply_requested: bool = False) -> bool:
        if reply_requested:
            return True
        elapsed = now - self._last_sent_at
        if elapsed >= self.interval_s:
            return True
        return confirm_lsn != self._last_sent_lsn and elapsed >= self.min_gap_s

    def sent(self, now: float, lsn: int) -> None:
        self._last_sent_at = now
        self._last_sent_lsn = lsn
