"""Catalog side of the source: slots, publications, table keys, over an ordinary SQL connection."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Final

import psycopg
from psycopg import errors as pgerrors
from psycopg import sql

from pgbridge.decode.messages import Column, Relation
from pgbridge.errors import ConfigError, FatalError, SlotError
from pgbridge.identifiers import parse_table, table_name
from pgbridge.lsn import Lsn, parse_lsn
from pgbridge.source.connection import build_conninfo, connect_failure, safe_target
from pgbridge.source.selection import TableSelection

log = logging.getLogger(__name__)


def connect_sql(dsn: str, *, connect_timeout_s: float = 10.0) -> psycopg.Connection[tuple[object, ...]]:
    conninfo = build_conninfo(dsn, replication=False, connect_timeout_s=connect_timeout_s)
    try:
        return psycopg.connect(conninfo, autocommit=True)
    except psycopg.OperationalError as exc:
        raise connect_failure(safe_target(dsn), str(exc),
                              hint="check user, password and database name in postgres.dsn") from None


@dataclass(frozen=True, slots=True)
class SlotInfo:
    name: str
    plugin: str | None
    slot_type: str
    database: str | None
    active: bool
    active_pid: int | None
    confirmed_flush_lsn: Lsn | None
    restart_lsn: Lsn | None
    wal_status: str | None
    two_phase: bool


def pending_slot(slot: str) -> str:
    """The slot an initial snapshot of ``slot`` reads through (snapshot/initial.py): it becomes
    ``slot`` when the snapshot completes, so one still there was left by an interrupted one."""
    return f"{slot}_snapshot"[:63]


def slot_info(conn: psycopg.Connection[tuple[object, ...]], slot: str) -> SlotInfo | None:
    row = conn.execute(
        "SELECT slot_name, plugin, slot_type, database, active, active_pid,"
        " confirmed_flush_lsn::text, restart_lsn::text, wal_status, two_phase"
        " FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone()
    if row is None:
        return None
    name, plugin, slot_type, database, active, pid, confirmed, restart, wal_status, two_phase = row
    return SlotInfo(
        name=str(name), plugin=None if plugin is None else str(plugin), slot_type=str(slot_type),
        database=None if database is None else str(database), active=bool(active),
        active_pid=None if pid is None else int(str(pid)),
        confirmed_flush_lsn=None if confirmed is None else parse_lsn(str(confirmed)),
        restart_lsn=None if restart is None else parse_lsn(str(restart)),
        wal_status=None if wal_status is None else str(wal_status), two_phase=bool(two_phase))


def validate_slot(info: SlotInfo, *, database: str) -> None:
    """Refuse a slot that would silently stream the wrong thing or nothing at all."""
    if info.slot_type != "logical" or info.plugin != "pgoutput":
        raise SlotError(f"replication slot {info.name} is {info.slot_type}/{info.plugin}, not logical/pgoutput",
                        hint="choose another postgres.slot or drop this slot")
    if info.database != database:
        raise SlotError(f"replication slot {info.name} belongs to database {info.database}, not {database}",
                        hint="choose another postgres.slot or point postgres.dsn at that database")
    if info.wal_status == "lost":
        raise SlotError(f"replication slot {info.name} was invalidated: the WAL it needs was removed",
                        hint="changes were lost; run `pgbridge slot drop` and restart with snapshot.mode=initial, "
                        "or start once with snapshot.mode=when_needed (it does both)")


# While waiting for an active slot to be released, try the drop again this often.
DROP_RETRY_S: Final = 0.2


def drop_slot(conn: psycopg.Connection[tuple[object, ...]], slot: str, *, wait_s: float = 0.0) -> bool:
    """Drop ``slot``; ``False`` if it did not exist. A slot in use is waited for up to ``wait_s``
    (a stopped pgbridge's walsender can outlive it by seconds), then ``SlotError`` names its user."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
        except pgerrors.UndefinedObject:
            return False
        except pgerrors.ObjectInUse as exc:
            if time.monotonic() < deadline:
                time.sleep(DROP_RETRY_S)
                continue
            holder = conn.execute(
                "SELECT s.active_pid, a.client_addr::text, a.application_name FROM pg_replication_slots s"
                " LEFT JOIN pg_stat_activity a ON a.pid = s.active_pid WHERE s.slot_name = %s", (slot,)).fetchone()
            who = (f" by pid {holder[0]} ({holder[2] or 'unknown application'} from {holder[1] or 'local socket'})"
                   if holder is not None and holder[0] is not None else "")
            waited = f" after waiting {wait_s:.0f}s" if wait_s > 0 else ""
            raise SlotError(f"replication slot {slot} is still in use{who}{waited}",
                            hint="stop the pgbridge that streams it first (scale it to 0), then drop") from exc
        return True


# After a clean stop the walsender that served us can take a moment to exit and release the slot.
DROP_ON_STOP_WAIT_S: Final = 10.0


def drop_slot_on_stop(dsn: str, slot: str, *, connect_timeout_s: float) -> None:
    """``postgres.drop_slot_on_stop``: drop ``slot`` (and its pending snapshot slot) after a clean
    stop, so the server retains no WAL for a pipeline that is gone; logged either way."""
    with connect_sql(dsn, connect_timeout_s=connect_timeout_s) as conn:
        dropped = drop_slot(conn, slot, wait_s=DROP_ON_STOP_WAIT_S)
        drop_slot(conn, pending_slot(slot))
    if dropped:
        log.warning("replication slot dropped on stop (postgres.drop_slot_on_stop): the next start takes a new "
                    "snapshot as snapshot.mode says", extra={"slot": slot})
    else:
        log.info("replication slot already gone on stop", extra={"slot": slot})


def copy_slot(conn: psycopg.Connection[tuple[object, ...]], source: str, target: str) -> None:
    conn.execute("SELECT pg_copy_logical_replication_slot(%s, %s)", (source, target))


def publication_exists(conn: psycopg.Connection[tuple[object, ...]], publication: str) -> bool:
    return conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (publication,)).fetchone() is not None


