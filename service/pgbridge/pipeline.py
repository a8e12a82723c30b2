"""Wiring: source → decode → assemble → encode → publish → ack, plus the reconnect loop.

```
 Postgres walsender ──CopyData──▶ ReplicationStream.read_batch ─▶ split_xlog / parse_copy_message
        ▲                                                        │ XLogData      │ keepalive
        │ standby status (confirmed LSN)                          ▼               ▼
   FeedbackPolicy ◀── AckTracker.confirmable ◀─┐       PgoutputDecoder   server WAL position
                                               │              ▼
                         delivery reports ─────┤     TransactionAssembler ──TxBegin/changes/TxEnd──▶
                                               │                                   ChangeEncoder
                                         KafkaPublisher ◀──────────(topic, key, value)─────┘
```
This module only connects things and keeps per-transaction counters; every decision of substance
lives in the stage modules. A ``Session`` is one connected attempt; any ``TransientError`` tears it
down and ``run_forever`` starts a new one from the slot's confirmed LSN, which is why nothing is
ever confirmed before Kafka acknowledged it.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import psycopg

from pgbridge import native
from pgbridge.ack.feedback import FeedbackPolicy
from pgbridge.ack.tracker import AckTracker, PublishSlot
from pgbridge.assemble.transaction import TransactionAssembler
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
from pgbridge.config import Settings, ToastConfig, TypesConfig
from pgbridge.decode.messages import PG_EPOCH_UNIX_US, Relation, TupleData
from pgbridge.decode.pgoutput import PgoutputDecoder
from pgbridge.encode import NumericPolicy
from pgbridge.encode.envelope import ChangeEncoder, EventContext, OutRecord, ToastPolicy
from pgbridge.encode.wire import SchemaRegistrar, SingleObjectRegistrar
from pgbridge.errors import (
    BrokerUnavailable,
    FatalError,
    RegistryUnavailable,
    SlotInUse,
    SourceUnavailable,
    TransientError,
)
from pgbridge.leader import LeaderLease, LeadershipLost
from pgbridge.lsn import INVALID_LSN, Lsn, format_lsn
from pgbridge.metrics import (
    OUTCOME_COMMITTED,
    TARGET_KAFKA,
    TARGET_POSTGRES,
    TARGET_SCHEMA_REGISTRY,
    EncodeMetrics,
    Metrics,
)
from pgbridge.publish.producer import KafkaPublisher
from pgbridge.publish.registry import ConfluentRegistrar, schema_announcer
from pgbridge.publish.topics import messages_topic, transactions_topic
from pgbridge.publish.transactions import Position
from pgbridge.slotted import slot_setters
from pgbridge.snapshot.chunking import Chunk
from pgbridge.snapshot.incremental import IncrementalSnapshotter, table_names
from pgbridge.snapshot.initial import ChunkSink, SnapshotInterrupted, run_initial_snapshot
from pgbridge.snapshot.progress import ProgressStore, done_key
from pgbridge.source import slots
from pgbridge.source.connection import ReplicationConnection
from pgbridge.source.frames import XLOG_TAG, Keepalive, parse_copy_message, split_xlog
from pgbridge.source.monitor import HEARTBEAT_PREFIX, SlotIdentity, SlotMonitor, emit_heartbeat
from pgbridge.source.stream import ReplicationStream
from pgbridge.source.type_catalog import CatalogTypes

log = logging.getLogger(__name__)

# How long a graceful stop waits for Kafka to acknowledge what is in flight.
SHUTDOWN_FLUSH_S: Final = 30.0
# Housekeeping (delivery callbacks, feedback, failure checks) at least every this many frames.
HOUSEKEEPING_EVERY: Final = 512
BACKOFF_INITIAL_S: Final = 0.5
# While Kafka is reported unreachable and nothing is being delivered, ask a broker for metadata this
# often (bounded wait) so /readyz recovers without traffic.
KAFKA_PROBE_INTERVAL_S: Final = 2.0
KAFKA_PROBE_TIMEOUT_S: Final = 0.5
BACKOFF_MAX_S: Final = 30.0


def negotiate_proto_version(server_version: int, override: int | None) -> int:
    """Highest pgoutput protocol the server speaks: 4 on 16+, 3 on 15, 2 on 14, 1 below."""
    if override is not None:
        return override
    if server_version >= 160000:
        return 4
    if server_version >= 150000:
        return 3
    if server_version >= 140000:
        return 2
    return 1


def replication_options(settings: Settings, proto_version: int, server_version: int) -> dict[str, str]:
    pg = settings.postgres
    options = {
        "proto_version": str(proto_version),
        "publication_names": f'"{pg.publication}"',
    }
    if server_version >= 140000:
        options["messages"] = "true"
    if pg.streaming and proto_version >= 2:
        options["streaming"] = "parallel" if proto_version >= 4 else "on"
    if pg.binary and server_version >= 140000:
        options["binary"] = "true"
    if pg.two_phase and proto_version >= 3:
        options["two_phase"] = "true"
    if server_version >= 160000:
        options["origin"] = pg.origin
    elif pg.origin == "none":
        raise FatalError(f"postgres.origin=none needs PostgreSQL 16 or later (server is {server_version // 10000})",
                         hint="set postgres.origin=any, or filter by source.origin downstream")
    return options


def toast_policy(config: ToastConfig) -> ToastPolicy:
    return ToastPolicy(default=config.policy, tables=dict(config.tables), cache_rows=config.cache_entries)


def numeric_policy(config: TypesConfig) -> NumericPolicy | None:
    """``types.unconstrained_numeric: decimal`` as the encoder's policy; ``None`` keeps the string."""
    if config.unconstrained_numeric != "decimal":
        return None
    return NumericPolicy(config.numeric_precision, config.numeric_scale, config.numeric_overflow)


