"""``pgbridge status``: where a bridge is, read from Postgres and Kafka rather than asked of a process.

Everything comes from the systems pgbridge works with, so it answers from any machine that has the
configuration, whether pgbridge runs, stands by or is stopped:

* the slot (``pg_replication_slots``): active or not, who streams it, its WAL status;
* the lag: the server's WAL position minus the slot's confirmed LSN, in bytes;
* the leader: the session holding the slot's advisory lock (leader.py);
* the initial snapshot: its plan and finished chunks in ``{prefix}._snapshot`` (snapshot/progress.py),
  with the records' Kafka timestamps for the rate and the time left; the incremental snapshot queue.

Gathering is I/O (``gather``); deriving percentages, rates and ETAs is pure (``initial_snapshot``),
and so is rendering (``render``).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Final

import psycopg
from confluent_kafka.admin import AdminClient

from pgbridge.config import Settings
from pgbridge.errors import PgbridgeError
from pgbridge.leader import LOCK_NAMESPACE
from pgbridge.logs import LibrdkafkaLog
from pgbridge.lsn import parse_lsn
from pgbridge.publish.producer import admin_config
from pgbridge.publish.topics import read_compacted
from pgbridge.snapshot.progress import header_key, incremental_key, plan_key, progress_topic
from pgbridge.source import slots

# Reading the progress topic (one small compacted partition) gives up after this long.
KAFKA_TIMEOUT_S: Final = 10.0


@dataclass(frozen=True, slots=True)
class SlotStatus:
    name: str
    exists: bool
    active: bool = False
    active_pid: int | None = None
    client: str | None = None
    confirmed_flush_lsn: str | None = None
    server_lsn: str | None = None
    lag_bytes: int | None = None
    wal_status: str | None = None


@dataclass(frozen=True, slots=True)
class LeaderStatus:
    pid: int
    client: str
    since: str


@dataclass(frozen=True, slots=True)
class TableProgress:
    table: str
    chunks_done: int
    chunks: int
    rows_estimate: int


@dataclass(frozen=True, slots=True)
class SnapshotStatus:
    """The initial snapshot. ``state``: ``running`` (a plan is recorded), ``complete`` (the slot
    exists and no plan is left), ``not started``, or ``unknown`` (``detail`` says why)."""

    state: str
    detail: str = ""
    tables: list[TableProgress] = field(default_factory=list)
    percent: float | None = None
    rows_done_estimate: int | None = None
    rows_estimate: int | None = None
    rows_per_s: float | None = None
    eta_s: float | None = None
    last_chunk_age_s: float | None = None
    incremental_queue: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Status:
    slot: SlotStatus
    leader: LeaderStatus | None
    snapshot: SnapshotStatus

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)


def initial_snapshot(records: dict[str, dict[str, Any]], timestamps: dict[str, int], slot: str,
                     now_ms: int) -> SnapshotStatus | None:
    """Progress of a running initial snapshot from its progress records, ``None`` without a plan.

    Rows done are estimated per table as finished chunks times the table's rows per chunk (the
    plan's ``rows_estimate``, from the statistics, over its chunk count). The rate is those rows
    over the time from the plan's record to the latest finished chunk's, and the ETA the rows
    left at that rate: both only once a chunk is finished.
    """
    header = records.get(header_key(slot))
    if header is None:
        return None
    consistent = int(header["consistent_lsn"])
    done_prefix = f"{slot}/initial/done/"
    done: dict[str, int] = {}
    last_done_ms = None
    for key, value in records.items():
        if key.startswith(done_prefix) and int(value.get("consistent_lsn", -1)) == consistent:
            table = key[len(done_prefix):].rpartition("/")[0]
            done[table] = done.get(table, 0) + 1
            stamp = timestamps.get(key)
            if stamp is not None:
                last_done_ms = stamp if last_done_ms is None else max(last_done_ms, stamp)
    tables = []
    for table in header["tables"]:
        plan = (records.get(plan_key(slot, table)) or {}).get("plan") or {}
        tables.append(TableProgress(table, done.get(table, 0), len(plan.get("chunks", [])),
                                    int(plan.get("rows_estimate", 0))))
    chunks = sum(t.chunks for t in tables)
    rows_total = sum(max(0, t.rows_estimate) for t in tables)
    rows_done = sum(round(max(0, t.rows_estimate) * t.chunks_done / t.chunks) for t in tables if t.chunks)
    if rows_total > 0:
        percent = 100.0 * rows_done / rows_total
    else:
        percent = 100.0 * sum(t.chunks_done for t in tables) / chunks if chunks else 0.0
    started_ms = timestamps.get(header_key(slot))
    rate = eta = age = None
    if last_done_ms is not None:
        age = max(0.0, (now_ms - last_done_ms) / 1000)
        if started_ms is not None and last_done_ms > started_ms and rows_done > 0:
            rate = rows_done / ((last_done_ms - started_ms) / 1000)
            eta = max(0, rows_total - rows_done) / rate
    return SnapshotStatus("running", tables=tables, percent=round(percent, 1), rows_done_estimate=rows_done,
                          rows_estimate=rows_total, rows_per_s=None if rate is None else round(rate, 1),
                          eta_s=None if eta is None else round(eta, 1),
                          last_chunk_age_s=None if age is None else round(age, 1))


def _slot_status(conn: psycopg.Connection[tuple[object, ...]], slot: str) -> SlotStatus:
    row = conn.execute(
        "SELECT s.active, s.active_pid, coalesce(a.application_name, '') || ' from '"
        " || coalesce(a.client_addr::text, 'local socket'), s.confirmed_flush_lsn::text,"
        " (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END)::text,"
        " s.wal_status FROM pg_replication_slots s LEFT JOIN pg_stat_activity a ON a.pid = s.active_pid"
        " WHERE s.slot_name = %s", (slot,)).fetchone()
    if row is None:
        return SlotStatus(slot, exists=False)
    active, pid, client, confirmed, server, wal_status = row
    lag = (max(0, parse_lsn(str(server)) - parse_lsn(str(confirmed)))
           if confirmed is not None and server is not None else None)
    return SlotStatus(slot, True, bool(active), None if pid is None else int(str(pid)),
                      str(client) if active else None, None if confirmed is None else str(confirmed),
                      None if server is None else str(server), lag, None if wal_status is None else str(wal_status))


def _leader(conn: psycopg.Connection[tuple[object, ...]], slot: str) -> LeaderStatus | None:
    """The session holding the slot's advisory lock (a bigint key: classid high, objid low word)."""
    row = conn.execute(
        "SELECT l.pid, coalesce(a.application_name, '') || ' from ' || coalesce(a.client_addr::text, 'local socket'),"
        " to_char(a.backend_start AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')"
        " FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
        " WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1"
        " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        " AND ((l.classid::int8 << 32) | l.objid::int8) = hashtextextended(%s, 0)",
        (LOCK_NAMESPACE + slot,)).fetchone()
    if row is None:
        return None
    return LeaderStatus(int(str(row[0])), str(row[1]), str(row[2]))


