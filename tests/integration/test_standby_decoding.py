"""Decoding on a standby (Postgres 16+; the suite's 18): pgbridge streams from a physical standby, so
the primary only ships WAL. The primary has ``wal_level = logical``; the standby streams through a
physical slot with ``hot_standby_feedback``. The tables and the publication are created on the
primary (a standby is read-only); pgbridge is pointed at the standby, with ``postgres.primary_dsn``
for its own writes (heartbeats, incremental snapshot watermarks, the running-xacts record a slot
created on a standby waits for).

Streaming from a standby, on 18: replay equals the primary's tables: rows that existed before
pgbridge started arrive through the initial snapshot (exported by the slot created on the standby),
a workload of inserts, updates, deletes and key changes on the primary through the stream, an
incremental snapshot signalled on the primary through watermarks written there; the slot on the
standby advances. Promoted under pgbridge, the standby keeps the slot and pgbridge goes on as on a
primary. Postgres 15 cannot decode on a standby: pgbridge refuses it with the reason.
"""

from __future__ import annotations

import re
import time

import psycopg
import pytest

from pgbridge.snapshot.incremental import emit_signal_sql
from tests.support.bridge import BridgeProcess, bridge_env, read_events
from tests.support.broker import Broker
from tests.support.churn import Churn, create_filled_table
from tests.support.cli import pgbridge
from tests.support.http import metric, scrape
from tests.support.postgres import (
    PgCluster,
    PgClusterFactory,
    commit_bound,
    create_database,
    execute,
    promote_standby,
    slot_confirmed_flush_lsn,
    start_standby,
    wal_insert_lsn,
)
from tests.support.replay import diff_states, replay, table_state
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

TABLES = ("public.items", "public.orders")
ROWS = 400
STANDBY_SLOT = "standby1"


def _replay_lsn(standby_dsn: str) -> int:
    return int(execute(standby_dsn, "SELECT (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint")[0][0])


def _wait_replayed(primary_dsn: str, standby_dsn: str, *, timeout: float = 60.0) -> None:
    """Until the standby replayed everything the primary wrote so far."""
    target = wal_insert_lsn(primary_dsn)
    wait_until(lambda: _replay_lsn(standby_dsn) >= target, timeout=timeout, interval=0.1,
               message=f"the standby never replayed {target:X}")



def _standby_pair(factory: PgClusterFactory, version: int) -> tuple[PgCluster, PgCluster]:
    """A primary (wal_level = logical, from the harness defaults) with database ``app`` holding the
    filled tables, and a physical standby of it (physical slot, hot_standby_feedback = on)."""
    primary = factory(version)
    create_database(primary, "app")
    for table in TABLES:
        create_filled_table(primary.dsn("app"), table, ROWS)
    return primary, start_standby(primary, STANDBY_SLOT)


