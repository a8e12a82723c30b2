"""The Delta mirror equals Postgres after each schema change (``postgres.ddl_events``).

Postgres → pgbridge (DDL events on) → Apache Kafka → mirror job (local[2], availableNow) → Delta,
compared with ``SELECT *`` after each of: a column rename, an add, a drop, a retype, a rename of the
key column (each with rows changed before and after), and a table rename. A renamed column keeps
its values in the mirror (the writer schema's field names the old column in ``aliases``, and the
mirror renames the column instead of dropping it); the renamed table's new topic, snapshotted by
pgbridge, mirrors every row under the new name.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgbridge_spark.config import MirrorConfig
from pgbridge_spark.mirror import MirrorJob
from tests.spark.mirror_support import assert_mirrored, run_available_now
from tests.support.bridge import BridgeProcess, bridge_env, read_events
from tests.support.broker import Broker
from tests.support.postgres import wait_published
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.spark, pytest.mark.integration]

# (statements, the table to compare afterwards)
STEPS: list[tuple[list[str], str]] = [
    (["INSERT INTO evo VALUES (3, 'three', 3)", "ALTER TABLE evo RENAME COLUMN a TO title",
      "INSERT INTO evo VALUES (4, 'four', 4)", "UPDATE evo SET title = 'uno' WHERE id = 1"], "public.evo"),
    (["ALTER TABLE evo ADD COLUMN extra text", "INSERT INTO evo VALUES (5, 'five', 5, 'x')",
      "UPDATE evo SET extra = 'y' WHERE id = 2"], "public.evo"),
    (["ALTER TABLE evo DROP COLUMN extra", "INSERT INTO evo VALUES (6, 'six', 6)"], "public.evo"),
    (["ALTER TABLE evo ALTER COLUMN n TYPE bigint", "INSERT INTO evo VALUES (7, 'seven', 5000000000)",
      "UPDATE evo SET n = n + 1 WHERE id = 3"], "public.evo"),
    (["ALTER TABLE evo RENAME COLUMN id TO ident", "INSERT INTO evo VALUES (8, 'eight', 8)",
      "UPDATE evo SET title = 'dos' WHERE ident = 2", "DELETE FROM evo WHERE ident = 4"], "public.evo"),
    (["ALTER TABLE evo RENAME TO evo2", "INSERT INTO evo2 VALUES (9, 'nine', 9)"], "public.evo2"),
]


def test_the_mirror_equals_postgres_after_each_schema_change(
        spark: Any, pg_dsn: str, apache_kafka: Broker, topic_prefix: str, tmp_path: Path) -> None:
    # given: rows before the bridge starts (its initial snapshot), DDL events on, a mirror job
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE evo (id int PRIMARY KEY, a text, n int)")
        conn.execute("INSERT INTO evo VALUES (1, 'one', 1), (2, 'two', 2)")
    env = bridge_env(pg_dsn, apache_kafka.bootstrap, topic_prefix, extra={
        "PGBRIDGE_POSTGRES__TABLES": "public.evo", "PGBRIDGE_POSTGRES__DDL_EVENTS": "true",
        "PGBRIDGE_SNAPSHOT__PUBLICATION_CHECK_S": "1"})
    output = tmp_path / "mirror"
    job = MirrorJob(spark, MirrorConfig(bootstrap_servers=apache_kafka.bootstrap, prefix=topic_prefix,
                                        output=str(output), checkpoint=str(tmp_path / "checkpoint")))
    with BridgeProcess(env).start() as bridge:
        wait_until(lambda: "replicating" in bridge.log() or not bridge.alive(), timeout=90, message="no start")
        assert bridge.alive(), bridge.log()
        wait_published(pg_dsn, topic_prefix)
        run_available_now(job)
        assert_mirrored(pg_dsn, output, "public.evo")
        for statements, table in STEPS:
            # when
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                for statement in statements:
                    conn.execute(statement)
            if table == "public.evo2":  # the new name's topic gets every row: pgbridge snapshots it
                with psycopg.connect(pg_dsn) as conn:
                    count = conn.execute("SELECT count(*) FROM evo2").fetchone()
                assert count is not None
                read_events(apache_kafka.bootstrap, f"{topic_prefix}.public.evo2", topic_prefix,
                            min_count=int(str(count[0])) + 1, timeout=90)
            wait_published(pg_dsn, topic_prefix)
            run_available_now(job)
            # then
            assert_mirrored(pg_dsn, output, table)
        changes = read_events(apache_kafka.bootstrap, f"{topic_prefix}.schema_changes", topic_prefix,
                              min_count=len(STEPS))
        assert bridge.terminate() == 0, bridge.log()
    assert [c["change"] for e in changes if e.value for c in e.value["changes"]] == [
        "column_renamed", "column_added", "column_dropped", "column_retyped", "column_renamed", "table_renamed"]
    shutil.rmtree(tmp_path, ignore_errors=True)
