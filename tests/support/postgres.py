"""Throwaway PostgreSQL clusters for integration tests: the fixtures' view of ``pgbridge.embedded``.

Starting, stopping, killing and cleaning up clusters lives in ``pgbridge.embedded.postgres`` (the demo
and the benchmarks need it too); this module re-exports what the tests import and adds what only
tests need: the ``PGBRIDGE_TEST_PG<version>_BINDIR`` override of the binaries, the
``pg_cluster_factory`` protocol, slot/WAL position probes, and per-test databases.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Protocol, cast

import psycopg
from psycopg import sql

from pgbridge.embedded import postgres as _embedded
from pgbridge.embedded.postgres import (
    DEFAULT_SETTINGS,
    HOST,
    OS_USER,
    START_TIMEOUT,
    STOP_TIMEOUT,
    SUPERUSER,
    SUPPORTED_VERSIONS,
    WHEEL_VERSION,
    PgCluster,
    execute,
)
from tests.support.waiting import wait_until

__all__ = [
    "DEFAULT_SETTINGS",
    "HOST",
    "OS_USER",
    "START_TIMEOUT",
    "STOP_TIMEOUT",
    "SUPERUSER",
    "SUPPORTED_VERSIONS",
    "WHEEL_VERSION",
    "PgCluster",
    "PgClusterFactory",
    "create_database",
    "current_wal_lsn",
    "drop_database",
    "execute",
    "locate_bindir",
    "server_clock",
    "slot_confirmed_flush_lsn",
    "slot_reply_time",
    "start_cluster",
    "wait_for_status_update",
]


def _bindir_override(version: int) -> Path | None:
    """``PGBRIDGE_TEST_PG<version>_BINDIR``: run the tests against another installation."""
    value = os.environ.get(f"PGBRIDGE_TEST_PG{version}_BINDIR")
    return Path(value) if value else None


def locate_bindir(version: int) -> Path:
    """The bin directory of PostgreSQL ``version`` the tests use (see ``pgbridge.embedded.postgres``).
    A missing or unusable installation is a hard error, never a skip."""
    return _embedded.locate_bindir(version, override=_bindir_override(version))


def start_cluster(version: int, *, settings: Mapping[str, str] | None = None) -> PgCluster:
    """initdb and start a PostgreSQL ``version`` cluster with ``DEFAULT_SETTINGS`` updated by
    ``settings``. The caller owns it: ``close()`` it (the fixtures do)."""
    return _embedded.start_cluster(version, settings=settings, bindir=_bindir_override(version))


class PgClusterFactory(Protocol):
    """The ``pg_cluster_factory`` fixture: start a cluster that is stopped after the test."""

    def __call__(self, version: int, settings: Mapping[str, str] | None = None) -> PgCluster: ...


# --- Queries ------------------------------------------------------------------------------------------


def slot_confirmed_flush_lsn(dsn: str, slot: str) -> int | None:
    """The slot's ``confirmed_flush_lsn`` as an int; ``None`` if the slot does not exist or has none."""
    rows = execute(
        dsn,
        "SELECT (confirmed_flush_lsn - '0/0'::pg_lsn)::bigint FROM pg_replication_slots WHERE slot_name = %s",
        (slot,),
    )
    if not rows or rows[0][0] is None:
        return None
    return int(rows[0][0])


def commit_bound(dsn: str, statement: str) -> int:
    """Run ``statement`` in a transaction; return a WAL position at or below its commit record.

    Logical decoding skips on restart only transactions whose commit record starts below the
    slot's ``confirmed_flush_lsn``, so a confirmed LSN at or below this value keeps the transaction.
    """
    with psycopg.connect(dsn) as conn:
        conn.execute(statement)
        row = conn.execute("SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint").fetchone()
        conn.commit()
    assert row is not None
    return int(row[0])


def current_wal_lsn(dsn: str) -> int:
    """``pg_current_wal_lsn()`` as an int."""
    rows = execute(dsn, "SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint")
    return int(rows[0][0])


def server_clock(dsn: str) -> datetime:
    """Postgres's ``clock_timestamp()``: a mark to compare later server-side timestamps with."""
    rows = execute(dsn, "SELECT clock_timestamp()")
    return cast(datetime, rows[0][0])


def slot_reply_time(dsn: str, slot: str) -> datetime | None:
    """When the consumer streaming ``slot`` last sent a standby status update (``reply_time`` of its
    walsender); ``None`` while nobody streams the slot or before the first update."""
    rows = execute(
        dsn,
        "SELECT r.reply_time FROM pg_replication_slots s JOIN pg_stat_replication r ON r.pid = s.active_pid"
        " WHERE s.slot_name = %s",
        (slot,),
    )
    return cast(datetime | None, rows[0][0]) if rows else None


def wait_for_status_update(dsn: str, slot: str, *, timeout: float = 30.0) -> None:
    """Wait until the consumer of ``slot`` sends a standby status update after this call began.

    What it confirmed then is its answer to everything it had read before: the positive signal a
    test needs before asserting that something was *not* confirmed.
    """
    mark = server_clock(dsn)

    def replied_since() -> bool:
        replied = slot_reply_time(dsn, slot)
        return replied is not None and replied > mark

    wait_until(replied_since, timeout=timeout, interval=0.1,
               message=f"the consumer of slot {slot} sent no status update after {mark.isoformat()}")


def create_database(cluster: PgCluster, dbname: str) -> None:
    cluster.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))


def drop_database(cluster: PgCluster, dbname: str, *, timeout: float = 30.0) -> None:
    """Drop ``dbname`` with everything that would keep it alive or hold back the cluster: prepared
    transactions, replication slots (terminating their walsenders first) and connections."""
    if not cluster.running:
        cluster.start()  # a test crashed the shared cluster and left it down
    exists = cluster.execute("SELECT 1 FROM pg_database WHERE datname = %s", params=(dbname,))
    if not exists:
        return
    for (gid,) in cluster.execute("SELECT gid FROM pg_prepared_xacts WHERE database = %s", params=(dbname,)):
        cluster.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)), dbname)
    cluster.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(sql.Identifier(dbname)))

    def slots_dropped() -> bool:
        slots = cluster.execute(
            "SELECT slot_name, active_pid FROM pg_replication_slots WHERE database = %s", params=(dbname,)
        )
        for slot_name, active_pid in slots:
            if active_pid is not None:
                cluster.execute("SELECT pg_terminate_backend(%s)", params=(active_pid,))
                continue  # dropped on a later round, once the walsender has released it
            with contextlib.suppress(psycopg.errors.UndefinedObject, psycopg.errors.ObjectInUse):
                cluster.execute("SELECT pg_drop_replication_slot(%s)", params=(slot_name,))
        return not slots

    wait_until(
        slots_dropped, timeout=timeout, interval=0.05, message=f"replication slots of {dbname} to be dropped"
    )
    cluster.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(dbname)))
