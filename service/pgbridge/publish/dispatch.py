"""Assembled events to Kafka: the publish side's owner of the open transaction.

```
 TxBegin ──▶ open unit (ack tracker), BEGIN record ─┐
 RowChange / TruncateChange / MessageChange ────────┼─▶ encoder ─▶ producer (unit's callback)
 TxEnd ──▶ END record (counts per table), seal unit ┘        tallies per table → metrics once per tx
 StandaloneMessage ──▶ its own unit
```
One transaction is open at a time (the assembler hands over whole transactions in commit order).
Its ``OpenTransaction`` carries the unit every record is tracked under, the running order
numbers of the envelope and one tally per table, added to Prometheus once per transaction.

Four things ride along because they must see the same events in the same order:

* **exactly-once restarts** (publish/transactions.py): a transaction already whole in Kafka is
  skipped but still seals a unit, so the confirmed LSN moves past it; one committed in parts skips
  the events of the parts already committed; a huge one is committed in parts here;
* **incremental snapshots** (snapshot/incremental.py): a row change of the table being read drops
  its keys from the held chunk; signals and watermarks are handed over, and at a chunk's high
  watermark its rows are produced in the watermark transaction's unit;
* **byte and event accounting**: every record published for a table counts its key and value
  bytes, whether it is a change, a truncate or a snapshot read (``Deliveries.count``);

* **schema changes** (encode/schema_change.py, ``postgres.ddl_events``): a DDL message of the
  trigger becomes its records instead of a ``{prefix}.messages`` one; skipped transactions too.

The life of each unit (open, hold under exactly-once, produce, seal, commit) is
``publish/delivery.py``'s; the dispatcher only says which unit a record goes in.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from pgbridge.ack.tracker import Unit
from pgbridge.assemble.units import (
    AssembledEvent,
    MessageChange,
    RowChange,
    StandaloneMessage,
    TruncateChange,
    TxBegin,
    TxEnd,
    TxOrigin,
)
from pgbridge.decode.ddl import DDL_PREFIX
from pgbridge.decode.messages import PG_EPOCH_UNIX_US, Relation
from pgbridge.encode.envelope import ChangeEncoder, EventContext, OutRecord
from pgbridge.errors import FatalError
from pgbridge.lsn import Lsn
from pgbridge.publish.delivery import Deliveries, Delivery
from pgbridge.publish.outbox import OutboxRouter
from pgbridge.publish.oversize import RecordOrigin, row_key_text
from pgbridge.publish.routing import PublishFilter, row_records
from pgbridge.publish.transactions import Position
from pgbridge.source.monitor import HEARTBEAT_PREFIX

log = logging.getLogger(__name__)


class IncrementalWindow(Protocol):
    """What the dispatcher hands an incremental snapshot (snapshot/incremental.py's
    ``IncrementalSnapshotter``): the changes of the table whose chunk is held between its
    watermarks, the signals and watermarks; it answers with the rows a high watermark releases."""

    window_table: str | None  # the table whose chunk is held, ``schema.table``
    signal_prefix: str
    watermark_prefix: str

    def drop_keys(self, keys: Iterable[bytes | None]) -> None:
        """Rows changed after the chunk was read: their held copies are stale."""

    def drop_all(self) -> None:
        """The table was truncated: nothing held is current."""

    def on_signal(self, content: bytes, lsn: Lsn) -> None: ...

    def on_watermark(self, content: bytes) -> tuple[str, list[OutRecord]] | None:
        """At a chunk's high watermark: its table and the rows to produce now."""

    def chunk_produced(self, unit: Unit) -> None:
        """The released rows were produced in ``unit`` (the watermark's transaction)."""


class _TableTally:
    """One table's share of an open transaction: its collection order, events per op, bytes."""

    __slots__ = ("nbytes", "ops", "order")

    def __init__(self) -> None:
        self.order = 0
        self.nbytes = 0
        self.ops: dict[str, int] = {}

    def add(self, op: str, nbytes: int) -> None:
        self.nbytes += nbytes
        self.ops[op] = self.ops.get(op, 0) + 1


