"""The publication pgbridge streams, as ``postgres.publication_mode`` says, over an ordinary SQL connection.

``filtered`` (default): pgbridge creates the publication ``FOR TABLE`` the selected tables
(``postgres.tables``, or ``table_include`` / ``table_exclude`` resolved against the catalog) and,
with patterns, adds tables created later that match (``PublicationSync``, every
``snapshot.publication_check_s``; the snapshot tick then snapshots them as any table new in the
publication); with ``postgres.tables``, a publication pgbridge created (marked by its comment,
``MANAGED_MARK``) is set to the list at start, and someone else's that differs stops the start
(``sync_listed_tables``). ``all_tables``: ``FOR ALL TABLES`` (superuser only), the selection filtering in-stream
(assemble/capture.py). ``disabled``: pgbridge never creates or alters it; it must exist.
Which tables are selected is pure logic in source/selection.py; this module is the catalog I/O.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Final

import psycopg
from psycopg import errors as pgerrors
from psycopg import sql

from pgbridge.config import PostgresConfig
from pgbridge.errors import ConfigError, FatalError
from pgbridge.identifiers import quote_ident, table_name
from pgbridge.source import slots
from pgbridge.source.selection import (
    CatalogTable,
    TableSelection,
    is_system_schema,
    pattern_selection,
    select_tables,
)

log = logging.getLogger(__name__)

SqlConn = psycopg.Connection[tuple[object, ...]]

MODE_FILTERED: Final = "filtered"
MODE_ALL_TABLES: Final = "all_tables"
MODE_DISABLED: Final = "disabled"
SCHEMA_PUBLICATION_VERSION: Final = 150000  # FOR TABLES IN SCHEMA (pg_publication_namespace)


def catalog_tables(conn: SqlConn) -> list[CatalogTable]:
    """Ordinary and partitioned tables of this database outside the system schemas."""
    rows = conn.execute(
        "SELECT n.nspname, c.relname, c.relkind = 'p', c.relispartition FROM pg_class c"
        " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind IN ('r', 'p')"
        " AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast') ORDER BY 1, 2").fetchall()
    return [CatalogTable(schema=str(schema), name=str(name), partitioned=bool(partitioned),
                         is_partition=bool(is_partition))
            for schema, name, partitioned, is_partition in rows if not is_system_schema(str(schema))]


def resolve_selection(conn: SqlConn, selection: TableSelection) -> list[tuple[str, str]]:
    """The selected tables that exist now; none is a configuration error naming the patterns."""
    selected = select_tables(catalog_tables(conn), selection)
    if not selected:
        raise ConfigError(f"{selection.describe()} match no table in database {conn.info.dbname}",
                          hint="patterns match schema.table in full, unquoted, as the catalog spells it "
                          "(public.orders, public.Order Items): fix the patterns or create the tables")
    return selected


def create_statement(publication: str, tables: list[tuple[str, str]] | None, server_version: int) -> str:
    """``CREATE PUBLICATION`` for ``tables`` (``None``: ``FOR ALL TABLES``), as an operator would run it."""
    target = "ALL TABLES" if tables is None else \
        "TABLE " + (", ".join(table_name(schema, name) for schema, name in tables) or "...")
    return f"CREATE PUBLICATION {publication} FOR {target}{slots.publication_options(server_version)};"


def is_all_tables(conn: SqlConn, publication: str) -> bool:
    row = conn.execute("SELECT puballtables FROM pg_publication WHERE pubname = %s", (publication,)).fetchone()
    return row is not None and bool(row[0])


def prepare_publication(conn: SqlConn, pg: PostgresConfig, *, standby: bool = False) -> None:
    """Make the publication what ``pg.publication_mode`` asks for, before the slot streams it.

    With patterns they are resolved first, so a selection that matches nothing fails at start. On a
    standby (source/standby.py) nothing is created or altered: see ``check_on_standby``.
    """
    selection = pattern_selection(pg)
    selected = resolve_selection(conn, selection) if selection is not None else pg.table_pairs
    version = conn.info.server_version
    exists = slots.publication_exists(conn, pg.publication)
    if standby:
        check_on_standby(conn, pg, selected, exists=exists)
        return
    if pg.publication_mode == MODE_DISABLED:
        if not exists:
            raise FatalError(f"publication {pg.publication} does not exist and postgres.publication_mode is "
                             "disabled, so pgbridge does not create it",
                             hint="run as the tables' owner: "
                             f"{create_statement(pg.publication, selected or [], version)}")
        _log_mode(pg, managed=False, selection="in-stream")
        return
    if pg.publication_mode == MODE_ALL_TABLES:
        if not exists:
            _create(conn, pg.publication, None)
            mark_managed(conn, pg.publication)
        _log_mode(pg, managed=is_managed(conn, pg.publication), selection="in-stream")
        return
    if selection is None:  # postgres.tables or nothing: as before the patterns existed
        if not exists or not pg.table_pairs:
            slots.ensure_publication(conn, pg.publication, pg.tables)
            if not exists:
                mark_managed(conn, pg.publication)
            _log_mode(pg, managed=not exists, selection="postgres.tables" if pg.tables else "none")
            return
        managed = sync_listed_tables(conn, pg.publication, pg.table_pairs)
        _log_mode(pg, managed=managed, selection="postgres.tables")
        return
    assert selected is not None
    if not exists:
        _create(conn, pg.publication, selected)
        mark_managed(conn, pg.publication)
    else:
        add_missing_tables(conn, pg.publication, selected)
    _log_mode(pg, managed=is_managed(conn, pg.publication), selection="table_include/table_exclude")


# Written on every publication pgbridge creates (COMMENT ON PUBLICATION): the mark that lets it alter
# the publication to follow postgres.tables later. A publication without it is someone else's.
MANAGED_MARK: Final = "pgbridge: created by pgbridge, which keeps its tables equal to postgres.tables"


def mark_managed(conn: SqlConn, publication: str) -> None:
    """Mark the publication pgbridge just created (not one another process created meanwhile)."""
    with contextlib.suppress(pgerrors.InsufficientPrivilege):  # created meanwhile by another role: not ours
        conn.execute(sql.SQL("COMMENT ON PUBLICATION {} IS {}").format(sql.Identifier(publication),
                                                                        sql.Literal(MANAGED_MARK)))


def is_managed(conn: SqlConn, publication: str) -> bool:
    row = conn.execute("SELECT obj_description(oid, 'pg_publication') FROM pg_publication WHERE pubname = %s",
                       (publication,)).fetchone()
    return row is not None and isinstance(row[0], str) and row[0].startswith("pgbridge:")


def _log_mode(pg: PostgresConfig, *, managed: bool, selection: str) -> None:
    log.info("publication mode", extra={"publication": pg.publication, "mode": pg.publication_mode,
                                        "selection": selection, "managed_by_pgbridge": managed})


@dataclass(frozen=True, slots=True)
class ListedDifference:
    """How a publication differs from ``postgres.tables`` (``FOR ALL TABLES`` / ``TABLES IN SCHEMA``
    count as differing: they cannot be made a list of tables by ``ALTER PUBLICATION``)."""

    publication: str
    missing: list[tuple[str, str]]  # listed, not in the publication
    extra: list[tuple[str, str]]  # in the publication, not listed
    whole: bool  # FOR ALL TABLES or TABLES IN SCHEMA
    wanted: list[tuple[str, str]]
    options: str = ""  # of a re-created publication: slots.publication_options

    def __bool__(self) -> bool:
        return bool(self.missing or self.extra or self.whole)

    def describe(self) -> str:
        parts = []
        if self.whole:
            parts.append("it publishes whole schemas or all tables")
        if self.missing:
            parts.append("it lacks " + ", ".join(table_name(*t) for t in self.missing))
        if self.extra:
            parts.append("it has " + ", ".join(table_name(*t) for t in self.extra) + ", which are not listed")
        return "; ".join(parts)

    def statement(self) -> str:
        """The one ``ALTER PUBLICATION`` (or, for a whole-database publication, the re-creation)
        that makes the publication ``postgres.tables``."""
        name = quote_ident(self.publication)
        listed = ", ".join(table_name(*t) for t in self.wanted)
        if self.whole:
            return f"DROP PUBLICATION {name}; CREATE PUBLICATION {name} FOR TABLE {listed}{self.options};"
        if not self.extra:
            return f"ALTER PUBLICATION {name} ADD TABLE {', '.join(table_name(*t) for t in self.missing)};"
        if not self.missing:
            return f"ALTER PUBLICATION {name} DROP TABLE {', '.join(table_name(*t) for t in self.extra)};"
        return f"ALTER PUBLICATION {name} SET TABLE {listed};"


def listed_difference(conn: SqlConn, publication: str, wanted: list[tuple[str, str]]) -> ListedDifference:
    """How ``publication`` (which exists) differs from the tables ``postgres.tables`` lists."""
    rows = conn.execute(
        "SELECT n.nspname, c.relname FROM pg_publication_rel r JOIN pg_publication p ON p.oid = r.prpubid"
        " JOIN pg_class c ON c.oid = r.prrelid JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE p.pubname = %s ORDER BY 1, 2", (publication,)).fetchall()
    members = [(str(schema), str(name)) for schema, name in rows]
    whole = is_all_tables(conn, publication)
    if not whole and conn.info.server_version >= SCHEMA_PUBLICATION_VERSION:
        whole = conn.execute("SELECT 1 FROM pg_publication_namespace s JOIN pg_publication p ON p.oid = s.pnpubid"
                             " WHERE p.pubname = %s", (publication,)).fetchone() is not None
    return ListedDifference(publication, [t for t in wanted if t not in members],
                            [t for t in members if t not in wanted], whole, list(wanted),
                            slots.publication_options(conn.info.server_version))


def sync_listed_tables(conn: SqlConn, publication: str, wanted: list[tuple[str, str]]) -> bool:
    """``postgres.tables`` with an existing publication (mode ``filtered``): one pgbridge created is
    made to publish exactly these tables (``ALTER PUBLICATION``, at start, before the slot streams);
    someone else's that differs stops the start with the statement to run. True if pgbridge's."""
    difference = listed_difference(conn, publication, wanted)
    managed = is_managed(conn, publication)
    if difference and not managed:
        raise FatalError(f"publication {publication} is not pgbridge's (it did not create it) and differs from "
                         f"postgres.tables: {difference.describe()}",
                         hint=f"as its owner: {difference.statement()} or, to have pgbridge keep it in sync, COMMENT "
                         f"ON PUBLICATION {quote_ident(publication)} IS 'pgbridge: managed'; or set "
                         "postgres.publication_mode to disabled to stream it as it is, filtered to postgres.tables")
    if difference:
        if difference.whole:
            raise FatalError(f"publication {publication} was created by pgbridge for all tables, and postgres.tables "
                             "now lists tables", hint=f"as a superuser: {difference.statement()}")
        statement = sql.SQL("ALTER PUBLICATION {} SET TABLE {}").format(
            sql.Identifier(publication), sql.SQL(", ").join(sql.Identifier(*t) for t in wanted))
        try:
            conn.execute(statement)
        except pgerrors.UndefinedTable as exc:
            raise ConfigError(f"postgres.tables names a table that does not exist: {exc.diag.message_primary}",
                              hint="fix postgres.tables") from None
        except pgerrors.InsufficientPrivilege as exc:
            raise FatalError(f"cannot alter publication {publication} to postgres.tables: "
                             f"{exc.diag.message_primary}", hint=f"as its owner: {difference.statement()}") from None
        log.info("publication altered to postgres.tables", extra={
            "publication": publication, "added": [table_name(*t) for t in difference.missing],
            "dropped": [table_name(*t) for t in difference.extra]})
    return managed


def check_on_standby(conn: SqlConn, pg: PostgresConfig, selected: list[tuple[str, str]] | None, *,
                     exists: bool) -> None:
    """A standby is read-only: the publication must have been created on the primary (it replicates).
    Missing, it is an error naming the statement to run there; lacking selected tables, a warning
    naming the ``ALTER PUBLICATION`` (they are not captured until it runs on the primary)."""
    version = conn.info.server_version
    if not exists:
        tables = None if pg.publication_mode == MODE_ALL_TABLES else selected or []
        raise FatalError(f"publication {pg.publication} does not exist on the standby, and a standby cannot create "
                         "it (read-only)",
                         hint=f"create it on the primary; it replicates to the standby: "
                         f"{create_statement(pg.publication, tables, version)}")
    if pg.publication_mode == MODE_ALL_TABLES or not selected or is_all_tables(conn, pg.publication):
        return
    members = member_tables(conn, pg.publication)
    lacking = [table_name(schema, name) for schema, name in selected if (schema, name) not in members]
    if lacking:
        log.warning("the publication lacks selected tables and a standby cannot add them: they are not captured",
                    extra={"publication": pg.publication, "tables": lacking,
                           "hint": f"on the primary: ALTER PUBLICATION {pg.publication} ADD TABLE "
                           f"{', '.join(lacking)};"})


def _create(conn: SqlConn, publication: str, tables: list[tuple[str, str]] | None) -> None:
    target = sql.SQL("ALL TABLES") if tables is None else sql.SQL("TABLE {}").format(
        sql.SQL(", ").join(sql.Identifier(schema, name) for schema, name in tables))
    statement = sql.SQL("CREATE PUBLICATION {} FOR {}{}").format(
        sql.Identifier(publication), target, sql.SQL(slots.publication_options(conn.info.server_version)))
    try:
        conn.execute(statement)
    except pgerrors.InsufficientPrivilege as exc:
        hint = ("FOR ALL TABLES needs a superuser: run it as one, or use publication_mode filtered"
                if tables is None else "create it as the tables' owner, or grant CREATE on the database")
        raise FatalError(f"cannot create publication {publication}: {exc.diag.message_primary}",
                         hint=f"{hint}: {create_statement(publication, tables, conn.info.server_version)}") from None
    except pgerrors.DuplicateObject:
        return
    log.info("publication created", extra={"publication": publication, "all_tables": tables is None,
                                           "tables": None if tables is None else
                                           [table_name(schema, name) for schema, name in tables]})


def member_tables(conn: SqlConn, publication: str) -> set[tuple[str, str]]:
    """Tables the publication names directly (``pg_publication_rel``) or publishes
    (``pg_publication_tables``: schemas, partitions of a root without publish_via_partition_root)."""
    rows = conn.execute(
        "SELECT n.nspname, c.relname FROM pg_publication_rel r JOIN pg_publication p ON p.oid = r.prpubid"
        " JOIN pg_class c ON c.oid = r.prrelid JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE p.pubname = %s", (publication,)).fetchall()
    return {(str(schema), str(name)) for schema, name in rows} | set(slots.published_tables(conn, publication))


def add_missing_tables(conn: SqlConn, publication: str, selected: list[tuple[str, str]]) -> list[str]:
    """``ALTER PUBLICATION ... ADD TABLE`` for each selected table it lacks; returns their names.

    A ``FOR ALL TABLES`` publication already has them all. A table dropped meanwhile is skipped.
    """
    if is_all_tables(conn, publication):
        return []
    members = member_tables(conn, publication)
    added: list[str] = []
    for schema, name in selected:
        if (schema, name) in members:
            continue
        try:
            conn.execute(sql.SQL("ALTER PUBLICATION {} ADD TABLE {}").format(
                sql.Identifier(publication), sql.Identifier(schema, name)))
        except (pgerrors.UndefinedTable, pgerrors.DuplicateObject):
            continue
        except pgerrors.InsufficientPrivilege as exc:
            raise FatalError(f"cannot add {table_name(schema, name)} to publication {publication}: "
                             f"{exc.diag.message_primary}",
                             hint=f"as its owner: ALTER PUBLICATION {publication} ADD TABLE "
                             f"{table_name(schema, name)}; or set postgres.publication_mode to disabled") from None
        added.append(table_name(schema, name))
    if added:
        log.info("tables added to the publication", extra={"publication": publication, "tables": added})
    return added


class PublicationSync:
    """Housekeeping job (``publication_mode: filtered`` with patterns): tables created since the start
    that match are added to the publication every ``interval_s``. It runs before the snapshot tick,
    which then finds them new in the publication and snapshots them incrementally."""

    def __init__(self, sql_conn: SqlConn, publication: str, selection: TableSelection, interval_s: float) -> None:
        self._sql = sql_conn
        self._publication = publication
        self._selection = selection
        self._interval_s = interval_s
        self._next_at = 0.0
        self._disabled = False

    def __call__(self, now: float) -> None:
        if self._disabled or now < self._next_at:
            return
        self._next_at = now + self._interval_s
        selected = select_tables(catalog_tables(self._sql), self._selection)
        try:
            add_missing_tables(self._sql, self._publication, selected)
        except FatalError as exc:  # a table owned by another role: streaming goes on without it
            log.warning("cannot add a new matching table to the publication; not trying again until restart",
                        extra={"error": str(exc), "hint": exc.hint})
            self._disabled = True
