"""Wiring: source → decode → assemble → encode → publish → ack, for one session.

```
 Postgres walsender ──CopyData──▶ ReplicationStream.read_batch ─▶ split_xlog / parse_copy_message
        ▲                                                        │ XLogData      │ keepalive
        │ standby status (confirmed LSN)                          ▼               ▼
   ProgressReporter ◀── AckTracker ◀──────┐           PgoutputDecoder   server WAL position
   (ack/progress.py: feedback, gauges,    │                  ▼
    stall watchdog)                       │         TransactionAssembler ──events──▶ Dispatcher
                        delivery reports ─┤                                (publish/dispatch.py)
                                          │                                    │ ChangeEncoder
                                    KafkaPublisher ◀──────(topic, key, value)──┘
```
This module only connects things: ``open_session`` opens the connections and the encoder,
``Session`` runs the loop and the housekeeping jobs (periodic.py); supervisor.py reconnects.
Every decision of substance lives in the stage modules. Any ``TransientError`` tears a session down and
a new one starts from the slot's confirmed LSN: nothing is ever confirmed before Kafka acknowledged it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Final

import psycopg

from pgbridge import native
from pgbridge.ack.progress import ProgressReporter
from pgbridge.ack.tracker import AckTracker
from pgbridge.assemble.capture import CaptureFilter
from pgbridge.assemble.transaction import TransactionAssembler
from pgbridge.check.postgres import require_logical_wal
from pgbridge.config import Settings, ToastConfig, TypesConfig
from pgbridge.decode.messages import Message
from pgbridge.decode.pgoutput import PgoutputDecoder
from pgbridge.encode import NumericPolicy
from pgbridge.encode.columns import ColumnRules, encoder_for
from pgbridge.encode.envelope import ChangeEncoder, ToastPolicy
from pgbridge.encode.renames import RenameHistory
from pgbridge.encode.schema_change import SchemaChanges
from pgbridge.errors import PgbridgeError, StopRequested
from pgbridge.health import Health
from pgbridge.leader import LeaderLease
from pgbridge.lsn import INVALID_LSN, Lsn, format_lsn
from pgbridge.metrics import EncodeMetrics, Metrics
from pgbridge.periodic import AssemblerGauges, Job, KafkaProbe, between_transaction_jobs, streaming_jobs
from pgbridge.publish.delivery import Deliveries
from pgbridge.publish.dispatch import Dispatcher
from pgbridge.publish.outbox import OutboxRouter, outbox_router
from pgbridge.publish.producer import KafkaPublisher
from pgbridge.publish.registry import ConfluentRegistrar, registrar_for
from pgbridge.publish.routing import PublishFilter, TopicRouter
from pgbridge.publish.topics import schema_changes_topic
from pgbridge.snapshot.filters import validate_filters
from pgbridge.snapshot.incremental import IncrementalSnapshotter, table_names
from pgbridge.snapshot.initial import run_initial_snapshot
from pgbridge.snapshot.modes import (
    StartAction,
    announce_tables,
    create_slot,
    initial_only_finished,
    open_slot,
    prepare_topic,
)
from pgbridge.snapshot.progress import ProgressStore
from pgbridge.snapshot.sink import SnapshotSink
from pgbridge.source import slots
from pgbridge.source.connection import ReplicationConnection
from pgbridge.source.ddl_trigger import prepare_ddl_capture
from pgbridge.source.frames import (
    XLOG_PAYLOAD_AT,
    XLOG_TAG,
    Keepalive,
    parse_copy_message,
    split_xlog,
    xlog_positions,
)
from pgbridge.source.keys import KeyColumns
from pgbridge.source.monitor import SlotIdentity
from pgbridge.source.options import negotiate_proto_version, replication_options
from pgbridge.source.publication import prepare_publication
from pgbridge.source.selection import stream_filter
from pgbridge.source.standby import PrimaryConnection, ServerRole, running_xacts_nudged, server_role
from pgbridge.source.stream import LARGE_FRAME_BYTES, ReplicationStream
from pgbridge.source.type_catalog import CatalogTypes

__all__ = ["Health", "Session", "numeric_policy", "open_session", "toast_policy"]

log = logging.getLogger(__name__)

# How long a graceful stop waits for Kafka to acknowledge what is in flight.
SHUTDOWN_FLUSH_S: Final = 30.0
# Before a reconnect: reports already on their way arrive within this; a broker that is down is not waited for.
TRANSIENT_FLUSH_S: Final = 2.0
# Housekeeping (delivery callbacks, feedback, failure checks) at least every this many frames.
HOUSEKEEPING_EVERY: Final = 512


def toast_policy(config: ToastConfig) -> ToastPolicy:
    return ToastPolicy(default=config.policy, tables=dict(config.tables), cache_rows=config.cache_entries)


def numeric_policy(config: TypesConfig) -> NumericPolicy | None:
    """``types.unconstrained_numeric: decimal`` as the encoder's policy; ``None`` keeps the string."""
    if config.unconstrained_numeric != "decimal":
        return None
    return NumericPolicy(config.numeric_precision, config.numeric_scale, config.numeric_overflow)


