"""The DDL event trigger (``postgres.ddl_events``): its SQL, installing it, and what ``check`` says.

Postgres' logical decoding carries no DDL: a Relation message shows a table's new columns, not
what happened to the old ones. The trigger closes the gap. At ``ddl_command_end`` of each
``CREATE``/``ALTER TABLE`` (and at ``sql_drop``) it writes, for every published table the command
touched, one *transactional* logical message (``pg_logical_emit_message(true, 'pgbridge.ddl',
json)``, format in decode/ddl.py) with the table's columns before and after, by attribute number.
Transactional: the message is decoded at its place in its transaction, so it reaches pgbridge in
commit order with the row changes, and a rolled-back DDL leaves no message.

Where "before" comes from, and why: ``ddl_command_end`` sees only the catalog *after* the command,
and ``ddl_command_start`` cannot say which table a command will touch (``pg_event_trigger_ddl_commands``
exists only at the end) nor take the table's lock first, so a snapshot taken there could miss a
concurrent change. So the trigger keeps its own record of each published table's last shape in
``pgbridge.ddl_shapes``, read ``FOR UPDATE`` and replaced in the DDL's own transaction: an aborted
DDL rolls the record back with it, and DDL on one table is serialized by the table's lock. The
table is ``UNLOGGED`` so that no publication (not even ``FOR ALL TABLES``) ever carries it and it
adds no WAL; the price is that a Postgres crash empties it, and then the trigger sends ``before``
null for a table's next DDL and pgbridge takes the shape of that table's previous event instead
(encode/schema_change.py). ``pgbridge.ddl_seed()`` records the published tables it lacks (at
install, at every pgbridge start, after ``CREATE``/``ALTER PUBLICATION``).

The trigger never stops a user's DDL: an error inside it is turned into a WARNING (that DDL is then
not captured). That makes its body a subtransaction, and logical decoding orders a subtransaction's
changes among its parent's by LSN, taking a message's LSN as the *end* of its WAL record, which is
the start of the next record: a row change right after the DDL (same transaction, in the parent)
would tie with the message and could be decoded first. So each firing ends with an empty message
(the fence, ``DDL_FENCE``) that takes the tie, and pgbridge ignores it; the real messages before it
keep their place (a user's own savepoints around the DDL are covered the same way). Creating an event trigger needs a superuser: pgbridge installs it when its role is
one, otherwise ``pgbridge check`` prints ``install_sql`` for the DBA.
"""

from __future__ import annotations

import logging
from typing import Final, Literal

import psycopg
from psycopg import errors as pgerrors

from pgbridge.config import PostgresConfig
from pgbridge.decode.ddl import DDL_FORMAT, DDL_PREFIX
from pgbridge.errors import FatalError, SourceUnavailable
from pgbridge.identifiers import quote_ident

log = logging.getLogger(__name__)

SqlConn = psycopg.Connection[tuple[object, ...]]
TriggerState = Literal["installed", "outdated", "missing"]

# Written on the capture function: which message format the installed trigger writes.
VERSION_MARK: Final = f"pgbridge ddl capture, format {DDL_FORMAT}"

_SHAPE_FUNCTION: Final = """
CREATE OR REPLACE FUNCTION pgbridge.ddl_shape(rel oid) RETURNS jsonb
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
SELECT jsonb_build_object(
  'schema', n.nspname::text, 'table', c.relname::text, 'replica_identity', c.relreplident::text,
  'publications', coalesce((
    SELECT jsonb_agg(DISTINCT pt.pubname::text ORDER BY pt.pubname::text)
    FROM pg_publication_tables pt
    JOIN pg_namespace pn ON pn.nspname = pt.schemaname
    JOIN pg_class pc ON pc.relnamespace = pn.oid AND pc.relname = pt.tablename
    WHERE pc.oid = c.oid OR pc.oid IN (SELECT relid FROM pg_partition_tree(c.oid))
       OR pc.oid IN (SELECT relid FROM pg_partition_ancestors(c.oid))), '[]'::jsonb),
  'columns', coalesce((
    SELECT jsonb_agg(jsonb_build_object(
      'attnum', a.attnum, 'name', a.attname::text, 'type', format_type(a.atttypid, a.atttypmod),
      'type_oid', a.atttypid::int8, 'typmod', a.atttypmod, 'not_null', a.attnotnull,
      'key', EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary
                                               AND a.attnum = ANY (i.indkey::int2[])))
      ORDER BY a.attnum)
    FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped), '[]'::jsonb))
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = rel
$fn$"""

