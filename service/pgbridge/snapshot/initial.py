"""Initial snapshot: every published table read in one consistent snapshot, chunked and parallel.

```
 planner (main thread, in the snapshot) ──TablePlan/chunks──▶ work queue
 worker 1..N: own connection, SET TRANSACTION SNAPSHOT <name>, COPY (SELECT .. WHERE <chunk>)
        │ parsed rows (bounded queue)
        ▼
 main thread: ChunkSink.emit (encode + produce, one Unit per chunk)
        │ chunk's unit fully acknowledged
        ▼
 on_chunk_durable → progress record (see progress.py for why this order makes resume safe)
```
In exactly-once mode the workers read each chunk in position order (key, or tableoid and ctid)
and hand over every row's position with it; each Kafka transaction then records how far every
chunk it carries got, and a restart resumes each chunk after that position (progress.py).
Rows are read with ``COPY ... TO STDOUT`` in text format, whose field text is exactly what
pgoutput sends for the same values, so snapshot rows go through the same encoder as streamed
rows and land on the same topic with the same writer schema. Workers only read and parse; the
encoder, the producer and the ack tracker stay on the main thread, as in streaming.

Every worker imports the same snapshot (``SET TRANSACTION SNAPSHOT``), so all chunks of all tables
see the database at one instant. For a first attempt that is the pending slot's exported
snapshot, valid while the replication connection that created the slot stays open and idle; for a
resumed attempt it is a snapshot exported by an ordinary transaction (``new_exported_snapshot``).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

import psycopg
from psycopg import sql

from pgbridge.ack.tracker import Unit
from pgbridge.config import SnapshotConfig
from pgbridge.decode.messages import KIND_NULL, KIND_TEXT, Relation, TupleData
from pgbridge.errors import PgbridgeError, SourceUnavailable, TransientError
from pgbridge.identifiers import table_name
from pgbridge.lsn import Lsn, format_lsn
from pgbridge.metrics import Metrics
from pgbridge.snapshot.chunking import (
    CHUNK_BY_CTID,
    Chunk,
    TablePlan,
    chunk_copy_query,
    plan_table,
    position_columns,
    positioned_copy_query,
    table_storage,
)
from pgbridge.snapshot.progress import (
    ProgressStore,
    done_key,
    header_key,
    initial_progress,
    plan_key,
    resume_key,
)
from pgbridge.source import slots
from pgbridge.source.connection import ReplicationConnection, build_conninfo
from pgbridge.source.selection import TableSelection

log = logging.getLogger(__name__)

PROGRESS_EVERY_S: Final = 10.0
# Rows a worker hands over at once: large enough to make queue hand-offs cheap, small enough that
# a stop request or a full producer is noticed within milliseconds.
ROW_BATCH: Final = 1000
# Batches waiting between the workers and the producer, per worker: bounds snapshot memory to
# about workers * 8 * 1000 rows.
BATCHES_PER_WORKER: Final = 8
# After the last row, how long the chunks' records may take to be acknowledged.
ACK_TIMEOUT_S: Final = 300.0

_ESCAPES: Final = {ord("b"): b"\b", ord("f"): b"\f", ord("n"): b"\n", ord("r"): b"\r", ord("t"): b"\t",
                   ord("v"): b"\v", ord("\\"): b"\\"}


class SnapshotInterrupted(PgbridgeError):
    """A stop was requested mid-snapshot; the pending slot makes the next start redo it."""


def unescape_copy_field(field: bytes) -> bytes:
    """Undo COPY text-format escaping of one field (backslash sequences)."""
    if b"\\" not in field:
        return field
    out = bytearray()
    i, n = 0, len(field)
    while i < n:
        ch = field[i]
        if ch != 0x5C or i + 1 >= n:
            out.append(ch)
            i += 1
            continue
        nxt = field[i + 1]
        if nxt in _ESCAPES:
            out += _ESCAPES[nxt]
            i += 2
        elif 0x30 <= nxt <= 0x37:
            j = i + 1
            while j < n and j < i + 4 and 0x30 <= field[j] <= 0x37:
                j += 1
            out.append(int(field[i + 1:j], 8) & 0xFF)
            i = j
        elif nxt == ord("x") and i + 2 < n:
            j = i + 2
            while j < n and j < i + 4 and chr(field[j]) in "0123456789abcdefABCDEF":
                j += 1
            out.append(int(field[i + 2:j], 16))
            i = j
        else:
            out.append(nxt)
            i += 2
    return bytes(out)


def parse_copy_lines(chunks: Iterator[bytes | memoryview], column_count: int) -> Iterator[TupleData]:
    """Turn COPY text-format data (arbitrary chunk boundaries) into TupleData rows."""
    kinds_all_text = bytes([KIND_TEXT]) * column_count
    rest = b""
    for chunk in chunks:
        data = rest + bytes(chunk)
        lines = data.split(b"\n")
        rest = lines.pop()
        for line in lines:
            fields = line.split(b"\t")
            if b"\\N" in fields:
                values = tuple(None if f == b"\\N" else unescape_copy_field(f) for f in fields)
                kinds = bytes(KIND_NULL if v is None else KIND_TEXT for v in values)
            else:
                values = tuple(unescape_copy_field(f) for f in fields)
                kinds = kinds_all_text
            yield TupleData(kinds, values)
    if rest:
        raise SourceUnavailable("COPY output ended in the middle of a row")


ConnT = psycopg.Connection[tuple[object, ...]]


Position = tuple[str, ...]


class ChunkSink(Protocol):
    """Where snapshot rows go: the pipeline's encoder, producer and ack tracker (main thread only)."""

    @property
    def positions(self) -> bool:
        """Whether rows come with their positions, in position order (exactly-once: progress.py)."""

    def begin_chunk(self, chunk: Chunk) -> Unit: ...

    def emit(self, relation: Relation, row: TupleData, unit: Unit, position: Position | None = None) -> None:
        """One row of the chunk begun as ``unit``; ``position`` when ``positions``."""

    def end_chunk(self, unit: Unit, chunk: Chunk) -> None:
        """Every row of ``chunk`` was emitted under ``unit`` (exactly-once: the Kafka transaction
        that commits its last row, or the next one, carries its done record)."""

    def service(self) -> None:
        """Serve delivery reports; raise if a delivery failed."""

    def close(self) -> None:
        """The snapshot is over (or failed): nothing more comes through this sink."""


