"""``pgbridge check`` against Postgres: the server, slot, publication, tables, grants, standby and the
column, key, route and outbox settings ``run`` would refuse for the captured tables."""

from __future__ import annotations

from typing import Final

import psycopg

from pgbridge.check.problem import Problem
from pgbridge.config import PostgresConfig, Settings
from pgbridge.encode.columns import ColumnRules, table_problem
from pgbridge.encode.schemas import TABLE_KEY_FIELD
from pgbridge.encode.types import codec_for
from pgbridge.errors import ConfigError, FatalError, PgbridgeError
from pgbridge.identifiers import quote_ident, table_name
from pgbridge.publish.outbox import catalog_problems, topic_problem
from pgbridge.publish.routing import TopicRouter
from pgbridge.snapshot.filters import filter_problems
from pgbridge.snapshot.modes import StartAction, decide_start
from pgbridge.source import slots
from pgbridge.source.connection import FAILOVER_VERSION
from pgbridge.source.ddl_trigger import trigger_problem
from pgbridge.source.keys import (
    NULLABLE_HINT,
    message_key,
    message_keys,
    nullable_columns,
    nullable_message,
    usable_key,
)
from pgbridge.source.monitor import read_slot
from pgbridge.source.publication import (
    MODE_ALL_TABLES,
    MODE_DISABLED,
    MODE_FILTERED,
    catalog_tables,
    create_statement,
    is_all_tables,
    is_managed,
    listed_difference,
    member_tables,
    resolve_selection,
)
from pgbridge.source.selection import TableSelection, pattern_selection, select_tables, stream_filter
from pgbridge.source.standby import (
    STANDBY_DECODING_VERSION,
    STANDBY_REQUIREMENTS,
    PrimaryConnection,
    in_recovery,
)
from pgbridge.source.type_catalog import CatalogTypes

# Column types stored out of line (TOAST) whose unchanged values pgoutput omits from updates.
_TOASTABLE_STORAGE = ("x", "e")


def wal_level_problem(wal_level: str) -> Problem | None:
    """Logical decoding needs ``wal_level = logical`` (``pgbridge check``, and ``run`` at start)."""
    if wal_level == "logical":
        return None
    return Problem("error", f"wal_level is {wal_level}, not logical",
                   "ALTER SYSTEM SET wal_level = logical; then restart Postgres")


