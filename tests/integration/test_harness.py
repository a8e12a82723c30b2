"""The test harness itself: real Postgres 15 and 18 clusters, the suite's broker (Apache Kafka by
default) and the demo's Tansu broker behave as the other integration tests assume."""

from __future__ import annotations

import os
import pwd
import subprocess
import time

import psycopg
import pytest
from confluent_kafka import KafkaError, Message, Producer

from tests.support.broker import Broker, TansuBroker, broker_kind
from tests.support.kafka import create_topic, list_topics, read_topic, read_topics
from tests.support.postgres import (
    PgCluster,
    PgClusterFactory,
    create_database,
    current_wal_lsn,
    drop_database,
    execute,
    slot_confirmed_flush_lsn,
)
from tests.support.waiting import wait_until

# The harness is what the other tests assume of a cluster of each supported version: every test here
# runs on 15 and 18.
pytestmark = [pytest.mark.integration, pytest.mark.each_pg_version]



def _produce(bootstrap: str, topic: str, items: list[tuple[bytes, bytes]]) -> None:
    """Produce idempotently with acks=all and fail unless every record was acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
    errors: list[KafkaError] = []
    delivered: list[Message] = []

    def on_delivery(error: KafkaError | None, message: Message) -> None:
        if error is not None:
            errors.append(error)
        else:
            delivered.append(message)

    for key, value in items:
        producer.produce(topic, key=key, value=value, on_delivery=on_delivery)
    assert producer.flush(30) == 0, "records still in flight after 30s"
    assert errors == []
    assert len(delivered) == len(items)


def test_cluster_runs_logical_wal_with_prepared_transactions(pg_cluster: PgCluster, pg_dsn: str) -> None:
    settings = dict(
        execute(
            pg_dsn,
            "SELECT name, setting FROM pg_settings WHERE name IN "
            "('wal_level', 'max_prepared_transactions', 'listen_addresses', 'server_version_num', 'fsync')",
        )
    )
    assert settings["wal_level"] == "logical"
    assert int(settings["max_prepared_transactions"]) > 0
    assert settings["listen_addresses"] == "127.0.0.1"
    assert settings["fsync"] == "off"
    assert int(settings["server_version_num"]) // 10000 == pg_cluster.version
    assert execute(pg_dsn, "SELECT current_database(), current_user")[0][1] == "postgres"
    if os.geteuid() == 0:
        assert pg_cluster.pid is not None
        assert pwd.getpwuid(os.stat(f"/proc/{pg_cluster.pid}").st_uid).pw_name == "postgres"


def test_pgoutput_slot_shows_an_insert(pg_dsn: str) -> None:
    # given a table in a publication and a pgoutput slot
    execute(pg_dsn, "CREATE TABLE harness_items (id int PRIMARY KEY, name text)")
    execute(pg_dsn, "CREATE PUBLICATION harness_pub FOR TABLE harness_items")
    execute(pg_dsn, "SELECT pg_create_logical_replication_slot('harness_slot', 'pgoutput')")
    created_at = slot_confirmed_flush_lsn(pg_dsn, "harness_slot")
    assert created_at is not None
    # when a row is inserted
    execute(pg_dsn, "INSERT INTO harness_items VALUES (1, 'one')")
    # then the slot shows Begin, Relation, Insert, Commit without consuming them, once the commit's
    # WAL is flushed (synchronous_commit=off: the WAL writer flushes it within a few 200ms rounds)
    changes = wait_until(
        lambda: execute(
            pg_dsn,
            "SELECT lsn, data FROM pg_logical_slot_peek_binary_changes('harness_slot', NULL, NULL, "
            "'proto_version', '1', 'publication_names', 'harness_pub')",
        ),
        timeout=10,
        message="the insert to be decodable from the slot",
    )
    tags = [bytes(data)[:1] for _lsn, data in changes]
    assert tags == [b"B", b"R", b"I", b"C"]
    insert = bytes(changes[2][1])
    assert b"one" in insert
    assert slot_confirmed_flush_lsn(pg_dsn, "harness_slot") == created_at
    assert current_wal_lsn(pg_dsn) > created_at
    assert slot_confirmed_flush_lsn(pg_dsn, "no_such_slot") is None


def test_drop_database_ends_walsenders_slots_and_prepared_transactions(pg_cluster: PgCluster) -> None:
    # given a database with a prepared transaction and a slot streamed by a live walsender
    dbname = "harness_drop_me"
    create_database(pg_cluster, dbname)
    dsn = pg_cluster.dsn(dbname)
    execute(dsn, "CREATE TABLE t (id int)")
    execute(dsn, "CREATE PUBLICATION p FOR ALL TABLES")
    execute(dsn, "SELECT pg_create_logical_replication_slot('harness_live', 'pgoutput')")
    with psycopg.connect(dsn) as conn:
        conn.execute("INSERT INTO t VALUES (1)")
        conn.execute("PREPARE TRANSACTION 'harness_gid'")
    receiver = subprocess.Popen(
        [
            str(pg_cluster.bindir / "pg_recvlogical"),
            f"--dbname={dsn}",
            "--slot=harness_live",
            "--start",
            "--file=/dev/null",
            "--option=proto_version=1",
            "--option=publication_names=p",
            "--no-loop",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(
            lambda: (
                execute(dsn, "SELECT active FROM pg_replication_slots WHERE slot_name = 'harness_live'")
                == [(True,)]
            ),
            timeout=10,
            message="pg_recvlogical to stream the slot",
        )
        # when the database is dropped
        drop_database(pg_cluster, dbname)
        # then the walsender, its slot, the prepared transaction and the database are gone
        assert receiver.wait(10) != 0
        assert pg_cluster.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = 'harness_live'") == []
        assert pg_cluster.execute("SELECT 1 FROM pg_prepared_xacts WHERE gid = 'harness_gid'") == []
        assert pg_cluster.execute("SELECT 1 FROM pg_database WHERE datname = %s", params=(dbname,)) == []
    finally:
        receiver.kill()
        receiver.wait()
        drop_database(pg_cluster, dbname)


def test_broker_accepts_idempotent_acks_all_produce(kafka_broker: Broker, topic_prefix: str) -> None:
    topic = f"{topic_prefix}.items"
    items = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(20)]
    create_topic(kafka_broker.bootstrap, topic, partitions=4)

    _produce(kafka_broker.bootstrap, topic, items)

    records = read_topic(kafka_broker.bootstrap, topic, min_count=len(items), idle=0.5)
    assert sorted((r.key, r.value) for r in records) == sorted(items)
    assert all(r.topic == topic and r.timestamp is not None for r in records)
    assert len({r.partition for r in records}) > 1, "keys spread over the 4 partitions"
    assert topic in list_topics(kafka_broker.bootstrap)


def test_reading_a_missing_topic_does_not_create_it(kafka_broker: Broker, topic_prefix: str) -> None:
    present, missing = f"{topic_prefix}.present", f"{topic_prefix}.missing"
    create_topic(kafka_broker.bootstrap, present)
    _produce(kafka_broker.bootstrap, present, [(b"k", b"v")])

    found = read_topics(kafka_broker.bootstrap, [present, missing], min_count={present: 1}, idle=0.5)

    assert [r.value for r in found[present]] == [b"v"]
    assert found[missing] == []
    assert missing not in list_topics(kafka_broker.bootstrap)
    with pytest.raises(AssertionError, match="never appeared"):
        read_topic(kafka_broker.bootstrap, missing, min_count=1, timeout=1.5)


def test_fresh_broker_restarts_on_the_same_address(fresh_broker: Broker, topic_prefix: str) -> None:
    topic = f"{topic_prefix}.kept"
    create_topic(fresh_broker.bootstrap, topic)
    _produce(fresh_broker.bootstrap, topic, [(b"k", b"v")])
    bootstrap = fresh_broker.bootstrap

    fresh_broker.stop()
    assert not fresh_broker.running
    fresh_broker.restart()

    assert fresh_broker.running
    assert fresh_broker.bootstrap == bootstrap
    # Apache Kafka comes back with its log (the realistic outage); Tansu comes back empty
    expected = [b"v"] if broker_kind() == "kafka" else []
    assert [r.value for r in read_topic(fresh_broker.bootstrap, topic, min_count=len(expected), idle=0.5)] == expected


def test_tansu_broker_restarts_empty_on_the_same_port(tansu_broker: TansuBroker, topic_prefix: str) -> None:
    topic = f"{topic_prefix}.lost"
    _produce(tansu_broker.bootstrap, topic, [(b"k", b"v")])  # Tansu creates a topic on first use
    port = tansu_broker.port

    tansu_broker.restart()

    assert tansu_broker.running
    assert tansu_broker.port == port
    assert topic not in list_topics(tansu_broker.bootstrap)
    assert read_topic(tansu_broker.bootstrap, topic, idle=0.5) == []
    tansu_broker.stop()
    assert not tansu_broker.running


def test_cluster_factory_applies_custom_settings(pg_cluster_factory: PgClusterFactory, pg_version: int) -> None:
    cluster = pg_cluster_factory(pg_version, {"logical_decoding_work_mem": "64kB"})
    replica = pg_cluster_factory(pg_version, {"wal_level": "replica"})

    assert cluster.version == pg_version
    assert cluster.execute("SHOW logical_decoding_work_mem") == [("64kB",)]
    assert cluster.execute("SHOW wal_level") == [("logical",)]
    assert replica.execute("SHOW wal_level") == [("replica",)]
    assert replica.port != cluster.port


def test_killed_cluster_recovers_committed_rows(pg_cluster_factory: PgClusterFactory, pg_version: int) -> None:
    # given a committed row whose commit waited for its WAL to be written (the default
    # synchronous_commit=off would lose the last few hundred ms of commits in a crash)
    cluster = pg_cluster_factory(pg_version)
    cluster.execute("CREATE TABLE kept (id int)")
    cluster.execute("BEGIN; SET LOCAL synchronous_commit = on; INSERT INTO kept VALUES (42); COMMIT")
    port = cluster.port

    # when the server is killed and started again
    cluster.kill()
    assert not cluster.running
    started = time.monotonic()
    cluster.start()

    # then it ran crash recovery, on the same port, and the row is there
    assert cluster.port == port
    assert cluster.execute("SELECT id FROM kept") == [(42,)]
    assert "not properly shut down" in cluster.log_tail(100)
    assert time.monotonic() - started < 30
    cluster.restart()
    assert cluster.execute("SELECT count(*) FROM kept") == [(1,)]