_SEED_FUNCTION: Final = """
CREATE OR REPLACE FUNCTION pgbridge.ddl_seed() RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  added integer;
BEGIN
  WITH published AS (
    SELECT pc.oid FROM pg_publication_tables pt
    JOIN pg_namespace pn ON pn.nspname = pt.schemaname
    JOIN pg_class pc ON pc.relnamespace = pn.oid AND pc.relname = pt.tablename),
  related AS (
    SELECT oid AS relid FROM published
    UNION SELECT a.relid FROM published p, pg_partition_ancestors(p.oid) a)
  INSERT INTO pgbridge.ddl_shapes (relid, shape)
  SELECT relid, pgbridge.ddl_shape(relid) FROM related
  ON CONFLICT (relid) DO NOTHING;
  GET DIAGNOSTICS added = ROW_COUNT;
  RETURN added;
END
$fn$"""

_CAPTURE_FUNCTION: Final = f"""
CREATE OR REPLACE FUNCTION pgbridge.ddl_capture() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  cmd record;
  before_shape jsonb;
  after_shape jsonb;
BEGIN
  IF TG_EVENT = 'sql_drop' THEN
    FOR cmd IN SELECT objid, object_identity FROM pg_event_trigger_dropped_objects()
               WHERE classid = 'pg_class'::regclass AND objsubid = 0 AND object_type = 'table'
    LOOP
      DELETE FROM pgbridge.ddl_shapes WHERE relid = cmd.objid RETURNING shape INTO before_shape;
      IF before_shape IS NOT NULL AND jsonb_array_length(before_shape->'publications') > 0 THEN
        PERFORM pg_logical_emit_message(true, '{DDL_PREFIX}', jsonb_build_object(
          'format', {DDL_FORMAT}, 'command', TG_TAG, 'identity', cmd.object_identity,
          'relid', cmd.objid::int8, 'before', before_shape, 'after', NULL)::text);
      END IF;
    END LOOP;
    PERFORM pg_logical_emit_message(true, '{DDL_PREFIX}', '');
    RETURN;
  END IF;
  IF TG_TAG IN ('CREATE PUBLICATION', 'ALTER PUBLICATION') THEN
    PERFORM pgbridge.ddl_seed();
    RETURN;
  END IF;
  FOR cmd IN SELECT DISTINCT d.objid FROM pg_event_trigger_ddl_commands() d
             JOIN pg_class r ON r.oid = d.objid
             WHERE d.classid = 'pg_class'::regclass AND r.relkind IN ('r', 'p') ORDER BY d.objid
  LOOP
    SELECT shape INTO before_shape FROM pgbridge.ddl_shapes WHERE relid = cmd.objid FOR UPDATE;
    after_shape := pgbridge.ddl_shape(cmd.objid);
    IF jsonb_array_length(after_shape->'publications') = 0
       AND (before_shape IS NULL OR jsonb_array_length(before_shape->'publications') = 0) THEN
      DELETE FROM pgbridge.ddl_shapes WHERE relid = cmd.objid;
      CONTINUE;
    END IF;
    INSERT INTO pgbridge.ddl_shapes (relid, shape) VALUES (cmd.objid, after_shape)
      ON CONFLICT (relid) DO UPDATE SET shape = EXCLUDED.shape;
    PERFORM pg_logical_emit_message(true, '{DDL_PREFIX}', jsonb_build_object(
      'format', {DDL_FORMAT}, 'command', TG_TAG,
      'identity', (pg_identify_object('pg_class'::regclass, cmd.objid, 0)).identity,
      'relid', cmd.objid::int8, 'before', before_shape, 'after', after_shape)::text);
  END LOOP;
  PERFORM pg_logical_emit_message(true, '{DDL_PREFIX}', '');
EXCEPTION WHEN OTHERS THEN
  RAISE WARNING 'pgbridge DDL capture failed, % is not captured: %', TG_TAG, SQLERRM;
END
$fn$"""

# Statements of the install, in order; each is idempotent, so installing again upgrades.
INSTALL_STATEMENTS: Final = (
    "CREATE SCHEMA IF NOT EXISTS pgbridge",
    "CREATE UNLOGGED TABLE IF NOT EXISTS pgbridge.ddl_shapes (relid oid PRIMARY KEY, shape jsonb NOT NULL)",
    "REVOKE ALL ON pgbridge.ddl_shapes FROM PUBLIC",
    _SHAPE_FUNCTION.strip(),
    _SEED_FUNCTION.strip(),
    "REVOKE EXECUTE ON FUNCTION pgbridge.ddl_seed() FROM PUBLIC",
    _CAPTURE_FUNCTION.strip(),
    f"COMMENT ON FUNCTION pgbridge.ddl_capture() IS '{VERSION_MARK}'",
    "DROP EVENT TRIGGER IF EXISTS pgbridge_ddl_end",
    "CREATE EVENT TRIGGER pgbridge_ddl_end ON ddl_command_end WHEN TAG IN ('CREATE TABLE', 'CREATE TABLE AS', "
    "'SELECT INTO', 'ALTER TABLE', 'CREATE PUBLICATION', 'ALTER PUBLICATION') EXECUTE FUNCTION pgbridge.ddl_capture()",
    "DROP EVENT TRIGGER IF EXISTS pgbridge_ddl_drop",
    "CREATE EVENT TRIGGER pgbridge_ddl_drop ON sql_drop EXECUTE FUNCTION pgbridge.ddl_capture()",
    "SELECT pgbridge.ddl_seed()",
)


