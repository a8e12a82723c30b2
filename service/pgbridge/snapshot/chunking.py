"""Splitting a table into chunks that workers can read independently, and the SQL that reads one.

A table with a key (primary key, else the replica identity index) is split by key ranges: one
ordered pass over the key (``row_number() OVER (ORDER BY key)``, an index-only scan) yields every
``chunk_rows``-th key as a boundary, and chunk *i* is ``(boundary[i-1], boundary[i]]`` with the
first open below and the last open above. Row comparison ``(a, b) > (x, y)`` makes composite keys
work the same way. Boundaries are kept as the key columns' text form and cast back with the
column's own type, so they survive being persisted as JSON and reused by a later connection.

A table without a key is split by physical position: ``ctid`` ranges of whole heap blocks (a TID
range scan on Postgres 14+). The last range is open above, so rows in blocks added after the
plan was made are still read.

Exactly-once snapshots read each chunk in a deterministic order with a *position* beside every
row (``positioned_copy_query``): the key columns as text, or ``(tableoid, ctid)`` for a keyless
table. Each Kafka transaction records how far every chunk it carries got (snapshot/progress.py),
and a restart reads the rest of the chunk, after that position (``after_condition``). A ctid
position names the same row in a later snapshot only while the table was not rewritten (``VACUUM
FULL``, ``CLUSTER``, a rewriting ``ALTER TABLE``), which gives it a new storage file: a keyless
plan keeps the storage files it was made on (``storage``) so a restart can tell.

Everything here is pure apart from ``plan_table``, which runs the planning queries on a
connection the caller has already put in the snapshot to read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

import psycopg
from psycopg import sql

from pgbridge.decode.messages import Relation
from pgbridge.snapshot.filters import with_filter

CHUNK_BY_KEY: Final = "key"
CHUNK_BY_CTID: Final = "ctid"
ChunkKind = Literal["key", "ctid"]


@dataclass(frozen=True, slots=True)
class Chunk:
    """One independently readable part of a table.

    For key chunks ``lower`` (exclusive) and ``upper`` (inclusive) are key values in text form; for
    ctid chunks they are block numbers (``lower`` inclusive, ``upper`` exclusive). ``None`` means
    unbounded on that side.
    """

    table: str
    index: int
    lower: tuple[str, ...] | None
    upper: tuple[str, ...] | None


@dataclass(frozen=True, slots=True)
class TablePlan:
    schema: str
    name: str
    kind: ChunkKind
    key_columns: tuple[str, ...]
    key_types: tuple[str, ...]  # format_type() of each key column, for casts
    rows_estimate: int
    chunks: tuple[Chunk, ...]
    # keyless plans: the storage files (``pg_relation_filenode`` of the table or of each leaf
    # partition, by oid) the ctid positions refer to; empty for keyed plans
    storage: tuple[int, ...] = ()

    @property
    def table(self) -> str:
        return f"{self.schema}.{self.name}"

    def to_json(self) -> dict[str, Any]:
        return {"schema": self.schema, "name": self.name, "kind": self.kind,
                "key_columns": list(self.key_columns), "key_types": list(self.key_types),
                "rows_estimate": self.rows_estimate, "storage": list(self.storage),
                "chunks": [[None if c.lower is None else list(c.lower),
                            None if c.upper is None else list(c.upper)] for c in self.chunks]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TablePlan:
        table = f"{data['schema']}.{data['name']}"
        kind: ChunkKind = CHUNK_BY_CTID if data["kind"] == CHUNK_BY_CTID else CHUNK_BY_KEY
        chunks = tuple(Chunk(table, i, None if lo is None else tuple(lo), None if hi is None else tuple(hi))
                       for i, (lo, hi) in enumerate(data["chunks"]))
        return cls(schema=str(data["schema"]), name=str(data["name"]), kind=kind,
                   key_columns=tuple(data["key_columns"]), key_types=tuple(data["key_types"]),
                   rows_estimate=int(data["rows_estimate"]), chunks=chunks,
                   storage=tuple(int(n) for n in data.get("storage", ())))


def key_chunks(table: str, boundaries: list[tuple[str, ...]]) -> tuple[Chunk, ...]:
    """Chunks between consecutive boundaries; ``n`` boundaries give ``n + 1`` chunks."""
    edges: list[tuple[str, ...] | None] = [None, *boundaries, None]
    return tuple(Chunk(table, i, edges[i], edges[i + 1]) for i in range(len(edges) - 1))


def ctid_chunks(table: str, block_count: int, blocks_per_chunk: int) -> tuple[Chunk, ...]:
    """Block ranges ``[lo, hi)`` covering ``block_count`` blocks; the last one is open above."""
    step = max(1, blocks_per_chunk)
    starts = list(range(0, max(block_count, 1), step))
    chunks = []
    for i, start in enumerate(starts):
        upper = None if i == len(starts) - 1 else (str(start + step),)
        chunks.append(Chunk(table, i, (str(start),), upper))
    return tuple(chunks)


def blocks_per_chunk(chunk_rows: int, rows_estimate: int, block_count: int) -> int:
    """How many heap blocks hold about ``chunk_rows`` rows, from the table's own density."""
    if rows_estimate <= 0 or block_count <= 0:
        return max(1, block_count)
    rows_per_block = max(1.0, rows_estimate / block_count)
    return max(1, int(chunk_rows / rows_per_block))


