"""Incremental snapshots while streaming continues: DBLog watermarks, one chunk at a time.

```
 signal (pg_logical_emit_message 'pgbridge.signal')  or  a table new in the publication
        │ queue of tables (persisted, progress.py)
        ▼
 tick():  emit LOW watermark ─▶ SELECT next chunk by key (own snapshot) ─▶ emit HIGH watermark
          rows encoded and buffered by Kafka key
        │
 stream:  ... LOW ... row changes of the table: their keys dropped from the buffer ... HIGH
        ▼
 at HIGH: the remaining rows are produced as op=r inside the HIGH transaction's unit
        ▼
 once acknowledged: the table's cursor (last key read) is persisted; next chunk
 (exactly-once: the cursor moves when the rows are produced, and is written into the Kafka
  transaction that carries them; see progress.py)
```
Why no stale row survives: the chunk's SELECT starts after the low watermark committed and ends
before the high watermark was written, so it sees every change committed before the low
watermark and maybe some committed between the two. A key changed between the watermarks is
dropped from the chunk (the stream carries its newer value); every other row read is exactly the
row's state when the high watermark is decoded, and is produced right there, before any later
change of the same key. Watermarks carry a random token per chunk, so watermarks of another
pgbridge, or of an earlier session decoded again after a restart, are ignored.

Why it ends on a table that keeps growing: the table's largest key is read when its snapshot
starts and no chunk reads past it. A row inserted above that key afterwards was inserted after the
bridge was already streaming the table, so the stream carries it; reading it as well would only
chase the inserts.

Keys are compared as the encoded Kafka keys, so text and binary pgoutput values agree and a
key-changing update drops both its old and new key. Tables need a key (primary key or replica
identity index) to be snapshotted incrementally; others are skipped with an error log line.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import psycopg
from psycopg import sql

from pgbridge.ack.tracker import Unit
from pgbridge.config import Settings
from pgbridge.decode.messages import Relation, TupleData
from pgbridge.encode.envelope import OutRecord
from pgbridge.errors import FatalError, SourceUnavailable
from pgbridge.identifiers import IdentifierError, normalize_table, parse_table, table_name
from pgbridge.lsn import Lsn, format_lsn, parse_lsn
from pgbridge.metrics import Metrics
from pgbridge.publish.transactions import KafkaTransactions, ProduceInto
from pgbridge.snapshot.chunking import CHUNK_BY_KEY, TablePlan, next_rows_copy_query, plan_table
from pgbridge.snapshot.initial import parse_copy_lines
from pgbridge.snapshot.progress import ProgressStore, encode_record, incremental_key, tables_key
from pgbridge.source import slots
from pgbridge.source.connection import build_conninfo
from pgbridge.source.selection import TableSelection, stream_filter

log = logging.getLogger(__name__)

SIGNAL_EXECUTE_SNAPSHOT: Final = "execute-snapshot"
# Debezium's incremental-snapshot controls: stop (listed tables, or all), pause, resume.
SIGNAL_STOP_SNAPSHOT: Final = "stop-snapshot"
SIGNAL_PAUSE_SNAPSHOT: Final = "pause-snapshot"
SIGNAL_RESUME_SNAPSHOT: Final = "resume-snapshot"
SIGNAL_TYPES: Final = (SIGNAL_EXECUTE_SNAPSHOT, SIGNAL_STOP_SNAPSHOT, SIGNAL_PAUSE_SNAPSHOT, SIGNAL_RESUME_SNAPSHOT)
WATERMARK_LOW: Final = "low"
WATERMARK_HIGH: Final = "high"
PROGRESS_EVERY_S: Final = 10.0

Encode = Callable[[Relation, TupleData, Lsn], OutRecord]


def watermark_prefix(signal_prefix: str) -> str:
    """Watermarks use the signal prefix's namespace: ``pgbridge.signal`` → ``pgbridge.watermark``."""
    head, _, _ = signal_prefix.rpartition(".")
    return f"{head}.watermark" if head else f"{signal_prefix}.watermark"


@dataclass(frozen=True, slots=True)
class SnapshotSignal:
    """One operator signal. ``tables`` is empty for pause and resume, and for a stop of every table."""

    tables: tuple[str, ...]
    slot: str | None
    kind: str = SIGNAL_EXECUTE_SNAPSHOT


# A signal is a short JSON object naming tables; anything far larger is a mistake or an attack,
# refused before it is parsed (json.loads of a huge or deeply nested document costs memory, time,
# or a RecursionError).
MAX_SIGNAL_BYTES: Final = 64 * 1024
MAX_SIGNAL_TABLES: Final = 1000


