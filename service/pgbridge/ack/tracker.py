"""The durable watermark: the LSN pgbridge may confirm to Postgres.

Why this is safe, in order of the rules Postgres applies on restart. ``START_REPLICATION`` resumes
logical decoding at the slot's ``confirmed_flush_lsn``; a transaction is skipped when its commit
record starts below it, and a two-phase transaction whose PREPARE record starts below it is
treated as already sent (only its COMMIT PREPARED is decoded again). So:

1. A committed transaction may be confirmed through its ``end_lsn`` only once every record of it,
   and of every transaction before it, has been acknowledged by Kafka with ``acks=all``. The
   tracker keeps transactions in publish order in a queue with a pending-record count each; a
   delivery report decrements one count, and the front of the queue pops while it is sealed and
   complete. That is O(1) per record and amortised O(1) per transaction.
2. The watermark is capped at the first LSN of the oldest transaction that is open, buffered
   (streamed, not yet committed) or prepared but not yet committed, because confirming past a
   PREPARE would make Postgres never send that transaction's changes again.
3. When nothing is open, buffered, prepared or in flight, the server's keepalive position may be
   confirmed: the walsender reports the end of the WAL it has already decoded and sent, so no
   commit below it can still arrive. This keeps quiet slots from holding WAL.
4. What is reported never goes backwards.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from pgbridge.errors import InvariantError
from pgbridge.lsn import INVALID_LSN, Lsn


@dataclass(slots=True, eq=False)
class Unit:
    """Delivery bookkeeping of one published unit: a transaction, a standalone message, a snapshot chunk.

    Identity is the unit (``eq=False``): callers key dictionaries by it.
    """

    pending: int = 0
    sealed: bool = False
    end_lsn: Lsn | None = None  # None: completing it does not move the watermark
    commit_ts_us: int = 0
    failed: bool = False

    @property
    def durable(self) -> bool:
        """Every record it will ever have was handed over and acknowledged by Kafka."""
        return self.sealed and not self.pending and not self.failed


class AckTracker:
    """Counts outstanding deliveries per unit and derives the confirmable LSN."""

    def __init__(self, start_lsn: Lsn = INVALID_LSN) -> None:
        self._queue: deque[Unit] = deque()
        self._acked_lsn = start_lsn
        self._reported_lsn = start_lsn
        self._in_flight = 0
        self.delivered_total = 0  # acknowledgements ever: how the stall watchdog sees delivery move

    @property
    def acked_lsn(self) -> Lsn:
        """End of the longest fully acknowledged prefix of published units."""
        return self._acked_lsn

    @property
    def in_flight(self) -> int:
        """Records handed to the producer and not yet acknowledged."""
        return self._in_flight

    def open_unit(self, commit_ts_us: int = 0) -> Unit:
        unit = Unit(commit_ts_us=commit_ts_us)
        self._queue.append(unit)
        return unit

    def add_record(self, unit: Unit) -> None:
        if unit.sealed:
            raise InvariantError("record added to a unit that is already sealed")
        unit.pending += 1
        self._in_flight += 1

    def add_records(self, unit: Unit, count: int) -> None:
        """``count`` records of ``unit`` handed to the producer (``add_record`` ``count`` times)."""
        if unit.sealed:
            raise InvariantError("record added to a unit that is already sealed")
        unit.pending += count
        self._in_flight += count

    def seal(self, unit: Unit, end_lsn: Lsn | None) -> list[Unit]:
        """No more records will be added; returns units that completed as a result."""
        unit.sealed = True
        unit.end_lsn = end_lsn
        return self._drain()

    def delivered(self, unit: Unit) -> list[Unit]:
        """One record of ``unit`` was acknowledged; returns units that completed as a result."""
        if unit.pending <= 0:
            raise InvariantError("delivery report for a unit with no pending records")
        unit.pending -= 1
        self._in_flight -= 1
        self.delivered_total += 1
        if unit.pending == 0 and unit.sealed and self._queue and self._queue[0] is unit:
            return self._drain()
        return []

    def failed(self, unit: Unit) -> None:
        """A record of ``unit`` was not delivered: it and everything after it stay unconfirmed."""
        unit.failed = True
        if unit.pending > 0:
            unit.pending -= 1
            self._in_flight -= 1

    def _drain(self) -> list[Unit]:
        done: list[Unit] = []
        queue = self._queue
        while queue:
            head = queue[0]
            if not head.durable:
                break
            queue.popleft()
            if head.end_lsn is not None and head.end_lsn > self._acked_lsn:
                self._acked_lsn = head.end_lsn
            done.append(head)
        return done

    def is_drained(self) -> bool:
        return not self._queue

    def confirmable(self, *, unfinished_lsn: Lsn | None, server_lsn: Lsn | None = None) -> Lsn:
        """The LSN to report: acked prefix, capped below unfinished work, never going backwards.

        ``unfinished_lsn`` is the first LSN of the oldest open, buffered or prepared transaction.
        ``server_lsn`` (a keepalive's WAL end) is used only when nothing at all is outstanding.
        """
        candidate = self._acked_lsn
        if unfinished_lsn is None and not self._queue and server_lsn is not None:
            candidate = Lsn(max(candidate, server_lsn))
        if unfinished_lsn is not None:
            candidate = Lsn(min(candidate, unfinished_lsn))
        if candidate > self._reported_lsn:
            self._reported_lsn = candidate
        return self._reported_lsn

    @property
    def reported_lsn(self) -> Lsn:
        return self._reported_lsn