@dataclass(frozen=True, slots=True)
class SnapshotTable:
    plan: TablePlan
    relation: Relation
    row_filter: str | None = None  # the table's snapshot.filters condition (snapshot/filters.py)


def connect_snapshot(dsn: str, snapshot_name: str | None, *, connect_timeout_s: float) -> ConnT:
    """A connection inside a REPEATABLE READ, READ ONLY transaction, in ``snapshot_name`` if given."""
    conninfo = build_conninfo(dsn, replication=False, connect_timeout_s=connect_timeout_s)
    try:
        conn = psycopg.connect(conninfo, autocommit=False)
    except psycopg.OperationalError as exc:
        raise SourceUnavailable(f"snapshot connection failed: {str(exc).strip()}") from None
    try:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        if snapshot_name is not None:
            conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot_name)))
    except psycopg.OperationalError as exc:
        conn.close()
        raise SourceUnavailable(f"cannot import snapshot {snapshot_name}: {str(exc).strip()}") from None
    return conn


def new_exported_snapshot(dsn: str, *, connect_timeout_s: float) -> tuple[ConnT, str]:
    """A fresh consistent snapshot for a resumed attempt: the connection must stay open (and idle)
    until every worker has imported the returned snapshot name."""
    conn = connect_snapshot(dsn, None, connect_timeout_s=connect_timeout_s)
    row = conn.execute("SELECT pg_export_snapshot()").fetchone()
    assert row is not None
    return conn, str(row[0])


