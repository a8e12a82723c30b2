"""Postgres failover with a failover slot (Postgres 17+; the suite's 18): a primary and a physical
standby synchronizing the slot (``sync_replication_slots``, ``hot_standby_feedback``, the primary's
``synchronized_standby_slots``), a running workload, ``kill -9`` of the primary and ``pg_ctl
promote`` of the standby. pgbridge, given both hosts with ``target_session_attrs=read-write``,
continues on the promoted server, and the topic replays to exactly its table: nothing lost, no
phantom change from the old primary's unreplicated tail, every duplicate identical."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import defaultdict

import pytest
from psycopg.conninfo import make_conninfo

from tests.support.bridge import BridgeProcess, bridge_env, read_events
from tests.support.broker import Broker
from tests.support.churn import create_filled_table
from tests.support.http import metric, scrape
from tests.support.postgres import (
    SUPERUSER,
    PgClusterFactory,
    RetryingWriter,
    commit_bound,
    create_database,
    execute,
    promote_standby,
    slot_confirmed_flush_lsn,
    start_standby,
    wal_insert_lsn,
)
from tests.support.replay import diff_states, replay, table_state, wait_caught_up
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

TABLE = "public.items"
ROWS = 500
STANDBY_SLOT = "standby1"


def _slot_row(dsn: str, slot: str) -> tuple[bool, bool, int | None] | None:
    """(failover, synced, confirmed_flush_lsn) of ``slot`` on the server of ``dsn``."""
    rows = execute(dsn, "SELECT failover, synced, (confirmed_flush_lsn - '0/0'::pg_lsn)::bigint"
                   " FROM pg_replication_slots WHERE slot_name = %s", (slot,))
    return (bool(rows[0][0]), bool(rows[0][1]), rows[0][2]) if rows else None


def _check_output(env: dict[str, str]) -> str:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PGBRIDGE_")}
    result = subprocess.run([sys.executable, "-m", "pgbridge", "check"], env={**clean, **env},
                            capture_output=True, text=True, timeout=120)
    return result.stdout + result.stderr


def test_bridge_continues_on_the_promoted_standby_without_loss_or_phantoms(
        pg_cluster_factory: PgClusterFactory, kafka_broker: Broker, topic_prefix: str) -> None:
    # given: a primary with a filled table and a standby synchronizing failover slots
    primary = pg_cluster_factory(18)
    create_database(primary, "app")
    create_filled_table(primary.dsn("app"), TABLE, ROWS)
    standby = start_standby(primary, STANDBY_SLOT, settings={"sync_replication_slots": "on"})
    try:
        primary.execute(f"ALTER SYSTEM SET synchronized_standby_slots = '{STANDBY_SLOT}'")
        primary.execute("SELECT pg_reload_conf()")
        dsn = make_conninfo(host=f"{primary.host},{standby.host}", port=f"{primary.port},{standby.port}",
                            user=SUPERUSER, dbname="app", target_session_attrs="read-write")
        primary_dsn, standby_dsn = primary.dsn("app"), standby.dsn("app")
        env = bridge_env(dsn, kafka_broker.bootstrap, topic_prefix,
                         extra={"PGBRIDGE_POSTGRES__TABLES": TABLE, "PGBRIDGE_POSTGRES__SLOT_CHECK_INTERVAL_S": "1"})
        writer = RetryingWriter(dsn, ROWS)
        with BridgeProcess(env).start(http=True) as bridge:
            port = bridge.http_port
            assert port is not None
            bridge.wait_confirmed(primary_dsn, topic_prefix, timeout=60, waiting_for="the initial snapshot to finish")
            writer.start()
            # the slot is a failover slot, the standby holds it synchronized, and both say so
            # (pgbridge makes the slot a failover slot just after creating it, when the slot may
            # already have confirmed a position)
            wait_until(lambda: (_slot_row(primary_dsn, topic_prefix) or (False,))[0], timeout=30, interval=0.2,
                       message="not created as a failover slot")
            wait_until(lambda: (row := _slot_row(standby_dsn, topic_prefix)) is not None and row[1]
                       and row[2] is not None, timeout=90, interval=0.5,
                       message="the standby never synchronized the slot")
            wait_until(lambda: metric(scrape(port), "pgbridge_slot_failover_synced") == 1, timeout=30,
                       interval=0.5, message="pgbridge_slot_failover_synced never 1")
            check = _check_output(env)
            assert f"slot {topic_prefix} is a failover slot protected by synchronized_standby_slots" in check, check
            # the workload runs and is delivered (the standby's copy of the slot follows)
            running = wal_insert_lsn(primary_dsn)
            wait_until(lambda: (slot_confirmed_flush_lsn(primary_dsn, topic_prefix) or 0) > running, timeout=60,
                       interval=0.1, message=f"the workload is not delivered: {bridge.log()[-3000:]}")
            # when: the primary dies (kill -9), the standby is promoted
            primary.kill()
            promoted_at = time.monotonic()
            promote_standby(standby)
            promoted = time.monotonic() - promoted_at
            marker = commit_bound(standby_dsn, "INSERT INTO items VALUES (-1, 'after promotion', 0)")
            wait_until(lambda: (slot_confirmed_flush_lsn(standby_dsn, topic_prefix) or 0) >= marker, timeout=90,
                       interval=0.05, message=f"nothing delivered after the promotion: {bridge.log()[-3000:]}")
            first_delivery = time.monotonic() - promoted_at
            # the workload goes on on the promoted server, and is delivered from there
            going_on = wal_insert_lsn(standby_dsn)
            wait_until(lambda: (slot_confirmed_flush_lsn(standby_dsn, topic_prefix) or 0) > going_on, timeout=60,
                       interval=0.1, message=f"the workload is not delivered after the promotion: {bridge.log()[-3000:]}")
            writer.stop()
            # then: caught up on the promoted server, the topic replays to exactly its table
            wait_caught_up(standby_dsn, topic_prefix, timeout=60)
            events = read_events(kafka_broker.bootstrap, f"{topic_prefix}.{TABLE}", topic_prefix,
                                 min_count=ROWS, timeout=60)
            got, want = replay(events), table_state(standby_dsn, TABLE, ("id",))
            assert not diff_states(got, want), diff_states(got, want)
            copies: dict[tuple[object, ...], set[str]] = defaultdict(set)
            for event in events:
                if event.value is not None:
                    value = event.value
                    position = (value["source"]["commit_lsn"], value["source"]["lsn"], value["op"],
                                json.dumps(event.key, sort_keys=True, default=str))
                    copies[position].add(json.dumps(value, sort_keys=True, default=str))
            assert all(len(versions) == 1 for versions in copies.values()), "a duplicate differs"
            duplicates = sum(1 for e in events if e.value is not None) - len(copies)
            assert bridge.terminate() == 0, bridge.log()
    finally:
        standby.close()
    assert writer.committed > 50
    print(f"failover: promotion took {promoted:.2f}s; first new delivery {first_delivery:.2f}s after the promote "
          f"command; {writer.committed} transactions, {duplicates} duplicate events")
