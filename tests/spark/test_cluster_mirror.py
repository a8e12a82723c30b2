"""The mirror job on a real cluster and real distributed storage: Postgres 18 → pgbridge → Apache
Kafka → ``spark-submit --master spark://...`` of ``mirror.py`` (executors in two worker JVMs) →
Delta tables on HDFS, and on S3 through s3a (moto's server); Iceberg tables on HDFS.

The driver is killed with SIGKILL in the middle of a micro-batch: after at least one table's
commit of that batch and before Spark's checkpoint marks the batch done. The same command on the
same checkpoint then finishes the work: every table equals ``SELECT *`` (as a multiset, so a row
applied twice would show, a keyless table included), and no table's history holds one micro-batch
twice (Delta: its log's ``txn`` actions; Iceberg: its snapshots' progress).
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from jvm.fetch import fetch

from tests.spark.cluster_support import (
    Store,
    Submission,
    delta_transactions,
    hdfs_store,
    iceberg_batches,
    mirror_command,
    numbered,
    s3_store,
)
from tests.spark.mirror_support import assert_mirrored
from tests.support.bridge import BridgeProcess, bridge_env
from tests.support.broker import Broker
from tests.support.postgres import wait_published
from tests.support.spark_cluster import SparkCluster

pytestmark = [pytest.mark.spark, pytest.mark.cluster, pytest.mark.integration, pytest.mark.timeout(1800)]

JOB_TIMEOUT_S = 400.0
TABLES = ("public.items", "public.events", "public.notes")
SCHEMA = """
CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL, qty int, price numeric(10,2), updated timestamptz);
CREATE TABLE events (at timestamp, message text);
ALTER TABLE events REPLICA IDENTITY FULL;
CREATE TABLE notes (id int PRIMARY KEY, body text);
INSERT INTO items SELECT g, 'item ' || g, g % 10, g * 1.5, '2024-01-01 00:00:00+00' FROM generate_series(1, 60) g;
"""


def first_round(dsn: str) -> None:
    """Inserts in many small transactions, updates, deletes, a key change; duplicate keyless rows."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for start in range(61, 221, 20):
            conn.execute("INSERT INTO items SELECT g, 'item ' || g, g %% 10, g * 1.5, now()"
                         " FROM generate_series(%s::int, %s::int) g", (start, start + 19))
        conn.execute("INSERT INTO events SELECT TIMESTAMP '2024-01-01' + g * INTERVAL '1 hour', 'e' || g % 30"
                     " FROM generate_series(1, 90) g")
        conn.execute("INSERT INTO events SELECT TIMESTAMP '2024-01-01' + g * INTERVAL '1 hour', 'e' || g % 30"
                     " FROM generate_series(1, 30) g")  # the same rows again: a multiset
        conn.execute("INSERT INTO notes SELECT g, 'note ' || g FROM generate_series(1, 40) g")
        conn.execute("UPDATE items SET qty = qty + 1, updated = now() WHERE id % 3 = 0")
        conn.execute("DELETE FROM items WHERE id % 7 = 0")
        conn.execute("DELETE FROM events WHERE message = 'e5'")
        conn.execute("UPDATE notes SET id = id + 1000 WHERE id <= 5")  # key change


def second_round(dsn: str) -> None:
    """While the job is down: more of everything, and a truncate."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO items SELECT g, 'late ' || g, 1, 2.5, now() FROM generate_series(221, 260) g")
        conn.execute("UPDATE items SET name = name || ' (2)' WHERE id % 5 = 0")
        conn.execute("UPDATE events SET message = 'changed' WHERE message = 'e7'")
        conn.execute("TRUNCATE notes")
        conn.execute("INSERT INTO notes VALUES (1, 'after truncate'), (2, 'again')")


# (storage, table format): Delta on both storages; Iceberg on HDFS (its Hadoop catalog's commit is a
# rename, which HDFS makes atomic)
@pytest.fixture(params=[("hdfs", "delta"), ("s3a", "delta"), ("hdfs", "iceberg")], ids=["hdfs", "s3a", "hdfs-iceberg"])
def target(request: pytest.FixtureRequest, spark: Any) -> Iterator[tuple[Store, str]]:
    """A folder of this test's own on HDFS, or a bucket of its own on S3 (moto) through s3a, and the
    table format; the tests' own Spark session (which reads the mirror back) is given the settings
    to reach it."""
    storage, table_format = request.param
    yield _store(request, spark, storage), table_format


def _store(request: pytest.FixtureRequest, spark: Any, storage: str) -> Store:
    folder = f"t-{uuid.uuid4().hex[:10]}"
    if storage == "hdfs":
        return hdfs_store(request.getfixturevalue("hdfs"), folder)
    store = s3_store(request.getfixturevalue("s3"), folder, sorted(fetch("s3a").glob("*.jar")))
    for key, value in store.conf.items():
        spark.conf.set(key.removeprefix("spark.hadoop."), value)
    return store


def batch_in_flight(store: Store) -> int | None:
    """The micro-batch in flight (the checkpoint has its offsets, not its commit); None between batches."""
    pending = numbered(store.names("checkpoint/offsets")) - numbered(store.names("checkpoint/commits"))
    return max(pending) if pending else None


def committed_batches(store: Store, table_format: str, table: str,
                      read_before: dict[str, list[tuple[str, int]]] | None = None) -> list[int]:
    """The micro-batches the table's history holds a commit of, one entry per commit."""
    if table_format == "iceberg":
        return [batch for _, batch in iceberg_batches(store, f"mirror/{table}")]
    return [version for _, version in delta_transactions(store, f"mirror/{table}", read_before)]