def _key_tuple(columns: tuple[str, ...]) -> sql.Composable:
    return sql.SQL("ROW({})").format(sql.SQL(", ").join(sql.Identifier(c) for c in columns))


def _value_tuple(values: tuple[str, ...], types: tuple[str, ...]) -> sql.Composable:
    # ROW(...) so a one-column key compares as a row too; casts use the column's own type.
    return sql.SQL("ROW({})").format(sql.SQL(", ").join(
        sql.SQL("{}::{}").format(sql.Literal(value), sql.SQL(type_name))
        for value, type_name in zip(values, types, strict=True)))


def chunk_condition(plan: TablePlan, chunk: Chunk) -> sql.Composable:
    """The WHERE condition selecting exactly ``chunk``'s rows (``TRUE`` for an unbounded chunk)."""
    parts: list[sql.Composable] = []
    if plan.kind == CHUNK_BY_CTID:
        if chunk.lower is not None and chunk.lower[0] != "0":
            parts.append(sql.SQL("ctid >= {}::tid").format(sql.Literal(f"({int(chunk.lower[0])},0)")))
        if chunk.upper is not None:
            parts.append(sql.SQL("ctid < {}::tid").format(sql.Literal(f"({int(chunk.upper[0])},0)")))
    else:
        key = _key_tuple(plan.key_columns)
        if chunk.lower is not None:
            parts.append(sql.SQL("{} > {}").format(key, _value_tuple(chunk.lower, plan.key_types)))
        if chunk.upper is not None:
            parts.append(sql.SQL("{} <= {}").format(key, _value_tuple(chunk.upper, plan.key_types)))
    if not parts:
        return sql.SQL("TRUE")
    return sql.SQL(" AND ").join(parts)


def chunk_copy_query(plan: TablePlan, relation: Relation, chunk: Chunk, row_filter: str | None = None) -> sql.Composed:
    """``COPY (SELECT <published columns> FROM t WHERE <chunk> [AND (<row_filter>)]) TO STDOUT`` in
    text format (``row_filter``: the table's ``snapshot.filters`` condition, snapshot/filters.py)."""
    columns = sql.SQL(", ").join(sql.Identifier(column.name) for column in relation.columns)
    return sql.SQL("COPY (SELECT {} FROM {} WHERE {}) TO STDOUT").format(
        columns, sql.Identifier(plan.schema, plan.name), with_filter(chunk_condition(plan, chunk), row_filter))


def position_columns(plan: TablePlan) -> tuple[sql.Composable, ...]:
    """What a row's position is made of, as text: its key columns, or (keyless) the partition it
    lives in and its ctid. Ordered by these, a chunk's rows come in one deterministic order."""
    if plan.kind == CHUNK_BY_CTID:
        return sql.SQL("tableoid"), sql.SQL("ctid")
    return tuple(sql.Identifier(c) for c in plan.key_columns)