def read_signal(content: bytes) -> SnapshotSignal | str:
    """A signal (``SIGNAL_TYPES``), or why ``content`` is not one (a sentence for the log).

    Never raises: a signal is operator input arriving inside the replication stream, and a bad one
    must not stop the stream (nor be acted on)."""
    raw = bytes(content)
    if len(raw) > MAX_SIGNAL_BYTES:
        return f"a signal of {len(raw):,} bytes is over the {MAX_SIGNAL_BYTES:,}-byte limit"
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return "a signal that is not UTF-8 text"
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, too many digits, nesting
        return f"a signal that is not JSON ({str(exc)[:100]})"
    if not isinstance(data, dict):
        return f"a signal that is a JSON {type(data).__name__}, not an object"
    kind = data.get("type")
    if not isinstance(kind, str) or kind not in SIGNAL_TYPES:
        return f"a signal of unknown type {str(kind)[:100]!r} (expected one of {', '.join(SIGNAL_TYPES)})"
    names: tuple[str, ...] = ()
    if kind in (SIGNAL_EXECUTE_SNAPSHOT, SIGNAL_STOP_SNAPSHOT):
        tables = _signal_tables(data, required=kind == SIGNAL_EXECUTE_SNAPSHOT)
        if isinstance(tables, str):
            return f"{_a_signal(kind)} {tables}"
        names = tables
    slot = data.get("slot")
    if slot is not None and not isinstance(slot, str):
        return f"{_a_signal(kind)} whose \"slot\" is a JSON {type(slot).__name__}, not a string"
    return SnapshotSignal(names, slot, kind)


def _a_signal(kind: str) -> str:
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind} signal"


def _signal_tables(data: dict[str, Any], *, required: bool) -> tuple[str, ...] | str:
    """The canonical tables of a signal (``tables``, or Debezium's ``data.data-collections``), or
    what is wrong with them. Optional for a stop (none: every table)."""
    tables = data.get("tables")
    nested = data.get("data")
    if tables is None and isinstance(nested, dict):
        tables = nested.get("data-collections")
    if tables is None and not required and (nested is None or isinstance(nested, dict)):
        return ()
    if not isinstance(tables, list) or (required and not tables) or not all(isinstance(t, str) for t in tables):
        return "without a non-empty \"tables\" list of schema.table names" if required else \
            "whose \"tables\" is not a list of schema.table names"
    if len(tables) > MAX_SIGNAL_TABLES:
        return f"naming {len(tables):,} tables (at most {MAX_SIGNAL_TABLES:,})"
    try:
        return tuple(normalize_table(t) for t in tables)
    except IdentifierError as exc:
        return f"with a malformed table name ({str(exc)[:200]})"


def parse_signal(content: bytes) -> SnapshotSignal | None:
    """An ``execute-snapshot`` signal, or ``None`` (with an error log line) for anything else."""
    signal = read_signal(content)
    if isinstance(signal, str):
        log.error(f"ignoring {signal}", extra={"content": _preview(content)})
        return None
    return signal


def _preview(content: bytes) -> str:
    return bytes(content[:200]).decode("utf-8", errors="replace")


def parse_watermark(content: bytes) -> tuple[str, str] | None:
    """(kind, token) of a watermark message."""
    try:
        data = json.loads(bytes(content).decode("utf-8"))
        return str(data["kind"]), str(data["token"])
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError):
        return None


@dataclass(slots=True)
class IncrementalState:
    """What survives a restart: the table queue, the cursor in its head, the last signal acted on,
    and whether a pause-snapshot signal holds the queue (a restart does not resume it: only a
    resume-snapshot signal does, so an operator's pause is never lifted behind their back)."""

    queue: list[str] = field(default_factory=list)
    after: list[str] | None = None
    signal_lsn: int = 0
    paused: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"queue": self.queue, "after": self.after, "signal_lsn": self.signal_lsn, "paused": self.paused}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> IncrementalState:
        if not data:
            return cls()
        after = data.get("after")
        return cls(list(data.get("queue", [])), None if after is None else [str(v) for v in after],
                   int(data.get("signal_lsn", 0)), bool(data.get("paused", False)))


@dataclass(slots=True)
class _PendingChunk:
    token: str
    table: str  # canonical name (identifiers.py): the queue's and the operators' form
    buffer: dict[bytes, OutRecord]
    next_after: list[str] | None
    last: bool
    window_open: bool = False
    unit: Unit | None = None
    emitted: int = 0
    # ``schema.table`` as the encoder names the relation (publish/dispatch.py compares it); differs
    # from ``table`` for a name that needs quoting.
    window_table: str | None = None


