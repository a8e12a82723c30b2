"""Throwaway PostgreSQL clusters for integration tests: the fixtures' view of ``pgbridge.embedded``.

Starting, stopping, killing and cleaning up clusters lives in ``pgbridge.embedded.postgres`` (the demo
and the benchmarks need it too); this module re-exports what the tests import and adds what only
tests need: the ``PGBRIDGE_TEST_PG<version>_BINDIR`` override of the binaries, the
``pg_cluster_factory`` protocol, slot/WAL position probes, and per-test databases.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Protocol, cast

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from pgbridge.embedded import postgres as _embedded
from pgbridge.embedded.ports import free_port
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
    "RetryingWriter",
    "create_database",
    "current_wal_lsn",
    "drop_database",
    "execute",
    "locate_bindir",
    "promote_standby",
    "server_clock",
    "slot_confirmed_flush_lsn",
    "slot_reply_time",
    "start_cluster",
    "wait_for_status_update",
    "wal_insert_lsn",
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


def run_sql(dsn: str, *statements: str) -> None:
    """Run ``statements`` in order on one autocommit connection (each its own transaction)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


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
    """``pg_current_wal_lsn()`` (the WAL *write* position) as an int.

    With ``synchronous_commit=off`` (the embedded servers) it can be before the latest commits:
    to wait for them, use ``wal_insert_lsn``.
    """
    rows = execute(dsn, "SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint")
    return int(rows[0][0])


def wal_insert_lsn(dsn: str) -> int:
    """A WAL position at or after every commit so far: ``pg_current_wal_insert_lsn()``.

    Not ``pg_current_wal_lsn()``: with ``synchronous_commit=off`` the write position lags the
    last commits by up to three WAL writer rounds, and a transaction that only took an xid (``SELECT
    txid_current()``) commits asynchronously even under ``SET LOCAL synchronous_commit = on`` (it
    wrote no WAL before its commit record), so it cannot force the flush. A slot confirms this
    position once the WAL writer flushed it and the consumer caught up.
    """
    rows = execute(dsn, "SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint")
    return int(rows[0][0])


def wait_published(dsn: str, slot: str, timeout: float = 90.0) -> None:
    """Wait until the bridge confirmed everything committed so far (so it is all in Kafka)."""
    target = wal_insert_lsn(dsn)
    wait_until(lambda: (slot_confirmed_flush_lsn(dsn, slot) or 0) >= target, timeout=timeout,
               message=f"bridge to confirm LSN {target}")


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


# --- Standbys -----------------------------------------------------------------------------------------


def start_standby(primary: PgCluster, slot: str, *, settings: Mapping[str, str] | None = None) -> PgCluster:
    """A physical standby of ``primary``: a physical slot ``slot`` on the primary, ``pg_basebackup``
    of it, then the copy started in standby mode streaming from that slot, with
    ``hot_standby_feedback`` on and a ``dbname`` in ``primary_conninfo`` (what slot synchronization,
    ``sync_replication_slots = on`` in ``settings``, needs on Postgres 17+). The caller owns it:
    ``close()`` it. Promote it with ``promote_standby``."""
    primary.execute("SELECT pg_create_physical_replication_slot(%s, true)", params=(slot,))
    conninfo = make_conninfo(host=primary.host, port=primary.port, user=SUPERUSER, dbname="postgres",
                             application_name=slot)
    merged = {**primary.settings, "primary_conninfo": conninfo, "primary_slot_name": slot, "hot_standby": "on",
              "hot_standby_feedback": "on", **(settings or {})}
    standby = PgCluster(primary.version, primary.bindir, primary.root.parent / f"{primary.root.name}-{slot}",
                        free_port(), merged)
    run_as = standby._run_as
    standby.root.mkdir(mode=0o700)
    run_as.chown(standby.root)
    standby.socket_dir.mkdir(mode=0o700)
    run_as.chown(standby.socket_dir)
    try:
        command = [str(primary.bindir / "pg_basebackup"), "--pgdata", str(standby.datadir),
                   "--host", primary.host, "--port", str(primary.port), "--username", SUPERUSER,
                   "--wal-method", "stream", "--checkpoint", "fast", "--no-sync"]
        result = subprocess.run(command, capture_output=True, text=True, cwd=standby.root, timeout=120,
                                check=False, env=_server_env(), **run_as.popen_kwargs())
        if result.returncode != 0:
            raise AssertionError(f"pg_basebackup failed (exit {result.returncode}): {result.stderr}")
        signal_file = standby.datadir / "standby.signal"
        signal_file.touch()
        run_as.chown(signal_file)
        standby.start()  # rewrites harness.conf: the standby's own port and settings
    except BaseException:
        standby.close()
        raise
    return standby


def promote_standby(standby: PgCluster, *, timeout: float = 60.0) -> None:
    """``pg_ctl promote``, then wait until the server accepts writes."""
    result = subprocess.run([str(standby.bindir / "pg_ctl"), "promote", "--pgdata", str(standby.datadir),
                             "--wait", "--timeout", str(int(timeout))], capture_output=True, text=True,
                            cwd=standby.root, timeout=timeout + 10, check=False, env=_server_env(),
                            **standby._run_as.popen_kwargs())
    if result.returncode != 0:
        raise AssertionError(f"pg_ctl promote failed (exit {result.returncode}): {result.stdout}{result.stderr}")
    wait_until(lambda: not standby.execute("SELECT pg_is_in_recovery()")[0][0], timeout=timeout, interval=0.05,
               message=f"{standby!r} to leave recovery")


def _server_env() -> dict[str, str]:
    """The environment server commands run with (no ``PG*`` variables, C locale)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PG")}
    env.update(LC_ALL="C", LANG="C")
    return env


class RetryingWriter(threading.Thread):
    """Small transactions on ``items (id bigint PRIMARY KEY, v text, n int)`` (ids 1..``rows``
    filled, see tests/support/churn.py) that outlive the server: a failed connection or commit is
    retried after a short pause. Whatever committed is in the table, which is what a replay is
    compared with; with a multi-host DSN it follows a promoted standby."""

    def __init__(self, dsn: str, rows: int) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.rows = rows
        self.halt = threading.Event()
        self.committed = 0
        self.failures = 0

    def run(self) -> None:
        n = 0
        while not self.halt.is_set():
            try:
                with psycopg.connect(self.dsn, connect_timeout=2) as conn:
                    while not self.halt.is_set():
                        n += 1
                        conn.execute("UPDATE items SET n = n + 1, v = %s WHERE id = %s", (f"u{n}", n % self.rows + 1))
                        conn.execute("INSERT INTO items VALUES (%s, 'new', 0)", (self.rows * 10 + n,))
                        if n % 7 == 0:
                            conn.execute("DELETE FROM items WHERE id = %s", ((n * 13) % self.rows + 1,))
                        conn.commit()
                        self.committed += 1
                        time.sleep(0.005)  # pacing the workload, not a wait
            except psycopg.Error:
                self.failures += 1
                self.halt.wait(0.2)

    def stop(self) -> None:
        self.halt.set()
        self.join(30)