def test_streaming_from_a_standby_replays_to_the_primarys_tables(
        pg_version: int, pg_cluster_factory: PgClusterFactory, kafka_broker: Broker, topic_prefix: str) -> None:
    # Postgres 18 (the suite's default): 15 cannot decode on a standby (16+), and
    # test_a_postgres_15_standby_is_refused_with_the_reason covers what pgbridge does there.
    # given: a primary with filled tables and a standby of it; no publication yet
    primary, standby = _standby_pair(pg_cluster_factory, pg_version)
    try:
        primary_dsn, standby_dsn = primary.dsn("app"), standby.dsn("app")
        env = bridge_env(standby_dsn, kafka_broker.bootstrap, topic_prefix, extra={
            "PGBRIDGE_POSTGRES__TABLES": ",".join(TABLES), "PGBRIDGE_POSTGRES__PRIMARY_DSN": primary_dsn,
            "PGBRIDGE_POSTGRES__HEARTBEAT_INTERVAL_S": "1", "PGBRIDGE_POSTGRES__SLOT_CHECK_INTERVAL_S": "1"})
        # the publication cannot be created on the standby: check and run name the statement for the primary
        _wait_replayed(primary_dsn, standby_dsn)
        check = pgbridge("check", env=env)
        assert "connected to a standby (in recovery)" in check.stdout, check.stdout + check.stderr
        assert f"publication {topic_prefix} does not exist on this standby" in check.stdout, check.stdout
        assert f"on the primary (it replicates to the standby): CREATE PUBLICATION {topic_prefix}" in check.stdout
        refused = pgbridge("run", env=env)
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert f"publication {topic_prefix} does not exist on the standby" in refused.stderr, refused.stderr
        assert f"create it on the primary; it replicates to the standby: CREATE PUBLICATION {topic_prefix} FOR " \
               "TABLE public.items, public.orders" in refused.stderr, refused.stderr
        execute(primary_dsn, f"CREATE PUBLICATION {topic_prefix} FOR TABLE {', '.join(TABLES)}")
        _wait_replayed(primary_dsn, standby_dsn)

        # when: pgbridge streams from the standby while a workload runs on the primary
        churns = [Churn(primary_dsn, table, ROWS, seed=seed, pause_s=0.01) for seed, table in enumerate(TABLES)]
        for churn in churns:
            churn.start()
        started = time.monotonic()
        with BridgeProcess(env).start(http=True) as bridge:
            port = bridge.http_port
            assert port is not None
            bridge.wait_confirmed(standby_dsn, topic_prefix, timeout=120, waiting_for="its slot on the standby")
            wait_until(lambda: "initial snapshot complete" in bridge.log(), timeout=120, interval=0.2,
                       message=f"the initial snapshot never finished: {bridge.log()[-3000:]}")
            snapshot_done = time.monotonic() - started
            first_confirmed = slot_confirmed_flush_lsn(standby_dsn, topic_prefix) or 0
            assert execute(primary_dsn, "SELECT count(*) FROM pg_replication_slots WHERE slot_type = 'logical'")[0][0] \
                == 0, "a logical slot was created on the primary"
            # an incremental snapshot, signalled on the primary: its watermarks are written there
            execute(primary_dsn, emit_signal_sql(["public.items"]))
            wait_until(lambda: "incremental snapshot of table done table=public.items" in bridge.log(), timeout=120,
                       interval=0.2, message=f"the incremental snapshot never finished: {bridge.log()[-3000:]}")
            # streaming goes on after the snapshot: the churn's changes made since are confirmed
            after_snapshot = wal_insert_lsn(primary_dsn)
            wait_until(lambda: (slot_confirmed_flush_lsn(standby_dsn, topic_prefix) or 0) > after_snapshot,
                       timeout=120, interval=0.2, message="nothing streamed after the incremental snapshot")
            transactions = sum(churn.stop() for churn in churns)
            # then: caught up to everything the primary wrote, the slot on the standby has advanced
            target = wal_insert_lsn(primary_dsn)
            caught_up_from = time.monotonic()
            wait_until(lambda: (slot_confirmed_flush_lsn(standby_dsn, topic_prefix) or 0) >= target, timeout=120,
                       interval=0.1, message=f"the standby's slot never confirmed {target:X}: {bridge.log()[-3000:]}")
            catch_up = time.monotonic() - caught_up_from
            final_confirmed = slot_confirmed_flush_lsn(standby_dsn, topic_prefix) or 0
            assert final_confirmed > first_confirmed
            heartbeats = metric(scrape(port), "pgbridge_heartbeats_total")
            assert heartbeats >= 1, "no heartbeat was written on the primary"
            log = bridge.log()
            assert "decoding on a standby" in log
            waited = re.search(r"slot created on a standby waited_s=([0-9.]+)", log)
            assert waited is not None, log[-3000:]
            for table in TABLES:
                events = read_events(kafka_broker.bootstrap, f"{topic_prefix}.{table}", topic_prefix,
                                     min_count=ROWS, timeout=60)
                want = table_state(primary_dsn, table, ("id",))
                assert want == table_state(standby_dsn, table, ("id",))
                got = replay(events)
                assert not diff_states(got, want), f"{table}: {diff_states(got, want)}"
                reads = sum(1 for e in events if e.value is not None and e.value["op"] == "r")
                assert reads >= ROWS // 2, f"{table}: {reads} snapshot reads of {ROWS} rows there before the start"
            # when: the standby is promoted under pgbridge; then: it goes on as on a primary
            promoted_at = time.monotonic()
            promote_standby(standby)
            marker = commit_bound(standby_dsn, "INSERT INTO items VALUES (-1, 'after promotion', 0)")
            wait_until(lambda: (slot_confirmed_flush_lsn(standby_dsn, topic_prefix) or 0) >= marker, timeout=60,
                       interval=0.05, message=f"nothing delivered after the promotion: {bridge.log()[-3000:]}")
            after_promotion = time.monotonic() - promoted_at
            # the walsender streams on across the promotion; pgbridge notices it and starts a session
            # that streams as from a primary (one "decoding on a standby" line: the first session's)
            wait_until(lambda: "the standby was promoted; reconnecting" in bridge.log(), timeout=30, interval=0.05,
                       message=f"the promotion went unnoticed: {bridge.log()[-3000:]}")
            marker = commit_bound(standby_dsn, "INSERT INTO items VALUES (-2, 'after the new session', 0)")
            wait_until(lambda: (slot_confirmed_flush_lsn(standby_dsn, topic_prefix) or 0) >= marker, timeout=60,
                       interval=0.05, message=f"nothing delivered by the new session: {bridge.log()[-3000:]}")
            new_session = time.monotonic() - promoted_at
            assert bridge.log().count("decoding on a standby standby=") == 1, bridge.log()
            events = read_events(kafka_broker.bootstrap, f"{topic_prefix}.public.items", topic_prefix,
                                 min_count=ROWS, timeout=60)
            got, want = replay(events), table_state(standby_dsn, "public.items", ("id",))
            assert not diff_states(got, want), f"after the promotion: {diff_states(got, want)}"
            assert bridge.terminate() == 0, bridge.log()
    finally:
        standby.close()
    assert transactions > 50
    print(f"standby decoding: slot created on the standby after waiting {waited.group(1)} s (nudged through "
          f"postgres.primary_dsn); initial snapshot done {snapshot_done:.1f} s after start; {transactions} "
          f"transactions; caught up {catch_up:.2f} s after the workload stopped; {heartbeats:.0f} heartbeats; "
          f"slot advanced {final_confirmed - first_confirmed} bytes; after a promotion the first new change was "
          f"confirmed {after_promotion:.2f} s after the promote command, one committed once the new session "
          f"started {new_session:.2f} s after it")


