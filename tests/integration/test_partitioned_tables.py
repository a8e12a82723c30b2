"""A partitioned table is one table (the contract): listed in ``postgres.tables``, its existing rows
are snapshotted once through the root, and changes to any partition (one created while streaming,
rows moving between partitions) land on the root's one topic with the root's schema."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import psycopg
import pytest

from pgbridge.snapshot.incremental import emit_signal_sql
from tests.support.bridge import BridgeProcess, bridge_env, read_events
from tests.support.broker import Broker
from tests.support.kafka import list_topics
from tests.support.replay import diff_states, replay, table_state, wait_caught_up
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

ROWS = 2000
TABLE = "public.measurements"


def _create(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE measurements (id bigint, year int, value text, PRIMARY KEY (id, year))"
                     " PARTITION BY RANGE (year)")
        conn.execute("CREATE TABLE measurements_2025 PARTITION OF measurements FOR VALUES FROM (2025) TO (2026)")
        conn.execute("CREATE TABLE measurements_2026 PARTITION OF measurements FOR VALUES FROM (2026) TO (2027)")
        conn.execute("INSERT INTO measurements SELECT i, 2025 + i %% 2, 'v' || i FROM generate_series(1, %s::int) i",
                     (ROWS,))


def test_partitioned_table_is_snapshotted_once_and_streamed_on_the_roots_topic(
        pg_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    # given: 2,000 rows in two partitions, the root listed in postgres.tables
    _create(pg_dsn)
    env = bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": TABLE, "PGBRIDGE_SNAPSHOT__CHUNK_ROWS": "300"})
    with BridgeProcess(env).start() as bridge:
        bridge.wait_confirmed(pg_dsn, topic_prefix, waiting_for="the initial snapshot to finish")
        # when: a partition is created while streaming and filled, rows move between partitions
        # (their key changes: year is in it), others change in place or go away
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE measurements_2027 PARTITION OF measurements FOR VALUES FROM (2027) TO (2028)")
            conn.execute("INSERT INTO measurements SELECT i, 2027, 'new' FROM generate_series(%s::int, %s::int) i",
                         (ROWS + 1, ROWS + 100))
            conn.execute("UPDATE measurements SET year = 2026, value = 'moved' WHERE year = 2025 AND id <= 50")
            conn.execute("UPDATE measurements SET year = 2025, value = 'back' WHERE year = 2027 AND id <= %s",
                         (ROWS + 10,))
            conn.execute("UPDATE measurements SET value = 'changed' WHERE id BETWEEN 100 AND 120")
            conn.execute("DELETE FROM measurements WHERE id BETWEEN 200 AND 210")
            # and an incremental snapshot of the root reads it once more, through the root
            conn.execute(emit_signal_sql([TABLE]))
        wait_until(lambda: "incremental snapshot of table done" in bridge.log(), timeout=90, interval=0.5,
                   message=f"the incremental snapshot never finished: {bridge.log()[-2000:]}")
        wait_caught_up(pg_dsn, topic_prefix, timeout=60)
        # then: one topic, named after the root
        topics = {t for t in list_topics(kafka_broker.bootstrap) if t.startswith(f"{topic_prefix}.")
                  and not t.startswith(f"{topic_prefix}._")} - {f"{topic_prefix}.transactions", f"{topic_prefix}.messages"}
        assert topics == {f"{topic_prefix}.{TABLE}"}
        events = read_events(kafka_broker.bootstrap, f"{topic_prefix}.{TABLE}", topic_prefix,
                             min_count=ROWS, timeout=60)
        values = [e.value for e in events if e.value is not None]
        assert {v["source"]["table"] for v in values} == {"measurements"}
        # each row read once per snapshot: the initial one (2,000) and the incremental one (all now)
        reads = [(e.key["id"], e.key["year"]) for e in events if e.value is not None and e.value["op"] == "r"]
        with psycopg.connect(pg_dsn) as conn:
            now = conn.execute("SELECT count(*) FROM measurements").fetchone()
        assert now is not None
        assert len(reads) == ROWS + now[0], f"{len(reads)} snapshot reads"
        assert max(Counter(reads).values()) == 2, "a row read more than once by one snapshot"
        # and the topic replays to SELECT * FROM the root
        got, want = replay(events), table_state(pg_dsn, TABLE, ("id", "year"))
        assert not diff_states(got, want), diff_states(got, want)
        assert bridge.terminate() == 0, bridge.log()


def test_check_warns_about_a_publication_that_publishes_partitions_separately(
        pg_dsn: str, kafka_broker: Broker) -> None:
    _create(pg_dsn)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE PUBLICATION leafy FOR TABLE measurements")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PGBRIDGE_")}
    env = {**clean, "PGBRIDGE_POSTGRES__DSN": pg_dsn, "PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS": kafka_broker.bootstrap,
           "PGBRIDGE_POSTGRES__PUBLICATION": "leafy"}
    result = subprocess.run([sys.executable, "-m", "pgbridge", "check"], env=env, capture_output=True, text=True,
                            timeout=120)
    assert "publishes the partitions of public.measurements separately" in result.stdout, result.stdout
    assert "ALTER PUBLICATION leafy SET (publish_via_partition_root = true)" in result.stdout
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("ALTER PUBLICATION leafy SET (publish_via_partition_root = true)")
    result = subprocess.run([sys.executable, "-m", "pgbridge", "check"], env=env, capture_output=True, text=True,
                            timeout=120)
    assert "separately" not in result.stdout, result.stdout