def _progress_records(settings: Settings) -> tuple[dict[str, dict[str, Any]], dict[str, int]] | str:
    """The slot's live progress records and their timestamps, or why they could not be read."""
    kafka = settings.kafka
    topic = progress_topic(kafka.topic_prefix)
    client = {**admin_config(kafka), "client.id": "pgbridge-status"}
    try:
        metadata = AdminClient(client, logger=LibrdkafkaLog()).list_topics(topic, timeout=KAFKA_TIMEOUT_S)
    except Exception as exc:
        return f"Kafka at {kafka.bootstrap_servers} is unreachable ({exc})"
    found = metadata.topics.get(topic)
    if found is None or found.error is not None:
        return {}, {}
    stamps: dict[str, int] = {}
    try:
        raw = read_compacted({**client, "group.id": "pgbridge-status"}, topic, timeout_s=KAFKA_TIMEOUT_S,
                             key_prefix=f"{settings.postgres.slot}/", timestamps=stamps)
    except PgbridgeError as exc:
        return str(exc)
    return {key: json.loads(value) for key, value in raw.items()}, stamps


def gather(settings: Settings) -> Status:
    """Read the status; an unreachable Postgres raises (nothing to report), an unreachable Kafka
    leaves the snapshot ``unknown``."""
    pg = settings.postgres
    with slots.connect_sql(pg.dsn.get_secret_value(), connect_timeout_s=pg.connect_timeout_s) as conn:
        slot = _slot_status(conn, pg.slot)
        pending = slots.slot_info(conn, slots.pending_slot(pg.slot)) is not None
        leader = _leader(conn, pg.slot)
    progress = _progress_records(settings)
    if isinstance(progress, str):
        return Status(slot, leader, SnapshotStatus("unknown", detail=progress))
    records, stamps = progress
    queue = list((records.get(incremental_key(pg.slot)) or {}).get("queue", []))
    snapshot = initial_snapshot(records, stamps, pg.slot, int(time.time() * 1000))
    if snapshot is not None:
        snapshot = replace(snapshot, incremental_queue=queue)
    elif slot.exists and not pending:
        snapshot = SnapshotStatus("complete", incremental_queue=queue)
    elif pending:
        snapshot = SnapshotStatus("running", detail="planning (no plan recorded yet)")
    else:
        snapshot = SnapshotStatus("not started", detail=f"snapshot.mode={settings.snapshot.mode}")
    return Status(slot, leader, snapshot)