@dataclass
class Health:
    """What /healthz and /readyz report; written by the pipeline thread, read by HTTP."""

    streaming: bool = False
    kafka_ok: bool = True
    last_error: str | None = None
    standby: bool = False


class _TableTally:
    """One table's share of an open transaction: its collection order, events per op, bytes."""

    __slots__ = ("nbytes", "ops", "order")

    def __init__(self) -> None:
        self.order = 0
        self.nbytes = 0
        self.ops: dict[str, int] = {}


@dataclass(slots=True)
class _OpenTransaction:
    """Per-transaction state of the row path; one ``EventContext`` serves every change of it.

    The context's order fields are advanced in place through their slot descriptors (checked
    below), because building a frozen dataclass per row was ~5% of the bridge's CPU. The encoder
    reads a context only during the call it is passed to, so one instance per transaction is
    safe; metric counts are kept here, one dict look-up a row, and added to Prometheus once per
    transaction.
    """

    begin: TxBegin
    unit: PublishSlot
    callback: Callable[..., None]
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

    def next_context(self, tally: _TableTally | None) -> EventContext:
        """The context of the transaction's next event: a change in ``tally``'s table, or
        (``None``) a logical message, which counts in the transaction's order but belongs to no
        table."""
        self.total_order += 1
        order = 0
        if tally is not None:
            order = tally.order = tally.order + 1
        context = self.context
        _set_total_order(context, self.total_order)
        _set_collection_order(context, order)
        return context

    def per_table(self) -> dict[str, int]:
        """Events per table, in order of each table's first event (the END record's counts)."""
        return {table: tally.order for table, tally in self.tables.items()}


_set_total_order, _set_collection_order = slot_setters(EventContext, "total_order", "collection_order",
                                                         exhaustive=False)