def plan_tables(conn: ConnT, tables: list[tuple[str, str]], publication: str, chunk_rows: int,
                metrics: Metrics, filters: Mapping[str, str] | None = None) -> list[SnapshotTable]:
    """Relations and chunk plans of ``tables``, on a connection already in the snapshot. Chunks
    cover every row; a table's filter (``filters``, by canonical name) thins each chunk's read."""
    planned = []
    for schema, table in tables:
        relation = slots.relation_from_catalog(conn, schema, table, publication)
        keys = slots.key_columns(conn, relation.rel_id)
        plan = plan_table(conn, relation, keys, chunk_rows)
        metrics.snapshot_rows_estimate.labels(plan.table).set(plan.rows_estimate)
        log.info("snapshot of table planned", extra={"table": plan.table, "rows_estimate": plan.rows_estimate,
                                                     "chunks": len(plan.chunks), "chunk_by": plan.kind})
        planned.append(SnapshotTable(plan, relation, (filters or {}).get(table_name(schema, table))))
    return planned


def relations_for(conn: ConnT, plans: list[TablePlan], publication: str, metrics: Metrics,
                  filters: Mapping[str, str] | None = None) -> list[SnapshotTable]:
    """Resumed attempt: the stored plans with relations read again from the catalog, and the filters
    now in force."""
    tables = []
    for plan in plans:
        relation = slots.relation_from_catalog(conn, plan.schema, plan.name, publication)
        metrics.snapshot_rows_estimate.labels(plan.table).set(plan.rows_estimate)
        tables.append(SnapshotTable(plan, relation, (filters or {}).get(table_name(plan.schema, plan.name))))
    return tables


@dataclass(frozen=True, slots=True)
class ChunkRead:
    """A chunk to read, all of it or (exactly-once, resuming) only its rows after ``after``."""

    chunk: Chunk
    after: Position | None = None


def chunks_to_read(tables: list[SnapshotTable], done: set[tuple[str, int]],
                   resume: Mapping[tuple[str, int], Position] | None = None, *,
                   rewritten: frozenset[str] = frozenset(), by_position: bool = False) -> list[ChunkRead]:
    """Chunks without a done record, each after its resume position if it has one.

    At least once (``by_position`` False) a keyless table with any unfinished chunk is read again
    whole: ctid ranges may not name the same rows in another snapshot. Exactly-once, positions are
    trusted unless the table is in ``rewritten`` (its storage changed since the plan), which
    leaves nothing for a keyless table but reading it whole again."""
    todo: list[ChunkRead] = []
    for entry in tables:
        plan = entry.plan
        missing = [c for c in plan.chunks if (plan.table, c.index) not in done]
        if missing and plan.kind == CHUNK_BY_CTID and (not by_position or plan.table in rewritten):
            todo.extend(ChunkRead(c) for c in plan.chunks)
            continue
        todo.extend(ChunkRead(c, (resume or {}).get((plan.table, c.index)) if by_position else None)
                    for c in missing)
    return todo


def rewritten_tables(conn: ConnT, tables: list[SnapshotTable]) -> frozenset[str]:
    """Keyless tables whose storage changed since their plan (their ctid positions name other rows
    now); each is read again whole, so its committed rows will be visible twice: said in the log."""
    rewritten = frozenset(t.plan.table for t in tables if t.plan.kind == CHUNK_BY_CTID
                          and table_storage(conn, t.relation.rel_id) != t.plan.storage)
    for table in sorted(rewritten):
        log.warning("a table without a key was rewritten (VACUUM FULL, CLUSTER, ALTER TABLE) during its "
                    "interrupted snapshot; reading it again whole, so a read_committed consumer sees its rows "
                    "committed before the restart twice", extra={"table": table})
    return rewritten


