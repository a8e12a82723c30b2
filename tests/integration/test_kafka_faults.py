"""Broker faults on a real three-node Apache Kafka cluster (RF 3, ``min.insync.replicas=2``).

Each scenario runs the remembering workload (tests/support/workload.py) while one broker fails:
the partition leader killed with ``kill -9``; the leader and a second broker killed (no quorum, ISR
below ``min.insync.replicas``) and the leader back with its log, timing the first new delivery; a
broker frozen with SIGSTOP for 20 s. In the last two pgbridge itself is killed with ``kill -9`` and
restarted during the outage (so whatever it had confirmed by then must already be in Kafka). In each: nothing lost, nothing reordered, duplicates identical, replay equals
the table, and the slot's confirmed LSN never passed a change that Kafka had not acknowledged.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.support.bridge import BridgeProcess, bridge_env, decode_records, load_schemas
from tests.support.broker import KafkaCluster, start_apache_kafka
from tests.support.kafka import read_topic
from tests.support.postgres import slot_confirmed_flush_lsn, wal_insert_lsn
from tests.support.replay import diff_states, replay, table_state, wait_caught_up
from tests.support.waiting import wait_until
from tests.support.workload import ITEMS_DDL, Workload, verify_committed

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def cluster() -> Iterator[KafkaCluster]:
    started = time.monotonic()
    cluster = start_apache_kafka(nodes=3)
    print(f"\nApache Kafka, 3 nodes, ready in {time.monotonic() - started:.1f}s")
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def healthy(cluster: KafkaCluster) -> Iterator[KafkaCluster]:
    """The shared cluster with every node up before and after the test."""
    cluster.restart()
    yield cluster
    for node in cluster.nodes:
        node.resume()
    cluster.restart()


def _start(pg_dsn: str, cluster: KafkaCluster, prefix: str) -> tuple[dict[str, str], BridgeProcess]:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(ITEMS_DDL)
    env = bridge_env(pg_dsn, cluster.bootstrap, prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": "public.items", "PGBRIDGE_SNAPSHOT__MODE": "never",
                            "PGBRIDGE_KAFKA__TOPIC_REPLICATION_FACTOR": "3",
                            "PGBRIDGE_KAFKA__DELIVERY_TIMEOUT_MS": "120000"})
    bridge = BridgeProcess(env).start()
    bridge.wait_confirmed(pg_dsn, prefix, timeout=60)
    return env, bridge


def _committing(workload: Workload, more: int = 20) -> None:
    """Wait until the workload has committed ``more`` transactions from now on."""
    start = len(workload.committed)
    wait_until(lambda: len(workload.committed) >= start + more, timeout=60, interval=0.05,
               message=f"the workload did not commit {more} transactions")


def _first_delivery(pg_dsn: str, cluster: KafkaCluster, prefix: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO items VALUES (0, 'first', 0)")
    read_topic(cluster.bootstrap, f"{prefix}.public.items", min_count=1, timeout=60, idle=0.2)


def _verify(pg_dsn: str, cluster: KafkaCluster, prefix: str, workload: Workload) -> int:
    wait_caught_up(pg_dsn, prefix, timeout=180)
    topic = f"{prefix}.public.items"
    records = read_topic(cluster.bootstrap, topic, min_count=workload.expected_total + 1, timeout=180, idle=2.0)
    store = load_schemas(cluster.bootstrap, prefix)
    values: list[dict[str, Any]] = [store.decode(r.value) for r in records if r.value is not None]
    duplicates = verify_committed([v for v in values if v["after"] is None or v["after"]["id"] != 0],
                                  workload.committed)
    state = replay(decode_records(store, records))
    assert diff_states(state, table_state(pg_dsn, "public.items", ("id",))) == ""
    return duplicates


def test_partition_leader_killed_under_load_loses_and_reorders_nothing(
        pg_dsn: str, healthy: KafkaCluster, topic_prefix: str) -> None:
    # given: pgbridge streaming into the three-node cluster
    _env, bridge = _start(pg_dsn, healthy, topic_prefix)
    try:
        _first_delivery(pg_dsn, healthy, topic_prefix)
        workload = Workload(pg_dsn, transactions=800, seed=3)
        workload.start()
        _committing(workload)
        # when: the leader of the table topic's partition dies with kill -9, and comes back later
        leader = healthy.leader_of(f"{topic_prefix}.public.items")
        leader.kill()
        killed = time.monotonic()
        successor = healthy.leader_of(f"{topic_prefix}.public.items")
        print(f"leader {leader.node_id} killed; node {successor.node_id} leads after "
              f"{time.monotonic() - killed:.1f}s")
        # pgbridge delivers through the new leader before the old one comes back
        mark = wal_insert_lsn(pg_dsn)
        wait_until(lambda: (slot_confirmed_flush_lsn(pg_dsn, topic_prefix) or 0) >= mark, timeout=120,
                   message=f"nothing delivered through the new leader: {bridge.log()[-3000:]}")
        leader.start()
        workload.join(300)
        assert workload.error is None, workload.error
        # then
        duplicates = _verify(pg_dsn, healthy, topic_prefix, workload)
        assert bridge.alive(), bridge.log()
        print(f"transactions={len(workload.committed)} changes={workload.expected_total} duplicates={duplicates}")
        assert bridge.terminate() == 0, bridge.log()
    finally:
        bridge.kill()


def test_a_broker_frozen_for_20s_with_pgbridge_killed_meanwhile_loses_nothing(
        pg_dsn: str, healthy: KafkaCluster, topic_prefix: str) -> None:
    # given
    env, bridge = _start(pg_dsn, healthy, topic_prefix)
    try:
        _first_delivery(pg_dsn, healthy, topic_prefix)
        workload = Workload(pg_dsn, transactions=800, seed=5)
        workload.start()
        _committing(workload)
        # when: the partition leader is SIGSTOPped for 20 s; halfway through pgbridge is killed -9
        # and restarted, so what it had confirmed by then must already be in Kafka
        leader = healthy.leader_of(f"{topic_prefix}.public.items")
        leader.pause()
        frozen = time.monotonic()
        time.sleep(10.0)  # the scenario's timing (frozen 20 s, the kill halfway), not a wait
        confirmed_at_kill = slot_confirmed_flush_lsn(pg_dsn, topic_prefix)
        bridge.kill()
        bridge = BridgeProcess(env, log_path=bridge.log_path).start()
        time.sleep(max(0.0, 20.0 - (time.monotonic() - frozen)))  # the rest of the 20 s freeze
        leader.resume()
        workload.join(300)
        assert workload.error is None, workload.error
        # then
        duplicates = _verify(pg_dsn, healthy, topic_prefix, workload)
        print(f"confirmed at kill {confirmed_at_kill}, transactions={len(workload.committed)} "
              f"duplicates={duplicates}")
        assert bridge.terminate() == 0, bridge.log()
    finally:
        bridge.kill()


def test_quorum_lost_then_a_broker_back_with_its_log_delivers_within_seconds(
        pg_dsn: str, healthy: KafkaCluster, topic_prefix: str) -> None:
    # given: pgbridge streaming into the three-node cluster under the workload
    env, bridge = _start(pg_dsn, healthy, topic_prefix)
    try:
        _first_delivery(pg_dsn, healthy, topic_prefix)
        workload = Workload(pg_dsn, transactions=800, seed=7)
        workload.start()
        _committing(workload)
        # when: the partition leader and a second broker die with kill -9: no quorum, no leader,
        # fewer than min.insync.replicas; pgbridge is killed -9 and restarted during the outage,
        # so what it had confirmed by then must already be in Kafka
        topic = f"{topic_prefix}.public.items"
        leader = healthy.leader_of(topic)
        other = next(node for node in healthy.nodes if node is not leader)
        leader.kill()
        other.kill()
        _committing(workload)  # the outage: the workload keeps committing
        bridge.kill()
        confirmed_during_outage = slot_confirmed_flush_lsn(pg_dsn, topic_prefix) or 0
        bridge = BridgeProcess(env, log_path=bridge.log_path).start()
        time.sleep(3.0)  # the outage goes on with a new pgbridge waiting for Kafka: a duration, not a wait
        # when: the old leader comes back with its log
        back = time.monotonic()
        leader.start()
        healthy.wait_ready()
        ready_s = time.monotonic() - back
        wait_until(lambda: (slot_confirmed_flush_lsn(pg_dsn, topic_prefix) or 0) > confirmed_during_outage,
                   timeout=120, interval=0.05, message="nothing confirmed after the broker came back")
        first_delivery_s = time.monotonic() - back
        print(f"broker {leader.node_id} back: ready after {ready_s:.1f}s, first new delivery confirmed "
              f"{first_delivery_s:.1f}s after its start ({first_delivery_s - ready_s:.1f}s after ready)")
        # the realistic outage heals in seconds, not after a delivery timeout (30 s). Usually 1-2.5 s;
        # about 20 s has been seen on Postgres 18 when the restarted pgbridge was still inside its
        # first read of the snapshot-progress topic (open question, noted in the issue)
        assert first_delivery_s - ready_s < 25.0
        other.start()
        workload.join(300)
        assert workload.error is None, workload.error
        # then: nothing lost or reordered, replay equals the table
        duplicates = _verify(pg_dsn, healthy, topic_prefix, workload)
        print(f"transactions={len(workload.committed)} changes={workload.expected_total} duplicates={duplicates}")
        assert bridge.terminate() == 0, bridge.log()
    finally:
        bridge.kill()
