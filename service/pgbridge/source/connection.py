"""The replication connection: libpq in ``replication=database`` mode, driven through ``psycopg.pq``.

psycopg 3 has no replication API, so replication commands (simple query protocol only) and the
COPY BOTH stream go straight through ``PGconn``. Every libpq failure becomes a typed error here,
the one place that sees the raw status.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Final

from psycopg import pq
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgbridge.errors import ConfigError, FatalError, SlotError, SlotInUse, SourceUnavailable
from pgbridge.lsn import Lsn, parse_lsn

log = logging.getLogger(__name__)

APPLICATION_NAME: Final = "pgbridge"
SESSION_OPTIONS: Final = ("-c DateStyle=ISO -c IntervalStyle=postgres -c extra_float_digits=3"
                          " -c bytea_output=hex")

# SQLSTATEs that no reconnect will fix.
_FATAL_SQLSTATES: Final = {
    "42704": "the replication slot does not exist",
    "55000": "the replication slot cannot be used (invalidated, or created for another database)",
    "42501": "permission denied",
    "28000": "authentication rejected",
    "28P01": "password authentication failed",
    "3D000": "the database does not exist",
}


def safe_target(dsn: str) -> str:
    """``host:port/dbname`` of a DSN for messages: never the password."""
    try:
        params = conninfo_to_dict(dsn)
    except Exception:
        return "(unparsable DSN)"
    host = params.get("host") or params.get("hostaddr") or "localhost"
    return f"{host}:{params.get('port') or 5432}/{params.get('dbname') or ''}"


# libpq's reasons that no reconnect will fix (it gives no SQLSTATE before the session exists, so
# this is the one place its text is read).
_FATAL_CONNECT_REASONS: Final = ("password authentication failed", "no pg_hba.conf entry", "does not exist",
                                 "authentication failed")


def connect_failure(target: str, message: str, *, hint: str) -> FatalError | SourceUnavailable:
    """A failed connection as an error that keeps libpq's whole reason on one line.

    libpq writes one line per host it tried (``connection to server at "db", port 5432 failed:
    Connection refused``) and a hint on the next; the reason is in the first, so keeping only the
    last line (the hint) told the operator nothing. Credentials, ``pg_hba.conf`` and a missing
    database or role are ``FatalError`` (``hint`` says what to fix); anything else is transient.
    """
    reason = " ".join(line.strip() for line in message.strip().splitlines() if line.strip())
    text = f"cannot connect to Postgres at {target}: {reason or 'connection failed'}"
    if any(fatal in reason for fatal in _FATAL_CONNECT_REASONS):
        return FatalError(text, hint=hint)
    return SourceUnavailable(text)


def build_conninfo(dsn: str, *, replication: bool, connect_timeout_s: float) -> str:
    try:
        kwargs: dict[str, str | int] = {
            "connect_timeout": max(1, int(connect_timeout_s)),
            "application_name": APPLICATION_NAME,
        }
        if replication:
            kwargs["replication"] = "database"
        # The text parsers of encode/ and snapshot/ rely on these output formats, whatever the
        # server's or role's defaults are.
        user_options = str(conninfo_to_dict(dsn).get("options") or "")
        kwargs["options"] = f"{user_options} {SESSION_OPTIONS}".strip()
        kwargs["client_encoding"] = "UTF8"
        return make_conninfo(dsn, **kwargs)
    except Exception as exc:  # psycopg.ProgrammingError on a malformed DSN
        raise ConfigError("postgres.dsn is not a valid libpq connection string or URI",
                          hint="use postgresql://user@host:5432/db or 'host=... dbname=...'") from exc


# Failover slots (CREATE_REPLICATION_SLOT ... FAILOVER, ALTER_REPLICATION_SLOT) exist since 17.
FAILOVER_VERSION: Final = 170000


def quote_literal(text: str) -> str:
    """A SQL string literal for the simple query protocol (standard_conforming_strings is on)."""
    return "'" + text.replace("'", "''") + "'"


@dataclass(frozen=True, slots=True)
class SystemIdentity:
    system_id: str
    timeline: int
    xlog_pos: Lsn
    dbname: str | None


@dataclass(frozen=True, slots=True)
class CreatedSlot:
    name: str
    consistent_point: Lsn
    snapshot_name: str | None


def result_error(result: pq.abc.PGresult, what: str) -> Exception:
    sqlstate = (result.error_field(pq.DiagnosticField.SQLSTATE) or b"").decode()
    message = (result.error_message or b"").decode(errors="replace").strip()
    if sqlstate == "55000" and "on the primary" in message:  # decoding on a standby (source/standby.py)
        return FatalError(f"{what} failed: {message}",
                          hint="on the primary: ALTER SYSTEM SET wal_level = logical; then restart it (the standby "
                          "decodes once it has replayed WAL written at that level)")
    if sqlstate in _FATAL_SQLSTATES:
        cls: type[FatalError] = SlotError if sqlstate in {"42704", "55000"} else FatalError
        return cls(f"{what} failed: {message}", hint=_FATAL_SQLSTATES[sqlstate])
    if sqlstate == "55006":  # object_in_use: slot active for another process
        return SlotInUse(f"{what} failed: {message}")
    return SourceUnavailable(f"{what} failed: {message} (SQLSTATE {sqlstate or 'none'})")


class ReplicationConnection:
    """One walsender session: replication commands, then the COPY BOTH stream."""

    def __init__(self, dsn: str, *, connect_timeout_s: float = 10.0, failover: bool = True) -> None:
        self._conninfo = build_conninfo(dsn, replication=True, connect_timeout_s=connect_timeout_s)
        self._target = safe_target(dsn)
        self._pgconn: pq.abc.PGconn | None = None
        # postgres.failover_slot: make the slot a failover slot where the server has them (17+).
        self.failover = failover
        self._failover_ignored_logged = False
        # Decoding on a standby (source/standby.py): no failover slots there, and slot creation
        # runs inside this context (which asks the primary for the record the creation waits for).
        self.standby = False
        self.slot_creation: Callable[[], AbstractContextManager[None]] = nullcontext

    @property
    def pgconn(self) -> pq.abc.PGconn:
        if self._pgconn is None:
            raise SourceUnavailable("replication connection is not open")
        return self._pgconn

    @property
    def target(self) -> str:
        return self._target

    def connect(self) -> None:
        pgconn = pq.PGconn.connect(self._conninfo.encode())
        if pgconn.status != pq.ConnStatus.OK:
            message = pgconn.error_message.decode(errors="replace")
            pgconn.finish()
            raise connect_failure(self._target, message,
                                  hint="check the credentials in postgres.dsn and that pg_hba.conf "
                                  "allows replication connections for this role")
        self._pgconn = pgconn

    @property
    def server_version(self) -> int:
        return self.pgconn.server_version

    def command(self, sql: str, what: str) -> list[tuple[str | None, ...]]:
        """Run one replication command with the simple query protocol; return its rows as text."""
        result = self.pgconn.exec_(sql.encode())
        if result.status not in (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.COMMAND_OK):
            if self.pgconn.status != pq.ConnStatus.OK:
                raise SourceUnavailable(f"{what}: connection to {self._target} lost")
            raise result_error(result, what)
        rows: list[tuple[str | None, ...]] = []
        for row in range(result.ntuples):
            rows.append(tuple(
                None if (value := result.get_value(row, col)) is None else bytes(value).decode()
                for col in range(result.nfields)
            ))
        return rows

    def identify_system(self) -> SystemIdentity:
        (system_id, timeline, xlog_pos, dbname), = self.command("IDENTIFY_SYSTEM", "IDENTIFY_SYSTEM")
        return SystemIdentity(system_id or "", int(timeline or 0), parse_lsn(xlog_pos or "0/0"), dbname)

    @property
    def wants_failover(self) -> bool:
        """Failover slots asked for and supported; on an older server the setting is ignored
        (logged once per connection)."""
        if not self.failover:
            return False
        if self.standby:
            if not self._failover_ignored_logged:
                self._failover_ignored_logged = True
                log.info("postgres.failover_slot ignored: a slot on a standby cannot be a failover slot")
            return False
        if self.server_version < FAILOVER_VERSION:
            if not self._failover_ignored_logged:
                self._failover_ignored_logged = True
                log.info("postgres.failover_slot ignored: failover slots need Postgres 17+",
                         extra={"server_version": self.server_version})
            return False
        return True

    def create_slot(self, name: str, *, two_phase: bool, export_snapshot: bool) -> CreatedSlot:
        if self.server_version >= 150000:
            options = [f"SNAPSHOT '{'export' if export_snapshot else 'nothing'}'"]
            if two_phase:
                options.append("TWO_PHASE true")
            if self.wants_failover:
                options.append("FAILOVER true")
            sql = f'CREATE_REPLICATION_SLOT "{name}" LOGICAL pgoutput ({", ".join(options)})'
        else:
            sql = (f'CREATE_REPLICATION_SLOT "{name}" LOGICAL pgoutput'
                   f"{' TWO_PHASE' if two_phase else ''}"
                   f" {'EXPORT_SNAPSHOT' if export_snapshot else 'NOEXPORT_SNAPSHOT'}")
        with self.slot_creation():
            (slot_name, consistent_point, snapshot_name, _plugin), = self.command(sql, "CREATE_REPLICATION_SLOT")
        return CreatedSlot(slot_name or name, parse_lsn(consistent_point or "0/0"), snapshot_name)

    def ensure_failover(self, slot: str) -> bool:
        """Make ``slot`` a failover slot if it is not one yet: a slot created by an older pgbridge,
        or copied from the initial snapshot's pending slot (pg_copy_logical_replication_slot does
        not copy the failover flag). Returns whether the slot is a failover slot now."""
        if not self.wants_failover:
            return False
        rows = self.command(f"SELECT failover FROM pg_replication_slots WHERE slot_name = {quote_literal(slot)}",
                            "reading the slot's failover flag")
        if not rows or rows[0][0] == "t":
            return bool(rows)
        self.command(f'ALTER_REPLICATION_SLOT "{slot}" (FAILOVER true)', "ALTER_REPLICATION_SLOT")
        log.info("slot made a failover slot", extra={"slot": slot})
        return True

    def start_replication(self, slot: str, start_lsn: Lsn, options: dict[str, str]) -> None:
        self.ensure_failover(slot)
        rendered = ", ".join(f'"{key}" \'{value}\'' for key, value in options.items())
        sql = f'START_REPLICATION SLOT "{slot}" LOGICAL {start_lsn >> 32:X}/{start_lsn & 0xFFFFFFFF:X} ({rendered})'
        self.pgconn.send_query(sql.encode())
        result = self.pgconn.get_result()
        if result is None:
            raise SourceUnavailable("START_REPLICATION returned no result")
        if result.status != pq.ExecStatus.COPY_BOTH:
            raise result_error(result, "START_REPLICATION")
        self.pgconn.nonblocking = 1
        log.info("streaming started", extra={"slot": slot, "options": rendered})

    def close(self) -> None:
        if self._pgconn is not None:
            self._pgconn.finish()
            self._pgconn = None
