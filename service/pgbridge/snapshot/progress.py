"""Snapshot progress: what is persisted, where, and why a crash at any point is safe.

Where progress lives
--------------------
In a compacted Kafka topic ``{prefix}._snapshot`` (one partition), keyed by ``{slot}/...``, with
JSON values. Kafka, not Postgres: pgbridge needs no write access to the source database (a
progress table would also be captured by ``FOR ALL TABLES`` publications and would add WAL),
and the records it describes live in Kafka anyway, so "chunk done" and "chunk's rows durable"
are facts about the same system. A progress record is produced only *after* every record it
vouches for was acknowledged with ``acks=all``, so the topic can lag behind the truth, never
run ahead of it. Reading it back is "read to the end once at start-up"; a record that is missed
only makes pgbridge redo work, which the rules below make harmless.

Records
-------
- ``{slot}/initial/plan/{table}``: the chunk plan of one table (boundaries in text form).
- ``{slot}/initial/plan``: the header, ``{"consistent_lsn": C, "tables": [...]}``, produced after
  every table plan and acknowledged before any row is read. ``C`` is the consistent point of the
  pending slot ``{slot}_snapshot``; it identifies the attempt.
- ``{slot}/initial/done/{table}/{index}``: chunk ``index`` of ``table`` was read and every one of
  its rows acknowledged.
- ``{slot}/initial/resume/{table}/{index}`` (exactly-once only): ``{"consistent_lsn": C, "after":
  [...]}``, the position (snapshot/chunking.py) of the last row of the chunk that is committed in
  Kafka; written inside the Kafka transaction that commits that row.
- ``{slot}/incremental``: the queue of incremental snapshots, the key after which the current
  table continues, the last signal acted on, and whether a pause-snapshot signal holds the queue.
- ``{slot}/tables``: the tables whose rows have been (or are being) snapshotted: a table in the
  publication and not in this set was added since, and gets an incremental snapshot.
- ``{slot}/schema/{relid}`` (``postgres.ddl_events``): a table's rename history, written in the unit
  of the DDL that changed it (encode/renames.py, encode/schema_change.py).
When the initial snapshot completes its keys are tombstoned, so compaction removes them.

Initial snapshot: resume semantics
----------------------------------
The exported snapshot lives only as long as the replication connection that created the pending
slot, so a restarted pgbridge can never read in it again. What survives is the pending slot:
it was never streamed from, so its confirmed LSN is still ``C``, and it keeps every change
committed after ``C``. On restart with a pending slot whose confirmed LSN equals the header's
``C``, pgbridge keeps the slot and re-reads only the chunks without a ``done`` record, in a *new*
consistent snapshot ``S'`` (exported by an ordinary ``REPEATABLE READ`` transaction and shared by
the workers). No watermarks are needed for this, and nothing is lost or left stale:

- every row visible at ``C`` either is in a done chunk (read at ``C``), or is re-read at ``S'``,
  or was changed or deleted between ``C`` and ``S'``, and then that change is in the slot;
- every snapshot record precedes, in the topic, every streamed record: streaming from the
  pending slot starts (at ``C``) only after the whole snapshot is acknowledged;
- so, per key, the last record is either a stream event after ``C`` (which carries the row's
  full new image, or deletes it) or, if the row did not change after ``C``, a snapshot read, and
  an unchanged row reads the same at ``C`` and at ``S'``, with the same key.
That last step holds for key ranges, not for ``ctid`` ranges: ``VACUUM FULL`` or ``CLUSTER``
moves rows without a logical change. So a keyless table with any unfinished chunk is read again
whole; a keyed table resumes chunk by chunk.
A key whose row changed between ``C`` and ``S'`` can show a newer snapshot value followed by
older stream events that end in the right state: a replay converges, a live reader may briefly
see the row go back in time. Snapshot reads carry ``source.commit_lsn = C`` and no transaction
block; re-read chunks repeat ``op=r`` records, which are idempotent upserts (the contract's
``(commit_lsn, total_order)`` rule does not apply to them: keep the latest per key). If the
header is missing or names another ``C``, the pending slot is dropped and the snapshot starts over.
The real slot is created (``pg_copy_logical_replication_slot``) only after every chunk is done, so
its confirmed LSN never passes a row that is not in Kafka.

Exactly-once: progress travels with every Kafka transaction
-----------------------------------------------------------
With ``kafka.exactly_once`` a chunk's rows may be spread over several Kafka transactions (the
``transaction_max_ms`` / ``transaction_max_bytes`` bounds, and parallel workers whose chunks share a
transaction), so a record per *chunk* cannot be committed with all of its rows. Instead every Kafka
transaction that carries snapshot rows also carries, for each chunk it touches, how far that chunk
got: its ``done`` record if the chunk ended, else its ``resume`` record with the position of its
last row (``ChunkProgress``, written just before ``commit_transaction``: publish/transactions.py
``before_commit``). The rows of a chunk are read in position order, so "committed" is exactly
"at or before the recorded position", and a restart reads each chunk after its position: no row
that a ``read_committed`` reader can see is read again. The new snapshot ``S'`` argument above
holds for the rest of the chunk as it does for whole chunks. A keyless table's position is
``(tableoid, ctid)``, which names the same row in ``S'`` only if the table was not rewritten
since ``C``: its plan keeps the storage files it was made on, and if they changed (``VACUUM FULL``,
``CLUSTER``) the table is read again whole, and its committed rows appear twice (logged as a
warning). On start the progress topic is read again once ``init_transactions`` has fenced the
previous producer, so a transaction that producer was committing when it died is seen whole.

At least once none of this is written: the ``done`` record follows the acknowledgement of the
chunk's rows as before, chunks are read unordered, and a chunk in flight at a crash is read again.

Incremental snapshots
---------------------
The current table's chunk rows are produced inside the unit of the transaction that carries the
high watermark, so the confirmed LSN cannot pass the high watermark before they are acknowledged.
The ``{slot}/incremental`` record moves forward only after that; a crash in between re-reads the
chunk (duplicate ``op=r`` only). A signal is recorded synchronously before its transaction can be
confirmed, so it is acted on exactly once even when the signal is decoded again after a restart
(signals at or below the recorded ``signal_lsn`` are ignored).

Exactly-once: the ``{slot}/incremental`` record moves forward when the chunk's rows are produced and
is written into the Kafka transaction that carries them (and the signal's), so the committed
record and the committed rows always agree, and the high watermark's transaction, skipped after a
restart when it is whole in Kafka, is never followed by a second read of the same chunk. Written
outside a transaction only when none is open, and then flushed before anything else is produced.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from confluent_kafka import KafkaError, Message, Producer

from pgbridge.config import KafkaConfig
from pgbridge.errors import BrokerUnavailable
from pgbridge.logs import LibrdkafkaLog
from pgbridge.publish.producer import consumer_config, delivery_problem, produce_when_room, producer_config
from pgbridge.publish.topics import TopicManager, read_compacted, sanitize

log = logging.getLogger(__name__)

# Reading the progress topic at start-up gives up after this long: a broker that cannot serve one
# small topic in that time is unreachable, and the session is retried.
LOAD_TIMEOUT_S: Final = 30.0
FLUSH_TIMEOUT_S: Final = 30.0


def progress_topic(prefix: str) -> str:
    return sanitize(f"{prefix}._snapshot")


def header_key(slot: str) -> str:
    return f"{slot}/initial/plan"


def plan_key(slot: str, table: str) -> str:
    return f"{slot}/initial/plan/{table}"


def done_key(slot: str, table: str, index: int) -> str:
    return f"{slot}/initial/done/{table}/{index}"


def resume_key(slot: str, table: str, index: int) -> str:
    return f"{slot}/initial/resume/{table}/{index}"


def chunk_progress(consistent_lsn: int, after: tuple[str, ...] | None) -> dict[str, Any]:
    """The value of a chunk's ``done`` record (``after`` None) or ``resume`` record."""
    if after is None:
        return {"consistent_lsn": consistent_lsn}
    return {"consistent_lsn": consistent_lsn, "after": list(after)}