# publish_via_partition_root exists since Postgres 13.
PUBVIAROOT_VERSION: Final = 130000


def publication_options(server_version: int) -> str:
    """The WITH clause of a publication pgbridge creates.

    A partitioned table is one table (the contract): changes to any of its partitions, including
    ones attached later, are published as changes of the root, with the root's schema, so they
    land on one topic; and pg_publication_tables then lists the root only, so snapshots read the
    table once, through the root.
    """
    return " WITH (publish_via_partition_root = true)" if server_version >= PUBVIAROOT_VERSION else ""


def ensure_publication(conn: psycopg.Connection[tuple[object, ...]], publication: str,
                       tables: list[str] | None) -> None:
    """Create ``publication`` for ``tables`` (canonical ``schema.table``, see identifiers.py)
    unless it exists; an existing one is used as the DBA made it."""
    if publication_exists(conn, publication):
        return
    if not tables:
        raise FatalError(f"publication {publication} does not exist",
                         hint=f"CREATE PUBLICATION {publication} FOR TABLE ...; or set postgres.tables "
                         "so pgbridge creates it")
    identifiers = [sql.Identifier(*parse_table(table)) for table in tables]
    try:
        conn.execute(sql.SQL("CREATE PUBLICATION {} FOR TABLE {}{}").format(
            sql.Identifier(publication), sql.SQL(", ").join(identifiers),
            sql.SQL(publication_options(conn.info.server_version))))
    except pgerrors.UndefinedTable as exc:
        raise ConfigError(f"postgres.tables names a table that does not exist: {exc.diag.message_primary}",
                          hint="fix postgres.tables") from None
    except pgerrors.InsufficientPrivilege as exc:
        raise FatalError(f"cannot create publication {publication}: {exc.diag.message_primary}",
                         hint="create it as the table owner, or grant CREATE on the database") from None
    except pgerrors.DuplicateObject:
        return
    log.info("publication created", extra={"publication": publication, "tables": tables})


