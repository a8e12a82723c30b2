"""The life of a delivery unit: open, hold (exactly-once), produce, seal; and what it delivered.

Every record pgbridge publishes travels in a unit of the ack tracker (ack/tracker.py): a Postgres
transaction, a standalone logical message, an initial-snapshot chunk, or the empty unit that moves
the watermark past a transaction an exactly-once restart skips. ``Deliveries`` is the one owner of
that life, so the rules hold the same way for each of them:

* **open**: a unit in publish order, with one delivery callback for all its records (the hot path
  allocates nothing per record); under exactly-once the open Kafka transaction *holds* it (one
  extra pending count), so it cannot complete before a commit that carries its records
  (publish/transactions.py, rule 3);
* **produce**: the record's topic exists (created on first use), then the producer takes it under
  the unit's callback; while its queue is full, ``idle`` keeps the walsender served;
* **seal**: no more records; the units that completed by it go to ``completed`` (the progress
  reporter observes commit→ack for them);
* **commit** (exactly-once): at a boundary when due, a part of a huge transaction when due, or
  snapshot rows when due and when the last chunk being read ends; units still being filled are
  held again by the next Kafka transaction. ``before_commit`` hooks put progress that is not a
  stream position (snapshot chunks' positions) into each transaction.

The per-table event and byte counters are kept here too (``pgbridge_events_total``,
``pgbridge_event_bytes_total``): every record published for a table counts, whichever unit
carried it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from pgbridge.ack.tracker import AckTracker, Unit
from pgbridge.encode.envelope import OutRecord
from pgbridge.lsn import Lsn
from pgbridge.metrics import OUTCOME_COMMITTED, Metrics
from pgbridge.publish.oversize import Describe
from pgbridge.publish.producer import Headers, KafkaPublisher, RowProducer
from pgbridge.publish.transactions import BeforeCommit, Position

log = logging.getLogger(__name__)

Completed = Callable[[list[Unit]], None]


class EventCounters:
    """``pgbridge_events_total`` and ``pgbridge_event_bytes_total``: children looked up once per label."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        self._events: dict[tuple[str, str], Any] = {}
        self._bytes: dict[str, Any] = {}

    def events(self, table: str, op: str, count: int) -> None:
        key = (table, op)
        counter = self._events.get(key)
        if counter is None:
            counter = self._events[key] = self._metrics.events.labels(table, op)
        counter.inc(count)

    def bytes(self, table: str, nbytes: int) -> None:
        counter = self._bytes.get(table)
        if counter is None:
            counter = self._bytes[table] = self._metrics.event_bytes.labels(table)
        counter.inc(nbytes)


def record_bytes(record: OutRecord) -> int:
    """What a record weighs in ``pgbridge_event_bytes_total``: its key and value."""
    return len(record.key or b"") + len(record.value or b"")


class Delivery:
    """One open unit, the delivery callback its records share, and its row producer
    (``KafkaPublisher.row_producer``: the row path's one call per change)."""

    __slots__ = ("callback", "produce_all", "unit")

    def __init__(self, unit: Unit, callback: Callable[..., None], produce_all: RowProducer) -> None:
        self.unit = unit
        self.callback = callback
        self.produce_all = produce_all


