"""Initial snapshot rows to Kafka: one delivery unit per chunk, counted like every other record.

The initial snapshot (snapshot/initial.py) reads tables in chunks on worker threads and hands each
row to this sink on the main thread. A chunk is a delivery unit (publish/delivery.py owns its
life), so its progress record is written only once Kafka acknowledged all its rows.

Exactly-once: the rows go into Kafka transactions committed once ``transaction_max_ms`` or
``transaction_max_bytes`` is reached (every row is a boundary: a snapshot row belongs to no Postgres
transaction), when the last chunk being read ends, or when the transaction is due while the workers
are quiet. A chunk's rows may therefore span several transactions, and one transaction holds rows of
every chunk the workers are reading; so every transaction carries, for each chunk it touches, the
chunk's position or done record (snapshot/progress.py ``ChunkPositions``, a ``before_commit`` hook),
and a restart resumes each chunk after its committed position. The units of chunks still being read
are held again after each commit, so that none counts as durable before a commit that follows its
last row.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pgbridge.ack.tracker import Unit
from pgbridge.decode.messages import Relation, TupleData
from pgbridge.encode.envelope import ChangeEncoder, EventContext
from pgbridge.lsn import Lsn
from pgbridge.publish.delivery import Deliveries, Delivery
from pgbridge.publish.outbox import OutboxRouter
from pgbridge.publish.oversize import RecordOrigin
from pgbridge.snapshot.chunking import Chunk
from pgbridge.snapshot.initial import ChunkSink, Position
from pgbridge.snapshot.progress import ChunkPositions, ProgressStore


def _snapshot_row_origin(topic: str) -> RecordOrigin:
    """A snapshot row Kafka refuses as too large: its topic; the key is in the record."""
    return RecordOrigin(table=topic, key="(see the record key)")


class SnapshotSink(ChunkSink):
    """Rows of the snapshot taken at ``snapshot_lsn``: encoded by ``encoder``, delivered in one
    unit per chunk by ``deliveries``. An ``outbox`` table's existing rows are not events."""

    def __init__(self, deliveries: Deliveries, encoder: ChangeEncoder, progress: ProgressStore, snapshot_lsn: Lsn,
                 *, outbox: OutboxRouter | None) -> None:
        self._deliveries = deliveries
        self._encoder = encoder
        self._outbox = outbox
        self._progress = progress
        self._snapshot_lsn = snapshot_lsn
        self._ctx = EventContext(commit_lsn=snapshot_lsn, xid=0, ts_us=int(time.time() * 1_000_000), origin=None,
                                 total_order=0, collection_order=0, snapshot=True)
        self._chunks: dict[Unit, Delivery] = {}
        self._open_units: list[Delivery] = []  # exactly-once: chunks begun and not ended
        self._positions: ChunkPositions | None = None
        self._unregister: Callable[[], None] | None = None
        if deliveries.exactly_once:
            self._positions = ChunkPositions(progress.topic, progress.slot, snapshot_lsn)
            self._unregister = deliveries.before_commit(self._positions.write)

    @property
    def positions(self) -> bool:
        return self._positions is not None

    def begin_chunk(self, chunk: Chunk) -> Unit:
        delivery = self._deliveries.open()  # exactly-once: held, completes only after a Kafka commit
        self._chunks[delivery.unit] = delivery
        if self._positions is not None:
            self._open_units.append(delivery)
            self._positions.begin(delivery.unit, chunk.table, chunk.index)
        return delivery.unit

    def emit(self, relation: Relation, row: TupleData, unit: Unit, position: Position | None = None) -> None:
        if self._outbox is not None and self._outbox.plan(relation) is not None:
            return  # an outbox table's existing rows are not events (publish/outbox.py)
        record = self._encoder.encode_snapshot_row(relation, row, self._ctx)
        nbytes = self._deliveries.produce(self._chunks[unit], record, _snapshot_row_origin)
        self._deliveries.count(f"{relation.namespace}.{relation.name}", "r", 1, nbytes)
        if self._positions is not None and position is not None:
            self._positions.reached(unit, position)
            self._deliveries.commit_if_due(self._open_units)

    def end_chunk(self, unit: Unit, chunk: Chunk) -> None:
        deliveries = self._deliveries
        delivery = self._chunks.pop(unit)
        deliveries.seal(delivery, None)
        if self._positions is not None:
            self._open_units.remove(delivery)
            self._positions.end(unit)  # its done record goes with the next commit
            if not self._open_units:
                deliveries.commit()  # nothing else is being read: make it durable now
            else:
                deliveries.commit_if_due(self._open_units)

    def service(self) -> None:
        self._deliveries.serve()
        self._progress.poll()
        if self._positions is not None:  # workers quiet (a slow read): what is open still commits in time
            self._deliveries.commit_if_due(self._open_units)

    def close(self) -> None:
        if self._unregister is not None:
            self._unregister()
            self._unregister = None