@dataclass(slots=True)
class OpenTransaction:
    """Per-transaction state of the row path; one ``EventContext`` serves every change of it.

    ``next_context`` is the one rule of the envelope's order numbers: it advances the total order
    and the table's collection order, in the context (mutable for this) and the tallies
    (``Dispatcher.row`` applies it inline, being called for every row). Metric counts are kept
    here, one dict look-up a row, and added to Prometheus once per transaction.
    """

    begin: TxBegin
    delivery: Delivery
    ts_us: int
    origin: str | None = None
    total_order: int = 0
    # Exactly-once restart: events 1..skip_through are already committed in Kafka (a split transaction)
    skip_through: int = 0
    tables: dict[str, _TableTally] = field(default_factory=dict)  # in order of first event
    context: EventContext = field(init=False)

    def __post_init__(self) -> None:
        self.set_origin(self.origin)

    def set_origin(self, origin: str | None) -> None:
        self.origin = origin
        self.context = EventContext(commit_lsn=self.begin.commit_lsn, xid=self.begin.xid, ts_us=self.ts_us,
                                    origin=origin, total_order=self.total_order, collection_order=0)

    def tally(self, table: str) -> _TableTally:
        tally = self.tables.get(table)
        if tally is None:
            tally = self.tables[table] = _TableTally()
        return tally

    def already_in_kafka(self) -> bool:
        """Exactly-once restart: is the next event part of what an earlier part committed?"""
        return bool(self.skip_through) and self.total_order < self.skip_through

    def next_context(self, tally: _TableTally | None) -> EventContext:
        """The context of the transaction's next event: a change in ``tally``'s table, or
        (``None``) a logical message, which counts in the transaction's order but belongs to no
        table."""
        self.total_order += 1
        order = 0
        if tally is not None:
            order = tally.order = tally.order + 1
        context = self.context
        context.total_order = self.total_order
        context.collection_order = order
        return context

    def per_table(self) -> dict[str, int]:
        """Events per table, in order of each table's first event (the END record's counts)."""
        return {table: tally.order for table, tally in self.tables.items()}