def after_condition(plan: TablePlan, after: tuple[str, ...]) -> sql.Composable:
    """Rows strictly after the position ``after`` (as ``positioned_copy_query`` returns it)."""
    if plan.kind == CHUNK_BY_CTID:
        oid, ctid = after
        return sql.SQL("ROW(tableoid, ctid) > ROW({}::oid, {}::tid)").format(sql.Literal(oid), sql.Literal(ctid))
    return sql.SQL("{} > {}").format(_key_tuple(plan.key_columns), _value_tuple(after, plan.key_types))


def positioned_copy_query(plan: TablePlan, relation: Relation, chunk: Chunk, after: tuple[str, ...] | None,
                          row_filter: str | None = None) -> sql.Composed:
    """``chunk_copy_query`` for exactly-once: only the rows after ``after`` (when resuming), in
    position order, each followed by its position columns as text (the caller splits them off).
    The sort costs an ordered index scan, or a sort of one chunk: at-least-once reads skip it."""
    positions = position_columns(plan)
    columns = sql.SQL(", ").join([*(sql.Identifier(column.name) for column in relation.columns),
                                  *(sql.SQL("{}::text AS {}").format(p, sql.Identifier(f"pgbridge_position_{i}"))
                                    for i, p in enumerate(positions))])
    condition = chunk_condition(plan, chunk)
    if after is not None:
        condition = sql.SQL("{} AND {}").format(condition, after_condition(plan, after))
    return sql.SQL("COPY (SELECT {} FROM {} WHERE {} ORDER BY {}) TO STDOUT").format(
        columns, sql.Identifier(plan.schema, plan.name), with_filter(condition, row_filter),
        sql.SQL(", ").join(positions))


def next_rows_copy_query(plan: TablePlan, relation: Relation, after: tuple[str, ...] | None,
                         limit: int, upper: tuple[str, ...] | None = None,
                         row_filter: str | None = None) -> sql.Composed:
    """Keyset pagination for incremental snapshots: the first ``limit`` rows with key > ``after``
    (and ``<= upper`` when given: the table's largest key when the snapshot started), in key order.
    Key columns are appended after the published columns so the caller can always read the key
    back, even when a column list leaves a key column out of the publication. ``row_filter`` (the
    table's ``snapshot.filters`` condition) only thins the pages: the cursor still moves by key."""
    assert plan.kind == CHUNK_BY_KEY
    columns = sql.SQL(", ").join([*(sql.Identifier(column.name) for column in relation.columns),
                                  *(sql.SQL("{}::text AS {}").format(sql.Identifier(c), sql.Identifier(f"pgbridge_key_{i}"))
                                    for i, c in enumerate(plan.key_columns))])
    condition = with_filter(chunk_condition(plan, Chunk(plan.table, 0, after, upper)), row_filter)
    return sql.SQL("COPY (SELECT {} FROM {} WHERE {} ORDER BY {} LIMIT {}) TO STDOUT").format(
        columns, sql.Identifier(plan.schema, plan.name), condition,
        sql.SQL(", ").join(sql.Identifier(c) for c in plan.key_columns), sql.Literal(limit))


# --- planning (I/O) --------------------------------------------------------------------------------

def _key_types(conn: psycopg.Connection[tuple[object, ...]], rel_id: int,
               columns: tuple[str, ...]) -> tuple[str, ...]:
    rows = conn.execute("SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute"
                        " WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped", (rel_id,)).fetchall()
    types = {str(name): str(type_name) for name, type_name in rows}
    return tuple(types[column] for column in columns)


def _largest_key(conn: psycopg.Connection[tuple[object, ...]], ident: sql.Identifier,
                 key_columns: tuple[str, ...]) -> tuple[str, ...] | None:
    """The largest key in row order (each column descending), as text; ``None`` for an empty table."""
    key_list = sql.SQL(", ").join(sql.Identifier(c) for c in key_columns)
    text_list = sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(c)) for c in key_columns)
    order = sql.SQL(", ").join(sql.SQL("{} DESC").format(sql.Identifier(c)) for c in key_columns)
    # Sorted inside, cast outside: in one query ORDER BY "id" would name the text cast (9 > 10).
    row = conn.execute(sql.SQL("SELECT {} FROM (SELECT {} FROM {} ORDER BY {} LIMIT 1) s").format(
        text_list, key_list, ident, order)).fetchone()
    return None if row is None else tuple(str(value) for value in row)