def test_a_postgres_15_standby_is_refused_with_the_reason(pg_cluster_factory: PgClusterFactory,
                                                          kafka_broker: Broker, topic_prefix: str) -> None:
    primary, standby = _standby_pair(pg_cluster_factory, 15)
    try:
        execute(primary.dsn("app"), f"CREATE PUBLICATION {topic_prefix} FOR TABLE {', '.join(TABLES)}")
        _wait_replayed(primary.dsn("app"), standby.dsn("app"))
        env = bridge_env(standby.dsn("app"), kafka_broker.bootstrap, topic_prefix)
        result = pgbridge("run", env=env)
        assert result.returncode == 1, result.stdout + result.stderr
        assert "is a standby (in recovery) running Postgres 15: logical decoding on a standby needs Postgres 16+" \
            in result.stderr, result.stderr
        check = pgbridge("check", env=env)
        assert check.returncode == 1
        assert "decoding on a standby needs Postgres 16+" in check.stdout, check.stdout
        with psycopg.connect(standby.dsn("app")) as conn:
            assert conn.execute("SELECT count(*) FROM pg_replication_slots").fetchone() == (0,)
    finally:
        standby.close()


def test_a_primary_below_wal_level_logical_and_missing_feedback_are_named(
        pg_cluster_factory: PgClusterFactory, kafka_broker: Broker, topic_prefix: str) -> None:
    # given: a primary at wal_level = replica; its standby at logical, without feedback or a physical slot
    primary = pg_cluster_factory(18, {"wal_level": "replica"})
    create_database(primary, "app")
    create_filled_table(primary.dsn("app"), TABLES[0], 10)
    execute(primary.dsn("app"), f"CREATE PUBLICATION {topic_prefix} FOR TABLE {TABLES[0]}")
    standby = start_standby(primary, STANDBY_SLOT, settings={"wal_level": "logical", "hot_standby_feedback": "off",
                                                             "primary_slot_name": ""})
    try:
        _wait_replayed(primary.dsn("app"), standby.dsn("app"))
        env = bridge_env(standby.dsn("app"), kafka_broker.bootstrap, topic_prefix,
                         extra={"PGBRIDGE_POSTGRES__PRIMARY_DSN": primary.dsn("app")})
        # when / then: check names what it can see on the standby
        check = pgbridge("check", env=env)
        assert "warning: hot_standby_feedback is off on the standby" in check.stdout, check.stdout
        assert "warning: the standby replicates without a physical slot" in check.stdout, check.stdout
        # and run stops at the slot's creation, naming the primary's wal_level and the fix
        result = pgbridge("run", env=env)
        assert result.returncode == 1, result.stdout + result.stderr
        assert 'requires "wal_level" >= "logical" on the primary' in result.stderr, result.stderr
        assert "on the primary: ALTER SYSTEM SET wal_level = logical" in result.stderr, result.stderr
        assert "decoding on a standby with hot_standby_feedback off" in result.stderr, result.stderr
    finally:
        standby.close()


