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
- ``{slot}/incremental``: the queue of incremental snapshots, the key after which the current
  table continues, the last signal acted on, and whether a pause-snapshot signal holds the queue.
- ``{slot}/tables``: the tables whose rows have been (or are being) snapshotted: a table in the
  publication and not in this set was added since, and gets an incremental snapshot.
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

Incremental snapshots
---------------------
The current table's chunk rows are produced inside the unit of the transaction that carries the
high watermark, so the confirmed LSN cannot pass the high watermark before they are acknowledged.
The ``{slot}/incremental`` record moves forward only after that; a crash in between re-reads the
chunk (duplicate ``op=r`` only). A signal is recorded synchronously before its transaction can be
confirmed, so it is acted on exactly once even when the signal is decoded again after a restart
(signals at or below the recorded ``signal_lsn`` are ignored).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from confluent_kafka import KafkaError, Producer

from pgbridge.config import KafkaConfig
from pgbridge.errors import BrokerUnavailable
from pgbridge.logs import LibrdkafkaLog
from pgbridge.publish.producer import consumer_config, produce_when_room, producer_config
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
    prefix = f"{slot}/initial/done/"
    for key, value in records.items():
        if key.startswith(prefix) and int(value.get("consistent_lsn", -1)) == consistent_lsn:
            table, _, index = key[len(prefix):].rpartition("/")
            done.add((table, int(index)))
    return InitialProgress(consistent_lsn, plans, done)


class ProgressStore:
    """Reads the progress topic once and writes progress records with its own acks=all producer."""

    def __init__(self, config: KafkaConfig, topics: TopicManager, slot: str) -> None:
        self._config = config
        self._topics = topics
        self.slot = slot
        self.topic = progress_topic(config.topic_prefix)
        self._producer: Producer | None = None
        self._errors: list[KafkaError] = []

    def _ensure(self) -> Producer:
        if self._producer is None:
            self._topics.ensure(self.topic, compacted=True)
            self._producer = Producer(producer_config(self._config), logger=LibrdkafkaLog())
        return self._producer

    def load(self) -> dict[str, dict[str, Any]]:
        """Every live record of this slot (latest value per key; tombstones remove the key)."""
        self._topics.ensure(self.topic, compacted=True)
        settings = {**consumer_config(self._config), "group.id": "pgbridge-progress"}
        latest = read_compacted(settings, self.topic, timeout_s=LOAD_TIMEOUT_S, key_prefix=f"{self.slot}/")
        return {key: json.loads(value) for key, value in latest.items()}

    def put(self, key: str, value: dict[str, Any] | None) -> None:
        """Produce one record (``None``: tombstone); durable once ``flush`` returned."""
        producer = self._ensure()
        payload = None if value is None else json.dumps(value, separators=(",", ":")).encode()

        def on_delivery(error: KafkaError | None, _message: object) -> None:
            if error is not None:
                self._errors.append(error)

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
            error = self._errors[0]
            self._errors.clear()
            raise BrokerUnavailable(f"progress record to {self.topic} failed: {error.str()}")

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(1.0)
            self._producer = None
