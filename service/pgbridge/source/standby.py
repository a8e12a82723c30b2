"""Decoding on a physical standby (Postgres 16+): what changes when ``postgres.dsn`` is a server in recovery.

A standby decodes the WAL it replays from the primary, so pgbridge streams from it as from a
primary and the primary only ships WAL. What a standby cannot do is write:

* the publication is a catalog object: it must be created (and tables added) on the primary, and
  reaches the standby by replication; pgbridge never creates or alters it there
  (source/publication.py), and a missing one is an error that names the statement to run on the
  primary;
* a logical slot created on a standby waits for a running-transactions record from the primary
  (the primary's background writer logs one every 15 s, and only while it has traffic: on an idle
  primary creation waits indefinitely). With ``postgres.primary_dsn`` pgbridge asks the primary for
  one (``pg_log_standby_snapshot()``) every second while it waits (``running_xacts_nudged``);
* heartbeats and incremental snapshot watermarks are logical messages: they are written on the
  primary through ``postgres.primary_dsn`` and decoded on the standby after replay; without it both
  are off, each with a log line;
* a slot created on a standby cannot be a failover slot: ``postgres.failover_slot`` is ignored.

The leader lock (leader.py) works unchanged: advisory locks are not WAL-logged and work in recovery.
The decision is taken once per session, when it connects (``server_role``): after a promotion the
next session finds a primary and everything above is back to normal.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final

import psycopg

from pgbridge.config import PostgresConfig
from pgbridge.errors import ConfigError, FatalError, PgbridgeError, SourceUnavailable
from pgbridge.source.connection import build_conninfo, connect_failure, safe_target

log = logging.getLogger(__name__)

SqlConn = psycopg.Connection[tuple[object, ...]]

# Logical decoding on a standby exists since Postgres 16.
STANDBY_DECODING_VERSION: Final = 160000
# While a slot is being created on a standby, ask the primary for a running-xacts record this often.
NUDGE_INTERVAL_S: Final = 1.0

STANDBY_REQUIREMENTS: Final = ("decoding on a standby needs Postgres 16+, hot_standby_feedback = on (with a "
                               "physical slot, primary_slot_name) and wal_level = logical on the primary")


def in_recovery(conn: SqlConn) -> bool:
    row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
    return bool(row and row[0])


@dataclass(frozen=True, slots=True)
class ServerRole:
    """Whether the session's server is a standby, and where pgbridge's own writes go."""

    standby: bool = False
    primary_dsn: str | None = None  # postgres.primary_dsn, used only on a standby

    def write_dsn(self, dsn: str) -> str | None:
        """The DSN to write logical messages through: the server itself on a primary, the primary
        on a standby; ``None`` on a standby without ``postgres.primary_dsn`` (no writes at all)."""
        return self.primary_dsn if self.standby else dsn


def server_role(conn: SqlConn, pg: PostgresConfig) -> ServerRole:
    """Detect a standby (``pg_is_in_recovery()``) and refuse what cannot work there; log what differs."""
    if not in_recovery(conn):
        return ServerRole()
    target = safe_target(pg.dsn.get_secret_value())
    version = conn.info.server_version
    if version < STANDBY_DECODING_VERSION:
        raise FatalError(f"{target} is a standby (in recovery) running Postgres {version // 10000}: logical decoding "
                         "on a standby needs Postgres 16+",
                         hint="point postgres.dsn at the primary, or upgrade the standby to Postgres 16+")
    feedback = conn.execute("SELECT current_setting('hot_standby_feedback')").fetchone()
    if feedback is None or feedback[0] != "on":
        log.warning("decoding on a standby with hot_standby_feedback off: the primary may remove catalog rows the "
                    "slot still needs, and the slot is then invalidated (conflicting)",
                    extra={"hint": "on the standby: ALTER SYSTEM SET hot_standby_feedback = on; SELECT "
                           "pg_reload_conf(); and stream it through a physical slot (primary_slot_name)"})
    primary = None if pg.primary_dsn is None else pg.primary_dsn.get_secret_value()
    if primary is None:
        log.warning("decoding on a standby without postgres.primary_dsn: heartbeats and incremental snapshots are "
                    "off (they write logical messages, which a standby cannot), and a new slot waits for the "
                    "primary to log its running transactions (SELECT pg_log_standby_snapshot() on the primary "
                    "ends the wait)", extra={"standby": target})
    else:
        _check_primary(primary, pg.connect_timeout_s)
    log.info("decoding on a standby", extra={"standby": target,
                                             "primary": None if primary is None else safe_target(primary)})
    return ServerRole(standby=True, primary_dsn=primary)


def _check_primary(dsn: str, connect_timeout_s: float) -> None:
    """``postgres.primary_dsn`` must not be a standby too; an unreachable primary is only logged
    (streaming from the standby needs nothing from it)."""
    try:
        conn = PrimaryConnection(dsn, connect_timeout_s=connect_timeout_s)
        try:
            standby = in_recovery(conn.get())
        finally:
            conn.close()
    except (PgbridgeError, psycopg.Error) as exc:
        log.warning("postgres.primary_dsn is unreachable; streaming from the standby goes on, the writes on the "
                    "primary are retried", extra={"error": str(exc).strip()})
        return
    if standby:
        raise ConfigError(f"postgres.primary_dsn ({safe_target(dsn)}) is a standby too (in recovery)",
                          hint="point postgres.primary_dsn at the primary postgres.dsn replicates from")


class PrimaryConnection:
    """An SQL connection to ``postgres.primary_dsn``, opened on first use and again after a failure."""

    def __init__(self, dsn: str, *, connect_timeout_s: float) -> None:
        self._dsn = dsn
        self._connect_timeout_s = connect_timeout_s
        self._conn: SqlConn | None = None

    @property
    def target(self) -> str:
        return safe_target(self._dsn)

    def get(self) -> SqlConn:
        if self._conn is None or self._conn.closed:
            conninfo = build_conninfo(self._dsn, replication=False, connect_timeout_s=self._connect_timeout_s)
            try:
                self._conn = psycopg.connect(conninfo, autocommit=True)
            except psycopg.OperationalError as exc:
                failure = connect_failure(self.target, str(exc), hint="check postgres.primary_dsn")
                raise SourceUnavailable(str(failure)) from None
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                log.debug("closing the primary connection failed", exc_info=True)
            self._conn = None


@contextmanager
def running_xacts_nudged(primary_dsn: str | None, *, connect_timeout_s: float,
                         interval_s: float = NUDGE_INTERVAL_S) -> Iterator[None]:
    """Around ``CREATE_REPLICATION_SLOT`` on a standby: the slot needs a running-transactions record
    from the primary written after the creation began. With ``primary_dsn`` a thread calls
    ``pg_log_standby_snapshot()`` there every ``interval_s`` until the creation returns."""
    started = time.monotonic()
    stop = threading.Event()
    thread: threading.Thread | None = None
    if primary_dsn is None:
        log.info("creating a slot on a standby: waiting for the primary to log its running transactions (every "
                 "15 s while it has traffic; SELECT pg_log_standby_snapshot() on the primary ends the wait)")
    else:
        primary = PrimaryConnection(primary_dsn, connect_timeout_s=connect_timeout_s)

        def nudge() -> None:
            try:
                while True:
                    primary.get().execute("SELECT pg_log_standby_snapshot()")
                    if stop.wait(interval_s):
                        return
            except psycopg.errors.InsufficientPrivilege as exc:
                log.warning("cannot call pg_log_standby_snapshot() on the primary; the slot waits for the primary's "
                            "background writer (every 15 s while it has traffic)",
                            extra={"error": exc.diag.message_primary,
                                   "hint": "GRANT EXECUTE ON FUNCTION pg_log_standby_snapshot() TO <role>; on the "
                                   "primary"})
            except (PgbridgeError, psycopg.Error) as exc:
                log.warning("cannot ask the primary to log its running transactions; the slot waits for its "
                            "background writer", extra={"error": str(exc).strip()})
            finally:
                primary.close()

        thread = threading.Thread(target=nudge, name="pgbridge-standby-snapshot", daemon=True)
        thread.start()
    try:
        yield
    finally:
        stop.set()
        if thread is not None:
            thread.join(timeout=connect_timeout_s + 5)
    log.info("slot created on a standby", extra={"waited_s": round(time.monotonic() - started, 2),
                                                 "nudged": primary_dsn is not None})