def install_sql(role: str | None = None) -> str:
    """The whole install as one script for a superuser, in one transaction; with ``role``, the grants
    that let that (non-superuser) pgbridge role record newly published tables at its start."""
    statements = list(INSTALL_STATEMENTS)
    if role is not None:
        statements += [f"GRANT USAGE ON SCHEMA pgbridge TO {quote_ident(role)}",
                       f"GRANT EXECUTE ON FUNCTION pgbridge.ddl_seed() TO {quote_ident(role)}"]
    return "BEGIN;\n" + ";\n".join(statements) + ";\nCOMMIT;"


def trigger_state(conn: SqlConn) -> TriggerState:
    """Whether both event triggers exist, enabled, with the capture function of this format."""
    row = conn.execute(
        "SELECT count(*) FILTER (WHERE evtenabled <> 'D'),"
        " obj_description(to_regprocedure('pgbridge.ddl_capture()'), 'pg_proc')"
        " FROM pg_event_trigger WHERE evtname IN ('pgbridge_ddl_end', 'pgbridge_ddl_drop')").fetchone()
    if row is None or int(str(row[0])) < 2:
        return "missing"
    return "installed" if row[1] == VERSION_MARK else "outdated"


def is_superuser(conn: SqlConn) -> bool:
    row = conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
    return row is not None and bool(row[0])


def install(conn: SqlConn) -> None:
    """Install (or upgrade) the trigger in one transaction; the role must be a superuser."""
    try:
        with conn.transaction():
            for statement in INSTALL_STATEMENTS:
                conn.execute(statement)
    except psycopg.OperationalError as exc:
        raise SourceUnavailable(f"installing the DDL event trigger failed: {exc}") from None
    except psycopg.Error as exc:
        raise FatalError(f"cannot install the DDL event trigger: {type(exc).__name__}: {exc.diag.message_primary}",
                         hint="run the SQL `pgbridge check` prints as a superuser, or set postgres.ddl_events to "
                         "false") from None
    log.info("DDL event trigger installed", extra={"format": DDL_FORMAT, "prefix": DDL_PREFIX})


def seed(conn: SqlConn) -> None:
    """Record the published tables the trigger has no shape of yet, where the role may."""
    row = conn.execute("SELECT has_function_privilege(to_regprocedure('pgbridge.ddl_seed()'), 'EXECUTE')"
                       " AND has_schema_privilege('pgbridge', 'USAGE')").fetchone()
    if row is None or not row[0]:
        return
    try:
        conn.execute("SELECT pgbridge.ddl_seed()")
    except pgerrors.InsufficientPrivilege:
        return


def prepare_ddl_capture(conn: SqlConn, pg: PostgresConfig) -> TriggerState:
    """At start with ``postgres.ddl_events``: install or upgrade the trigger when the role is a
    superuser, else warn with the SQL to run (rows keep streaming; renames stay drop + add)."""
    state = trigger_state(conn)
    if state != "installed" and is_superuser(conn):
        install(conn)
        return "installed"
    if state == "installed":
        seed(conn)
        return state
    log.warning(f"postgres.ddl_events is on but the DDL event trigger is {state}, and creating it needs a "
                "superuser: schema changes are not published and a renamed column is a dropped and an added field",
                extra={"hint": f"as a superuser, in database {conn.info.dbname}, run the SQL that "
                                 "`pgbridge check` prints"})
    return state


def trigger_problem(conn: SqlConn, pg: PostgresConfig) -> tuple[str, str] | None:
    """``pgbridge check``: (problem, fix) when ``postgres.ddl_events`` is on and the trigger is not
    installed (or from another pgbridge version) and this role cannot install it at start."""
    if not pg.ddl_events:
        return None
    state = trigger_state(conn)
    if state == "installed" or is_superuser(conn):
        return None
    what = "is not installed" if state == "missing" else "is from another pgbridge version"
    script = " ".join(line.strip() for line in install_sql(conn.info.user).splitlines())  # no -- comments in it
    return (f"postgres.ddl_events is on but the DDL event trigger {what}, and role {conn.info.user} is not a "
            "superuser: without it no schema change is published and renames are a drop and an add",
            f"as a superuser, in database {conn.info.dbname}: {script}")