class _Worker(threading.Thread):
    """Reads chunks from ``work`` in the shared snapshot and hands parsed rows to ``out``."""

    def __init__(self, number: int, conn: ConnT, tables: dict[str, SnapshotTable],
                 work: queue.Queue[ChunkRead], out: queue.Queue[tuple[object, ...]], abort: threading.Event,
                 *, positions: bool) -> None:
        super().__init__(name=f"pgbridge-snapshot-{number}", daemon=True)
        self.conn = conn
        self.tables = tables
        self.work = work
        self.out = out
        self.abort = abort
        self.positions = positions

    def _put(self, item: tuple[object, ...]) -> bool:
        while not self.abort.is_set():
            try:
                self.out.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def run(self) -> None:
        try:
            while not self.abort.is_set():
                try:
                    read = self.work.get_nowait()
                except queue.Empty:
                    break
                count = self._read(read)
                if count is None or not self._put(("chunk", read.chunk, count)):
                    return
            self._put(("exit",))
        except BaseException as exc:  # handed to the main thread, which raises it
            self._put(("error", exc))
        finally:
            try:
                self.conn.close()
            except Exception:
                log.debug("closing a snapshot worker connection failed", exc_info=True)


    def _read(self, read: ChunkRead) -> int | None:
        """Hand over ``read``'s rows in batches (with their positions, split off each row, when
        asked for); the number of rows, or None when aborted."""
        chunk = read.chunk
        entry = self.tables[chunk.table]
        width = len(entry.relation.columns)
        if self.positions:
            query = positioned_copy_query(entry.plan, entry.relation, chunk, read.after, entry.row_filter)
            fields = width + len(position_columns(entry.plan))
        else:
            query = chunk_copy_query(entry.plan, entry.relation, chunk, entry.row_filter)
            fields = width
        count = 0
        batch: list[TupleData] = []
        positions: list[Position] | None = [] if self.positions else None
        with self.conn.cursor() as cursor, cursor.copy(query) as copy:
            for row in parse_copy_lines(iter(copy), fields):  # type: ignore[arg-type]
                if positions is not None:
                    positions.append(tuple(bytes(v or b"").decode() for v in row.values[width:]))
                    row = TupleData(row.kinds[:width], row.values[:width])
                batch.append(row)
                if len(batch) >= ROW_BATCH:
                    count += len(batch)
                    if not self._put(("rows", chunk, batch, positions)):
                        return None
                    batch = []
                    positions = [] if self.positions else None
        count += len(batch)
        return count if self._put(("rows", chunk, batch, positions)) else None


