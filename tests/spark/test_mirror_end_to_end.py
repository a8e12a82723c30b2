"""Postgres → pgbridge → Apache Kafka → mirror job (local[2], Spark's kafka source, from_avro) →
Delta Lake, and Iceberg (``--table-format iceberg``), equals SELECT * of every table.

One scenario in stages, each checked against Postgres: an initial snapshot and a mixed workload
(inserts, updates, a key change, deletes, a truncate, a large transaction, a prepared
transaction); the job stopped mid-stream and restarted, its last micro-batch replayed and
pgbridge's records re-published as duplicates; then columns added and dropped mid-stream.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka import Producer

from pgbridge_spark.config import MirrorConfig
from pgbridge_spark.mirror import MirrorJob
from tests.spark.mirror_support import assert_mirrored, run_available_now
from tests.support.bridge import BridgeProcess, bridge_env
from tests.support.broker import Broker
from tests.support.kafka import read_topic
from tests.support.postgres import wait_published
from tests.support.waiting import wait_until

# Delta commits cost Spark jobs; a shared 2-core machine runs them slowly
pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(1800)]

TABLES = ("public.customers", "public.orders", "public.audit", "public.scratch")
SCHEMA = """
CREATE TABLE customers (id bigint PRIMARY KEY, name text NOT NULL, balance numeric(12,2),
                        created timestamptz, tags int4[]);
CREATE TABLE orders (id int PRIMARY KEY, customer_id bigint, note varchar(40), paid bool, ordered date,
                     payload jsonb);