class Session:
    """One connected attempt: SQL + replication connections and a producer, streaming until stopped."""

    def __init__(self, settings: Settings, metrics: Metrics, health: Health, stop: threading.Event, *,
                 identity: SlotIdentity | None = None, lease: LeaderLease | None = None) -> None:
        self.settings = settings
        self.metrics = metrics
        self.health = health
        self.stop = stop
        self.tracker = AckTracker()
        self.feedback = FeedbackPolicy(settings.postgres.status_interval_s)
        self.assembler = TransactionAssembler(memory_bytes=settings.buffer.memory_bytes,
                                              spill_dir=settings.buffer.spill_dir)
        self.publisher = KafkaPublisher(settings.kafka, self.tracker, metrics, self._completed,
                                        slot=settings.postgres.slot)
        self.transactions = self.publisher.transactions  # None unless kafka.exactly_once
        self.position: Position | None = None  # exactly-once: how far committed Kafka transactions got
        self._skipped: TxBegin | None = None  # exactly-once: a transaction already whole in Kafka
        self.sql: psycopg.Connection[tuple[object, ...]] | None = None
        self.repl: ReplicationConnection | None = None
        self.stream: ReplicationStream | None = None
        self.encoder: ChangeEncoder | None = None
        self.registry: ConfluentRegistrar | None = None
        self._tx: _OpenTransaction | None = None
        self._server_lsn: Lsn | None = None
        self._received_lsn: Lsn = INVALID_LSN
        self._event_counters: dict[tuple[str, str], object] = {}
        self._prefix = settings.kafka.topic_prefix
        self._messages_topic = messages_topic(self._prefix)
        self._transactions_topic = transactions_topic(self._prefix)
        self._key_cache: dict[tuple[int, tuple[str, ...]], tuple[str, ...]] = {}
        self._spilled_seen = 0
        self._outcomes_seen: dict[str, int] = {}
        self.progress = ProgressStore(settings.kafka, self.publisher.topics, settings.postgres.slot)
        self.incremental: IncrementalSnapshotter | None = None
        self._next_publication_check = 0.0
        self.identity = identity or SlotIdentity()
        self.lease = lease
        self.monitor: SlotMonitor | None = None
        self._event_bytes: dict[str, object] = {}
        self._next_heartbeat_at = time.monotonic() + settings.postgres.heartbeat_interval_s
        self._next_kafka_probe_at = 0.0

    # -- set-up ------------------------------------------------------------------------------------
    def open(self) -> None:
        pg = self.settings.postgres
        dsn = pg.dsn.get_secret_value()
        self.sql = slots.connect_sql(dsn, connect_timeout_s=pg.connect_timeout_s)
        wal_level = self.sql.execute("SHOW wal_level").fetchone()
        if wal_level is None or wal_level[0] != "logical":
            raise FatalError(f"wal_level is {wal_level[0] if wal_level else '?'}, logical replication needs "
                             "wal_level=logical", hint="ALTER SYSTEM SET wal_level = logical; then restart Postgres")
        slots.ensure_publication(self.sql, pg.publication, pg.tables)
        self.repl = ReplicationConnection(dsn, connect_timeout_s=pg.connect_timeout_s)
        self.repl.connect()
        # Options are settled before any slot is created, so an unsupported one fails cleanly.
        proto = negotiate_proto_version(self.repl.server_version, pg.proto_version)
        options = replication_options(self.settings, proto, self.repl.server_version)
        identity = self.repl.identify_system()
        database = identity.dbname or ""
        registrar: SchemaRegistrar
        if self.settings.schema_registry.url:  # Confluent wire format; an unreachable registry retries
            registrar = self.registry = ConfluentRegistrar.connect(self.settings.schema_registry)
        else:
            registrar = SingleObjectRegistrar(schema_announcer(self.publisher, self._prefix))
        self.encoder = ChangeEncoder(topic_prefix=self._prefix, database=database, registrar=registrar,
                                     key_resolver=self._key_columns,
                                     type_names=self.assembler.relations.type_name,
                                     type_catalog=CatalogTypes(self.sql), toast=toast_policy(self.settings.toast),
                                     numeric=numeric_policy(self.settings.types),
                                     observer=EncodeMetrics(self.metrics))
        info = slots.slot_info(self.sql, pg.slot)
        pending = f"{pg.slot}_snapshot"[:63]
        progress_records = self.progress.load()
        self.incremental = IncrementalSnapshotter(
            dsn=dsn, slot=pg.slot, publication=pg.publication, chunk_rows=self.settings.snapshot.chunk_rows,
            signal_prefix=self.settings.snapshot.signal_prefix, progress=self.progress, metrics=self.metrics,
            connect_timeout_s=pg.connect_timeout_s)
        self.incremental.load(progress_records)
        if info is None:
            self.identity.missing(pg.slot)
            self._create_slot(database, pending, progress_records)
        else:
            slots.validate_slot(info, database=database)
            if info.active:
                raise SlotInUse(f"replication slot {pg.slot} is in use by pid {info.active_pid}; "
                                "waiting for it to be released")
            self.identity.verify_on_open(pg.slot, info.confirmed_flush_lsn)
            if slots.slot_info(self.sql, pending) is not None:
                slots.drop_slot(self.sql, pending)
        # Exactly-once: fence older producers only now that the slot is ours, then learn what is
        # committed in Kafka already (the slot's confirmed LSN may lag it).
        self.position = self.publisher.start_transactions()
        self.repl.start_replication(pg.slot, INVALID_LSN, options)
        self.identity.streaming()
        self.monitor = SlotMonitor(pg.slot, self.metrics, interval_s=pg.slot_check_interval_s,
                                   walsender_pid=self.repl.pgconn.backend_pid)
        self.stream = ReplicationStream(self.repl)
        self.decoder = PgoutputDecoder(proto)
        self.health.streaming = True
        self.metrics.streaming.set(1)
        log.info("replicating", extra={"slot": pg.slot, "publication": pg.publication,
                                       "proto_version": proto, "server_version": self.repl.server_version,
                                       "compiled_kernels": sorted(m for m, on in native.status().items() if on)})

    def _create_slot(self, database: str, pending: str, records: dict[str, dict[str, Any]]) -> None:
        """Create the slot; with snapshot.mode=initial, through the initial snapshot (snapshot/initial.py)."""
        assert self.sql is not None and self.repl is not None and self.incremental is not None
        pg = self.settings.postgres
        if self.settings.snapshot.mode == "never":
            if slots.slot_info(self.sql, pending) is not None:
                slots.drop_slot(self.sql, pending)
            created = self.repl.create_slot(pg.slot, two_phase=pg.two_phase, export_snapshot=False)
            log.info("slot created", extra={"slot": created.name,
                                            "consistent_point": format_lsn(created.consistent_point)})
            self.incremental.set_known_tables(table_names(slots.published_tables(self.sql, pg.publication)))
            return
        tables = run_initial_snapshot(
            dsn=pg.dsn.get_secret_value(), repl=self.repl, sql_conn=self.sql, slot=pg.slot, pending=pending,
            publication=pg.publication, config=self.settings.snapshot, two_phase=pg.two_phase,
            progress=self.progress, records=records, make_sink=lambda lsn: _SnapshotSink(self, lsn),
            metrics=self.metrics, stop=self.stop, connect_timeout_s=pg.connect_timeout_s)
        self.incremental.set_known_tables(tables)

    def _snapshot_tick(self, now: float) -> None:
        """Between transactions: drive incremental snapshots and notice tables new in the publication."""
        snap = self.incremental
        if snap is None or self.sql is None or self.stream is None:  # not before streaming starts
            return
        self.progress.poll()
        if now >= self._next_publication_check:
            self._next_publication_check = now + self.settings.snapshot.publication_check_s
            published = table_names(slots.published_tables(self.sql, self.settings.postgres.publication))
            snap.check_publication(published, snapshot_new=self.settings.snapshot.mode == "initial")
        if snap.busy:
            snap.tick(self._encode_incremental_row, self._key_columns)

    def _encode_incremental_row(self, relation: Relation, row: TupleData, high_lsn: Lsn) -> OutRecord:
        assert self.encoder is not None
        ctx = EventContext(commit_lsn=high_lsn, xid=0, ts_us=int(time.time() * 1_000_000), origin=None,
                           total_order=0, collection_order=0, snapshot=True)
        return self.encoder.encode_snapshot_row(relation, row, ctx)

    def _key_columns(self, relation: Relation) -> tuple[str, ...]:
        cache_key = (relation.rel_id, tuple(column.name for column in relation.columns))
        cached = self._key_cache.get(cache_key)
        if cached is None:
            assert self.sql is not None
            try:
                names = slots.key_columns(self.sql, relation.rel_id)
            except psycopg.OperationalError as exc:
                raise SourceUnavailable(f"catalog lookup failed: {exc}") from None
            present = {column.name for column in relation.columns}
            if relation.replica_identity == "n" and not names:
                names = ()
            cached = tuple(name for name in names if name in present)
            if len(cached) != len(names):
                cached = ()
            self._key_cache[cache_key] = cached
        return cached

    # -- the loop ----------------------------------------------------------------------------------
    def run(self) -> None:
        """Frames in batches (``read_batch``); XLogData straight to decode → assemble → handle."""
        assert self.stream is not None
        read_batch = self.stream.read_batch
        decode = self.decoder.decode
        feed = self.assembler.feed
        handle = self._handle
        stop = self.stop
        frames = 0
        while not stop.is_set():
            batch = read_batch(0.1)
            if not batch:
                self._housekeeping(reply_requested=False)
                continue
            for payload in batch:
                if payload[0] == XLOG_TAG:
                    wal_start, wal_end, body = split_xlog(payload)
                    if wal_end > self._received_lsn:
                        self._received_lsn = wal_end
                    events = 0
                    for event in feed(decode(body), wal_start):
                        handle(event)
                        events += 1
                        if events >= HOUSEKEEPING_EVERY:
                            # A committed streamed/prepared transaction replays here in one go:
                            # keep serving delivery reports and the walsender's timeout.
                            events = 0
                            self._housekeeping(reply_requested=False)
                    frames += 1
                else:
                    frame = parse_copy_message(payload)
                    assert isinstance(frame, Keepalive)  # the only other tag parse_copy_message accepts
                    self._server_lsn = frame.wal_end
                    self._housekeeping(reply_requested=frame.reply_requested)
            if frames >= HOUSEKEEPING_EVERY:
                frames = 0
                self._housekeeping(reply_requested=False)

    def _housekeeping(self, *, reply_requested: bool) -> None:
        publisher = self.publisher
        publisher.poll(0)
        publisher.raise_if_failed()
        if not publisher.kafka_ok and time.monotonic() >= self._next_kafka_probe_at:
            # kafka_ok turns True on a delivery; with nothing to deliver, ask a broker directly
            self._next_kafka_probe_at = time.monotonic() + KAFKA_PROBE_INTERVAL_S
            publisher.probe(KAFKA_PROBE_TIMEOUT_S)
        self.health.kafka_ok = publisher.kafka_ok
        assembler = self.assembler
        idle = assembler.is_idle() and self._tx is None
        confirm = self.tracker.confirmable(unfinished_lsn=assembler.oldest_unfinished_lsn(),
                                           server_lsn=self._server_lsn if idle else None)
        now = time.monotonic()
        if self.stream is not None and self.feedback.due(now, confirm_lsn=confirm,
                                                         reply_requested=reply_requested):
            # When nothing is outstanding, ask for a keepalive: a busy walsender sends one on its own
            # only every wal_sender_timeout/2, and its position is what lets a quiet slot's confirmed
            # LSN follow a busy server (the heartbeat rule in ack/tracker.py).
            self.stream.send_status(confirm, reply_requested=idle)
            self.feedback.sent(now, confirm)
            self.identity.sent(confirm)
        metrics = self.metrics
        metrics.confirmed_flush_lsn.set(confirm)
        metrics.received_lsn.set(self._received_lsn)
        server = max(self._server_lsn or 0, self._received_lsn)
        metrics.server_wal_lsn.set(server)
        metrics.replication_lag_bytes.set(max(0, server - confirm))
        metrics.buffered_bytes.set(assembler.buffered_bytes)
        spilled = assembler.spilled_bytes_total
        if spilled > self._spilled_seen:
            metrics.spilled_bytes.inc(spilled - self._spilled_seen)
            self._spilled_seen = spilled
        for outcome, total in assembler.outcome_totals.items():
            if total > self._outcomes_seen.get(outcome, 0):
                metrics.transactions.labels(outcome).inc(total - self._outcomes_seen.get(outcome, 0))
                self._outcomes_seen[outcome] = total
        metrics.queue_depth.set(self.tracker.in_flight)
        if self.lease is not None:
            self.lease.check()
        monitor = self.monitor
        if monitor is not None and monitor.due(now) and self.sql is not None:
            monitor.check(self.sql, now)
        if self._next_heartbeat_at <= now:
            self._heartbeat(now)
        if self._tx is None:
            if self.transactions is not None:
                self.transactions.idle()
            self._snapshot_tick(now)

    def _heartbeat(self, now: float) -> None:
        interval = self.settings.postgres.heartbeat_interval_s
        if interval <= 0 or self.sql is None:
            self._next_heartbeat_at = float("inf")
            return
        self._next_heartbeat_at = now + interval
        try:
            emit_heartbeat(self.sql)
        except psycopg.errors.InsufficientPrivilege as exc:
            log.warning("heartbeat disabled: no permission for pg_logical_emit_message",
                        extra={"error": exc.diag.message_primary})
            self._next_heartbeat_at = float("inf")
            return
        self.metrics.heartbeats.inc()

    def _handle(self, event: AssembledEvent) -> None:
        encoder = self.encoder
        assert encoder is not None
        if type(event) is RowChange:
            tx = self._tx
            if tx is None:
                if self._skipped is not None:  # exactly-once: already whole in Kafka
                    return
                raise FatalError("row change outside a transaction reached the encoder")
            table = encoder.table_of(event.relation)
            tally = tx.tally(table)
            if tx.skip_through and tx.total_order < tx.skip_through:
                tx.next_context(tally)  # already committed in Kafka by an earlier part
                return
            records = encoder.encode_row(event, tx.next_context(tally))
            tally.nbytes += self.publisher.produce_all(records, tx.callback, tx.unit, self._idle_tick)
            ops = tally.ops
            ops[event.op] = ops.get(event.op, 0) + 1
            snap = self.incremental
            if snap is not None and snap.window_table == table:
                snap.drop_keys(record.key for record in records)
            transactions = self.transactions
            if transactions is not None and transactions.split_due():
                self._split(tx)
        elif isinstance(event, TxBegin):
            if self._tx is not None:
                raise FatalError("transaction began while another was still open")
            position = self.position
            if position is not None and position.skips_transaction(event.commit_lsn):
                self._skipped = event  # whole in Kafka already: its END only moves the watermark
                return
            unit = self.tracker.open_unit(event.commit_ts + PG_EPOCH_UNIX_US)
            tx = _OpenTransaction(begin=event, unit=unit, callback=self.publisher.callback_for(unit),
                                  ts_us=event.commit_ts + PG_EPOCH_UNIX_US,
                                  skip_through=position.skips_through(event.commit_lsn) if position else 0)
            self._tx = tx
            if self.transactions is not None:
                self.transactions.hold(unit)
            if not tx.skip_through:  # a split transaction's BEGIN went with its first part
                self._produce(encoder.encode_tx_boundary(status="BEGIN", xid=event.xid, commit_lsn=event.commit_lsn,
                                                         ts_us=tx.ts_us, event_count=0, per_table={}),
                              tx.callback, unit)
        elif self._skipped is not None:
            self._skip(event)
        elif isinstance(event, TxEnd):
            tx = self._tx
            if tx is None or tx.begin.commit_lsn != event.commit_lsn:
                raise FatalError("transaction end does not match its begin")
            self._produce(encoder.encode_tx_boundary(status="END", xid=event.xid, commit_lsn=event.commit_lsn,
                                                     ts_us=tx.ts_us, event_count=tx.total_order,
                                                     per_table=tx.per_table()),
                          tx.callback, tx.unit)
            self._tx = None
            self._count_transaction(tx)
            self.metrics.transactions.labels(OUTCOME_COMMITTED).inc()
            done = self.tracker.seal(tx.unit, event.end_lsn)
            if done:  # every record was acknowledged before the seal
                self._completed(done)
            if self.transactions is not None:
                self.transactions.boundary(Position(event.commit_lsn, tx.total_order))
        elif isinstance(event, TruncateChange):
            tx = self._tx
            if tx is None:
                raise FatalError("truncate outside a transaction reached the encoder")
            for relation in event.relations:
                table = encoder.table_of(relation)
                tally = tx.tally(table)
                if tx.skip_through and tx.total_order < tx.skip_through:
                    tx.next_context(tally)
                    continue
                record = encoder.encode_truncate(event, relation, tx.next_context(tally))
                self._produce(record, tx.callback, tx.unit)
                tally.nbytes += len(record.value or b"")
                tally.ops["t"] = tally.ops.get("t", 0) + 1
                if self.incremental is not None and self.incremental.window_table == table:
                    self.incremental.drop_all()
        elif isinstance(event, MessageChange):
            tx = self._tx
            if tx is None:
                raise FatalError("transactional message outside a transaction reached the encoder")
            if tx.skip_through and tx.total_order < tx.skip_through:
                tx.next_context(None)
                return
            self._produce(encoder.encode_message(event.prefix, event.content, event.lsn,
                                                 tx.next_context(None), True),
                          tx.callback, tx.unit)
            if self.incremental is not None:
                self._snapshot_message(event.prefix, event.content, event.lsn, tx)
        elif isinstance(event, TxOrigin):
            if self._tx is not None:
                self._tx.set_origin(event.name)
        elif isinstance(event, StandaloneMessage):
            if event.prefix == HEARTBEAT_PREFIX:
                return
            position = self.position
            if position is not None and position.skips_transaction(event.lsn):
                return
            unit = self.tracker.open_unit()
            if self.transactions is not None:
                self.transactions.hold(unit)
            record = encoder.encode_message(event.prefix, event.content, event.lsn, None, False)
            self._produce(record, self.publisher.callback_for(unit), unit)
            self.tracker.seal(unit, None)
            if self.transactions is not None:
                self.transactions.boundary(Position(event.lsn))
            if self.incremental is not None:
                self._snapshot_message(event.prefix, event.content, event.lsn, None)

    def _skip(self, event: AssembledEvent) -> None:
        """Exactly-once restart: events of a transaction whole in Kafka; its END moves the watermark."""
        skipped = self._skipped
        assert skipped is not None
        if isinstance(event, TxEnd):
            if event.commit_lsn != skipped.commit_lsn:
                raise FatalError("transaction end does not match its begin")
            self._skipped = None
            done = self.tracker.seal(self.tracker.open_unit(), event.end_lsn)
            if done:
                self._completed(done)

    def _split(self, tx: _OpenTransaction) -> None:
        """Exactly-once: commit the part of a huge transaction produced so far (rule 1 of
        publish/transactions.py); its unit stays held by the next Kafka transaction."""
        transactions = self.transactions
        assert transactions is not None
        transactions.commit_part(Position(tx.begin.commit_lsn, tx.total_order, complete=False))
        transactions.hold(tx.unit)
        log.info("huge transaction committed in parts", extra={"xid": tx.begin.xid, "events": tx.total_order})

    def _snapshot_message(self, prefix: str, content: bytes, lsn: Lsn, tx: _OpenTransaction | None) -> None:
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
            for record in rows:
                self._produce(record, tx.callback, tx.unit)
            self._event_counter((table, "r")).inc(len(rows))
            snap.chunk_produced(tx.unit)

    def _produce(self, record: OutRecord, callback: Callable[..., None], unit: PublishSlot) -> None:
        self.publisher.topics.ensure(record.topic)
        self.publisher.produce(record.topic, record.key, record.value, callback, unit, self._idle_tick)

    def _idle_tick(self) -> None:
        """Called while the producer queue is full: keep the walsender from timing us out."""
        if self.stop.is_set():
            raise _StopRequested()
        self._housekeeping(reply_requested=False)

    def _event_counter(self, key: tuple[str, str]) -> Any:
        """The ``pgbridge_events_total`` child of (table, op), looked up once per key."""
        counter = self._event_counters.get(key)
        if counter is None:
            counter = self.metrics.events.labels(*key)
            self._event_counters[key] = counter
        return counter

    def _count_event(self, relation: Relation, op: str) -> None:
        self._event_counter((f"{relation.namespace}.{relation.name}", op)).inc()

    def _count_transaction(self, tx: _OpenTransaction) -> None:
        """Add a finished transaction's row events and bytes to the Prometheus counters."""
        for table, tally in tx.tables.items():
            for op, count in tally.ops.items():
                self._event_counter((table, op)).inc(count)
            self._count_bytes(table, tally.nbytes)

    def _count_bytes(self, table: str, nbytes: int) -> None:
        counter = self._event_bytes.get(table)
        if counter is None:
            counter = self.metrics.event_bytes.labels(table)
            self._event_bytes[table] = counter
        counter.inc(nbytes)  # type: ignore[attr-defined]

    def _completed(self, units: list[PublishSlot]) -> None:
        now_us = time.time() * 1_000_000
        for unit in units:
            if unit.commit_ts_us:
                self.metrics.commit_to_ack.observe(max(0.0, (now_us - unit.commit_ts_us) / 1_000_000))

    # -- tear-down ---------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Graceful stop: flush Kafka, confirm the last safe LSN, close."""
        if self.transactions is not None and self._tx is None:
            self.transactions.commit()  # whole transactions only; a half one is aborted by close()
        remaining = self.publisher.flush(SHUTDOWN_FLUSH_S)
        if remaining:
            log.warning("stopping with unacknowledged records; they will be re-read on restart",
                        extra={"remaining": remaining})
        try:
            self.publisher.raise_if_failed()
            self._housekeeping(reply_requested=False)
            if self.stream is not None:
                confirm = self.tracker.reported_lsn
                self.stream.send_status(confirm)
                self.identity.sent(confirm)
                log.info("confirmed on shutdown", extra={"lsn": format_lsn(confirm)})
        finally:
            self.close()

    def close(self) -> None:
        self.health.streaming = False
        self.metrics.streaming.set(0)
        if self.stream is not None:
            self.stream.close()
            self.stream = None
        if self.repl is not None:
            self.repl.close()
            self.repl = None
        if self.sql is not None:
            self.sql.close()
            self.sql = None
        self.publisher.close()
        self.assembler.close()
        if self.incremental is not None:
            self.incremental.close()
        self.progress.close()
        if self.registry is not None:
            self.registry.close()
            self.registry = None