class IncrementalSnapshotter:
    """Drives incremental snapshots from the pipeline's main thread (no threads of its own)."""

    def __init__(self, *, dsn: str | None, slot: str, publication: str, chunk_rows: int, signal_prefix: str,
                 progress: ProgressStore, metrics: Metrics, connect_timeout_s: float,
                 filters: Mapping[str, str] | None = None, selection: TableSelection | None = None,
                 transactions: KafkaTransactions | None = None) -> None:
        # Where watermarks are written and chunks read: None on a standby without postgres.primary_dsn
        # (source/standby.py), where incremental snapshots cannot run.
        self._dsn = dsn
        self._filters = dict(filters or {})  # snapshot.filters by canonical table name
        # postgres.table_include/exclude (source/selection.py stream_filter): a signal naming a table the
        # stream filter drops must not publish its rows
        self._selection = selection
        self.slot = slot
        self.publication = publication
        self.chunk_rows = chunk_rows
        self.signal_prefix = signal_prefix
        self.watermark_prefix = watermark_prefix(signal_prefix)
        self._progress = progress
        self._metrics = metrics
        self._connect_timeout_s = connect_timeout_s
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None
        self.state = IncrementalState()
        self.known_tables: set[str] | None = None
        self._pending: _PendingChunk | None = None
        self._plans: dict[str, tuple[TablePlan, Relation]] = {}
        self._table_rows: dict[str, int] = {}
        self._last_report = time.monotonic()
        # The table whose row changes must be checked against the chunk buffer, or None. The
        # pipeline's hot path reads only this attribute.
        self.window_table: str | None = None
        # Exactly-once: the state is written into the open Kafka transaction (``_write_state``)
        # when it changed while one was open (progress.py)
        self._transactions = transactions
        self._unwritten = False
        if transactions is not None:
            transactions.before_commit(self._write_state)

    @classmethod
    def of(cls, settings: Settings, progress: ProgressStore, metrics: Metrics, *,
           dsn: str | None, transactions: KafkaTransactions | None = None) -> IncrementalSnapshotter:
        """The session's snapshotter, built from the ``postgres`` and ``snapshot`` sections, writing its
        watermarks through ``dsn`` (``ServerRole.write_dsn``: the primary when decoding on a standby)
        and, exactly-once, its state through ``transactions``."""
        pg = settings.postgres
        return cls(
            dsn=dsn, slot=pg.slot, publication=pg.publication,
            chunk_rows=settings.snapshot.chunk_rows, signal_prefix=settings.snapshot.signal_prefix,
            progress=progress, metrics=metrics, connect_timeout_s=pg.connect_timeout_s,
            filters=settings.snapshot.filters, selection=stream_filter(settings.postgres),
            transactions=transactions)

    # -- persisted state ----------------------------------------------------------------------------
    def load(self, records: dict[str, dict[str, Any]]) -> None:
        self.state = IncrementalState.from_json(records.get(incremental_key(self.slot)))
        known = records.get(tables_key(self.slot))
        self.known_tables = None if known is None else set(known.get("tables", []))
        self._metrics.snapshot_paused.set(1 if self.state.paused else 0)
        if self.state.paused:
            log.warning("incremental snapshots are paused (a pause-snapshot signal); send resume-snapshot "
                        "to continue", extra={"tables": self.state.queue, "after": self.state.after})
        elif self.state.queue:
            log.info("resuming incremental snapshot", extra={"tables": self.state.queue,
                                                             "after": self.state.after})

    def _persist(self, *, sync: bool, between: bool = True) -> None:
        """Write the state: at least once through the progress store (``sync``: acknowledged before
        returning). Exactly-once, into the open Kafka transaction, whose data it must commit (or
        abort) with; ``sync`` and ``between`` Postgres transactions, that transaction commits now.
        With none open it goes through the progress store, acknowledged before anything else is
        produced, so that no later transaction's record can land before it."""
        transactions = self._transactions
        if transactions is not None and transactions.is_open:
            self._unwritten = True
            if sync and between:
                transactions.commit()
            return
        self._progress.put(incremental_key(self.slot), self.state.to_json())
        if sync or transactions is not None:
            self._progress.flush()

    def _write_state(self, produce: ProduceInto) -> None:
        """``before_commit`` hook (exactly-once): the state, if it changed in this transaction."""
        if self._unwritten:
            self._unwritten = False
            produce(self._progress.topic, incremental_key(self.slot).encode(), encode_record(self.state.to_json()))

    def set_known_tables(self, tables: Iterable[str]) -> None:
        self.known_tables = set(tables)
        self._progress.put(tables_key(self.slot), {"tables": sorted(self.known_tables)})
        self._progress.flush()

    @property
    def busy(self) -> bool:
        return bool(self.state.queue) or self._pending is not None

    # -- triggers -----------------------------------------------------------------------------------
    def on_signal(self, content: bytes, lsn: Lsn) -> None:
        """A message with the signal prefix. Acted on once: recorded before its transaction can be
        confirmed, and ignored when decoded again at or below the recorded LSN."""
        if lsn <= self.state.signal_lsn:
            log.info("ignoring a signal already acted on", extra={"lsn": format_lsn(lsn)})
            return
        signal = read_signal(content)
        if isinstance(signal, str):  # logged and skipped: the stream goes on, nothing is queued
            log.error(f"ignoring {signal}; the stream goes on",
                      extra={"lsn": format_lsn(lsn), "content": _preview(content)})
            return
        if signal.slot is not None and signal.slot != self.slot:
            return
        self.state.signal_lsn = int(lsn)
        if signal.kind == SIGNAL_EXECUTE_SNAPSHOT:
            log.info("incremental snapshot requested", extra={"tables": list(signal.tables), "lsn": format_lsn(lsn),
                                                              "paused": self.state.paused})
            self._enqueue(signal.tables)
        elif signal.kind == SIGNAL_STOP_SNAPSHOT:
            self._stop(signal.tables, lsn)
        else:
            self._set_paused(signal.kind == SIGNAL_PAUSE_SNAPSHOT, lsn)
        self._persist(sync=True, between=False)  # exactly-once: commits with the signal's transaction

    def _stop(self, tables: tuple[str, ...], lsn: Lsn) -> None:
        """Take ``tables`` (all when empty) off the queue. A chunk of the head table between its
        watermarks is abandoned; rows already produced stay (they are correct ``op=r`` records)."""
        stopped = [t for t in self.state.queue if not tables or t in tables]
        head = self.state.queue[0] if self.state.queue else None
        self.state.queue = [t for t in self.state.queue if t not in stopped]
        if head is not None and head in stopped:
            self.state.after = None
            self._pending = None
            self.window_table = None
        for table in stopped:
            self._plans.pop(table, None)
            self._table_rows.pop(table, None)
        log.info("incremental snapshot stopped", extra={"tables": stopped, "requested": list(tables) or "all",
                                                        "remaining": self.state.queue, "lsn": format_lsn(lsn)})

    def _set_paused(self, paused: bool, lsn: Lsn) -> None:
        """Pause: no new chunk is read (one between its watermarks completes). Resume: go on."""
        self.state.paused = paused
        self._metrics.snapshot_paused.set(1 if paused else 0)
        log.info("incremental snapshot paused" if paused else "incremental snapshot resumed",
                 extra={"tables": self.state.queue, "after": self.state.after, "lsn": format_lsn(lsn)})

    def check_publication(self, published: Iterable[str], *, snapshot_new: bool) -> None:
        """Compare the publication with the tables known to be snapshotted; queue the new ones."""
        current = set(published)
        if self.known_tables is None:
            self.set_known_tables(current)
            return
        added = sorted(current - self.known_tables)
        if not added and current == self.known_tables:
            return
        if added and snapshot_new:
            log.info("tables added to the publication; snapshotting them", extra={"tables": added})
            self._enqueue(added)
            self._persist(sync=True)
        self.set_known_tables(current)

    def _enqueue(self, tables: Iterable[str]) -> None:
        for table in tables:
            if table not in self.state.queue:
                self.state.queue.append(table)

    # -- the stream between the watermarks ----------------------------------------------------------
    def drop_keys(self, keys: Iterable[bytes | None]) -> None:
        pending = self._pending
        assert pending is not None
        for key in keys:
            if key is not None:
                pending.buffer.pop(key, None)

    def drop_all(self) -> None:
        """A TRUNCATE of the table between the watermarks: nothing read is current any more."""
        if self._pending is not None:
            self._pending.buffer.clear()

    def on_watermark(self, content: bytes) -> tuple[str, list[OutRecord]] | None:
        """A watermark message; at this chunk's high watermark, the table and the rows to produce
        right now."""
        parsed = parse_watermark(content)
        pending = self._pending
        if parsed is None or pending is None or parsed[1] != pending.token or pending.unit is not None:
            return None
        kind = parsed[0]
        if kind == WATERMARK_LOW:
            pending.window_open = True
            self.window_table = pending.window_table or pending.table
            return None
        if kind != WATERMARK_HIGH or not pending.window_open:
            return None
        self.window_table = None
        records = list(pending.buffer.values())
        pending.emitted = len(records)
        return pending.table, records

    def chunk_produced(self, unit: Unit) -> None:
        """The high watermark's rows were produced in ``unit`` (the watermark's transaction).
        Exactly-once the cursor moves now, and its record goes into the Kafka transaction that
        carries the rows: whatever a restart finds committed, rows and cursor agree."""
        pending = self._pending
        assert pending is not None
        pending.unit = unit
        if self._transactions is not None:
            self._advance(pending)
            self._persist(sync=False, between=False)

    # -- driving ------------------------------------------------------------------------------------
    def tick(self, encode: Encode, key_columns: Callable[[Relation], tuple[str, ...]]) -> None:
        """Move on: persist an acknowledged chunk, or read the next one. Cheap when idle."""
        pending = self._pending
        if pending is not None:
            unit = pending.unit
            if unit is None or not unit.durable:
                return
            self._chunk_done(pending)
            self._pending = None
        if not self.state.queue or self.state.paused:
            return
        if self._dsn is None:
            log.error("incremental snapshots cannot run on a standby without postgres.primary_dsn (their watermarks "
                      "are logical messages, which only the primary can write); skipped",
                      extra={"tables": self.state.queue, "hint": "set postgres.primary_dsn to the primary, then send "
                             "the execute-snapshot signal again"})
            self.state.queue.clear()
            self.state.after = None
            self._persist(sync=False)
            return
        table = self.state.queue[0]
        entry = self._plan(table, key_columns)
        if entry is None:
            self.state.queue.pop(0)
            self.state.after = None
            self._persist(sync=False)
            return
        plan, relation = entry
        if not plan.chunks:  # empty when planned: everything since comes through the stream
            self._table_done(table)
            self._persist(sync=False)
            return
        self._read_chunk(table, plan, relation, encode)

    def _advance(self, pending: _PendingChunk) -> None:
        """Move the cursor past ``pending`` (or finish its table)."""
        table = pending.table
        self._table_rows[table] = self._table_rows.get(table, 0) + pending.emitted
        if pending.last:
            self._table_done(table)
        else:
            self.state.after = pending.next_after

    def _chunk_done(self, pending: _PendingChunk) -> None:
        """``pending``'s rows are acknowledged (exactly-once: committed, cursor included)."""
        table = pending.table
        self._metrics.snapshot_rows.labels(table).inc(pending.emitted)
        if self._transactions is None:
            self._advance(pending)
            self._persist(sync=False)
        now = time.monotonic()
        if now - self._last_report >= PROGRESS_EVERY_S and not pending.last:
            self._last_report = now
            estimate = self._plans[table][0].rows_estimate if table in self._plans else 0
            log.info("incremental snapshot progress", extra={"table": table, "rows": self._table_rows.get(table, 0),
                                                             "rows_estimate": estimate})

    def _table_done(self, table: str) -> None:
        self.state.queue.remove(table)
        self.state.after = None
        self._plans.pop(table, None)
        log.info("incremental snapshot of table done", extra={"table": table, "rows": self._table_rows.pop(table, 0)})

    def _connection(self) -> psycopg.Connection[tuple[object, ...]]:
        if self._conn is None or self._conn.closed:
            assert self._dsn is not None  # tick() skips every table without one
            conninfo = build_conninfo(self._dsn, replication=False, connect_timeout_s=self._connect_timeout_s)
            try:
                self._conn = psycopg.connect(conninfo, autocommit=True)
            except psycopg.OperationalError as exc:
                raise SourceUnavailable(f"incremental snapshot connection failed: {str(exc).strip()}") from None
        return self._conn

    def _plan(self, table: str, key_columns: Callable[[Relation], tuple[str, ...]]) -> tuple[TablePlan, Relation] | None:
        cached = self._plans.get(table)
        if cached is not None:
            return cached
        schema, name = parse_table(table)
        conn = self._connection()
        try:
            published = slots.published_tables(conn, self.publication)
            if (schema, name) not in published:
                log.error("cannot snapshot a table that is not in the publication; skipped",
                          extra={"table": table, "publication": self.publication})
                return None
            if self._selection is not None and not self._selection.matches(schema, name):
                log.error("cannot snapshot a table that postgres.table_include/table_exclude do not select; "
                          "skipped", extra={"table": table, "publication": self.publication})
                return None
            relation = slots.relation_from_catalog(conn, schema, name, self.publication)
            keys = key_columns(relation) or slots.key_columns(conn, relation.rel_id)
            if not keys:
                log.error("cannot snapshot a table without a primary key or replica identity index "
                          "incrementally; skipped", extra={"table": table})
                return None
            plan = plan_table(conn, relation, keys, self.chunk_rows, boundaries=False)
        except FatalError as exc:
            log.error("cannot snapshot table; skipped", extra={"table": table, "error": str(exc)})
            return None
        except psycopg.OperationalError as exc:
            raise SourceUnavailable(f"incremental snapshot planning failed: {str(exc).strip()}") from None
        self._metrics.snapshot_rows_estimate.labels(table).set(plan.rows_estimate)
        log.info("incremental snapshot of table started", extra={"table": table, "rows_estimate": plan.rows_estimate,
                                                                 "after": self.state.after})
        self._plans[table] = (plan, relation)
        return plan, relation

    def _emit_watermark(self, conn: psycopg.Connection[tuple[object, ...]], kind: str, token: str,
                        table: str) -> Lsn:
        content = json.dumps({"kind": kind, "token": token, "table": table, "slot": self.slot})
        row = conn.execute("SELECT pg_logical_emit_message(true, %s, %s)::text",
                           (self.watermark_prefix, content)).fetchone()
        assert row is not None
        return parse_lsn(str(row[0]))

    def _read_chunk(self, table: str, plan: TablePlan, relation: Relation, encode: Encode) -> None:
        assert plan.kind == CHUNK_BY_KEY
        conn = self._connection()
        token = uuid.uuid4().hex
        after = None if self.state.after is None else tuple(self.state.after)
        query = next_rows_copy_query(plan, relation, after, self.chunk_rows, plan.chunks[0].upper,
                                     self._filters.get(table))
        width = len(relation.columns)
        rows: list[tuple[TupleData, list[str]]] = []
        try:
            self._emit_watermark(conn, WATERMARK_LOW, token, table)
            with conn.cursor() as cursor, cursor.copy(query) as copy:
                for row in parse_copy_lines(iter(copy), width + len(plan.key_columns)):  # type: ignore[arg-type]
                    values = row.values
                    key_text = [bytes(v or b"").decode() for v in values[width:]]
                    rows.append((TupleData(row.kinds[:width], values[:width]), key_text))
            high_lsn = self._emit_watermark(conn, WATERMARK_HIGH, token, table)
        except psycopg.OperationalError as exc:
            raise SourceUnavailable(f"incremental snapshot read failed: {str(exc).strip()}") from None
        except psycopg.Error as exc:
            # The table changed under us (dropped, altered): skip it rather than stop streaming.
            log.error("incremental snapshot of table failed; skipped", extra={"table": table, "error": str(exc)})
            self.state.queue.remove(table)
            self.state.after = None
            self._plans.pop(table, None)
            self._persist(sync=False)
            return
        buffer: dict[bytes, OutRecord] = {}
        for row, _ in rows:
            record = encode(relation, row, high_lsn)
            if record.key is not None:
                buffer[record.key] = record
        self._pending = _PendingChunk(token=token, table=table, window_table=plan.table, buffer=buffer,
                                      next_after=rows[-1][1] if rows else self.state.after,
                                      last=len(rows) < self.chunk_rows)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def table_names(tables: Iterable[tuple[str, str]]) -> list[str]:
    """Canonical names (``public.orders``, ``public."Order Items"``): what signals, the queue and
    the persisted table list hold, so a name with a dot or a capital parses back exactly."""
    return [table_name(schema, name) for schema, name in tables]


def emit_signal_sql(tables: Iterable[str], prefix: str = "pgbridge.signal",
                    kind: str = SIGNAL_EXECUTE_SNAPSHOT) -> sql.Composed:
    """The operator's command, as documented: useful in tests and the CLI. Pause and resume carry no
    tables; a stop without tables stops every table."""
    names = list(tables)
    content = json.dumps({"type": kind, "tables": names} if names or kind == SIGNAL_EXECUTE_SNAPSHOT
                         else {"type": kind})
    return sql.SQL("SELECT pg_logical_emit_message(true, {}, {})").format(sql.Literal(prefix), sql.Literal(content))
