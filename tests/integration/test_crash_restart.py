"""pgbridge killed with SIGKILL mid-workload and restarted: nothing lost, duplicates identical."""

from __future__ import annotations

import random
import time
from typing import Any

import psycopg
import pytest

from tests.support.bridge import BridgeProcess, bridge_env, load_schemas
from tests.support.broker import Broker
from tests.support.kafka import read_topic
from tests.support.workload import ITEMS_DDL, Workload, verify_committed

pytestmark = pytest.mark.integration


def _decode_all(bootstrap: str, prefix: str, count: int) -> list[dict[str, Any]]:
    records = read_topic(bootstrap, f"{prefix}.public.items", min_count=count, timeout=180, idle=3.0)
    store = load_schemas(bootstrap, prefix)
    return [store.decode(r.value) for r in records if r.value is not None]


def test_sigkill_at_random_points_loses_nothing_and_duplicates_are_identical(
        pg_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    # given
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(ITEMS_DDL)
    env = bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": "public.items", "PGBRIDGE_SNAPSHOT__MODE": "never"})
    bridge = BridgeProcess(env).start()
    try:
        bridge.wait_confirmed(pg_dsn, topic_prefix, timeout=60)
        workload = Workload(pg_dsn, transactions=1500, seed=7)
        # when: the workload runs while pgbridge is killed and restarted at random moments
        workload.start()
        rnd = random.Random(11)
        kills = 0
        while workload.is_alive() and kills < 4:
            time.sleep(rnd.uniform(0.3, 1.5))  # the sleep is the random kill point, not a wait
            bridge.kill()
            kills += 1
            bridge = BridgeProcess(env, log_path=bridge.log_path).start()
        workload.join(180)
        assert workload.error is None, workload.error
        assert kills >= 2, "the workload finished before pgbridge could be killed twice"
        events = _decode_all(kafka_broker.bootstrap, topic_prefix, workload.expected_total)
        assert bridge.terminate() == 0, bridge.log()
    finally:
        bridge.kill()

    # then: every committed change is there, in order, and every duplicate equals its first copy
    duplicates = verify_committed(events, workload.committed)
    print(f"kills={kills} events={len(events)} duplicates={duplicates}")