class _SnapshotSink(ChunkSink):
    """Initial snapshot rows into the session's encoder, producer and ack tracker (one unit per chunk)."""

    def __init__(self, session: Session, snapshot_lsn: Lsn) -> None:
        self._session = session
        self._snapshot_lsn = snapshot_lsn
        self._ts_us = int(time.time() * 1_000_000)
        self._ctx = EventContext(commit_lsn=snapshot_lsn, xid=0, ts_us=self._ts_us, origin=None,
                                 total_order=0, collection_order=0, snapshot=True)
        self._callbacks: dict[int, Callable[..., None]] = {}
        self._open_units: list[PublishSlot] = []  # exactly-once: chunks begun and not ended

    def begin_chunk(self) -> PublishSlot:
        unit = self._session.tracker.open_unit()
        self._callbacks[id(unit)] = self._session.publisher.callback_for(unit)
        if self._session.transactions is not None:
            self._session.transactions.hold(unit)  # completes only after a Kafka commit
            self._open_units.append(unit)
        return unit

    def emit(self, relation: Relation, row: TupleData, unit: PublishSlot) -> None:
        session = self._session
        assert session.encoder is not None
        session._produce(session.encoder.encode_snapshot_row(relation, row, self._ctx), self._callbacks[id(unit)], unit)
        session._count_event(relation, "r")

    def end_chunk(self, unit: PublishSlot, chunk: Chunk) -> None:
        callback = self._callbacks.pop(id(unit), None)
        transactions = self._session.transactions
        if transactions is not None and callback is not None:
            # the chunk's progress record commits with its rows (snapshot/progress.py writes the same
            # record again once the rows are durable, which is harmless on a compacted topic)
            progress = self._session.progress
            self._session.publisher.produce(
                progress.topic, done_key(progress.slot, chunk.table, chunk.index).encode(),
                json.dumps({"consistent_lsn": self._snapshot_lsn}, separators=(",", ":")).encode(),
                callback, unit, self.service)
        self._session.tracker.seal(unit, None)
        if transactions is not None:
            # Workers read chunks in parallel, so the Kafka transaction also holds rows of chunks
            # still being read: commit, then hold those again, so that no chunk counts as durable
            # (and gets its progress record) before a commit that follows its last row.
            self._open_units.remove(unit)
            transactions.commit()
            for still_open in self._open_units:
                transactions.hold(still_open)

    def service(self) -> None:
        self._session.publisher.poll(0)
        self._session.publisher.raise_if_failed()
        self._session.progress.poll()


