"""The insert lane: a plain transaction's Insert frames from bytes to ``produce`` in one step.

```
 XLogData 'I' ──▶ read_tuple (decode kernel) ──▶ kernel_insert (encode kernel) ──▶ produce
        │ anything else, or a row a kernel hands back
        └──────────▶ decode ──▶ feed ──▶ handle   (the stages, unchanged)
```
Most of a narrow row's CPU was Python glue between the stages, each of which only passes an
insert of a plain transaction through: the decoder builds an ``Insert``, the assembler turns it
into a ``RowChange`` (a plain transaction is handed on as it comes), the dispatcher looks up the
plan, advances the orders and tallies, and the encoder calls the kernel. The lane does just what
they would do for such a row, with the stages' own objects, and nothing else:

* it runs only while the stages say so: the assembler is in a plain transaction
  (``in_plain_transaction``) and hands the table's changes on (``passes_on``: a table the capture
  filter drops is left to it), the dispatcher's open transaction needs nothing but encoding
  (``lane_transaction``: no outbox or skipped inserts, no exactly-once transaction being skipped
  or resumed; a huge one is split as ``_row`` splits it), the table's plan needs
  only the kernel (``lane_plan``: no column policy, no TOAST cache). ``ready`` asks them again
  after every frame the stages handle that is not a row change (BEGIN, COMMIT, Relation,
  Origin…) and after every batch, since only those can change their answer;
* a row it cannot finish (malformed bytes, a value the kernel leaves to Python, a key column
  missing, an incremental-snapshot window on the table) changes nothing and goes the normal way,
  which names the fault or takes the Python path, so errors and special values have one owner;
* its records are the same bytes, in the same order, under the same unit and callback; the
  transaction's total and per-table orders and byte tallies advance as ``Dispatcher._row``
  advances them (``tests/unit/test_lane.py`` runs every frame sequence both ways and compares).

Without the compiled kernels (``PGBRIDGE_PURE_PYTHON=1``, or not built) there is no lane: the
stages are the reference path and stay the only one.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Final, cast

from pgbridge import native
from pgbridge.assemble.transaction import TransactionAssembler
from pgbridge.assemble.units import RowChange
from pgbridge.decode.messages import Relation, TupleData
from pgbridge.encode.plan import TablePlan
from pgbridge.errors import PgbridgeError
from pgbridge.lsn import INVALID_LSN, Lsn
from pgbridge.publish.delivery import Produce
from pgbridge.publish.dispatch import Dispatcher, OpenTransaction
from pgbridge.publish.oversize import RecordOrigin, row_key_text
from pgbridge.slotted import new_instance, slot_setters

_decode_kernel: Any = native.load("pgbridge.decode._native")

INSERT_TAG_AT: Final = 25  # the message's tag, after the XLogData header
INSERT_TAG: Final = 0x49  # 'I'
ROW_TAGS: Final = frozenset(b"IUD")  # messages after which ``ready`` gives the same answer
_NEW: Final = 0x4E  # 'N'
# XLogData header (tag, wal start, wal end, send time), then Insert: tag, relation OID, 'N', columns
_HEAD = struct.Struct(">xQQ8xxIBH")
_unpack_head = cast(Callable[[bytes, int], tuple[Lsn, Lsn, int, int, int]], _HEAD.unpack_from)
_FIRST_COLUMN: Final = _HEAD.size
INSERT_MIN_BYTES: Final = _HEAD.size  # an Insert frame is longer: its first column's kind
_set_kinds, _set_values = slot_setters(TupleData, "kinds", "values")


class _Table:
    """A relation's lane entry: its Relation version, plan and table name."""

    __slots__ = ("plan", "relation", "table")

    def __init__(self, relation: Relation, plan: TablePlan) -> None:
        self.relation = relation
        self.plan = plan
        self.table = plan.table


_UNSEEN: Final = _Table.__new__(_Table)  # a relation OID not looked up yet (``None``: not for the lane)