@dataclass
class Connections:
    """What one session opened: the SQL and replication connections and the encoder built on them."""

    sql: psycopg.Connection[tuple[object, ...]]
    repl: ReplicationConnection
    encoder: ChangeEncoder
    keys: KeyColumns
    registry: ConfluentRegistrar | None
    database: str
    proto: int
    options: dict[str, str]
    # A standby (decoding on a standby, source/standby.py) and its connection to the primary.
    role: ServerRole
    primary: PrimaryConnection | None = None

    def close(self) -> None:
        self.repl.close()
        self.sql.close()
        if self.primary is not None:
            self.primary.close()
        if self.registry is not None:
            self.registry.close()


def open_session(settings: Settings, assembler: TransactionAssembler, publisher: KafkaPublisher,
                 metrics: Metrics) -> Connections:
    """Connect to Postgres (SQL, then replication), settle the stream's options and build the encoder.

    Options are settled before any slot is created, so an unsupported one fails cleanly. Whatever was
    opened is closed again if a later step fails.
    """
    pg = settings.postgres
    dsn = pg.dsn.get_secret_value()
    sql = slots.connect_sql(dsn, connect_timeout_s=pg.connect_timeout_s)
    repl: ReplicationConnection | None = None
    try:
        require_logical_wal(sql)
        role = server_role(sql, pg)
        prepare_publication(sql, pg, standby=role.standby)
        if pg.ddl_events and not role.standby:  # a standby cannot create it; the primary's trigger replicates
            prepare_ddl_capture(sql, pg)
        repl = ReplicationConnection(dsn, connect_timeout_s=pg.connect_timeout_s, failover=pg.failover_slot)
        if role.standby:
            repl.standby = True
            repl.slot_creation = partial(running_xacts_nudged, role.primary_dsn, connect_timeout_s=pg.connect_timeout_s)
        repl.connect()
        proto = negotiate_proto_version(repl.server_version, pg.proto_version)
        options = replication_options(pg, proto, repl.server_version)
        database = repl.identify_system().dbname or ""
        prefix = settings.kafka.topic_prefix
        registrar, registry = registrar_for(settings.schema_registry, publisher)
        keys = KeyColumns.checked(sql, settings.kafka, pg.publication)
        encoder = encoder_for(ColumnRules.of(settings.columns))(
            topic_prefix=prefix, database=database, registrar=registrar, key_resolver=keys,
            type_names=assembler.relations.type_name, type_catalog=CatalogTypes(sql),
            toast=toast_policy(settings.toast), numeric=numeric_policy(settings.types),
            observer=EncodeMetrics(metrics), subject_strategy=settings.schema_registry.subject_name_strategy,
            router=TopicRouter.of(settings.kafka, slots.published_tables(sql, pg.publication, stream_filter(pg))))
        encoder.check_tables(slots.relation_from_catalog(sql, schema, table, pg.publication)
                             for schema, table in slots.published_tables(sql, pg.publication, stream_filter(pg)))
    except BaseException:
        if repl is not None:
            repl.close()
        sql.close()
        raise
    primary = None if role.primary_dsn is None else PrimaryConnection(role.primary_dsn,
                                                                       connect_timeout_s=pg.connect_timeout_s)
    return Connections(sql, repl, encoder, keys, registry, database, proto, options, role, primary)