CREATE TABLE audit (ts timestamp, message text);
ALTER TABLE audit REPLICA IDENTITY FULL;
CREATE TABLE scratch (id int PRIMARY KEY, v text);
INSERT INTO customers VALUES (100, 'snap', 1.00, '2020-01-01 00:00:00+00', '{7}');
INSERT INTO scratch SELECT g, 'row ' || g FROM generate_series(1, 50) g;
"""


def workload(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        with conn.transaction():
            conn.execute("INSERT INTO customers VALUES (1, 'ann', 10.50, '2024-01-02 03:04:05+00', '{1,2}'),"
                         " (2, 'bob', NULL, NULL, NULL)")
            conn.execute("INSERT INTO orders VALUES (10, 1, 'first', true, '2024-02-29', '{\"k\": [1, 2]}')")
        conn.execute("UPDATE customers SET balance = 99.99, name = 'ann2' WHERE id = 1")
        conn.execute("INSERT INTO audit VALUES ('2024-01-01 00:00:00', 'hello'), ('2024-01-01 00:00:00', 'hello')")
        conn.execute("UPDATE audit SET message = 'changed' WHERE ctid = (SELECT min(ctid) FROM audit)")
        with conn.transaction():
            conn.execute("DELETE FROM orders WHERE id = 10")
            conn.execute("UPDATE customers SET id = 3 WHERE id = 2")  # key change
            conn.execute("DELETE FROM customers WHERE id = 100")
        conn.execute("TRUNCATE scratch")
        conn.execute("INSERT INTO scratch VALUES (1, 'after truncate')")
        with conn.transaction():  # a large transaction (streamed by Postgres, spilled by pgbridge)
            conn.execute("INSERT INTO orders SELECT g, g % 7, 'bulk ' || g, g % 2 = 0, DATE '2024-01-01' + g,"
                         " jsonb_build_object('g', g) FROM generate_series(1000, 6000) g")
            conn.execute("UPDATE orders SET paid = NOT paid WHERE id % 3 = 0")
            conn.execute("DELETE FROM orders WHERE id % 5 = 0")


def more_work(dsn: str, start: int, count: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in range(start, start + count):
            with conn.transaction():
                conn.execute("INSERT INTO customers VALUES (%s, %s, %s, now(), '{}')", (i, f"c{i}", i / 100))
                conn.execute("UPDATE orders SET note = %s WHERE id = %s", (f"touched {i}", 1000 + i))
                if i % 4 == 0:
                    conn.execute("DELETE FROM customers WHERE id = %s", (i - 1,))


def republish(bootstrap: str, topic: str, first: int) -> int:
    """Produce records of ``topic`` from offset ``first`` on again: what pgbridge does after a crash."""
    records = [r for r in read_topic(bootstrap, topic, min_count=first + 1, idle=1.0) if r.offset >= first]
    producer = Producer({"bootstrap.servers": bootstrap})
    for r in records:
        producer.produce(topic, key=r.key, value=r.value)
    assert producer.flush(30) == 0
    return len(records)


@pytest.mark.parametrize("table_format", ["delta", "iceberg"])
def test_mirror_follows_postgres_through_restarts_duplicates_and_alter_table(
        spark: Any, pg_dsn: str, apache_kafka: Broker, topic_prefix: str, tmp_path: Path, table_format: str) -> None:
    # given: tables with rows before the bridge starts (snapshot), the bridge, a mirror job
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
        setting = conn.execute("SHOW max_prepared_transactions").fetchone()
        assert setting is not None
        two_phase = setting[0] != "0"
    env = bridge_env(pg_dsn, apache_kafka.bootstrap, topic_prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": ",".join(TABLES)})
    output, checkpoint = tmp_path / "mirror", tmp_path / "checkpoint"
    config = MirrorConfig(bootstrap_servers=apache_kafka.bootstrap, prefix=topic_prefix, output=str(output),
                          checkpoint=str(checkpoint), max_offsets_per_trigger=4000, table_format=table_format)
    batches: list[int] = []
    job = MirrorJob(spark, config, on_batch=lambda batch_id, result: batches.append(batch_id))
    with BridgeProcess(env).start() as bridge:
        bridge.wait_confirmed(pg_dsn, topic_prefix)
        # when: the mixed workload, then one run of the job over everything published
        workload(pg_dsn)
        if two_phase:
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                conn.execute("BEGIN")
                conn.execute("INSERT INTO customers VALUES (50, 'prepared', 5.00, NULL, NULL)")
                conn.execute("PREPARE TRANSACTION 'p1'")
                conn.execute("COMMIT PREPARED 'p1'")
        wait_published(pg_dsn, topic_prefix)
        run_available_now(job)
        # then
        assert len(batches) >= 2  # the large transaction spans micro-batches
        for table in TABLES:
            assert_mirrored(pg_dsn, output, table)

        # when: the job runs continuously and is stopped mid-stream, then started again
        query = job.start()
        writer = threading.Thread(target=more_work, args=(pg_dsn, 7000, 60))
        writer.start()
        wait_until(lambda: len(batches) >= 4, timeout=600,  # a Delta batch is many Spark jobs
                   message="micro-batches while the workload runs")
        query.stop()
        writer.join()
        wait_published(pg_dsn, topic_prefix)
        # ... and the last micro-batch is replayed (its commit mark lost, as in a crash before it)
        last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
        for name in (str(last), f".{last}.crc"):
            (checkpoint / "commits" / name).unlink(missing_ok=True)
        # ... and pgbridge re-publishes records, as after a crash
        assert republish(apache_kafka.bootstrap, f"{topic_prefix}.public.customers", 2) > 0
        assert republish(apache_kafka.bootstrap, f"{topic_prefix}.public.scratch", 0) > 0
        run_available_now(job)
        # then
        for table in TABLES:
            assert_mirrored(pg_dsn, output, table)

        # when: columns are added and dropped mid-stream
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("ALTER TABLE customers ADD COLUMN email text")
            conn.execute("UPDATE customers SET email = name || '@example.com' WHERE id % 2 = 0")
            conn.execute("ALTER TABLE customers DROP COLUMN tags")
            conn.execute("INSERT INTO customers (id, name, email) VALUES (9000, 'new', 'n@example.com')")
            conn.execute("ALTER TABLE orders DROP COLUMN payload")
            conn.execute("UPDATE orders SET note = 'after drop' WHERE id = 1001")
            conn.execute("ALTER TABLE orders ADD COLUMN payload jsonb")  # back to the first column set
            conn.execute("UPDATE orders SET payload = '{\"back\": true}' WHERE id = 1002")
        wait_published(pg_dsn, topic_prefix)
        run_available_now(job)
        # then
        for table in TABLES:
            assert_mirrored(pg_dsn, output, table)
        # every table micro-batch, schema changes included, was decoded by from_avro
        assert job.decoder_counts["jvm"] > 0 and job.decoder_counts["python"] == 0, job.decoder_counts
        assert bridge.terminate() == 0, bridge.log()
    shutil.rmtree(tmp_path, ignore_errors=True)