class InsertLane:
    """Takes a plain transaction's inserts past the stages when they would only pass them on."""

    def __init__(self, *, assembler: TransactionAssembler, dispatcher: Dispatcher) -> None:
        self._assembler = assembler
        self._relations = assembler.relations
        self._dispatcher = dispatcher
        self._encoder = dispatcher.encoder
        self._incremental = dispatcher.incremental
        self._exactly_once = dispatcher.exactly_once
        self._tables: dict[int, _Table | None] = {}
        self._version = -1
        self._tx: OpenTransaction | None = None
        self._produce: Produce | None = None  # the open transaction's record producer (``ready``)
        self._context: tuple[bytes, bytes, bytes] = (b"", b"", b"")
        self._origin_of = self._origin  # bound once: passed with every record
        self._row: tuple[Relation, TupleData, Lsn] | None = None  # the row being produced, for ``_origin``

    @classmethod
    def of(cls, *, assembler: TransactionAssembler, dispatcher: Dispatcher) -> InsertLane | None:
        """The lane, or ``None`` without the compiled kernels (the stages are then the only path)."""
        if not all(native.status().values()):
            return None
        return cls(assembler=assembler, dispatcher=dispatcher)

    def ready(self) -> bool:
        """Whether inserts may take the lane now; asked again after every frame the stages handled
        that is not a row change, and after every batch."""
        tx = self._dispatcher.lane_transaction() if self._assembler.in_plain_transaction() else None
        self._tx = tx
        if tx is not None:  # the transaction's context bytes (cached by the encoder) change with its origin
            self._context = self._encoder.context_bytes(tx.context)
            self._produce = self._dispatcher.lane_producer(tx)
        return tx is not None

    def insert(self, frame: bytes) -> Lsn:
        """Publish the Insert in XLogData ``frame``; its WAL end, or 0 when the stages must take it.

        The caller has checked ``ready()``, that the frame is longer than ``INSERT_MIN_BYTES`` and
        that its message tag is ``'I'``.
        """
        tx, produce = self._tx, self._produce
        assert tx is not None and produce is not None
        wal_start, wal_end, rel_id, marker, count = _unpack_head(frame, 0)
        if marker != _NEW:
            return INVALID_LSN
        if self._relations.version != self._version:
            self._tables.clear()
            self._version = self._relations.version
        entry = self._tables.get(rel_id, _UNSEEN)
        if entry is _UNSEEN:
            entry = self._tables[rel_id] = self._entry(rel_id)
        if entry is None:
            return INVALID_LSN
        snap = self._incremental
        if snap is not None and snap.window_table == entry.table:
            return INVALID_LSN  # the change drops keys from the held chunk: Dispatcher._row does that
        parsed = _decode_kernel.read_tuple(frame, _FIRST_COLUMN, count)
        if parsed is None or parsed[2] != len(frame):
            return INVALID_LSN
        row = new_instance(TupleData)
        _set_kinds(row, parsed[0])
        _set_values(row, parsed[1])
        tally = tx.tally(entry.table)
        total = tx.total_order + 1
        order = tally.order + 1
        records = entry.plan.kernel_insert(row, wal_start, self._context, total, order)
        if records is None:
            return INVALID_LSN
        key, value = records
        tx.total_order = total
        tally.order = order
        self._row = (entry.relation, row, wal_start)
        produce(entry.plan.topic, key, value, self._origin_of)
        tally.add("c", len(value) if key is None else len(key) + len(value))
        if self._exactly_once:
            self._dispatcher.split_if_due(tx)
        return wal_end

    def _entry(self, rel_id: int) -> _Table | None:
        """The lane entry of a relation OID, or ``None`` when its inserts take the stages' path
        (unknown OID, whose error the assembler raises; a plan that needs more than the kernel)."""
        relation = self._relations.find(rel_id)
        if relation is None or not self._assembler.passes_on(relation):
            return None
        try:
            plan = self._encoder.lane_plan(relation)
        except PgbridgeError:
            return None  # encode_row raises it again, where every other row's error is raised
        if plan is None:
            return None
        return _Table(relation, plan)

    def _origin(self, topic: str) -> RecordOrigin:
        """The row being produced, should Kafka refuse it as too large (``Dispatcher._row_origin``)."""
        tx, row = self._tx, self._row
        if tx is None or row is None:
            return RecordOrigin(table=topic, key="(see the record key)", commit_lsn=None, total_order=None)
        relation, new, lsn = row
        change = RowChange(op="c", relation=relation, lsn=lsn, old_kind=None, old=None, new=new)
        return RecordOrigin(table=self._encoder.table_of(relation), key=row_key_text(change),
                            commit_lsn=tx.begin.commit_lsn, total_order=tx.total_order)