class Session:
    """One connected attempt: open, run until stopped or failed, shut down (or close after a failure)."""

    def __init__(self, settings: Settings, metrics: Metrics, health: Health, stop: threading.Event, *,
                 identity: SlotIdentity | None = None, lease: LeaderLease | None = None) -> None:
        self.settings = settings
        self.metrics = metrics
        self.health = health
        self.stop = stop
        self.identity = identity or SlotIdentity()
        self.lease = lease
        self.tracker = AckTracker()
        selection = stream_filter(settings.postgres)
        self.assembler = TransactionAssembler(memory_bytes=settings.buffer.memory_bytes,
                                              spill_dir=settings.buffer.spill_dir,
                                              capture=None if selection is None else CaptureFilter(selection))
        self.reporter = ProgressReporter(self.tracker, metrics, self.identity,
                                         status_interval_s=settings.postgres.status_interval_s,
                                         stall_s=settings.watchdog.stall_s)
        self.publisher = KafkaPublisher(settings.kafka, self.tracker, metrics, self.reporter.completed,
                                        slot=settings.postgres.slot, stop=stop)
        self.progress = ProgressStore(settings.kafka, self.publisher.topics, settings.postgres.slot)
        self.conn: Connections | None = None
        self.dispatcher: Dispatcher | None = None
        self.incremental: IncrementalSnapshotter | None = None
        self.stream: ReplicationStream | None = None
        self.decoder: PgoutputDecoder | None = None
        self._jobs: list[Job] = [KafkaProbe(self.publisher)]
        self._between_transactions: list[Job] = []
        self._gauges = AssemblerGauges(self.assembler, metrics)

    # -- set-up ------------------------------------------------------------------------------------
    def open(self) -> None:
        pg = self.settings.postgres
        conn = self.conn = open_session(self.settings, self.assembler, self.publisher, self.metrics)
        validate_filters(conn.sql, pg.publication, self.settings.snapshot.filters, stream_filter(pg))
        records = self.progress.load()
        snapshotter = self.incremental = IncrementalSnapshotter.of(
            self.settings, self.progress, self.metrics, dsn=conn.role.write_dsn(pg.dsn.get_secret_value()),
            transactions=self.publisher.transactions)
        if self.publisher.transactions is None:
            snapshotter.load(records)  # exactly-once: below, once the previous producer is fenced
        deliveries = Deliveries(self.publisher, self.tracker, self.metrics, completed=self.reporter.completed,
                                idle=self._idle_tick)
        outbox = outbox_router(conn.sql, self.settings.outbox, self.settings.kafka.topic_prefix)
        dispatcher = self.dispatcher = Dispatcher(
            encoder=conn.encoder, deliveries=deliveries, filter=PublishFilter.of(self.settings.kafka),
            incremental=snapshotter, outbox=outbox)
        if pg.ddl_events:
            conn.encoder.schema_changes = _schema_changes(self.settings, conn, self.progress.topic, records)
        self._prepare_slot(conn, records, partial(_BeatingSnapshotSink, deliveries, conn.encoder, self.progress,
                                                  outbox=outbox, health=self.health))
        # Exactly-once: fence older producers only now that the slot is ours, then learn what is
        # committed in Kafka already (the slot's confirmed LSN may lag it).
        dispatcher.position = self.publisher.start_transactions()
        if self.publisher.transactions is not None:
            snapshotter.load(self.progress.load())  # whole: a commit the old producer began is done
        conn.repl.start_replication(pg.slot, INVALID_LSN, conn.options)
        self.identity.streaming()
        self._jobs += streaming_jobs(pg, conn.sql, self.reporter, self.metrics, conn.repl.pgconn.backend_pid,
                                     primary=conn.primary, standby=conn.role.standby)
        self._between_transactions += between_transaction_jobs(self.settings, conn.sql, snapshotter, self.progress,
                                                               conn.encoder, conn.keys, standby=conn.role.standby)
        self.stream = ReplicationStream(conn.repl)
        self.decoder = PgoutputDecoder(conn.proto)
        self.health.streaming = True
        self.health.beat()
        self.metrics.streaming.set(1)
        log.info("replicating", extra={"slot": pg.slot, "publication": pg.publication,
                                       "proto_version": conn.proto, "server_version": conn.repl.server_version,
                                       "compiled_kernels": sorted(m for m, on in native.status().items() if on)})

    def _prepare_slot(self, conn: Connections, records: dict[str, dict[str, Any]],
                      make_sink: Callable[[Lsn], SnapshotSink]) -> None:
        """An existing slot is checked (ours, not in use, not moved by someone else); a missing one is
        created as ``snapshot.mode`` says (snapshot/modes.py decides, snapshot/initial.py snapshots)."""
        assert self.incremental is not None
        pg, mode = self.settings.postgres, self.settings.snapshot.mode
        action = open_slot(conn.sql, pg.slot, mode, database=conn.database, identity=self.identity)
        if action is StartAction.STREAM:
            return
        if action in (StartAction.CREATE, StartAction.CREATE_WITH_SCHEMAS):
            create_slot(conn.sql, conn.repl, pg.slot, two_phase=pg.two_phase)
            if action is StartAction.CREATE_WITH_SCHEMAS:
                announce_tables(conn.sql, pg.publication,
                                partial(prepare_topic, conn.encoder, self.publisher.topics), stream_filter(pg),
                                skip=frozenset(self.settings.outbox.table_names))
            self.incremental.set_known_tables(table_names(slots.published_tables(conn.sql, pg.publication,
                                                                                 stream_filter(pg))))
            return
        # Ready while it snapshots (health.py); the liveness beat starts once rows are read (planning
        # the chunks of a huge table may take long without a loop to beat in).
        self.health.snapshotting = True
        self.health.beat_at = None
        if self.publisher.transactions is not None:
            # Exactly-once: fence the previous producer first, so that a transaction it was
            # committing when it died is whole in the progress read (snapshot/progress.py)
            self.publisher.transactions.init()
            records = self.progress.load()
        try:
            tables = run_initial_snapshot(
                dsn=pg.dsn.get_secret_value(), repl=conn.repl, sql_conn=conn.sql, slot=pg.slot,
                pending=slots.pending_slot(pg.slot), publication=pg.publication, config=self.settings.snapshot,
                two_phase=pg.two_phase, progress=self.progress, records=records,
                make_sink=make_sink,
                metrics=self.metrics, stop=self.stop, connect_timeout_s=pg.connect_timeout_s,
                selection=stream_filter(pg))
        finally:
            self.health.snapshotting = False
        self.incremental.set_known_tables(tables)
        if mode == "initial_only":
            raise initial_only_finished(conn.sql, pg.slot, len(tables))

    # -- the loop ----------------------------------------------------------------------------------
    def run(self) -> None:
        """Frames in batches (``read_batch``); a plain transaction's row takes each stage's row
        entry, bound here: ``read_row`` (in place), ``plain_row``, ``row``; every other message, and a
        row a stage declines (streamed, a table the capture filter drops), ``decode``, ``feed`` and
        ``handle``."""
        assert self.stream is not None and self.decoder is not None and self.dispatcher is not None
        read_batch = self.stream.read_batch
        decoder = self.decoder
        read_row, decode = decoder.read_row, decoder.decode
        plain_row, feed = self.assembler.plain_row, self.assembler.feed
        row, handle = self.dispatcher.row, self.dispatcher.handle
        received = self.reporter.received
        stop = self.stop
        frames = 0
        while not stop.is_set():
            batch = read_batch(0.1)
            if not batch:
                self._housekeeping(reply_requested=False)
                continue
            large = len(batch[-1]) >= LARGE_FRAME_BYTES  # only ever last (read_batch)
            for payload in batch[:-1] if large else batch:
                if payload[0] == XLOG_TAG:
                    wal_start, wal_end = (xlog_positions(payload) if len(payload) > XLOG_PAYLOAD_AT
                                          else split_xlog(payload)[:2])  # raises on a header cut short
                    received(wal_end)
                    row_message = read_row(payload, XLOG_PAYLOAD_AT)
                    if row_message is None:
                        message: Message = decode(payload[XLOG_PAYLOAD_AT:])
                        read_row = decoder.read_row  # a Stream Start or Stop changes it
                    else:  # a row: a plain transaction's goes straight to the dispatcher
                        change = plain_row(row_message, wal_start)
                        if change is not None:
                            row(change)
                            frames += 1
                            continue
                        message = row_message
                    events = 0
                    for event in feed(message, wal_start):
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
                    self.reporter.server_lsn = frame.wal_end
                    self._housekeeping(reply_requested=frame.reply_requested)
            if large:
                self._large_frame(batch)
                read_row = decoder.read_row
                frames += 1
            if frames >= HOUSEKEEPING_EVERY:
                frames = 0
                self._housekeeping(reply_requested=False)

    def _large_frame(self, batch: list[memoryview]) -> None:
        """The batch's last frame, a huge one (a row holding a value of hundreds of MB, issue 16):
        decoded, then let go of before its events are handled, since encoding the row needs as much
        memory again (the loop above would keep the frame alive in ``batch`` and its variables)."""
        assert self.decoder is not None and self.dispatcher is not None
        payload = batch.pop()
        if payload[0] != XLOG_TAG:
            parse_copy_message(payload)  # raises: only an XLogData frame can be this large
        wal_start, wal_end, body = split_xlog(payload)
        self.reporter.received(wal_end)
        message = self.decoder.decode(body)
        del payload, body
        # Receiving and decoding the frame took a while, and handling its row (encoding hundreds of
        # MB) takes as long again with no reply to the walsender in between: answer it now, so the
        # two together need not fit in one wal_sender_timeout (a test server's 10 s was exceeded
        # on a loaded machine, and the reconnect delivered the transaction a second time).
        self._housekeeping(reply_requested=False)
        events = 0
        for event in self.assembler.feed(message, wal_start):
            self.dispatcher.handle(event)
            events += 1
            if events >= HOUSEKEEPING_EVERY:
                events = 0
                self._housekeeping(reply_requested=False)
        self._housekeeping(reply_requested=False)

    def _housekeeping(self, *, reply_requested: bool) -> None:
        self.health.beat()
        publisher = self.publisher
        publisher.poll(0)
        publisher.raise_if_failed()
        now = time.monotonic()
        for job in self._jobs:
            job(now)
        self.health.kafka_ok = publisher.kafka_ok
        assembler = self.assembler
        between = self.dispatcher is None or not self.dispatcher.in_transaction
        self.reporter.report(self.stream, idle=assembler.is_idle() and between,
                             unfinished_lsn=assembler.oldest_unfinished_lsn(), reply_requested=reply_requested,
                             now=now)
        self.health.stall = self.reporter.stall
        self._gauges()
        if self.lease is not None:
            self.lease.check()
        if between:
            if publisher.transactions is not None:
                publisher.transactions.idle()
            for job in self._between_transactions:
                job(now)

    def _idle_tick(self) -> None:
        """Called while the producer queue is full: keep the walsender from timing us out."""
        if self.stop.is_set():
            raise StopRequested("stopped while waiting for room in the producer queue")
        self._housekeeping(reply_requested=False)

    # -- tear-down ---------------------------------------------------------------------------------
    def shutdown(self) -> bool:
        """Graceful stop: flush Kafka, confirm the last safe LSN, close. True when it drained: every
        record acknowledged and confirmed, between two transactions (postgres.drop_slot_on_stop)."""
        between = self.dispatcher is None or not self.dispatcher.in_transaction
        transactions = self.publisher.transactions
        if transactions is not None and between:
            transactions.commit()  # whole transactions only; a half one is aborted by close()
        remaining = self.publisher.flush(SHUTDOWN_FLUSH_S)
        if remaining:
            log.warning("stopping with unacknowledged records; they will be re-read on restart",
                        extra={"remaining": remaining})
        try:
            self.publisher.raise_if_failed()
            if self.stream is None:  # not streaming yet (starting, or the initial snapshot): no LSN to confirm
                return False
            self._housekeeping(reply_requested=False)
            log.info("confirmed on shutdown", extra={"lsn": format_lsn(self.reporter.final(self.stream))})
            return remaining == 0 and between
        finally:
            self.close()

    def stop_on_refused(self) -> None:
        """Stop on a record Kafka refused for good (``PublishError``: too large with
        ``kafka.oversize_policy=stop``, or not authorized). What was produced before it is still
        owed, as on a graceful stop: flushed (within ``SHUTDOWN_FLUSH_S``) and, where Kafka
        acknowledged a whole transaction, confirmed. Then close; the caller re-raises the refusal."""
        self._settle(SHUTDOWN_FLUSH_S, "before stopping on a refused record", logging.WARNING)

    def close_after_transient(self) -> None:
        """A transient failure tears the session down (supervisor.py): first confirm what Kafka
        already acknowledged, waiting at most ``TRANSIENT_FLUSH_S`` for reports in flight. Without
        it, a change delivered within the last feedback interval is delivered again by the next
        session (a registry outage right after a commit did: the same row twice, allowed at
        least once but avoidable). Postgres gone, or Kafka gone, only makes it confirm less."""
        # Postgres gone is the usual transient failure, and the reconnect's warning already names it.
        self._settle(TRANSIENT_FLUSH_S, "before reconnecting", logging.DEBUG)

    def _settle(self, flush_s: float, when: str, failure_level: int) -> None:
        """Flush for up to ``flush_s``, confirm the acknowledged prefix, close. The refused or
        failed transaction and everything after it are never confirmed: the tracker confirms only
        sealed, acknowledged units, capped below the oldest unfinished transaction."""
        try:
            remaining = self.publisher.flush(flush_s)
            if self.stream is not None:
                self.reporter.report(None, idle=False, unfinished_lsn=self.assembler.oldest_unfinished_lsn(),
                                     reply_requested=False, now=time.monotonic())
                log.info("confirmed what Kafka acknowledged", extra={
                    "when": when, "lsn": format_lsn(self.reporter.final(self.stream)), "unacknowledged": remaining})
        except (PgbridgeError, psycopg.Error) as exc:  # the failure, not this, is what the operator must read
            log.log(failure_level, "could not confirm what Kafka acknowledged", extra={"when": when, "error": str(exc)})
        finally:
            self.close()

    def close(self) -> None:
        self.health.streaming = False
        self.health.stall = None
        self.health.beat_at = None
        self.reporter.clear()
        self.metrics.streaming.set(0)
        if self.stream is not None:
            self.stream.close()
            self.stream = None
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        self.publisher.close()
        self.assembler.close()
        if self.incremental is not None:
            self.incremental.close()
        self.progress.close()