def read_chunks(dsn: str, snapshot_name: str, tables: list[SnapshotTable], todo: list[ChunkRead], sink: ChunkSink,
                on_chunk_durable: Callable[[Chunk, int], None], *, workers: int, metrics: Metrics,
                stop: threading.Event, connect_timeout_s: float) -> int:
    """Read ``todo`` with ``workers`` connections sharing ``snapshot_name``; return rows read.

    Each chunk's rows go to the sink under one ``Unit``; ``on_chunk_durable`` is called once
    all of them are acknowledged. Returns only when every chunk is durable.
    """
    by_table = {entry.plan.table: entry for entry in tables}
    work: queue.Queue[ChunkRead] = queue.Queue()
    for chunk_read in todo:
        work.put(chunk_read)
    count = max(1, min(workers, len(todo)))
    # Import the snapshot in every worker before any reads: the exporter must still be idle.
    connections = [connect_snapshot(dsn, snapshot_name, connect_timeout_s=connect_timeout_s) for _ in range(count)]
    out: queue.Queue[tuple[object, ...]] = queue.Queue(maxsize=count * BATCHES_PER_WORKER)
    abort = threading.Event()
    threads = [_Worker(i, conn, by_table, work, out, abort, positions=sink.positions)
               for i, conn in enumerate(connections)]
    remaining_per_table: dict[str, int] = defaultdict(int)
    rows_per_table: dict[str, int] = defaultdict(int)
    for chunk_read in todo:
        remaining_per_table[chunk_read.chunk.table] += 1
    units: dict[Chunk, Unit] = {}
    waiting: list[tuple[Chunk, Unit, int]] = []
    total = 0
    started = last_report = time.monotonic()

    def settle() -> None:
        sink.service()
        keep = []
        for chunk, unit, rows in waiting:
            if unit.durable:
                on_chunk_durable(chunk, rows)
                remaining_per_table[chunk.table] -= 1
                if remaining_per_table[chunk.table] == 0:
                    log.info("snapshot of table done", extra={"table": chunk.table,
                                                              "rows": rows_per_table[chunk.table]})
            else:
                keep.append((chunk, unit, rows))
        waiting[:] = keep

    for thread in threads:
        thread.start()
    alive = len(threads)
    try:
        while alive:
            if stop.is_set():
                raise SnapshotInterrupted("initial snapshot interrupted by a stop request")
            try:
                item = out.get(timeout=0.1)
            except queue.Empty:
                settle()
                continue
            kind = item[0]
            if kind == "rows":
                read, batch, positions = item[1], item[2], item[3]
                assert isinstance(read, Chunk) and isinstance(batch, list)
                unit = units.get(read)
                if unit is None:
                    unit = units[read] = sink.begin_chunk(read)
                relation = by_table[read.table].relation
                if positions is None:
                    for row in batch:
                        sink.emit(relation, row, unit)
                else:
                    assert isinstance(positions, list)
                    for row, position in zip(batch, positions, strict=True):
                        sink.emit(relation, row, unit, position)
                metrics.snapshot_rows.labels(read.table).inc(len(batch))
                rows_per_table[read.table] += len(batch)
                total += len(batch)
                settle()
            elif kind == "chunk":
                finished, rows = item[1], item[2]
                assert isinstance(finished, Chunk) and isinstance(rows, int)
                unit = units.pop(finished, None) or sink.begin_chunk(finished)
                sink.end_chunk(unit, finished)
                waiting.append((finished, unit, rows))
            elif kind == "exit":
                alive -= 1
            else:
                error = item[1]
                if isinstance(error, psycopg.OperationalError):
                    raise SourceUnavailable(f"snapshot read failed: {str(error).strip()}") from error
                assert isinstance(error, BaseException)
                raise error
            now = time.monotonic()
            if now - last_report >= PROGRESS_EVERY_S:
                last_report = now
                for table, done in rows_per_table.items():
                    entry = by_table[table]
                    log.info("snapshot progress", extra={"table": table, "rows": done,
                                                         "rows_estimate": entry.plan.rows_estimate})
        deadline = time.monotonic() + ACK_TIMEOUT_S
        while waiting:
            if stop.is_set():
                raise SnapshotInterrupted("initial snapshot interrupted by a stop request")
            if time.monotonic() > deadline:
                raise TransientError("Kafka did not acknowledge the snapshot in time")
            settle()
            time.sleep(0.01)
    finally:
        abort.set()
        for thread in threads:
            thread.join(5.0)
    elapsed = max(time.monotonic() - started, 1e-9)
    log.info("snapshot rows read", extra={"rows": total, "rows_per_s": round(total / elapsed),
                                          "workers": count})
    return total


