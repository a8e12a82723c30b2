"""Unchanged TOASTed values: the contract's marker, or filled from the old row or the local cache."""

from __future__ import annotations

import json
import secrets

import psycopg
import pytest

from tests.support.bridge import BridgeProcess, bridge_env, load_schemas
from tests.support.broker import Broker
from tests.support.kafka import read_topics

pytestmark = pytest.mark.integration

TABLES = {"marked": "marker", "from_old": "old_tuple", "cached": "cache"}


def test_each_toast_policy_fills_only_what_it_knows_and_marks_the_rest(pg_dsn: str, kafka_broker: Broker,
                                                                       topic_prefix: str) -> None:
    # given: a value far above the TOAST threshold that does not compress (stored out of line)
    big = secrets.token_hex(20_000)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for table in TABLES:
            conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, n int, doc text)")
        conn.execute("ALTER TABLE from_old REPLICA IDENTITY FULL")
    env = bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix, extra={
        "PGBRIDGE_POSTGRES__TABLES": ",".join(f"public.{t}" for t in TABLES), "PGBRIDGE_SNAPSHOT__MODE": "never",
        "PGBRIDGE_TOAST__TABLES": json.dumps({f"public.{t}": p for t, p in TABLES.items() if p != "marker"})})
    with BridgeProcess(env).start() as bridge:
        bridge.wait_confirmed(pg_dsn, topic_prefix, timeout=60)
        # when: an insert (seen by the cache), then two updates that leave doc alone
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            for table in TABLES:
                conn.execute(f"INSERT INTO {table} VALUES (1, 0, %s)", (big,))
                conn.execute(f"UPDATE {table} SET n = 1")
                conn.execute(f"UPDATE {table} SET n = 2")
        topics = {t: f"{topic_prefix}.public.{t}" for t in TABLES}
        records = read_topics(kafka_broker.bootstrap, list(topics.values()),
                              min_count={topic: 3 for topic in topics.values()}, timeout=60)
        assert bridge.terminate() == 0, bridge.log()
    store = load_schemas(kafka_broker.bootstrap, topic_prefix)

    def updates(table: str) -> list[tuple[str | None, list[str]]]:
        values = [store.decode(r.value) for r in records[topics[table]]][1:]
        return [(v["after"]["doc"], v["unchanged_toast_columns"]) for v in values]

    # then
    assert updates("marked") == [(None, ["doc"]), (None, ["doc"])]
    assert updates("from_old") == [(big, []), (big, [])]
    assert updates("cached") == [(big, []), (big, [])]
