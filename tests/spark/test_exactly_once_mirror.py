"""The mirror on exactly-once topics: read_committed, no duplicate filter, pgbridge killed mid-stream.

pgbridge runs with ``kafka.exactly_once`` and is killed with ``kill -9`` twice while the workload
commits, leaving aborted Kafka transactions behind; the mirror job (``exactly_once=True``: no
duplicate filter) reads ``read_committed`` and its Parquet equals ``SELECT *`` of every table.
"""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgbridge_spark.config import MirrorConfig
from pgbridge_spark.mirror import MirrorJob
from tests.spark.mirror_support import assert_mirrored, run_available_now
from tests.spark.test_mirror_end_to_end import SCHEMA, TABLES, more_work, workload
from tests.support.bridge import BridgeProcess, bridge_env
from tests.support.broker import Broker, require_transactions
from tests.support.postgres import wait_published
from tests.support.waiting import wait_until

# Delta commits cost Spark jobs; a shared 2-core machine runs them slowly
pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(1800)]


def test_exactly_once_topics_mirror_exactly_without_a_duplicate_filter(
        spark: Any, pg_dsn: str, apache_kafka: Broker, topic_prefix: str, tmp_path: Path) -> None:
    require_transactions()
    # given
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
    env = bridge_env(pg_dsn, apache_kafka.bootstrap, topic_prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": ",".join(TABLES), "PGBRIDGE_KAFKA__EXACTLY_ONCE": "true",
                            "PGBRIDGE_HA__LEADER_ELECTION": "false"})
    output, checkpoint = tmp_path / "mirror", tmp_path / "checkpoint"
    config = MirrorConfig(bootstrap_servers=apache_kafka.bootstrap, prefix=topic_prefix, output=str(output),
                          checkpoint=str(checkpoint), max_offsets_per_trigger=4000,
                          exactly_once=True)
    bridge = BridgeProcess(env).start()
    try:
        bridge.wait_confirmed(pg_dsn, topic_prefix)
        # when: the workload commits while pgbridge is killed -9 twice
        workload(pg_dsn)
        writer = threading.Thread(target=more_work, args=(pg_dsn, 7000, 300))
        writer.start()
        for kill in range(2):
            wait_until(lambda: bridge.log().count("replicating") > kill, timeout=60,  # noqa: B023
                       message="the restarted bridge never streamed")
            time.sleep(0.7)  # the sleep is the kill point, not a wait
            bridge.kill()
            bridge = BridgeProcess(env, log_path=bridge.log_path).start()
        writer.join()
        wait_published(pg_dsn, topic_prefix)
        run_available_now(MirrorJob(spark, config))
        # then
        for table in TABLES:
            assert_mirrored(pg_dsn, output, table)
        assert bridge.terminate() == 0, bridge.log()
    finally:
        bridge.kill()
    shutil.rmtree(tmp_path, ignore_errors=True)