class Dispatcher:
    """Hands every assembled event to the encoder, and its records to a delivery unit.

    ``deliveries`` owns the units' life (publish/delivery.py); ``filter`` says which operations
    and tombstones are published (publish/routing.py); ``incremental`` and ``outbox`` ride along.
    Slotted: ``row`` reads a dozen of its attributes for every row.
    """

    __slots__ = ("_deliveries", "_describe_row", "_drop_tombstones", "_encode_row", "_exactly_once",
                 "_last_relation", "_last_table", "_plain_rows", "_plain_tx", "_row_event", "_skipped", "_skipped_ops", "_tx",
                 "encoder", "filter", "incremental", "outbox", "position")

    def __init__(self, *, encoder: ChangeEncoder, deliveries: Deliveries, filter: PublishFilter,
                 incremental: IncrementalWindow | None, outbox: OutboxRouter | None = None) -> None:
        self.encoder = encoder
        self._deliveries = deliveries
        self._exactly_once = deliveries.exactly_once
        self.incremental = incremental
        self.filter = filter
        # The row path reads these once per row: None when nothing is skipped / every tombstone kept,
        # so the common configuration pays one comparison, not a method call, per row.
        self._skipped_ops = filter.skipped or None
        self._drop_tombstones = not filter.tombstones_on_delete
        self.outbox = outbox  # outbox tables' inserts become outbox events (publish/outbox.py)
        self.position: Position | None = None  # exactly-once: how far committed Kafka transactions got
        self._tx: OpenTransaction | None = None
        self._skipped: TxBegin | None = None  # exactly-once: a transaction already whole in Kafka
        self._row_event: RowChange | None = None  # the change being produced, for ``_describe_row``
        # Bound once, read by ``row`` for every row.
        self._describe_row = self._row_origin
        self._encode_row = encoder.encode_row
        self._last_relation: Relation | None = None  # the last row's Relation version, and its table name
        self._last_table = ""
        # ``row``'s common case: nothing configured that a row must be checked against, and the open
        # transaction (``_plain_tx``, set at its BEGIN) is not resumed after parts already in Kafka.
        self._plain_rows = outbox is None and self._skipped_ops is None and not self._drop_tombstones
        self._plain_tx: OpenTransaction | None = None

    @property
    def in_transaction(self) -> bool:
        return self._tx is not None

    @property
    def exactly_once(self) -> bool:
        return self._exactly_once

    def _produce(self, record: OutRecord, tx: OpenTransaction) -> int:
        return self._deliveries.produce(tx.delivery, record, self._other_origin)

    # -- where a record came from, asked only when Kafka refuses it as too large ---------------------
    def _row_origin(self, topic: str) -> RecordOrigin:
        """The row being produced now: its table, key columns and position in its transaction."""
        event, tx = self._row_event, self._tx
        if event is None or tx is None:
            return self._other_origin(topic)
        return RecordOrigin(table=self.encoder.table_of(event.relation), key=row_key_text(event),
                            commit_lsn=tx.begin.commit_lsn, total_order=tx.total_order)

    def _other_origin(self, topic: str) -> RecordOrigin:
        """A record that is not a row change (boundary, truncate, message, snapshot row)."""
        tx = self._tx
        return RecordOrigin(table=topic, key="(see the record key)",
                            commit_lsn=None if tx is None else tx.begin.commit_lsn,
                            total_order=None if tx is None else tx.total_order)

    # -- events ------------------------------------------------------------------------------------
    def handle(self, event: AssembledEvent) -> None:
        if type(event) is RowChange:  # the hot path first
            self.row(event)
        elif isinstance(event, TxBegin):
            self._begin(event)
        elif self._skipped is not None:
            self._skip(event)
        elif isinstance(event, TxEnd):
            self._end(event)
        elif isinstance(event, TruncateChange):
            self._truncate(event)
        elif isinstance(event, MessageChange):
            self._message(event)
        elif isinstance(event, TxOrigin):
            if self._tx is not None:
                self._tx.set_origin(event.name)
        elif isinstance(event, StandaloneMessage):
            self._standalone(event)

    def row(self, event: RowChange) -> None:
        """A row change of the open transaction (the streaming loop hands a plain transaction's rows
        here directly, ``handle`` every other): the one place a row takes its place in the
        transaction's order and tallies, is encoded and produced in the transaction's unit.

        Every row of the stream comes here, so the common case (``_plain_rows``: no outbox, no
        skipped operation or tombstone; ``_plain_tx``: not resumed after parts already in Kafka)
        reads only attributes bound in
        ``__init__``, remembers the last Relation version's table name (``_last_relation``) and
        applies ``next_context`` and ``_TableTally.add`` inline; anything else is ``_row``'s."""
        tx = self._tx
        if tx is None or not self._plain_rows or tx is not self._plain_tx:
            self._row(event, tx)
            return
        relation = event.relation
        if relation is self._last_relation:
            table = self._last_table
        else:
            table = self._last_table = self.encoder.table_of(relation)
            self._last_relation = relation
        tally = tx.tables.get(table) or tx.tally(table)
        tx.total_order = total = tx.total_order + 1  # ``next_context``
        tally.order = order = tally.order + 1
        context = tx.context
        context.total_order = total
        context.collection_order = order
        records = self._encode_row(event, context)
        self._row_event = event
        tally.nbytes += tx.delivery.produce_all(records, self._describe_row)  # ``_TableTally.add``
        ops, op = tally.ops, event.op
        ops[op] = ops.get(op, 0) + 1
        snap = self.incremental
        if snap is not None and snap.window_table == table:
            snap.drop_keys(record.key for record in records)
        if self._exactly_once:
            self.split_if_due(tx)

    def _row(self, event: RowChange, tx: OpenTransaction | None) -> None:
        """``row`` in every case: outbox tables, skipped operations and tombstones, exactly-once
        (a transaction skipped or resumed after parts already in Kafka, a huge one split)."""
        if tx is None:
            if self._skipped is not None:  # exactly-once: already whole in Kafka
                return
            raise FatalError("row change outside a transaction reached the encoder")
        outbox = self.outbox
        if outbox is not None and outbox.plan(event.relation) is not None:
            if not self.filter.skips(event.op):
                self._outbox_row(event, outbox, tx)
            return
        table = self.encoder.table_of(event.relation)
        skipped_ops = self._skipped_ops
        if skipped_ops is not None and event.op in skipped_ops:
            self._skip_row(event, table, tx)
            return
        tally = tx.tally(table)
        if tx.already_in_kafka():
            tx.next_context(tally)
            return
        records = self.encoder.encode_row(event, tx.next_context(tally))
        self._row_event = event
        published = row_records(records, event.op, False) if self._drop_tombstones else records
        tally.add(event.op, tx.delivery.produce_all(published, self._describe_row))
        snap = self.incremental
        if snap is not None and snap.window_table == table:
            snap.drop_keys(record.key for record in records)
        if self._exactly_once:
            self.split_if_due(tx)

    def _outbox_row(self, event: RowChange, outbox: OutboxRouter, tx: OpenTransaction) -> None:
        """An outbox table's change: an insert is one outbox record, produced in the transaction's
        unit; it takes no place in the transaction's order (the outbox table's own topic gets
        nothing, so no END count may announce it). Under exactly-once, a transaction committed in
        parts resumes after the last event of the parts: an outbox record before it is skipped."""
        plan = outbox.plan(event.relation)
        if event.op != "c" or plan is None or event.new is None:
            outbox.ignore(event.relation, event.op)
            return
        if tx.already_in_kafka():
            return
        record = outbox.record(event.relation, event.new, plan)
        nbytes = self._deliveries.produce(tx.delivery, OutRecord(record.topic, record.key, record.value),
                                          self._other_origin, record.headers)
        self._deliveries.count(f"{event.relation.namespace}.{event.relation.name}", "c", 1, nbytes)

    def _skip_row(self, event: RowChange, table: str, tx: OpenTransaction) -> None:
        """A change of a skipped operation: nothing published, no place in the transaction's order.
        It still supersedes the held incremental-snapshot row of its key, as a published one would:
        that row was read before this change and would publish a state the table no longer has."""
        snap = self.incremental
        if snap is not None and snap.window_table == table:
            snap.drop_keys(record.key for record in self.encoder.encode_row(event, tx.context))

    def _begin(self, event: TxBegin) -> None:
        if self._tx is not None:
            raise FatalError("transaction began while another was still open")
        position = self.position
        if position is not None and position.skips_transaction(event.commit_lsn):
            self._skipped = event  # whole in Kafka already: its END only moves the watermark
            return
        ts_us = event.commit_ts + PG_EPOCH_UNIX_US
        tx = OpenTransaction(begin=event, delivery=self._deliveries.open(ts_us), ts_us=ts_us,
                             skip_through=position.skips_through(event.commit_lsn) if position else 0)
        self._tx = tx
        self._plain_tx = None if tx.skip_through else tx
        if not tx.skip_through:  # a split transaction's BEGIN went with its first part
            self._produce(self.encoder.encode_tx_boundary(status="BEGIN", xid=event.xid, commit_lsn=event.commit_lsn,
                                                          ts_us=ts_us, event_count=0, per_table={}), tx)

    def _end(self, event: TxEnd) -> None:
        tx = self._tx
        if tx is None or tx.begin.commit_lsn != event.commit_lsn:
            raise FatalError("transaction end does not match its begin")
        self._produce(self.encoder.encode_tx_boundary(status="END", xid=event.xid, commit_lsn=event.commit_lsn,
                                                      ts_us=tx.ts_us, event_count=tx.total_order,
                                                      per_table=tx.per_table()), tx)
        self._tx = self._plain_tx = None
        deliveries = self._deliveries
        for table, tally in tx.tables.items():
            deliveries.count_ops(table, tally.ops, tally.nbytes)
        deliveries.transaction_committed()
        deliveries.seal(tx.delivery, event.end_lsn)
        deliveries.boundary(Position(event.commit_lsn, tx.total_order))

    def _truncate(self, event: TruncateChange) -> None:
        tx = self._tx
        if tx is None:
            raise FatalError("truncate outside a transaction reached the encoder")
        skipped = self.filter.skips("t")  # not published; still empties a held snapshot chunk
        outbox = self.outbox
        for relation in event.relations:
            if outbox is not None and outbox.plan(relation) is not None:
                outbox.ignore(relation, "t")
                continue
            table = self.encoder.table_of(relation)
            if skipped:
                if self.incremental is not None and self.incremental.window_table == table:
                    self.incremental.drop_all()
                continue
            tally = tx.tally(table)
            if tx.already_in_kafka():
                tx.next_context(tally)
                continue
            record = self.encoder.encode_truncate(event, relation, tx.next_context(tally))
            tally.add("t", self._produce(record, tx))
            if self.incremental is not None and self.incremental.window_table == table:
                self.incremental.drop_all()

    def _message(self, event: MessageChange) -> None:
        tx = self._tx
        if tx is None:
            raise FatalError("transactional message outside a transaction reached the encoder")
        ddl = self.encoder.schema_changes
        if ddl is not None and event.prefix == DDL_PREFIX:
            taken = ddl.take(event, tx.begin.commit_lsn)
            if taken is not None and tx.already_in_kafka():
                tx.next_context(None)
            elif taken is not None:
                for record in ddl.records(taken, tx.next_context(None)):
                    self._produce(record, tx)
            return
        if tx.already_in_kafka():
            tx.next_context(None)
            return
        self._produce(self.encoder.encode_message(event.prefix, event.content, event.lsn, tx.next_context(None), True),
                      tx)
        if self.incremental is not None:
            self._snapshot_message(event.prefix, event.content, event.lsn, tx)

    def _standalone(self, event: StandaloneMessage) -> None:
        if event.prefix == HEARTBEAT_PREFIX:
            return
        position = self.position
        if position is not None and position.skips_transaction(event.lsn):
            return
        deliveries = self._deliveries
        delivery = deliveries.open()
        record = self.encoder.encode_message(event.prefix, event.content, event.lsn, None, False)
        deliveries.produce(delivery, record, self._other_origin)
        deliveries.seal(delivery, None)
        if self.incremental is not None:  # before the boundary: exactly-once, a signal's state commits with it
            self._snapshot_message(event.prefix, event.content, event.lsn, None)
        deliveries.boundary(Position(event.lsn))

    def _skip(self, event: AssembledEvent) -> None:
        """Exactly-once restart: events of a transaction whole in Kafka; its END moves the watermark."""
        skipped = self._skipped
        assert skipped is not None
        ddl = self.encoder.schema_changes
        if isinstance(event, MessageChange) and ddl is not None and event.prefix == DDL_PREFIX:
            ddl.take(event, skipped.commit_lsn)  # its Relations come next: the history must know
        elif isinstance(event, TxEnd):
            if event.commit_lsn != skipped.commit_lsn:
                raise FatalError("transaction end does not match its begin")
            self._skipped = None
            self._deliveries.pass_over(event.end_lsn)

    def split_if_due(self, tx: OpenTransaction) -> None:
        """Exactly-once, after each row: a huge transaction's part is committed when due."""
        self._deliveries.split_if_due(tx.delivery, tx.begin.commit_lsn, tx.total_order, tx.begin.xid)

    def _snapshot_message(self, prefix: str, content: bytes, lsn: Lsn, tx: OpenTransaction | None) -> None:
        """Signals start incremental snapshots; a chunk's high watermark releases its rows, produced
        in the watermark's transaction so the confirmed LSN cannot pass them unacknowledged."""
        snap = self.incremental
        assert snap is not None
        if prefix == snap.signal_prefix:
            snap.on_signal(content, lsn)
        elif prefix == snap.watermark_prefix and tx is not None:
            released = snap.on_watermark(content)
            if released is None:
                return
            table, rows = released
            if self.outbox is not None and table in self.outbox.tables:
                rows = []  # an outbox table's rows are not table records
            nbytes = 0
            for record in rows:
                nbytes += self._produce(record, tx)
            self._deliveries.count(table, "r", len(rows), nbytes)
            snap.chunk_produced(tx.delivery.unit)
