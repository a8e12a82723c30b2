"""SIGTERM during a workload: exit 0, and the slot is confirmed exactly through the last delivered
transaction: its commit record's end, or beyond it only over WAL that holds no commit. SIGTERM while
starting against a server that does not answer: exit 0 within seconds, nothing confirmed."""

from __future__ import annotations

import threading
import time
from typing import Final

import psycopg
import pytest

from tests.support.bridge import BridgeProcess, bridge_env, load_schemas
from tests.support.broker import Broker
from tests.support.kafka import read_topic
from tests.support.ports import free_port
from tests.support.postgres import PgClusterFactory, create_database, slot_confirmed_flush_lsn, wal_insert_lsn
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


def _lsn(value: int) -> str:
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


# SIGTERM to exit while pgbridge waits on a server that does not answer: the waits are asked in
# attempts of 1 s (publish/topics.py ATTEMPT_S) and the process then closes its clients; a metadata
# request held the stop for 30 s before. Measured 1.1-1.6 s on a shared 2-core machine.
PROMPT_S: Final = 5.0


@pytest.mark.parametrize("unreachable", ["kafka", "postgres", "registry"])
def test_sigterm_while_a_server_is_unreachable_at_start_exits_0_promptly_and_confirms_nothing(
        unreachable: str, pg_dsn: str, topic_prefix: str) -> None:
    # given: pgbridge run, with one of its servers a closed port on loopback, waiting on it
    closed = f"127.0.0.1:{free_port()}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE t (id int PRIMARY KEY); CREATE PUBLICATION {topic_prefix} FOR TABLE t")
    dsn = pg_dsn if unreachable != "postgres" else psycopg.conninfo.make_conninfo(pg_dsn, port=closed.split(":")[1])
    extra = {"PGBRIDGE_SNAPSHOT__MODE": "never"}
    if unreachable == "registry":
        extra["PGBRIDGE_SCHEMA_REGISTRY__URL"] = f"http://{closed}"
    if unreachable == "postgres":  # the session's reconnects (the leader lock's wait is another)
        extra["PGBRIDGE_HA__LEADER_ELECTION"] = "false"
    # Kafka is the closed port in every case: start-up reaches it only after Postgres and the registry
    env = bridge_env(dsn, closed, topic_prefix, extra=extra)
    # Kafka is asked right after the publication is settled; the others are waited for with backoff
    waiting = "publication mode" if unreachable == "kafka" else "transient failure; reconnecting"
    with BridgeProcess(env).start() as bridge:
        wait_until(lambda: waiting in bridge.log(), timeout=60, message=f"pgbridge never waited: {waiting}")
        # when
        began = time.monotonic()
        code = bridge.terminate()
        took = time.monotonic() - began
    # then: the documented exit, promptly, with nothing confirmed (no slot was even created)
    log = bridge.log()
    assert code == 0, log
    assert took < PROMPT_S, f"stopped {took:.1f} s after SIGTERM:\n{log[-3000:]}"
    assert "stop requested" in log and "Traceback" not in log, log
    assert slot_confirmed_flush_lsn(pg_dsn, topic_prefix) is None


def test_sigterm_mid_workload_confirms_the_end_of_the_last_delivered_transaction(
        pg_version: int, pg_cluster_factory: PgClusterFactory, kafka_broker: Broker, topic_prefix: str) -> None:
    # given: a cluster of its own (no autovacuum: every commit in the WAL is the workload's)
    cluster = pg_cluster_factory(pg_version, {"autovacuum": "off"})
    create_database(cluster, "app")
    dsn = cluster.dsn("app")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION pg_walinspect")
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
    env = bridge_env(dsn, kafka_broker.bootstrap, topic_prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": "public.t", "PGBRIDGE_SNAPSHOT__MODE": "never"})
    stop = threading.Event()

    def workload() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            i = 0
            while not stop.is_set():
                with conn.transaction():
                    for _ in range(3):
                        i += 1
                        conn.execute("INSERT INTO t VALUES (%s, 'w')", (i,))

    with BridgeProcess(env).start() as bridge:
        bridge.wait_confirmed(dsn, topic_prefix, timeout=60)
        writer = threading.Thread(target=workload, daemon=True)
        writer.start()
        # mid-workload: transactions committed after the writer started are being delivered
        started = wal_insert_lsn(dsn)
        wait_until(lambda: (slot_confirmed_flush_lsn(dsn, topic_prefix) or 0) > started, timeout=60,
                   message="nothing of the workload was confirmed")
        # when: SIGTERM while transactions keep committing
        code = bridge.terminate()
        stop.set()
        writer.join(30)
    # then: a clean exit
    assert code == 0, bridge.log()
    confirmed = slot_confirmed_flush_lsn(dsn, topic_prefix)
    assert confirmed is not None
    # a transaction is delivered when its END boundary is in Kafka: SIGTERM may stop reading in the
    # middle of one, whose first records then are in Kafka but which is (rightly) not confirmed
    records = read_topic(kafka_broker.bootstrap, f"{topic_prefix}.transactions", min_count=1, timeout=60, idle=2.0)
    store = load_schemas(kafka_broker.bootstrap, topic_prefix)
    boundaries = [store.decode(r.value) for r in records if r.value is not None]
    delivered = {b["commit_lsn"] for b in boundaries if b["status"] == "END"}
    last = max(delivered)
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT (end_lsn - '0/0')::bigint FROM pg_get_wal_record_info(%s::pg_lsn)",
                           (_lsn(last),)).fetchone()
        assert row is not None
        last_end = int(row[0])
        # every commit between the first delivered one and the confirmed LSN was delivered ...
        commits = {int(r[0]) for r in conn.execute(
            "SELECT (start_lsn - '0/0')::bigint FROM pg_get_wal_records_info(%s::pg_lsn, %s::pg_lsn)"
            " WHERE resource_manager = 'Transaction' AND record_type LIKE 'COMMIT%%'",
            (_lsn(min(delivered)), _lsn(confirmed))).fetchall()}
    assert commits <= delivered, sorted(commits - delivered)[:5]
    # ... and the confirmed LSN is the end of the last delivered commit (or beyond it only over
    # WAL without commits, when the walsender's keepalive reported that position while idle)
    assert confirmed >= last_end
    assert not [c for c in commits if c >= last_end]
    print(f"PG {pg_version}: {len(delivered)} transactions delivered; last commit ends at {_lsn(last_end)}, "
          f"confirmed {_lsn(confirmed)} ({confirmed - last_end} bytes beyond)")
