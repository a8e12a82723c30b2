"""pgbridge's routing and filtering options in the mirror job (docs/routing.md): a table routed
onto a topic of its own mirrors like any table (consistent mode included: the END counts name the
real table), a topic several tables were routed onto is refused with a clear error instead of
being merged into one directory, and with ``kafka.skipped_operations`` the consistent mirror still
completes every transaction (the END counts only what was published)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pyspark.errors import StreamingQueryException

from pgbridge_spark.config import MirrorConfig
from pgbridge_spark.mirror import MirrorJob
from tests.spark.mirror_support import read_table
from tests.support.bridge import BridgeProcess, bridge_env
from tests.support.broker import Broker
from tests.support.postgres import wait_published

# Delta commits cost Spark jobs; a shared 2-core machine runs them slowly
pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(1800)]

SCHEMA = """
CREATE TABLE shard_1 (id int PRIMARY KEY, v text);
CREATE TABLE shard_2 (id int PRIMARY KEY, v text);
CREATE TABLE solo (id int PRIMARY KEY, v text);
"""
ROUTES = json.dumps([{"match": r"public\.shard_\d", "topic": "sales.orders"},
                     {"match": r"public\.(solo)", "topic": r"routed.\1"}])


def test_a_one_table_routed_topic_mirrors_and_a_multi_table_topic_is_refused(
        spark: Any, pg_dsn: str, apache_kafka: Broker, topic_prefix: str, tmp_path: Path) -> None:
    # given: the bridge with two tables routed onto one topic and one onto a topic of its own
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
    env = bridge_env(pg_dsn, apache_kafka.bootstrap, topic_prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": "public.shard_1,public.shard_2,public.solo",
                            "PGBRIDGE_SNAPSHOT__MODE": "never", "PGBRIDGE_KAFKA__TOPIC_ROUTES": ROUTES})
    output = tmp_path / "mirror"
    config = MirrorConfig(bootstrap_servers=apache_kafka.bootstrap, prefix=topic_prefix, output=str(output),
                          checkpoint=str(tmp_path / "checkpoint"), consistent=True)
    with BridgeProcess(env).start() as bridge:
        bridge.wait_confirmed(pg_dsn, topic_prefix)
        # when: only the solo table changes
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO solo VALUES (1, 'a'), (2, 'b')")
            conn.execute("UPDATE solo SET v = 'b2' WHERE id = 2")
        wait_published(pg_dsn, topic_prefix)
        query = MirrorJob(spark, config).start(available_now=True)
        assert query.awaitTermination(300), "the availableNow run did not finish within 300 s"
        assert query.exception() is None, query.exception()
        # then: its directory is the routed name, holding the table's rows
        rows = sorted((r["id"], r["v"]) for r in read_table(output / "routed.solo")[1])
        assert rows == [(1, "a"), (2, "b2")]

        # when: both shards get a row, with the same id
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO shard_1 VALUES (1, 'x'); INSERT INTO shard_2 VALUES (1, 'y')")
        wait_published(pg_dsn, topic_prefix)
        query = MirrorJob(spark, config).start(available_now=True)
        # then: the run fails naming the topic and why, and nothing was merged into a directory
        with pytest.raises(StreamingQueryException) as failed:
            query.awaitTermination(300)
        assert bridge.terminate() == 0, bridge.log()
    error = str(failed.value)
    assert (f"MultiTableTopic: topic {topic_prefix}.sales.orders holds several tables (records of "
            f"{topic_prefix}.public.shard_1, {topic_prefix}.public.shard_2)") in error, error
    assert "route each table to a topic of its own" in error
    assert not (output / "sales.orders").exists()


def test_the_consistent_mirror_completes_transactions_with_skipped_operations(
        spark: Any, pg_dsn: str, apache_kafka: Broker, topic_prefix: str, tmp_path: Path) -> None:
    # given: updates are not published
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
    env = bridge_env(pg_dsn, apache_kafka.bootstrap, topic_prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": "public.solo", "PGBRIDGE_SNAPSHOT__MODE": "never",
                            "PGBRIDGE_KAFKA__SKIPPED_OPERATIONS": "u"})
    output = tmp_path / "mirror"
    config = MirrorConfig(bootstrap_servers=apache_kafka.bootstrap, prefix=topic_prefix, output=str(output),
                          checkpoint=str(tmp_path / "checkpoint"), consistent=True)
    with BridgeProcess(env).start() as bridge:
        bridge.wait_confirmed(pg_dsn, topic_prefix)
        # when: one transaction of inserts and a skipped update, then one of a skipped update only
        with psycopg.connect(pg_dsn) as conn:
            conn.execute("INSERT INTO solo VALUES (1, 'a'), (2, 'b')")
            conn.execute("UPDATE solo SET v = 'changed' WHERE id = 1")
            conn.commit()
            conn.execute("UPDATE solo SET v = 'again'")
            conn.commit()
        wait_published(pg_dsn, topic_prefix)
        query = MirrorJob(spark, config).start(available_now=True)
        assert query.awaitTermination(300), "the availableNow run did not finish within 300 s"
        assert query.exception() is None, query.exception()
        assert bridge.terminate() == 0, bridge.log()
    # then: the transaction passed the consistent cut (a count including the update would hold it
    # back forever), so the inserted rows are mirrored, without the updates
    rows = sorted((r["id"], r["v"]) for r in read_table(output / "public.solo")[1])
    assert rows == [(1, "a"), (2, "b")]