def require_logical_wal(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    """``run``'s start: the server's ``wal_level`` as ``pgbridge check`` judges it, raised as a
    ``FatalError`` (retrying cannot change it)."""
    row = conn.execute("SHOW wal_level").fetchone()
    problem = wal_level_problem(str(row[0]) if row else "?")
    if problem is not None:
        raise FatalError(problem.message, hint=problem.fix)


def check_postgres(conn: psycopg.Connection[tuple[object, ...]], settings: Settings) -> list[Problem]:
    pg = settings.postgres
    problems: list[Problem] = []

    def setting(name: str) -> str:
        row = conn.execute("SELECT current_setting(%s)", (name,)).fetchone()
        return str(row[0]) if row else ""

    wal_level = wal_level_problem(setting("wal_level"))
    if wal_level is not None:
        problems.append(wal_level)
    if int(setting("max_replication_slots") or 0) < 1:
        problems.append(Problem("error", "max_replication_slots is 0",
                                "ALTER SYSTEM SET max_replication_slots = 10; then restart Postgres"))
    if int(setting("max_wal_senders") or 0) < 1:
        problems.append(Problem("error", "max_wal_senders is 0",
                                "ALTER SYSTEM SET max_wal_senders = 10; then restart Postgres"))
    if conn.info.server_version >= WAL_KEEP_VERSION:
        problems.append(wal_keep_problem(setting("max_slot_wal_keep_size"), settings.snapshot.mode))
    if pg.two_phase and int(setting("max_prepared_transactions") or 0) < 1:
        problems.append(Problem("warning", "postgres.two_phase is on but max_prepared_transactions is 0",
                                "nothing to decode until max_prepared_transactions > 0"))
    role = conn.execute("SELECT rolreplication OR rolsuper, current_user FROM pg_roles "
                        "WHERE rolname = current_user").fetchone()
    user = str(role[1]) if role is not None else "<role>"
    if role is None or not role[0]:
        problems.append(Problem("error", f"the connecting role {user} lacks the REPLICATION attribute",
                                f"ALTER ROLE {quote_ident(user)} WITH REPLICATION;"))
    publication_exists = slots.publication_exists(conn, pg.publication)
    standby = in_recovery(conn)
    if standby:
        problems.extend(_standby_problems(conn, pg))
    if standby and not publication_exists:
        tables, selection_problems = _selected_tables(conn, pg)
        problems.extend(selection_problems)
        statement = create_statement(pg.publication, None if pg.publication_mode == MODE_ALL_TABLES else tables,
                                     conn.info.server_version)
        problems.append(Problem("error", f"publication {pg.publication} does not exist on this standby, and a standby "
                                "cannot create it", f"on the primary (it replicates to the standby): {statement}"))
    elif pattern_selection(pg) is not None or pg.publication_mode != MODE_FILTERED:
        selection_found, tables = _selection_problems(conn, pg, user, publication_exists)
        problems.extend(selection_found)
        if publication_exists:
            problems.extend(_partition_problems(conn, pg.publication))
    elif not publication_exists:
        if pg.tables:
            tables = pg.table_pairs or []
            for table, (schema, name) in zip(pg.tables, tables, strict=True):
                found = conn.execute("SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                                     " WHERE n.nspname = %s AND c.relname = %s", (schema, name)).fetchone()
                if found is None:
                    problems.append(Problem("error", f"table {table} in postgres.tables does not exist",
                                            "create it or remove it from postgres.tables (quote names "
                                            'with capitals, spaces or dots: public."Order Items")'))
            problems.extend(_publication_creation_problems(conn, pg.publication, tables, user))
        else:
            problems.append(Problem("error", f"publication {pg.publication} does not exist",
                                    f"CREATE PUBLICATION {pg.publication} FOR TABLE ...; "
                                    "or set postgres.tables so pgbridge creates it"))
            tables = []
    else:
        if pg.table_pairs and not standby:  # a standby alters nothing (check_on_standby)
            problems.extend(_listed_problems(conn, pg.publication, pg.table_pairs))
        tables = list(slots.published_tables(conn, pg.publication))
        if not tables:
            problems.append(Problem("warning", f"publication {pg.publication} publishes no tables",
                                    f"ALTER PUBLICATION {pg.publication} ADD TABLE ...;"))
        problems.extend(_partition_problems(conn, pg.publication))
    problems.extend(_privilege_problems(conn, [(str(a), str(b)) for a, b in tables], user,
                                        heartbeat=pg.heartbeat_interval_s > 0))
    catalog = CatalogTypes(conn)
    for schema, name in tables:
        problems.extend(_table_problems(conn, str(schema), str(name)))
        problems.extend(_column_problems(conn, settings, catalog, str(schema), str(name)))
        if pg.binary:
            problems.extend(_binary_problems(conn, catalog, str(schema), str(name),
                                             pg.publication if publication_exists else None))
    problems.extend(_message_key_problems(conn, settings, [(str(a), str(b)) for a, b in tables]))
    ddl = None if standby else trigger_problem(conn, pg)  # postgres.ddl_events (source/ddl_trigger.py)
    if ddl is not None:
        problems.append(Problem("error", *ddl))
    if publication_exists:
        problems.extend(Problem("error", problem, fix) for problem, fix in
                        filter_problems(conn, pg.publication, settings.snapshot.filters, stream_filter(pg)))
    info = slots.slot_info(conn, pg.slot)
    database = conn.info.dbname
    if info is not None:
        if decide_start(settings.snapshot.mode, slot_exists=True,
                        wal_status=info.wal_status) is StartAction.RECREATE_AND_SNAPSHOT:
            problems.append(Problem("warning", f"slot {pg.slot} was invalidated (the WAL it needs was removed): run "
                                    "drops it and takes a new initial snapshot (snapshot.mode=when_needed)",
                                    "none needed; consumers see every row again as op=r"))
        else:
            try:
                slots.validate_slot(info, database=database)
            except PgbridgeError as exc:
                problems.append(Problem("error", str(exc), exc.hint or "drop the slot"))
        if info.active:
            problems.append(Problem("warning", f"slot {pg.slot} is in use by pid {info.active_pid}",
                                    "another consumer is streaming; run stops until it exits"))
    if pg.failover_slot and conn.info.server_version >= FAILOVER_VERSION and not standby:
        problems.extend(_failover_problems(conn, pg.slot))
    return problems


def _standby_problems(conn: psycopg.Connection[tuple[object, ...]], pg: PostgresConfig) -> list[Problem]:
    """``postgres.dsn`` is a standby (source/standby.py, the same rules as ``run``): Postgres 16+,
    ``hot_standby_feedback`` with a physical slot, and ``postgres.primary_dsn`` for the writes."""
    version = conn.info.server_version
    if version < STANDBY_DECODING_VERSION:
        return [Problem("error", f"connected to a standby (in recovery) running Postgres {version // 10000}: logical "
                        "decoding on a standby needs Postgres 16+", "point postgres.dsn at the primary, or upgrade")]
    problems = [Problem("info", f"connected to a standby (in recovery): {STANDBY_REQUIREMENTS} (a standby cannot "
                        "show the primary's wal_level: run fails naming it if it is lower); the publication is "
                        "created on the primary", "nothing to do if so (docs/operations.md, \"Decoding on a standby\")")]
    settings = {str(name): str(value) for name, value in conn.execute(
        "SELECT name, setting FROM pg_settings WHERE name IN ('hot_standby_feedback', 'primary_slot_name')")}
    if settings.get("hot_standby_feedback") != "on":
        problems.append(Problem("warning", "hot_standby_feedback is off on the standby: the primary may remove catalog "
                                "rows the slot needs, which invalidates it (conflicting)",
                                "ALTER SYSTEM SET hot_standby_feedback = on; SELECT pg_reload_conf(); on the standby"))
    if not settings.get("primary_slot_name"):
        problems.append(Problem("warning", "the standby replicates without a physical slot (primary_slot_name is "
                                "empty): hot_standby_feedback holds the primary's catalog rows only while it is "
                                "connected", "on the primary: SELECT pg_create_physical_replication_slot('standby1'); "
                                "on the standby: ALTER SYSTEM SET primary_slot_name = 'standby1'; SELECT "
                                "pg_reload_conf();"))
    if pg.primary_dsn is None:
        problems.append(Problem(
            "warning" if pg.heartbeat_interval_s > 0 else "info",
            "postgres.primary_dsn is not set: on a standby heartbeats and incremental snapshots are off, and a new "
            "slot waits for the primary's next running-transactions record",
            "set PGBRIDGE_POSTGRES__PRIMARY_DSN to the primary (pgbridge writes only logical messages there)"))
        return problems
    primary = PrimaryConnection(pg.primary_dsn.get_secret_value(), connect_timeout_s=pg.connect_timeout_s)
    try:
        if in_recovery(primary.get()):
            problems.append(Problem("error", f"postgres.primary_dsn ({primary.target}) is a standby too (in recovery)",
                                    "point postgres.primary_dsn at the primary postgres.dsn replicates from"))
    except (PgbridgeError, psycopg.Error) as exc:
        problems.append(Problem("warning", f"postgres.primary_dsn is unreachable: {str(exc).strip()}",
                                "check postgres.primary_dsn; streaming from the standby does not need it"))
    finally:
        primary.close()
    return problems


def _selected_tables(conn: psycopg.Connection[tuple[object, ...]],
                     pg: PostgresConfig) -> tuple[list[tuple[str, str]], list[Problem]]:
    """The tables ``postgres.tables`` or the include/exclude patterns select, resolved against the
    catalog as ``run`` resolves them, with the error of patterns that cannot be resolved."""
    patterns = pattern_selection(pg)
    if patterns is None:
        return pg.table_pairs or [], []
    try:
        return resolve_selection(conn, patterns), []
    except PgbridgeError as exc:
        return [], [Problem("error", str(exc), exc.hint or "fix the patterns")]


def _selection_problems(conn: psycopg.Connection[tuple[object, ...]], pg: PostgresConfig, user: str,
                        exists: bool) -> tuple[list[Problem], list[tuple[str, str]]]:
    """``table_include`` / ``table_exclude`` and ``publication_mode`` (docs/capture.md): the patterns
    match a table, and the publication exists or ``run`` can create it as the mode asks. Returns the
    problems and the tables ``run`` would capture (for the per-table checks)."""
    selected, problems = _selected_tables(conn, pg)
    patterns = pattern_selection(pg)
    version = conn.info.server_version
    if exists:
        captured = slots.published_tables(conn, pg.publication, stream_filter(pg))
        lacking = sorted(set(selected) - member_tables(conn, pg.publication)) \
            if not is_all_tables(conn, pg.publication) else []
        names = ", ".join(table_name(schema, name) for schema, name in lacking)
        if lacking and pg.publication_mode == MODE_DISABLED:
            problems.append(Problem("error", f"publication {pg.publication} lacks the selected tables {names}: with "
                                    "postgres.publication_mode disabled they are not captured",
                                    f"ALTER PUBLICATION {pg.publication} ADD TABLE {names};"))
        elif lacking and patterns is not None and pg.publication_mode == MODE_FILTERED:
            problems.append(Problem("info", f"publication {pg.publication} lacks the selected tables {names}",
                                    "none needed: run adds them (postgres.publication_mode filtered)"))
        return problems, captured
    if pg.publication_mode == MODE_DISABLED:
        problems.append(Problem("error", f"publication {pg.publication} does not exist and postgres.publication_mode "
                                "is disabled, so run does not create it",
                                f"as the tables' owner: {create_statement(pg.publication, selected, version)}"))
        return problems, selected
    if pg.publication_mode == MODE_ALL_TABLES:
        row = conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
        if row is None or not row[0]:
            problems.append(Problem(
                "error", f"postgres.publication_mode all_tables: publication {pg.publication} does not exist and "
                f"role {user} cannot create it (FOR ALL TABLES needs a superuser)",
                f"as a superuser: {create_statement(pg.publication, None, version)} or ALTER ROLE "
                f"{quote_ident(user)} SUPERUSER; or set postgres.publication_mode to filtered"))
        return problems, select_tables(catalog_tables(conn), stream_filter(pg) or TableSelection(include=None))
    if selected:
        problems.extend(_publication_creation_problems(conn, pg.publication, selected, user))
    return problems, selected


WAL_KEEP_VERSION: Final = 130000  # max_slot_wal_keep_size appeared in Postgres 13


def wal_keep_problem(value: str, snapshot_mode: str) -> Problem:
    """``max_slot_wal_keep_size`` (Postgres 13+, as ``current_setting`` spells it): unlimited (-1),
    a stuck or abandoned slot keeps WAL until the server's disk is full; set, a slot further behind
    is invalidated, which ``run`` survives only with ``snapshot.mode`` ``when_needed``."""
    if value.strip() == "-1":
        return Problem("warning", "max_slot_wal_keep_size is -1 (unlimited): a stuck or abandoned slot keeps WAL "
                       "until the disk fills", "ALTER SYSTEM SET max_slot_wal_keep_size = '<below the free WAL "
                       "disk>'; SELECT pg_reload_conf(); then watch pgbridge_slot_invalidation_forecast_seconds")
    then = ("run drops it and takes a new snapshot (snapshot.mode when_needed)" if snapshot_mode == "when_needed"
            else "run stops until it is dropped (snapshot.mode when_needed re-snapshots instead)")
    return Problem("info", f"max_slot_wal_keep_size is {value}: a slot more than that behind is invalidated and "
                   f"{then}", "alert on pgbridge_slot_invalidation_forecast_seconds (PgbridgeSlotInvalidationSoon)")


def _listed_problems(conn: psycopg.Connection[tuple[object, ...]], publication: str,
                     wanted: list[tuple[str, str]]) -> list[Problem]:
    """``postgres.tables`` against an existing publication (source/publication.py, the same rule as
    ``run``): pgbridge's own is altered to the list at start; someone else's that differs stops it."""
    difference = listed_difference(conn, publication, wanted)
    if not difference:
        return []
    if is_managed(conn, publication):
        return [Problem("info", f"publication {publication} differs from postgres.tables ({difference.describe()})",
                        f"none needed: run alters it, as pgbridge created it ({difference.statement()})")]
    return [Problem("error", f"publication {publication} is not pgbridge's and differs from postgres.tables: "
                    f"{difference.describe()}", f"as its owner: {difference.statement()} or set "
                    "postgres.publication_mode to disabled to stream it as it is, filtered to postgres.tables")]


def drop_on_stop_problems(settings: Settings) -> list[Problem]:
    """``postgres.drop_slot_on_stop`` with leader election (on by default): a standby that takes over
    after a clean stop of the leader finds no slot, takes a new snapshot and misses what changed in
    between. A warning: with one replica the combination is fine."""
    if not (settings.postgres.drop_slot_on_stop and settings.ha.leader_election):
        return []
    return [Problem("warning", "postgres.drop_slot_on_stop drops the slot on every clean stop: with ha.leader_election "
                    "a standby replica that takes over finds no slot, takes a new snapshot and misses the changes "
                    "in between", "run a single replica, or set postgres.drop_slot_on_stop to false "
                    "(PGBRIDGE_POSTGRES__DROP_SLOT_ON_STOP=false)")]


def _failover_problems(conn: psycopg.Connection[tuple[object, ...]], slot: str) -> list[Problem]:
    """Whether the slot would survive a failover to a standby (Postgres 17+): a failover slot, and
    ``synchronized_standby_slots`` naming standby slots with a standby on them (see
    source/monitor.py ``SlotState.failover_protected``, the same rule as the metric)."""
    state = read_slot(conn, slot)
    if state is None:
        return []  # created as a failover slot by run
    problems: list[Problem] = []
    if not state.failover:
        problems.append(Problem("warning", f"slot {slot} is not a failover slot: a promoted standby would not have it",
                                "pgbridge run makes it one at its next start (postgres.failover_slot); or "
                                f'ALTER_REPLICATION_SLOT "{slot}" (FAILOVER true) on a replication connection'))
    elif state.synced:
        problems.append(Problem("info", f"slot {slot} is a failover slot synchronized on this server (a standby, "
                                "or one promoted since)", "nothing to do"))
    elif not state.standby_slots:
        if state.active_physical_slots:
            standbys = ", ".join(sorted(state.active_physical_slots))
            problems.append(Problem(
                "warning", f"slot {slot} is a failover slot but synchronized_standby_slots is empty: pgbridge may "
                "receive changes a standby does not have yet, and after a failover to it they are gone from "
                "Postgres but in Kafka", f"ALTER SYSTEM SET synchronized_standby_slots = '{standbys}'; "
                "SELECT pg_reload_conf();"))
    else:
        missing = [name for name in state.standby_slots if name not in state.active_physical_slots]
        if missing:
            problems.append(Problem(
                "warning", f"synchronized_standby_slots names {', '.join(missing)} with no standby streaming on "
                f"it: changes to failover slot {slot} wait for it", "start the standby, or remove the slot from "
                "synchronized_standby_slots"))
        else:
            problems.append(Problem("info", f"slot {slot} is a failover slot protected by synchronized_standby_slots "
                                    f"({', '.join(state.standby_slots)})", "nothing to do"))
    return problems


def _privilege_problems(conn: psycopg.Connection[tuple[object, ...]], tables: list[tuple[str, str]], user: str,
                        *, heartbeat: bool) -> list[Problem]:
    """What the connecting role may not do that ``run`` needs, each with the exact GRANT (the
    minimal grants per feature are in docs/deployment.md, "Least privilege"). A superuser passes
    every test here."""
    role = quote_ident(user)
    problems: list[Problem] = []
    for schema in sorted({schema for schema, _ in tables}):
        row = conn.execute("SELECT has_schema_privilege(current_user, n.oid, 'USAGE') FROM pg_namespace n "
                           "WHERE n.nspname = %s", (schema,)).fetchone()
        if row is not None and not row[0]:
            problems.append(Problem("error", f"role {user} has no USAGE on schema {schema}: the snapshots cannot "
                                    "read its tables", f"GRANT USAGE ON SCHEMA {quote_ident(schema)} TO {role};"))
    for schema, name in tables:
        row = conn.execute("SELECT has_table_privilege(current_user, c.oid, 'SELECT') FROM pg_class c "
                           "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s",
                           (schema, name)).fetchone()
        if row is not None and not row[0]:
            table = table_name(schema, name)
            problems.append(Problem("error", f"role {user} cannot SELECT from {table}: the initial and incremental "
                                    "snapshots read it", f"GRANT SELECT ON {table} TO {role};"))
    # The text-content variant pgbridge calls; Postgres 17 gave it a fourth argument (flush).
    row = conn.execute("SELECT has_function_privilege(current_user, p.oid, 'EXECUTE'), p.oid::regprocedure::text "
                       "FROM pg_proc p WHERE p.proname = 'pg_logical_emit_message' "
                       "AND p.proargtypes[2] = 'text'::regtype").fetchone()
    if row is not None and not row[0]:
        problems.append(Problem("error" if heartbeat else "warning",
                                f"role {user} may not execute pg_logical_emit_message: heartbeats and incremental "
                                "snapshot watermarks are logical messages",
                                f"GRANT EXECUTE ON FUNCTION {row[1]} TO {role};"))
    return problems


def _publication_creation_problems(conn: psycopg.Connection[tuple[object, ...]], publication: str,
                                   tables: list[tuple[str, str]], user: str) -> list[Problem]:
    """``run`` creates a missing publication from ``postgres.tables``, which Postgres allows only
    to a role with CREATE on the database that owns every table. Otherwise the owner must."""
    owned = conn.execute(
        "SELECT bool_and(pg_has_role(current_user, c.relowner, 'USAGE')), has_database_privilege(current_database(), "
        "'CREATE') FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE (n.nspname, c.relname) IN (SELECT * FROM unnest(%s::text[], %s::text[]))",
        ([schema for schema, _ in tables], [name for _, name in tables])).fetchone()
    if owned is None or owned[0] is None or (owned[0] and owned[1]):
        return []
    listed = ", ".join(table_name(schema, name) for schema, name in tables)
    return [Problem("error", f"publication {publication} does not exist and role {user} cannot create it (Postgres "
                    "lets only a table's owner, with CREATE on the database, publish it)",
                    f"as the tables' owner: CREATE PUBLICATION {quote_ident(publication)} FOR TABLE {listed};")]


def _partition_problems(conn: psycopg.Connection[tuple[object, ...]], publication: str) -> list[Problem]:
    """A publication without ``publish_via_partition_root`` publishes each partition of a
    partitioned table as a table of its own: one topic per partition, the snapshot reading the
    partitions instead of the table, a new partition a new topic. The contract publishes a
    partitioned table as one table, which needs the option (Postgres 13+)."""
    if conn.info.server_version < slots.PUBVIAROOT_VERSION:
        return []
    roots = slots.partitioned_published_separately(conn, publication)
    if not roots:
        return []
    return [Problem("warning", f"publication {publication} publishes the partitions of {', '.join(roots)} "
                    "separately (publish_via_partition_root is off): one topic per partition instead of one "
                    "per table", f"ALTER PUBLICATION {publication} SET (publish_via_partition_root = true);")]


def _table_problems(conn: psycopg.Connection[tuple[object, ...]], schema: str, name: str) -> list[Problem]:
    row = conn.execute(
        "SELECT c.oid, c.relreplident, EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary),"
        " EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisreplident)"
        " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s",
        (schema, name)).fetchone()
    if row is None:
        return []
    oid, identity, has_pk, has_identity_index = row
    table = f"{schema}.{name}"
    problems: list[Problem] = []
    if identity == "n":
        problems.append(Problem("error", f"table {table} has REPLICA IDENTITY NOTHING: updates and deletes fail",
                                f"ALTER TABLE {table} REPLICA IDENTITY FULL; (or DEFAULT with a primary key)"))
    elif identity == "d" and not has_pk:
        problems.append(Problem("error", f"table {table} has no primary key and REPLICA IDENTITY DEFAULT: "
                                "updates and deletes fail",
                                f"ALTER TABLE {table} ADD PRIMARY KEY (...); or REPLICA IDENTITY FULL"))
    elif identity == "i" and not has_identity_index:
        problems.append(Problem("error", f"table {table} has REPLICA IDENTITY USING INDEX but the index is gone",
                                f"ALTER TABLE {table} REPLICA IDENTITY USING INDEX <unique index>;"))
    if identity != "f":
        toastable = conn.execute(
            "SELECT string_agg(attname, ', ' ORDER BY attnum) FROM pg_attribute WHERE attrelid = %s AND attnum > 0"
            " AND NOT attisdropped AND attstorage IN ('x', 'e')", (oid,)).fetchone()
        if toastable and toastable[0]:
            problems.append(Problem("warning", f"table {table} has TOASTable columns ({toastable[0]}) and no "
                                    "REPLICA IDENTITY FULL: unchanged large values are not sent on update",
                                    f"ALTER TABLE {table} REPLICA IDENTITY FULL; if consumers need them"))
    return problems


def _published_columns(conn: psycopg.Connection[tuple[object, ...]], schema: str, name: str,
                       publication: str | None) -> set[str] | None:
    """The publication's column list of the table (``pg_publication_tables.attnames``, Postgres 15+),
    or ``None`` when every ordinary column is published."""
    if publication is None or conn.info.server_version < 150000:
        return None
    row = conn.execute("SELECT attnames FROM pg_publication_tables WHERE pubname = %s AND schemaname = %s"
                       " AND tablename = %s", (publication, schema, name)).fetchone()
    names = row[0] if row is not None else None
    return {str(a) for a in names} if isinstance(names, list) else None


def _binary_problems(conn: psycopg.Connection[tuple[object, ...]], catalog: CatalogTypes, schema: str,
                     name: str, publication: str | None) -> list[Problem]:
    """With ``postgres.binary``: published columns whose values Postgres sends in binary (their type
    has a send function) but pgbridge cannot read in binary. Found now rather than at the first
    row, which would stop the bridge with the same advice."""
    rows = conn.execute(
        "SELECT a.attname, a.atttypid, a.atttypmod, t.typsend <> 0, a.attgenerated <> ''"
        " FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid JOIN pg_class c ON c.oid = a.attrelid"
        " JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
        (schema, name)).fetchall()
    published = _published_columns(conn, schema, name, publication)
    problems: list[Problem] = []
    for column, type_oid, type_modifier, sent_in_binary, generated in rows:
        if not sent_in_binary or (column not in published if published is not None else generated):
            continue
        codec = codec_for(int(str(type_oid)), int(str(type_modifier)), catalog=catalog)
        if codec.from_binary is None:
            problems.append(Problem(
                "error", f"column {schema}.{name}.{column} has type {codec.pg_type}, which Postgres sends in "
                "binary with postgres.binary on and pgbridge reads only as text",
                "set postgres.binary to false (PGBRIDGE_POSTGRES__BINARY=false)"))
    return problems


def check_routes(conn: psycopg.Connection[tuple[object, ...]], settings: Settings) -> list[Problem]:
    """``kafka.topic_routes``: each published table's routed topic is a valid name (an error names
    the table and the route); topics several tables share are named, with the key field they get."""
    publication = settings.postgres.publication
    if not settings.kafka.topic_routes or not slots.publication_exists(conn, publication):
        return []
    tables = slots.published_tables(conn, publication)
    router = TopicRouter.of(settings.kafka)
    problems: list[Problem] = []
    for schema, table in tables:
        try:
            router.topic_of(schema, table)
        except PgbridgeError as exc:
            problems.append(Problem("error", str(exc), exc.hint or "change kafka.topic_routes"))
    if problems:
        return problems
    return [Problem("info", f"topic {topic} holds {', '.join(names)}: its keys carry {TABLE_KEY_FIELD}",
                    "none needed; the Spark mirror refuses a topic holding several tables")
            for topic, names in TopicRouter.of(settings.kafka, tables).shared_topics().items()]


def check_outbox(conn: psycopg.Connection[tuple[object, ...]], settings: Settings) -> list[Problem]:
    """``outbox.*``: the topic is outside the prefix; each outbox table exists, has the outbox
    columns in types pgbridge can carry, and is published (else its inserts never arrive)."""
    outbox = settings.outbox
    if not outbox.tables:
        return []
    fix = "fix the outbox table or the outbox.*_column settings (docs/routing.md)"
    problem = topic_problem(outbox.topic, settings.kafka.topic_prefix)
    problems = [Problem("error", problem, "use a topic outside the prefix, e.g. outbox.event.{aggregate_type}")
                ] if problem else []
    problems.extend(Problem("error", message, fix) for message in catalog_problems(conn, outbox))
    publication = settings.postgres.publication
    if slots.publication_exists(conn, publication):
        published = {f"{schema}.{table}" for schema, table in slots.published_tables(conn, publication)}
        problems.extend(Problem("error", f"outbox table {table} is not in publication {publication}",
                                f"ALTER PUBLICATION {publication} ADD TABLE {quoted}")
                        for table, quoted in zip(outbox.table_names, outbox.tables, strict=True)
                        if table not in published)
    return problems


def _column_problems(conn: psycopg.Connection[tuple[object, ...]], settings: Settings, catalog: CatalogTypes,
                     schema: str, name: str) -> list[Problem]:
    """What ``run`` would refuse of ``columns.*`` for this table (encode/columns.py, the same rule):
    an excluded Kafka key column, a truncated column that is not text."""
    rules = ColumnRules.of(settings.columns)
    if not rules:
        return []
    relation = slots.relation_from_catalog(conn, schema, name, settings.postgres.publication)
    configured = message_keys(settings.kafka).get((schema, name))
    keys = configured if configured else usable_key(slots.key_columns(conn, relation.rel_id), relation)
    problem = table_problem(relation, rules, keys,
                            lambda c: codec_for(c.type_oid, c.type_modifier, None, catalog))
    return [] if problem is None else [Problem("error", *problem)]


def _message_key_problems(conn: psycopg.Connection[tuple[object, ...]], settings: Settings,
                          tables: list[tuple[str, str]]) -> list[Problem]:
    """``kafka.message_key_columns`` entries ``run`` would refuse (source/keys.py, the same rule): a
    table not captured, a column it lacks, a column outside its replica identity."""
    problems: list[Problem] = []
    for (schema, name), columns in message_keys(settings.kafka).items():
        if (schema, name) not in tables:
            problems.append(Problem("error", f"kafka.message_key_columns names {table_name(schema, name)}, which "
                                    "is not captured", "publish the table or remove its entry"))
            continue
        relation = slots.relation_from_catalog(conn, schema, name, settings.postgres.publication)
        try:
            message_key(columns, relation)
        except ConfigError as exc:
            problems.append(Problem("error", str(exc), exc.hint or "fix kafka.message_key_columns"))
            continue
        nullable = nullable_columns(conn, relation.rel_id, columns)
        if nullable:
            problems.append(Problem("error", nullable_message(schema, name, nullable), NULLABLE_HINT))
    return problems