def test_without_primary_dsn_the_standby_streams_and_the_writes_are_off_with_a_line_each(
        pg_cluster_factory: PgClusterFactory, kafka_broker: Broker, topic_prefix: str) -> None:
    # given: the pair, the publication created on the primary, no postgres.primary_dsn
    primary, standby = _standby_pair(pg_cluster_factory, 18)
    try:
        primary_dsn, standby_dsn = primary.dsn("app"), standby.dsn("app")
        execute(primary_dsn, f"CREATE PUBLICATION {topic_prefix} FOR TABLE {', '.join(TABLES)}")
        _wait_replayed(primary_dsn, standby_dsn)
        env = bridge_env(standby_dsn, kafka_broker.bootstrap, topic_prefix,
                         extra={"PGBRIDGE_POSTGRES__HEARTBEAT_INTERVAL_S": "1"})
        with BridgeProcess(env).start(http=True) as bridge:
            port = bridge.http_port
            # the operator's documented command ends the slot creation's wait for the primary
            wait_until(lambda: "waiting for the primary to log its running transactions" in bridge.log(), timeout=60,
                       interval=0.1, message=f"no wait announced: {bridge.log()[-3000:]}")
            wait_until(lambda: bool(execute(primary_dsn, "SELECT pg_log_standby_snapshot()"))
                       and slot_confirmed_flush_lsn(standby_dsn, topic_prefix) is not None, timeout=60, interval=0.5,
                       message=f"no slot on the standby: {bridge.log()[-3000:]}")
            wait_until(lambda: "initial snapshot complete" in bridge.log(), timeout=120, interval=0.2,
                       message=f"the initial snapshot never finished: {bridge.log()[-3000:]}")
            # when: changes and an execute-snapshot signal on the primary
            execute(primary_dsn, "UPDATE items SET n = n + 1 WHERE id % 3 = 0")
            execute(primary_dsn, "DELETE FROM orders WHERE id % 5 = 0")
            execute(primary_dsn, "INSERT INTO items SELECT g, 'late', 0 FROM generate_series(10001, 10050) g")
            execute(primary_dsn, emit_signal_sql(["public.items"]))
            target = wal_insert_lsn(primary_dsn)
            wait_until(lambda: (slot_confirmed_flush_lsn(standby_dsn, topic_prefix) or 0) >= target, timeout=120,
                       interval=0.1, message=f"the standby's slot never confirmed {target:X}: {bridge.log()[-3000:]}")
            wait_until(lambda: "incremental snapshots cannot run on a standby without postgres.primary_dsn"
                       in bridge.log(), timeout=30, interval=0.1, message=bridge.log()[-3000:])
            # then: streamed and replayed all the same; heartbeats and the incremental snapshot were off
            for table in TABLES:
                events = read_events(kafka_broker.bootstrap, f"{topic_prefix}.{table}", topic_prefix,
                                     min_count=ROWS, timeout=60)
                got, want = replay(events), table_state(primary_dsn, table, ("id",))
                assert not diff_states(got, want), f"{table}: {diff_states(got, want)}"
            log = bridge.log()
            assert "postgres.heartbeat_interval_s ignored: on a standby" in log
            assert port is not None and metric(scrape(port), "pgbridge_heartbeats_total") == 0
            assert bridge.terminate() == 0, bridge.log()
    finally:
        standby.close()
