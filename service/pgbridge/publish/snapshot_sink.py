"""Initial snapshot rows to Kafka: one delivery unit per chunk, counted like every other record.

The initial snapshot (snapshot/initial.py) reads tables in chunks on worker threads and hands each
row to this sink on the main thread. A chunk is a unit of the ack tracker, so its progress record is
written only once Kafka acknowledged all its rows. Under exactly-once the chunk's rows and its
progress record share one Kafka transaction; since workers read chunks in parallel, a transaction
also carries rows of chunks still being read, which are held again after each commit so that none
counts as durable before a commit that follows its last row.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from pgbridge.ack.tracker import Unit
from pgbridge.decode.messages import Relation, TupleData
from pgbridge.encode.envelope import EventContext
from pgbridge.lsn import Lsn
from pgbridge.publish.dispatch import Dispatcher, record_bytes
from pgbridge.snapshot.chunking import Chunk
from pgbridge.snapshot.initial import ChunkSink
from pgbridge.snapshot.progress import ProgressStore, done_key


class SnapshotSink(ChunkSink):
    """Rows of the snapshot taken at ``snapshot_lsn`` into the dispatcher's encoder and producer."""

    def __init__(self, dispatcher: Dispatcher, progress: ProgressStore, snapshot_lsn: Lsn) -> None:
        self._dispatcher = dispatcher
        self._progress = progress
        self._snapshot_lsn = snapshot_lsn
        self._ctx = EventContext(commit_lsn=snapshot_lsn, xid=0, ts_us=int(time.time() * 1_000_000), origin=None,
                                 total_order=0, collection_order=0, snapshot=True)
        self._callbacks: dict[Unit, Callable[..., None]] = {}
        self._open_units: list[Unit] = []  # exactly-once: chunks begun and not ended

    def begin_chunk(self) -> Unit:
        dispatcher = self._dispatcher
        unit = dispatcher.tracker.open_unit()
        self._callbacks[unit] = dispatcher.publisher.callback_for(unit)
        if dispatcher.transactions is not None:
            dispatcher.transactions.hold(unit)  # completes only after a Kafka commit
            self._open_units.append(unit)
        return unit

    def emit(self, relation: Relation, row: TupleData, unit: Unit) -> None:
        dispatcher = self._dispatcher
        if dispatcher.outbox is not None and dispatcher.outbox.plan(relation) is not None:
            return  # an outbox table's existing rows are not events (publish/outbox.py)
        record = dispatcher.encoder.encode_snapshot_row(relation, row, self._ctx)
        dispatcher.produce(record, self._callbacks[unit], unit)
        table = f"{relation.namespace}.{relation.name}"
        dispatcher.counters.events(table, "r", 1)
        dispatcher.counters.bytes(table, record_bytes(record))

    def end_chunk(self, unit: Unit, chunk: Chunk) -> None:
        dispatcher = self._dispatcher
        callback = self._callbacks.pop(unit, None)
        transactions = dispatcher.transactions
        if transactions is not None and callback is not None:
            # the chunk's progress record commits with its rows (snapshot/progress.py writes the same
            # record again once the rows are durable, which is harmless on a compacted topic)
            progress = self._progress
            dispatcher.publisher.produce(
                progress.topic, done_key(progress.slot, chunk.table, chunk.index).encode(),
                json.dumps({"consistent_lsn": self._snapshot_lsn}, separators=(",", ":")).encode(),
                callback, unit, self.service)
        dispatcher.tracker.seal(unit, None)
        if transactions is not None:
            self._open_units.remove(unit)
            transactions.commit()
            for still_open in self._open_units:
                transactions.hold(still_open)

    def service(self) -> None:
        publisher = self._dispatcher.publisher
        publisher.poll(0)
        publisher.raise_if_failed()
        self._progress.poll()