def partitioned_published_separately(conn: psycopg.Connection[tuple[object, ...]],
                                     publication: str) -> list[str]:
    """Partitioned tables (canonical names) whose partitions ``publication`` publishes as tables
    of their own: listed in the publication, directly or through FOR ALL TABLES / FOR TABLES IN
    SCHEMA, while ``publish_via_partition_root`` is off."""
    rows = conn.execute(
        "SELECT DISTINCT pn.nspname, pc.relname FROM pg_publication_tables pt"
        " JOIN pg_publication p ON p.pubname = pt.pubname"
        " JOIN pg_namespace n ON n.nspname = pt.schemaname"
        " JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename"
        " JOIN pg_inherits i ON i.inhrelid = c.oid"
        " JOIN pg_class pc ON pc.oid = i.inhparent AND pc.relkind = 'p'"
        " JOIN pg_namespace pn ON pn.oid = pc.relnamespace"
        " WHERE pt.pubname = %s AND NOT p.pubviaroot ORDER BY 1, 2", (publication,)).fetchall()
    return [table_name(str(schema), str(name)) for schema, name in rows]


def published_tables(conn: psycopg.Connection[tuple[object, ...]], publication: str,
                     selection: TableSelection | None = None) -> list[tuple[str, str]]:
    """The tables the publication publishes; with ``selection`` (``selection.stream_filter``)
    only the selected ones, so snapshots never read a table the stream filter drops."""
    rows = conn.execute("SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s"
                        " ORDER BY 1, 2", (publication,)).fetchall()
    return [(str(schema), str(table)) for schema, table in rows
            if selection is None or selection.matches(str(schema), str(table))]


def key_columns(conn: psycopg.Connection[tuple[object, ...]], rel_id: int) -> tuple[str, ...]:
    """Primary key columns, else the replica identity index's columns, in index order."""
    rows = conn.execute(
        "SELECT a.attname, i.indisprimary FROM pg_index i"
        " CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)"
        " JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum"
        " WHERE i.indrelid = %s AND (i.indisprimary OR i.indisreplident)"
        " ORDER BY i.indisprimary DESC, k.ord", (rel_id,)).fetchall()
    primary = [str(name) for name, is_primary in rows if is_primary]
    if primary:
        return tuple(primary)
    return tuple(str(name) for name, _ in rows)


def relation_from_catalog(conn: psycopg.Connection[tuple[object, ...]], schema: str, table: str,
                          publication: str) -> Relation:
    """The Relation pgoutput would send for a table, built from the catalog (for snapshots)."""
    row = conn.execute(
        "SELECT c.oid, c.relreplident FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relname = %s", (schema, table)).fetchone()
    if row is None:
        raise FatalError(f"table {schema}.{table} disappeared", hint="check the publication's tables")
    oid, replident = int(str(row[0])), str(row[1])
    published: set[str] | None = None
    if conn.info.server_version >= 150000:
        names = conn.execute("SELECT attnames FROM pg_publication_tables WHERE pubname = %s"
                             " AND schemaname = %s AND tablename = %s", (publication, schema, table)).fetchone()
        if names is not None and names[0] is not None:
            published = {str(name) for name in names[0]}  # type: ignore[attr-defined]
    if replident == "f":
        identity_cols = {"*"}
    else:
        index_kind = "i.indisreplident" if replident == "i" else "i.indisprimary"
        identity_cols = {str(r[0]) for r in conn.execute(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid"
            " AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s AND " + index_kind, (oid,)).fetchall()}
    attributes = conn.execute(
        "SELECT attname, atttypid, atttypmod FROM pg_attribute WHERE attrelid = %s AND attnum > 0"
        " AND NOT attisdropped AND attgenerated = '' ORDER BY attnum", (oid,)).fetchall()
    columns = tuple(
        Column(is_key=("*" in identity_cols or str(name) in identity_cols), name=str(name),
               type_oid=int(str(typid)), type_modifier=int(str(typmod)))
        for name, typid, typmod in attributes if published is None or str(name) in published)
    return Relation(xid=None, rel_id=oid, namespace=schema, name=table, replica_identity=replident,
                    columns=columns)