def kill_mid_batch(job: Submission, store: Store, table_format: str) -> tuple[int, str]:
    """SIGKILL the driver once a micro-batch is in flight and one table's history already holds that
    batch's commit: (the batch, that table)."""
    deadline = time.monotonic() + JOB_TIMEOUT_S
    read_before: dict[str, list[tuple[str, int]]] = {}
    while time.monotonic() < deadline:
        assert job.running(), f"the job ended before a micro-batch could be interrupted:\n{job.log()[-4000:]}"
        batch = batch_in_flight(store)
        committed = [] if batch is None else [
            table for table in TABLES if batch in committed_batches(store, table_format, table, read_before)]
        if batch is not None and committed:
            job.kill()
            return batch, committed[0]
        time.sleep(0.05)
    raise AssertionError(f"no micro-batch was seen in flight within {JOB_TIMEOUT_S:g} s:\n{job.log()[-4000:]}")


def test_driver_killed_mid_batch_on_a_cluster_resumes_to_equal_tables(
        spark_cluster: SparkCluster, target: tuple[Store, str], spark: Any, pg_dsn: str, apache_kafka: Broker,
        topic_prefix: str, tmp_path: Path) -> None:
    store, table_format = target
    # given: tables, pgbridge publishing them, the first round of changes in Kafka
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
    env = bridge_env(pg_dsn, apache_kafka.bootstrap, topic_prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": ",".join(TABLES)})
    args = ["--bootstrap-servers", apache_kafka.bootstrap, "--prefix", topic_prefix,
            "--output", store.uri("mirror"), "--checkpoint", store.uri("checkpoint"),
            "--available-now", "--table-format", table_format]
    command = mirror_command(spark_cluster, store, sorted(fetch("spark").glob("*.jar")), args)
    with BridgeProcess(env).start() as bridge:
        bridge.wait_confirmed(pg_dsn, topic_prefix)
        first_round(pg_dsn)
        wait_published(pg_dsn, topic_prefix)
        # when: the driver is killed -9 in the middle of a micro-batch
        with Submission(spark_cluster, command, tmp_path / "first.log").start() as first:
            interrupted, committed = kill_mid_batch(first, store, table_format)
        # ... more changes arrive while it is down, and the same command runs again
        second_round(pg_dsn)
        wait_published(pg_dsn, topic_prefix)
        with Submission(spark_cluster, command, tmp_path / "second.log").start() as second:
            code = second.wait(JOB_TIMEOUT_S)
            log = second.log()
    # then: the restarted job finished
    assert code == 0, f"{log[-6000:]}\n{spark_cluster.logs()}"
    # ... on both workers' executors
    app = re.search(r"app-\d{14}-\d{4}", log)
    assert app is not None and spark_cluster.executor_workers(app.group()) == {"worker-1", "worker-2"}
    # ... every table equals Postgres, and no table's history holds a micro-batch twice (the one
    # committed before the kill holds the interrupted batch once)
    for table in TABLES:
        assert_mirrored(pg_dsn, store.uri("mirror"), table)
        batches = committed_batches(store, table_format, table)
        assert len(batches) == len(set(batches)), f"{table}: micro-batches committed {sorted(batches)}"
        assert table != committed or batches.count(interrupted) == 1, f"{table}: {sorted(batches)}"