def run_initial_snapshot(*, dsn: str, repl: ReplicationConnection, sql_conn: ConnT, slot: str, pending: str,
                         publication: str, config: SnapshotConfig, two_phase: bool, progress: ProgressStore,
                         records: dict[str, dict[str, Any]], make_sink: Callable[[Lsn], ChunkSink],
                         metrics: Metrics, stop: threading.Event, connect_timeout_s: float,
                         selection: TableSelection | None = None) -> list[str]:
    """Snapshot every published table through the pending slot, then create ``slot`` from it.

    Resumes a previous attempt when its pending slot and progress agree (see progress.py); else
    starts over. Returns the tables snapshotted, named canonically (``public."Order Items"``).
    """
    existing = slots.slot_info(sql_conn, pending)
    previous = initial_progress(records, slot)
    exporter: ConnT
    resume: Mapping[tuple[str, int], Position]
    rewritten: frozenset[str]
    if (existing is not None and previous is not None and not existing.active
            and existing.confirmed_flush_lsn == previous.consistent_lsn):
        consistent = Lsn(previous.consistent_lsn)
        sink = make_sink(consistent)
        by_position = sink.positions
        exporter, snapshot_name = new_exported_snapshot(dsn, connect_timeout_s=connect_timeout_s)
        plans = [TablePlan.from_json(plan) for plan in previous.plans.values()]
        tables = relations_for(exporter, plans, publication, metrics, config.filters)
        done, resume = previous.done, previous.resume
        rewritten = rewritten_tables(exporter, tables) if by_position else frozenset()
        log.info("resuming the initial snapshot in a new consistent snapshot",
                 extra={"slot": pending, "consistent_point": format_lsn(consistent),
                        "chunks_done": len(done), "chunks_resumed": len(resume) if by_position else 0,
                        "chunks": sum(len(p.chunks) for p in plans)})
    else:
        if existing is not None:
            log.warning("dropping a pending snapshot slot whose progress is unknown; starting over",
                        extra={"slot": pending})
            slots.drop_slot(sql_conn, pending)
        created = repl.create_slot(pending, two_phase=two_phase, export_snapshot=True)
        assert created.snapshot_name is not None
        consistent, snapshot_name = created.consistent_point, created.snapshot_name
        sink = make_sink(consistent)
        by_position = sink.positions
        log.info("snapshot slot created", extra={"slot": pending, "consistent_point": format_lsn(consistent)})
        exporter = connect_snapshot(dsn, snapshot_name, connect_timeout_s=connect_timeout_s)
        tables = plan_tables(exporter, slots.published_tables(sql_conn, publication, selection), publication,
                             config.chunk_rows, metrics, config.filters)
        progress.put_many((plan_key(slot, t.plan.table), {"consistent_lsn": consistent, "plan": t.plan.to_json()})
                          for t in tables)
        progress.put(header_key(slot), {"consistent_lsn": consistent, "tables": [t.plan.table for t in tables]})
        progress.flush()
        done, resume, rewritten = set(), {}, frozenset()
    written: list[str] = []

    def chunk_durable(chunk: Chunk, _rows: int) -> None:
        key = done_key(slot, chunk.table, chunk.index)
        progress.put(key, {"consistent_lsn": consistent})
        written.append(key)

    todo = chunks_to_read(tables, done, resume, rewritten=rewritten, by_position=by_position)
    try:
        read_chunks(dsn, snapshot_name, tables, todo, sink, chunk_durable, workers=config.workers,
                    metrics=metrics, stop=stop, connect_timeout_s=connect_timeout_s)
    finally:
        sink.close()
        exporter.close()
    slots.copy_slot(sql_conn, pending, slot)
    slots.drop_slot(sql_conn, pending)
    names = [t.plan.table for t in tables]
    # The attempt is over: tombstones let compaction forget it.
    resumed = {(r.chunk.table, r.chunk.index) for r in todo} | set(resume) if by_position else set()
    progress.put_many((key, None) for key in [*written, *(done_key(slot, t, i) for t, i in done),
                                              *(resume_key(slot, t, i) for t, i in resumed),
                                              *(plan_key(slot, t) for t in names), header_key(slot)])
    progress.flush()
    log.info("initial snapshot complete; slot created", extra={"slot": slot, "tables": names})
    # Canonical names (identifiers.py), as the incremental snapshotter compares them.
    return [table_name(t.plan.schema, t.plan.name) for t in tables]
