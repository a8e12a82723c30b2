"""A Parquet mirror (the job before Delta Lake) converted by ``pgbridge_spark.migrate``, continued by
the Delta job with a new checkpoint: the old rows stay, the later changes apply, nothing is twice.

The old output is laid out as the old job left it (``{schema}.{table}`` Parquet with the three
``_pgbridge_`` position columns and ``_pgbridge_state.json``, a keyless table, the ``_pgbridge``
control folder); its rows are what a mirror of the same topics holds. The topics then forget those
changes (records deleted up to their end, as retention would): after the conversion, a row that no
later change touched exists only because the conversion kept it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from pgbridge_spark.config import MirrorConfig
from pgbridge_spark.delta_tables import is_table
from pgbridge_spark.migrate import EXIT_REFUSED, STATE_FILE, Action, Found, migrate, plan
from pgbridge_spark.mirror import MirrorJob
from tests.spark.mirror_support import assert_mirrored, mirror_rows, run_available_now
from tests.support.bridge import BridgeProcess, bridge_env
from tests.support.broker import Broker
from tests.support.postgres import wait_published

pytestmark = [pytest.mark.spark]

ITEMS = "public.items"


def forget_records(bootstrap: str, topic: str) -> int:
    """Delete every record now in ``topic`` (``DeleteRecords`` up to each partition's end)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "pgbridge-test-forget"})
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        ends = [TopicPartition(topic, p, consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1])
                for p in partitions]
    finally:
        consumer.close()
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the answers arrive
    for future in admin.delete_records(ends).values():
        future.result(timeout=30)
    return sum(end.offset for end in ends)


def old_parquet_mirror(spark: Any, mirrored: Path, old: Path) -> None:
    """What the Parquet job left: the table's rows with their positions and the state file, a
    keyless table, and the consistent mode's control folder."""
    spark.read.format("delta").load(str(mirrored / ITEMS)).write.parquet(str(old / ITEMS))
    (old / ITEMS / STATE_FILE).write_text(json.dumps({"row_type": None, "key_fields": ["id"], "schema_id": None,
                                                      "partitions": {"0": [1, 1]}, "truncated_at": None}))
    spark.createDataFrame([("a line", 1, 1)], "line string, _pgbridge_commit_lsn long, _pgbridge_total_order long") \
        .write.parquet(str(old / "public.log"))
    (old / "public.log" / STATE_FILE).write_text(json.dumps({"key_fields": [], "partitions": {}}))
    spark.createDataFrame([(b"k", 0)], "key binary, offset long").write.parquet(str(old / "_pgbridge" / "pending"))
    (old / "_pgbridge" / "consistent.json").write_text(json.dumps({"cut": 1}))


@pytest.mark.parametrize(("found", "action"), [
    (Found("public.items", False, '{"key_fields": ["id"]}', False), Action.CONVERT),
    (Found("public.items", True, None, False), Action.ALREADY_DELTA),
    (Found("public.items", True, '{"key_fields": ["id"]}', False), Action.ALREADY_DELTA),
    (Found("public.log", False, '{"key_fields": []}', False), Action.REFUSE_KEYLESS),
    (Found("public.log", False, "not json", False), Action.REFUSE_KEYLESS),
    (Found("public.items", False, '{"key_fields": ["id"]}', True), Action.REFUSE_CHANGELOG),
    (Found("notes", False, None, False), None),
])
def test_each_folder_of_the_old_output_gets_one_action(found: Found, action: Action | None) -> None:
    step = plan(found)
    assert (step.action if step else None) == action


@pytest.mark.integration
@pytest.mark.timeout(1200)
def test_a_converted_parquet_mirror_keeps_its_rows_and_takes_the_later_changes(
        spark: Any, pg_dsn: str, apache_kafka: Broker, topic_prefix: str, tmp_path: Path) -> None:
    # given: a Parquet mirror of items (300 rows, some updated and deleted) whose changes the
    # topic no longer holds, and 20 + 10 + 20 + 1 later changes in the topic
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, name text, qty int)")
    env = bridge_env(pg_dsn, apache_kafka.bootstrap, topic_prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": ITEMS})
    old = tmp_path / "old"
    with BridgeProcess(env).start() as bridge:
        bridge.wait_confirmed(pg_dsn, topic_prefix)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO items SELECT g, 'item ' || g, g FROM generate_series(1, 300) g")
            conn.execute("UPDATE items SET qty = qty * 10 WHERE id % 7 = 0")
            conn.execute("DELETE FROM items WHERE id BETWEEN 290 AND 300")
        wait_published(pg_dsn, topic_prefix)
        first = MirrorConfig(bootstrap_servers=apache_kafka.bootstrap, prefix=topic_prefix,
                             output=str(tmp_path / "first"), checkpoint=str(tmp_path / "first-checkpoint"),
                             tables=(ITEMS,))
        run_available_now(MirrorJob(spark, first))
        old_parquet_mirror(spark, tmp_path / "first", old)
        assert forget_records(apache_kafka.bootstrap, f"{topic_prefix}.{ITEMS}") >= 300
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("UPDATE items SET name = 'renamed ' || id WHERE id BETWEEN 1 AND 20")
            conn.execute("DELETE FROM items WHERE id BETWEEN 21 AND 30")
            conn.execute("INSERT INTO items SELECT g, 'new ' || g, 0 FROM generate_series(301, 320) g")
            conn.execute("UPDATE items SET id = 700 WHERE id = 70")  # a key change
        wait_published(pg_dsn, topic_prefix)
        assert bridge.terminate() == 0, bridge.log()

    # when: converted; the keyless table is refused, the rest converted
    said: list[str] = []
    assert migrate(spark, str(old), echo=said.append) == EXIT_REFUSED, said
    assert any(line.startswith("public.log: refused: no key columns") for line in said), said
    assert is_table(spark, str(old / ITEMS)) and not (old / ITEMS / STATE_FILE).exists()
    assert not is_table(spark, str(old / "public.log")) and (old / "_pgbridge").exists()
    shutil.rmtree(old / "public.log")  # the user re-snapshots it elsewhere, then runs the command again
    said.clear()
    assert migrate(spark, str(old), echo=said.append) == 0, said
    assert f"{ITEMS}: already Delta (left as it is)" in said and not (old / "_pgbridge").exists()

    # then: the Delta job, on a new checkpoint, continues the converted table to Postgres's rows
    config = MirrorConfig(bootstrap_servers=apache_kafka.bootstrap, prefix=topic_prefix, output=str(old),
                          checkpoint=str(tmp_path / "delta-checkpoint"), tables=(ITEMS,))
    run_available_now(MirrorJob(spark, config))
    assert_mirrored(pg_dsn, old, ITEMS)
    _, rows = mirror_rows(old / ITEMS)
    assert sum(rows.values()) == 300 - 11 - 10 + 20
    shutil.rmtree(tmp_path, ignore_errors=True)