def encode_record(value: dict[str, Any] | None) -> bytes | None:
    """The bytes of a progress record's value (``None``: a tombstone)."""
    return None if value is None else json.dumps(value, separators=(",", ":")).encode()


def incremental_key(slot: str) -> str:
    return f"{slot}/incremental"


def tables_key(slot: str) -> str:
    return f"{slot}/tables"


@dataclass(frozen=True, slots=True)
class InitialProgress:
    """What a previous attempt of the initial snapshot left: its plan and the chunks it finished."""

    consistent_lsn: int
    plans: dict[str, dict[str, Any]]
    done: set[tuple[str, int]]
    # exactly-once: the position of the last committed row of chunks neither done nor untouched
    resume: dict[tuple[str, int], tuple[str, ...]] = field(default_factory=dict)


def initial_progress(records: dict[str, dict[str, Any]], slot: str) -> InitialProgress | None:
    """The previous attempt's progress, or ``None`` if its header or any table plan is missing."""
    header = records.get(header_key(slot))
    if header is None:
        return None
    consistent_lsn = int(header["consistent_lsn"])
    plans: dict[str, dict[str, Any]] = {}
    for table in header["tables"]:
        plan = records.get(plan_key(slot, table))
        if plan is None or int(plan.get("consistent_lsn", -1)) != consistent_lsn:
            return None
        plans[table] = plan["plan"]
    done: set[tuple[str, int]] = set()
    resume: dict[tuple[str, int], tuple[str, ...]] = {}
    done_prefix, resume_prefix = f"{slot}/initial/done/", f"{slot}/initial/resume/"
    for key, value in records.items():
        if int(value.get("consistent_lsn", -1)) != consistent_lsn:
            continue
        if key.startswith(done_prefix):
            table, _, index = key[len(done_prefix):].rpartition("/")
            done.add((table, int(index)))
        elif key.startswith(resume_prefix) and value.get("after") is not None:
            table, _, index = key[len(resume_prefix):].rpartition("/")
            resume[(table, int(index))] = tuple(str(v) for v in value["after"])
    return InitialProgress(consistent_lsn, plans, done, {k: v for k, v in resume.items() if k not in done})