def _bytes(count: int) -> str:
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _duration(seconds: float) -> str:
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def render(status: Status) -> list[str]:
    """One line per subject, ``name  value``, for a terminal."""
    slot = status.slot
    if not slot.exists:
        lines = [f"slot      {slot.name}: does not exist (created by pgbridge run)"]
    else:
        state = f"active, streamed by pid {slot.active_pid} ({slot.client})" if slot.active else "inactive"
        lines = [f"slot      {slot.name}: {state}; wal_status {slot.wal_status or 'unknown'}"]
        if slot.lag_bytes is not None:
            lines.append(f"lag       {_bytes(slot.lag_bytes)} ({slot.lag_bytes} bytes): confirmed "
                         f"{slot.confirmed_flush_lsn}, server at {slot.server_lsn}")
    leader = status.leader
    lines.append(f"leader    pid {leader.pid} ({leader.client}), since {leader.since}" if leader
                 else "leader    none: no pgbridge holds the slot's leader lock")
    snap = status.snapshot
    if snap.state == "running" and snap.percent is not None:
        done = sum(t.chunks_done for t in snap.tables)
        total = sum(t.chunks for t in snap.tables)
        text = (f"initial snapshot running: {snap.percent:.1f}% ({done} of {total} chunks, "
                f"~{snap.rows_done_estimate} of ~{snap.rows_estimate} rows)")
        if snap.rows_per_s is not None and snap.eta_s is not None:
            text += f", {snap.rows_per_s:.0f} rows/s, ETA {_duration(snap.eta_s)}"
        else:
            text += ", rate and ETA after the first chunk"
        if snap.last_chunk_age_s is not None:
            text += f"; last chunk {_duration(snap.last_chunk_age_s)} ago"
        lines.append(f"snapshot  {text}")
        lines.extend(f"          {t.table}: {t.chunks_done}/{t.chunks} chunks, ~{t.rows_estimate} rows"
                     for t in snap.tables)
    else:
        lines.append(f"snapshot  initial snapshot {snap.state}" + (f": {snap.detail}" if snap.detail else ""))
    if snap.incremental_queue:
        lines.append(f"          incremental snapshot queued: {', '.join(snap.incremental_queue)}")
    return lines
