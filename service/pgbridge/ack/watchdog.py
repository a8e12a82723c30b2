"""The stall watchdog: work is waiting and nothing has moved for too long.

A stream can stall without any error: a walsender socket that stops delivering, a producer wedged
on a broker that accepts connections but never answers. Every other signal stays quiet then (the
session is "streaming", Kafka is "reachable"), so the only trustworthy symptom is positions that
should move and do not:

* **source stalled**: the server has WAL beyond what pgbridge received (``server > received``), and
  ``received`` has not moved;
* **delivery stalled**: records are waiting for Kafka (``in_flight > 0``) and neither an
  acknowledgement nor the confirmed LSN has moved.

A slot that is merely quiet (nothing new on the server) or held back by a transaction still open
in Postgres (received > confirmed, nothing in flight) is *not* stalled: both are normal and must
not page anyone. The state machine is pure (time is an argument), so its rules are unit-tested
exactly; ``pipeline`` feeds it from housekeeping, which runs at least every 100 ms even while the
socket or the producer is stuck.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from pgbridge.lsn import Lsn, format_lsn
from pgbridge.metrics import STALL_KINDS

STALL_SOURCE: Final = STALL_KINDS[0]
STALL_DELIVERY: Final = STALL_KINDS[1]


@dataclass(frozen=True, slots=True)
class Positions:
    """What housekeeping knows right now. ``acked`` is a counter of acknowledgements, any unit."""

    server: Lsn
    received: Lsn
    confirmed: Lsn
    in_flight: int
    acked: int


@dataclass(frozen=True, slots=True)
class Stall:
    kind: str  # STALL_SOURCE or STALL_DELIVERY
    for_s: float
    positions: Positions

    @property
    def reason(self) -> str:
        p = self.positions
        if self.kind == STALL_SOURCE:
            return (f"stalled: the server has WAL up to {format_lsn(p.server)} but nothing was received "
                    f"beyond {format_lsn(p.received)} for {self.for_s:.0f}s")
        return (f"stalled: {p.in_flight} records wait for Kafka and nothing was acknowledged for "
                f"{self.for_s:.0f}s (confirmed {format_lsn(p.confirmed)})")


class StallWatchdog:
    """Feed it positions; it answers with the current ``Stall`` or ``None``. ``timeout_s <= 0`` disables it."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._last: Positions | None = None
        self._received_since = 0.0  # when ``received`` last moved (or source work appeared)
        self._delivered_since = 0.0  # when an ack or the confirmed LSN last moved (or records appeared)

    def observe(self, now: float, positions: Positions) -> Stall | None:
        last = self._last
        self._last = positions
        if last is None:
            self._received_since = self._delivered_since = now
            return None
        if positions.received != last.received or positions.server <= positions.received:
            self._received_since = now  # moving, or nothing to receive
        if (positions.acked != last.acked or positions.confirmed != last.confirmed
                or positions.in_flight == 0 or last.in_flight == 0):
            self._delivered_since = now  # moving, or nothing waiting (or it only just started)
        if self.timeout_s <= 0:
            return None
        source_for = now - self._received_since
        if source_for >= self.timeout_s:
            return Stall(STALL_SOURCE, source_for, positions)
        delivery_for = now - self._delivered_since
        if delivery_for >= self.timeout_s:
            return Stall(STALL_DELIVERY, delivery_for, positions)
        return None