class ChunkPositions:
    """Exactly-once: how far each chunk of the initial snapshot got, written into every Kafka
    transaction that carries its rows (``write``, a ``before_commit`` hook of
    publish/transactions.py): a ``resume`` record with the position of the chunk's last row
    produced so far, or its ``done`` record once it ended. Units stand for chunks (snapshot sink)."""

    def __init__(self, topic: str, slot: str, consistent_lsn: int) -> None:
        self._topic = topic
        self._slot = slot
        self._consistent_lsn = consistent_lsn
        self._chunks: dict[object, tuple[str, int]] = {}  # unit -> (table, index)
        self._reached: dict[object, tuple[str, ...]] = {}  # since the last write
        self._ended: list[tuple[str, int]] = []  # since the last write

    def begin(self, unit: object, table: str, index: int) -> None:
        self._chunks[unit] = (table, index)

    def reached(self, unit: object, position: tuple[str, ...]) -> None:
        """The row at ``position`` was produced (rows come in position order)."""
        self._reached[unit] = position

    def end(self, unit: object) -> None:
        self._reached.pop(unit, None)
        self._ended.append(self._chunks.pop(unit))

    def pending(self) -> list[tuple[str, dict[str, Any]]]:
        """The records the open Kafka transaction needs, and forget them (it is about to commit)."""
        records = [(resume_key(self._slot, *self._chunks[unit]), chunk_progress(self._consistent_lsn, position))
                   for unit, position in self._reached.items()]
        records += [(done_key(self._slot, table, index), chunk_progress(self._consistent_lsn, None))
                    for table, index in self._ended]
        self._reached.clear()
        self._ended.clear()
        return records

    def write(self, produce: Callable[[str, bytes, bytes | None], None]) -> None:
        for key, value in self.pending():
            produce(self._topic, key.encode(), encode_record(value))


class ProgressStore:
    """Reads the progress topic once and writes progress records with its own acks=all producer."""

    def __init__(self, config: KafkaConfig, topics: TopicManager, slot: str) -> None:
        self._config = config
        self._topics = topics
        self.slot = slot
        self.topic = progress_topic(config.topic_prefix)
        self._producer: Producer | None = None
        self._errors: list[str] = []

    def _ensure(self) -> Producer:
        if self._producer is None:
            self._topics.ensure(self.topic, compacted=True)
            self._producer = Producer(producer_config(self._config), logger=LibrdkafkaLog())
        return self._producer

    def load(self) -> dict[str, dict[str, Any]]:
        """Every live record of this slot (latest value per key; tombstones remove the key)."""
        self._topics.ensure(self.topic, compacted=True)
        settings = {**consumer_config(self._config), "group.id": "pgbridge-progress"}
        latest = read_compacted(settings, self.topic, timeout_s=LOAD_TIMEOUT_S, key_prefix=f"{self.slot}/",
                                stop=self._topics.stop)
        return {key: json.loads(value) for key, value in latest.items()}

    def put(self, key: str, value: dict[str, Any] | None) -> None:
        """Produce one record (``None``: tombstone); durable once ``flush`` returned."""
        producer = self._ensure()
        payload = encode_record(value)

        def on_delivery(error: KafkaError | None, message: Message) -> None:
            problem = delivery_problem(error, message)
            if problem is not None:
                self._errors.append(problem)

        try:
            producer.produce(self.topic, payload, key.encode(), on_delivery=on_delivery)
        except BufferError:
            produce_when_room(producer, self.topic, key.encode(), payload, on_delivery, lambda: producer.poll(0.05))
        producer.poll(0)

    def put_many(self, items: Iterable[tuple[str, dict[str, Any] | None]]) -> None:
        for key, value in items:
            self.put(key, value)

    def poll(self) -> None:
        if self._producer is not None:
            self._producer.poll(0)

    def flush(self, timeout_s: float = FLUSH_TIMEOUT_S) -> None:
        """Wait until every record put so far is acknowledged; raise if any was not."""
        if self._producer is None:
            return
        remaining = self._producer.flush(timeout_s)
        if remaining:
            raise BrokerUnavailable(f"{remaining} progress records to {self.topic} not acknowledged")
        if self._errors:
            problem = self._errors[0]
            self._errors.clear()
            raise BrokerUnavailable(f"progress record to {self.topic} failed: {problem}")

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(1.0)
            self._producer = None
