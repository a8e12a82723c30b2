"""Housekeeping jobs that run between frames on the pipeline thread, each at its own pace.

Each job is a small unit with one reason to exist; the session calls them from housekeeping
(at least every 100 ms, also while the producer queue is full), and each decides whether it is due:

* ``KafkaProbe``: while Kafka is reported unreachable and nothing is being delivered, ask a broker
  for metadata (bounded wait) so ``/readyz`` recovers without traffic;
* ``SlotCheck``: the slot's row in ``pg_replication_slots`` (retained WAL, invalidation forecast, who
  streams from it) and the server's WAL position for the stall watchdog;
* ``Heartbeat``: a logical message into this database's WAL so a quiet slot's confirmed LSN follows
  a busy server (``PrimaryHeartbeat`` when decoding on a standby: written on the primary);
* ``PromotionWatch`` (decoding on a standby): the standby was promoted, so the session ends and the
  next one streams as from a primary;
* ``SnapshotTick`` (between transactions only): incremental snapshot chunks and tables new in the
  publication;
* ``AssemblerGauges`` (every housekeeping, after the progress report): the assembler's buffered and
  spilled bytes and transaction outcomes as metrics.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Final

import psycopg

from pgbridge.ack.progress import ProgressReporter
from pgbridge.assemble.transaction import TransactionAssembler
from pgbridge.config import PostgresConfig, Settings
from pgbridge.decode.messages import Relation, TupleData
from pgbridge.encode.envelope import ChangeEncoder, EventContext, OutRecord
from pgbridge.errors import SourceUnavailable
from pgbridge.lsn import Lsn
from pgbridge.metrics import Metrics
from pgbridge.publish.producer import KafkaPublisher
from pgbridge.snapshot.incremental import IncrementalSnapshotter, table_names
from pgbridge.snapshot.modes import snapshots_added_tables
from pgbridge.snapshot.progress import ProgressStore
from pgbridge.source import slots
from pgbridge.source.keys import KeyColumns
from pgbridge.source.monitor import SlotMonitor, emit_heartbeat
from pgbridge.source.publication import MODE_FILTERED, PublicationSync
from pgbridge.source.selection import pattern_selection, stream_filter
from pgbridge.source.standby import PrimaryConnection, in_recovery

log = logging.getLogger(__name__)

SqlConn = psycopg.Connection[tuple[object, ...]]
# A job: called with ``time.monotonic()``, it decides itself whether it is due.
Job = Callable[[float], None]

KAFKA_PROBE_INTERVAL_S: Final = 2.0
KAFKA_PROBE_TIMEOUT_S: Final = 0.5


class KafkaProbe:
    """``kafka_ok`` turns True on a delivery; with nothing to deliver, ask a broker directly."""

    def __init__(self, publisher: KafkaPublisher, interval_s: float = KAFKA_PROBE_INTERVAL_S) -> None:
        self._publisher = publisher
        self._interval_s = interval_s
        self._next_at = 0.0

    def __call__(self, now: float) -> None:
        if not self._publisher.kafka_ok and now >= self._next_at:
            self._next_at = now + self._interval_s
            self._publisher.probe(KAFKA_PROBE_TIMEOUT_S)


class SlotCheck:
    """The slot monitor at its interval; its server WAL position feeds the stall watchdog."""

    def __init__(self, monitor: SlotMonitor, sql: SqlConn, reporter: ProgressReporter) -> None:
        self.monitor = monitor
        self._sql = sql
        self._reporter = reporter

    def __call__(self, now: float) -> None:
        if self.monitor.due(now):
            self._reporter.catalog_server_lsn = self.monitor.check(self._sql, now).server_lsn


class Heartbeat:
    """``pg_logical_emit_message`` every ``interval_s`` (0: never); turns itself off without permission."""

    def __init__(self, sql: SqlConn | None, metrics: Metrics, interval_s: float) -> None:
        self._sql = sql  # None: a subclass writes elsewhere (PrimaryHeartbeat)
        self._metrics = metrics
        self._interval_s = interval_s
        self._next_at = time.monotonic() + interval_s if interval_s > 0 else float("inf")

    def __call__(self, now: float) -> None:
        if now < self._next_at:
            return
        self._next_at = now + self._interval_s
        try:
            if not self._emit():
                return
        except psycopg.errors.InsufficientPrivilege as exc:
            log.warning("heartbeat disabled: no permission for pg_logical_emit_message",
                        extra={"error": exc.diag.message_primary})
            self._next_at = float("inf")
            return
        self._metrics.heartbeats.inc()

    def _emit(self) -> bool:
        assert self._sql is not None
        emit_heartbeat(self._sql)
        return True


class PrimaryHeartbeat(Heartbeat):
    """Decoding on a standby: the heartbeat is written on the primary (``postgres.primary_dsn``) and
    reaches the standby by replication, where it wakes the walsender as on a primary. The primary
    being unreachable is a warning (once per outage), not a failure of the stream."""

    def __init__(self, primary: PrimaryConnection, metrics: Metrics, interval_s: float) -> None:
        super().__init__(None, metrics, interval_s)
        self._primary = primary
        self._failing = False

    def _emit(self) -> bool:
        try:
            emit_heartbeat(self._primary.get())
        except (SourceUnavailable, psycopg.OperationalError) as exc:
            if not self._failing:
                log.warning("heartbeat on the primary failed; retrying at the next interval",
                            extra={"primary": self._primary.target, "error": str(exc).strip()})
            self._failing = True
            self._primary.close()
            return False
        self._failing = False
        return True


class PromotionWatch:
    """Decoding on a standby: every ``interval_s``, whether the server left recovery. A promoted
    standby keeps the slot and its walsender keeps streaming, but this session's writes still go to
    the old primary (watermarks written there never reach the stream); a new session streams as
    from a primary, from the slot's confirmed LSN."""

    def __init__(self, sql: SqlConn, interval_s: float) -> None:
        self._sql = sql
        self._interval_s = interval_s
        self._next_at = 0.0

    def __call__(self, now: float) -> None:
        if now < self._next_at:
            return
        self._next_at = now + self._interval_s
        try:
            promoted = not in_recovery(self._sql)
        except psycopg.OperationalError as exc:
            raise SourceUnavailable(f"checking for a promotion failed: {str(exc).strip()}") from None
        if promoted:
            log.info("the standby was promoted; reconnecting to stream from it as from a primary")
            raise SourceUnavailable("the standby pgbridge decodes on was promoted")


