"""The mirror reads Confluent wire format too: pgbridge with a real Schema Registry (Apicurio, BACKWARD
compatibility enforced by the registry) → consistent mirror through a column added mid-stream."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgbridge_spark.config import MirrorConfig
from pgbridge_spark.mirror import MirrorJob
from tests.spark.mirror_support import assert_mirrored
from tests.support.bridge import BridgeProcess, bridge_env
from tests.support.broker import Broker
from tests.support.kafka import list_topics
from tests.support.postgres import wait_published
from tests.support.registry import start_registry

# Delta commits cost Spark jobs; a shared 2-core machine runs them slowly
pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(1800)]


def test_registry_encoded_topics_mirror_consistently(spark: Any, pg_dsn: str, apache_kafka: Broker,
                                                     topic_prefix: str, tmp_path: Path) -> None:
    # given
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, v int, note text, at timestamptz)")
        conn.execute("CREATE TABLE log (line text)")
        conn.execute("ALTER TABLE log REPLICA IDENTITY FULL")
    output = tmp_path / "mirror"
    with start_registry() as registry:
        registry.set_compatibility("BACKWARD")
        env = bridge_env(pg_dsn, apache_kafka.bootstrap, topic_prefix,
                         extra={"PGBRIDGE_POSTGRES__TABLES": "public.items,public.log",
                                "PGBRIDGE_SNAPSHOT__MODE": "never", "PGBRIDGE_SCHEMA_REGISTRY__URL": registry.url})
        with BridgeProcess(env).start() as bridge:
            bridge.wait_confirmed(pg_dsn, topic_prefix)
            # when
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                conn.execute("INSERT INTO items SELECT g, g, 'n' || g, now() FROM generate_series(1, 300) g")
                conn.execute("INSERT INTO log VALUES ('a'), ('b'), ('a')")
                with conn.transaction():
                    conn.execute("UPDATE items SET v = v * 10 WHERE id % 2 = 0")
                    conn.execute("DELETE FROM items WHERE id % 7 = 0")
                    conn.execute("DELETE FROM log WHERE line = 'b'")
                conn.execute("ALTER TABLE items ADD COLUMN extra numeric(6,2)")
                conn.execute("UPDATE items SET extra = 1.25 WHERE id < 10")
            wait_published(pg_dsn, topic_prefix)
            config = MirrorConfig(bootstrap_servers=apache_kafka.bootstrap, prefix=topic_prefix, output=str(output),
                                  checkpoint=str(tmp_path / "checkpoint"), consistent=True,
                                  schema_registry_url=registry.url, max_offsets_per_trigger=2000)
            job = MirrorJob(spark, config)
            query = job.start(available_now=True)
            assert query.awaitTermination(300), "the availableNow run did not finish within 300 s"
            assert query.exception() is None, query.exception()
            assert bridge.terminate() == 0, bridge.log()
    # then
    assert f"{topic_prefix}._schemas" not in list_topics(apache_kafka.bootstrap)
    assert_mirrored(pg_dsn, output, "public.items")
    assert_mirrored(pg_dsn, output, "public.log")
    assert job.decoder_counts["jvm"] > 0 and job.decoder_counts["python"] == 0, job.decoder_counts
