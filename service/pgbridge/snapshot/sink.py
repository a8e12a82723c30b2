"""Initial snapshot rows to Kafka: one delivery unit per chunk, counted like every other record.

The initial snapshot (snapshot/initial.py) reads tables in chunks on worker threads and hands each
row to this sink on the main thread. A chunk is a delivery unit (publish/delivery.py owns its
life), so its progress record is written only once Kafka acknowledged all its rows. Under
exactly-once the chunk's rows and its progress record share one Kafka transaction; since workers
read chunks in parallel, a transaction also carries rows of chunks still being read, which are
held again after each commit so that none counts as durable before a commit that follows its last
row.
"""

from __future__ import annotations

import json
import time

from pgbridge.ack.tracker import Unit
from pgbridge.decode.messages import Relation, TupleData
from pgbridge.encode.envelope import ChangeEncoder, EventContext
from pgbridge.lsn import Lsn
from pgbridge.publish.delivery import Deliveries, Delivery
from pgbridge.publish.outbox import OutboxRouter
from pgbridge.publish.oversize import RecordOrigin
from pgbridge.snapshot.chunking import Chunk
from pgbridge.snapshot.initial import ChunkSink
from pgbridge.snapshot.progress import ProgressStore, done_key


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

    def begin_chunk(self) -> Unit:
        delivery = self._deliveries.open()  # exactly-once: held, completes only after a Kafka commit
        self._chunks[delivery.unit] = delivery
        if self._deliveries.exactly_once:
            self._open_units.append(delivery)
        return delivery.unit

    def emit(self, relation: Relation, row: TupleData, unit: Unit) -> None:
        if self._outbox is not None and self._outbox.plan(relation) is not None:
            return  # an outbox table's existing rows are not events (publish/outbox.py)
        record = self._encoder.encode_snapshot_row(relation, row, self._ctx)
        nbytes = self._deliveries.produce(self._chunks[unit], record, _snapshot_row_origin)
        self._deliveries.count(f"{relation.namespace}.{relation.name}", "r", 1, nbytes)

    def end_chunk(self, unit: Unit, chunk: Chunk) -> None:
        deliveries = self._deliveries
        delivery = self._chunks.pop(unit)
        if deliveries.exactly_once:
            # the chunk's progress record commits with its rows (snapshot/progress.py writes the same
            # record again once the rows are durable, which is harmless on a compacted topic)
            progress = self._progress
            deliveries.produce_raw(
                delivery, progress.topic, done_key(progress.slot, chunk.table, chunk.index).encode(),
                json.dumps({"consistent_lsn": self._snapshot_lsn}, separators=(",", ":")).encode(), self.service)
        deliveries.seal(delivery, None)
        if deliveries.exactly_once:
            self._open_units.remove(delivery)
            deliveries.commit(still_open=self._open_units)

    def service(self) -> None:
        self._deliveries.serve()
        self._progress.poll()