class SnapshotTick:
    """Between transactions: drive incremental snapshots and notice tables new in the publication."""

    def __init__(self, settings: Settings, sql: SqlConn, snapshotter: IncrementalSnapshotter,
                 progress: ProgressStore, encoder: ChangeEncoder, keys: KeyColumns) -> None:
        self._settings = settings
        self._sql = sql
        self._snapshotter = snapshotter
        self._progress = progress
        self._encoder = encoder
        self._keys = keys
        self._next_publication_check = 0.0

    def __call__(self, now: float) -> None:
        snap = self._snapshotter
        self._progress.poll()
        if now >= self._next_publication_check:
            self._next_publication_check = now + self._settings.snapshot.publication_check_s
            pg = self._settings.postgres
            published = table_names(slots.published_tables(self._sql, pg.publication, stream_filter(pg)))
            snap.check_publication(published, snapshot_new=snapshots_added_tables(self._settings.snapshot.mode))
        if snap.busy:
            snap.tick(self._encode_row, self._keys)

    def _encode_row(self, relation: Relation, row: TupleData, high_lsn: Lsn) -> OutRecord:
        ctx = EventContext(commit_lsn=high_lsn, xid=0, ts_us=int(time.time() * 1_000_000), origin=None,
                           total_order=0, collection_order=0, snapshot=True)
        return self._encoder.encode_snapshot_row(relation, row, ctx)


def streaming_jobs(pg: PostgresConfig, sql: SqlConn, reporter: ProgressReporter, metrics: Metrics,
                   walsender_pid: int, *, standby: bool = False, primary: PrimaryConnection | None = None) -> list[Job]:
    """The jobs that start with streaming: the slot check (its monitor knows our walsender's pid, to
    tell us from another consumer of the slot) and the heartbeat: on a standby written through
    ``primary``, and off without it."""
    monitor = SlotMonitor(pg.slot, metrics, interval_s=pg.slot_check_interval_s, walsender_pid=walsender_pid)
    jobs: list[Job] = [SlotCheck(monitor, sql, reporter)]
    if standby:
        jobs.append(PromotionWatch(sql, pg.slot_check_interval_s))
    if not standby:
        jobs.append(Heartbeat(sql, metrics, pg.heartbeat_interval_s))
    elif primary is not None:
        jobs.append(PrimaryHeartbeat(primary, metrics, pg.heartbeat_interval_s))
    elif pg.heartbeat_interval_s > 0:
        log.warning("postgres.heartbeat_interval_s ignored: on a standby heartbeats are written on the primary, "
                    "through postgres.primary_dsn, which is not set")
    return jobs


def between_transaction_jobs(settings: Settings, sql: SqlConn, snapshotter: IncrementalSnapshotter,
                             progress: ProgressStore, encoder: ChangeEncoder, keys: KeyColumns, *,
                             standby: bool = False) -> list[Job]:
    """The jobs run only between transactions, in order: a filtered publication with patterns is
    synced first, so the snapshot tick sees the tables the sync added (not on a standby, which
    cannot alter it)."""
    pg = settings.postgres
    jobs: list[Job] = []
    patterns = pattern_selection(pg)
    if patterns is not None and pg.publication_mode == MODE_FILTERED and not standby:  # before the tick
        jobs.append(PublicationSync(sql, pg.publication, patterns, settings.snapshot.publication_check_s))
    jobs.append(SnapshotTick(settings, sql, snapshotter, progress, encoder, keys))
    return jobs


class AssemblerGauges:
    """The assembler keeps running totals; the metrics get what grew since the last call."""

    def __init__(self, assembler: TransactionAssembler, metrics: Metrics) -> None:
        self._assembler = assembler
        self._metrics = metrics
        self._spilled_seen = 0
        self._outcomes_seen: dict[str, int] = {}

    def __call__(self) -> None:
        assembler, metrics = self._assembler, self._metrics
        metrics.buffered_bytes.set(assembler.buffered_bytes)
        spilled = assembler.spilled_bytes_total
        if spilled > self._spilled_seen:
            metrics.spilled_bytes.inc(spilled - self._spilled_seen)
            self._spilled_seen = spilled
        for outcome, total in assembler.outcome_totals.items():
            if total > self._outcomes_seen.get(outcome, 0):
                metrics.transactions.labels(outcome).inc(total - self._outcomes_seen.get(outcome, 0))
                self._outcomes_seen[outcome] = total