class _StopRequested(Exception):
    """Raised out of a backpressure wait when a stop was requested."""


def run_forever(settings: Settings, metrics: Metrics, health: Health, stop: threading.Event) -> None:
    """Stream until ``stop`` is set; reconnect with capped exponential backoff on transient errors.

    With ``ha.leader_election`` the process first takes the leader lease (leader.py) and stands by,
    not ready, until it has it; losing the lease's session ends the session and it stands by again.
    """
    ha = settings.ha
    lease = LeaderLease(settings.postgres.dsn.get_secret_value(), settings.postgres.slot, metrics,
                        retry_s=ha.standby_retry_s, lease_s=ha.lease_s,
                        connect_timeout_s=settings.postgres.connect_timeout_s) if ha.leader_election else None
    identity = SlotIdentity()
    backoff = BACKOFF_INITIAL_S
    try:
        while not stop.is_set():
            if lease is not None and not lease.held:
                lease.release()
                health.standby = True
                if not lease.acquire(stop):
                    return
                health.standby = False
                identity.new_term()  # another replica may have streamed from the slot meanwhile
            session = Session(settings, metrics, health, stop, identity=identity, lease=lease)
            try:
                session.open()
                backoff = BACKOFF_INITIAL_S
                health.last_error = None
                session.run()
                session.shutdown()
                return
            except _StopRequested:
                session.shutdown()
                return
            except SnapshotInterrupted:
                log.info("stopped during the initial snapshot; the next start resumes it")
                session.close()
                return
            except LeadershipLost as exc:
                session.publisher.check_fenced()  # frozen while a standby took over: stop, never commit
                health.last_error = str(exc)
                log.warning("leadership lost; standing by", extra={"error": str(exc)})
                session.close()
                continue
            except SlotInUse as exc:
                # Another consumer streams: a standby (or a replica without the lease) polls at the
                # standby interval so it takes over within seconds of the slot being released.
                health.last_error = str(exc)
                identity.new_term()
                log.info("slot busy; waiting", extra={"error": str(exc), "retry_s": ha.standby_retry_s})
                session.close()
                stop.wait(ha.standby_retry_s)
                continue
            except TransientError as exc:
                session.publisher.check_fenced()  # a fenced producer stops here, it never reconnects
                health.last_error = str(exc)
                target = TARGET_KAFKA if isinstance(exc, BrokerUnavailable) else \
                    TARGET_SCHEMA_REGISTRY if isinstance(exc, RegistryUnavailable) else TARGET_POSTGRES
                metrics.reconnects.labels(target).inc()
                log.warning("transient failure; reconnecting", extra={"error": str(exc), "retry_in_s": backoff})
                session.close()
            except BaseException:
                session.close()
                raise
            stop.wait(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX_S)
    finally:
        if lease is not None:
            lease.release()