# Rows and heap blocks of a table. A partitioned table (published via its root, read once through
# it) has no storage of its own, so its leaf partitions count instead: rows summed (the root's
# own reltuples, set by ANALYZE, would count them twice), blocks the largest leaf's (a ctid range
# applies to every partition at once). pg_partition_tree is empty for an ordinary table.
SIZE_QUERY: Final = (
    "SELECT coalesce(sum(greatest(c.reltuples, 0)), 0)::bigint,"
    " coalesce(max(pg_relation_size(c.oid)), 0) / current_setting('block_size')::bigint"
    " FROM pg_class c WHERE c.relkind <> 'p' AND (c.oid = %(oid)s OR c.oid IN"
    " (SELECT relid FROM pg_partition_tree(%(oid)s::oid::regclass) WHERE isleaf))")


# The storage files behind a table's ctids: its own, or each leaf partition's (a partitioned root
# has none), by oid. A rewrite (VACUUM FULL, CLUSTER, a rewriting ALTER TABLE, TRUNCATE) changes them.
STORAGE_QUERY: Final = (
    "SELECT coalesce(array_agg(pg_relation_filenode(c.oid) ORDER BY c.oid), '{}')"
    " FROM pg_class c WHERE c.relkind <> 'p' AND (c.oid = %(oid)s OR c.oid IN"
    " (SELECT relid FROM pg_partition_tree(%(oid)s::oid::regclass) WHERE isleaf))")


def table_storage(conn: psycopg.Connection[tuple[object, ...]], rel_id: int) -> tuple[int, ...]:
    row = conn.execute(STORAGE_QUERY, {"oid": rel_id}).fetchone()
    return () if row is None else tuple(int(str(n)) for n in row[0] or ())  # type: ignore[attr-defined]


def plan_table(conn: psycopg.Connection[tuple[object, ...]], relation: Relation, key_columns: tuple[str, ...],
               chunk_rows: int, *, boundaries: bool = True) -> TablePlan:
    """Estimate the table's size and split it into chunks of about ``chunk_rows`` rows.

    With ``boundaries=False`` a keyed table gets a single chunk bounded above by its largest key
    now, or no chunk when it is empty (incremental snapshots page through the key instead of
    planning ranges up front). The bound is what makes an incremental snapshot end on a table
    that keeps growing at the top of its key: rows inserted above it after this moment reach
    Kafka through the stream, so reading them too would only chase the inserts (DBLog does the
    same).
    """
    table = f"{relation.namespace}.{relation.name}"
    ident = sql.Identifier(relation.namespace, relation.name)
    row = conn.execute(SIZE_QUERY, {"oid": relation.rel_id}).fetchone()
    estimate, block_count = (int(str(row[0])), int(str(row[1]))) if row else (0, 0)
    if not key_columns:
        chunks = ctid_chunks(table, block_count, blocks_per_chunk(chunk_rows, estimate, block_count))
        return TablePlan(relation.namespace, relation.name, CHUNK_BY_CTID, (), (), estimate, chunks,
                         table_storage(conn, relation.rel_id))
    types = _key_types(conn, relation.rel_id, key_columns)
    if not boundaries:
        top = _largest_key(conn, ident, key_columns)
        chunks = () if top is None else (Chunk(table, 0, None, top),)
        return TablePlan(relation.namespace, relation.name, CHUNK_BY_KEY, key_columns, types, estimate, chunks)
    key_list = sql.SQL(", ").join(sql.Identifier(c) for c in key_columns)
    text_list = sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(c)) for c in key_columns)
    # Ordered by the row number, not by the key columns: in the outer query those names are
    # their text casts, which sort differently (10 < 9).
    query = sql.SQL("SELECT {} FROM (SELECT {}, row_number() OVER (ORDER BY {}) AS pgbridge_rn FROM {}) s"
                    " WHERE pgbridge_rn % {} = 0 ORDER BY pgbridge_rn").format(
        text_list, key_list, key_list, ident, sql.Literal(chunk_rows))
    found = [tuple(str(value) for value in r) for r in conn.execute(query).fetchall()]
    return TablePlan(relation.namespace, relation.name, CHUNK_BY_KEY, key_columns, types, estimate,
                     key_chunks(table, found))