def _schema_changes(settings: Settings, conn: Connections, history_topic: str,
                    records: dict[str, dict[str, Any]]) -> SchemaChanges:
    """``postgres.ddl_events``: the rename history in force at the slot's confirmed LSN (from the
    progress records read at start), and where the DDL events and their history records go."""
    pg = settings.postgres
    info = slots.slot_info(conn.sql, pg.slot)
    history = RenameHistory.load(records, pg.slot, None if info is None else info.confirmed_flush_lsn)
    selection = stream_filter(pg)
    return SchemaChanges(encoder=conn.encoder, history=history, publication=pg.publication,
                         captured=(lambda _schema, _table: True) if selection is None else selection.matches,
                         topic=schema_changes_topic(settings.kafka.topic_prefix), history_topic=history_topic,
                         slot=pg.slot)


class _BeatingSnapshotSink(SnapshotSink):
    """The snapshot sink whose service loop (at least every 0.1 s while rows are read) is the
    pipeline thread's liveness beat during the initial snapshot."""

    def __init__(self, deliveries: Deliveries, encoder: ChangeEncoder, progress: ProgressStore, snapshot_lsn: Lsn,
                 *, outbox: OutboxRouter | None, health: Health) -> None:
        super().__init__(deliveries, encoder, progress, snapshot_lsn, outbox=outbox)
        self._health = health

    def service(self) -> None:
        self._health.beat()
        super().service()