class Deliveries:
    """Opens, holds, fills and seals delivery units; counts what they carried.

    ``completed`` receives the units a seal completed; ``idle`` is called while the producer's queue
    is full (the session keeps the walsender served).
    """

    def __init__(self, publisher: KafkaPublisher, tracker: AckTracker, metrics: Metrics, *,
                 completed: Completed, idle: Callable[[], None]) -> None:
        self._publisher = publisher
        self._tracker = tracker
        self._transactions = publisher.transactions  # None unless kafka.exactly_once
        self._metrics = metrics
        self._counters = EventCounters(metrics)
        self._completed = completed
        self._idle = idle

    @property
    def exactly_once(self) -> bool:
        return self._transactions is not None

    # -- the unit's life ---------------------------------------------------------------------------
    def open(self, commit_ts_us: int = 0) -> Delivery:
        """A new unit, last in publish order; under exactly-once held by the open Kafka transaction.
        ``commit_ts_us`` (a transaction's commit time) is what commit→ack is observed against."""
        unit = self._tracker.open_unit(commit_ts_us)
        if self._transactions is not None:
            self._transactions.hold(unit)
        callback = self._publisher.callback_for(unit)
        return Delivery(unit, callback, self._publisher.row_producer(callback, unit, self._idle))

    def produce(self, delivery: Delivery, record: OutRecord, describe: Describe,
                headers: Headers | None = None) -> int:
        """One record in ``delivery``'s unit; its key and value bytes. ``describe`` names the
        record's origin should Kafka refuse it as too large."""
        publisher = self._publisher
        publisher.topics.ensure(record.topic)
        publisher.produce(record.topic, record.key, record.value, delivery.callback, delivery.unit, self._idle,
                          describe, headers)
        return record_bytes(record)

    def seal(self, delivery: Delivery, end_lsn: Lsn | None) -> None:
        """No more records in the unit; ``end_lsn`` is where the watermark may move once it and
        every unit before it are acknowledged (``None``: it does not move it)."""
        done = self._tracker.seal(delivery.unit, end_lsn)
        if done:
            self._completed(done)

    def pass_over(self, end_lsn: Lsn) -> None:
        """Exactly-once restart: a transaction already whole in Kafka publishes nothing, but an
        empty unit sealed at its end moves the watermark past it in publish order."""
        done = self._tracker.seal(self._tracker.open_unit(), end_lsn)
        if done:
            self._completed(done)

    def serve(self) -> None:
        """Serve delivery reports (they complete units); raise if a delivery failed."""
        self._publisher.poll(0)
        self._publisher.raise_if_failed()

    # -- exactly-once: the Kafka transaction carrying the units ------------------------------------
    def boundary(self, position: Position) -> None:
        """A Postgres transaction or standalone message ended at ``position``: commit when due."""
        if self._transactions is not None:
            self._transactions.boundary(position)

    def split_if_due(self, delivery: Delivery, commit_lsn: Lsn, total_order: int, xid: int) -> None:
        """After each row of a transaction: commit the part of a huge transaction produced so far
        when it is due (rule 1 of publish/transactions.py); its unit stays held by the next Kafka
        transaction."""
        transactions = self._transactions
        if transactions is None or not transactions.split_due():
            return
        transactions.commit_part(Position(commit_lsn, total_order, complete=False))
        transactions.hold(delivery.unit)
        log.info("huge transaction committed in parts", extra={"xid": xid, "events": total_order})

    def commit(self, still_open: Iterable[Delivery] = ()) -> None:
        """Commit the open Kafka transaction now; the units of ``still_open`` (being filled) are
        held again by the next one, so none counts as durable before a commit after its last record."""
        transactions = self._transactions
        if transactions is None:
            return
        transactions.commit()
        for delivery in still_open:
            transactions.hold(delivery.unit)

    def commit_if_due(self, still_open: Iterable[Delivery] = ()) -> None:
        """Snapshot rows (every row a boundary): ``commit`` once the open Kafka transaction is old or
        big enough (``kafka.transaction_max_ms`` / ``transaction_max_bytes``)."""
        if self._transactions is not None and self._transactions.due():
            self.commit(still_open)

    def before_commit(self, hook: BeforeCommit) -> Callable[[], None] | None:
        """Exactly-once: ``hook`` produces its records into every Kafka transaction just before it
        commits (publish/transactions.py); returns what unregisters it (None at least once)."""
        return None if self._transactions is None else self._transactions.before_commit(hook)

    # -- accounting --------------------------------------------------------------------------------
    def count(self, table: str, op: str, events: int, nbytes: int) -> None:
        """``events`` records of ``op`` published for ``table``, weighing ``nbytes`` (keys and values)."""
        self._counters.events(table, op, events)
        self._counters.bytes(table, nbytes)

    def count_ops(self, table: str, ops: dict[str, int], nbytes: int) -> None:
        """A transaction's share of ``table``: events per op and their bytes, added once."""
        counters = self._counters
        for op, events in ops.items():
            counters.events(table, op, events)
        counters.bytes(table, nbytes)

    def transaction_committed(self) -> None:
        self._metrics.transactions.labels(OUTCOME_COMMITTED).inc()
