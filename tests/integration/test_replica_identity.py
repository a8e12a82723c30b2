"""Keys and before-images for every REPLICA IDENTITY setting, as the contract states them."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.support.bridge import BridgeProcess, bridge_env, load_schemas
from tests.support.broker import Broker
from tests.support.kafka import read_topics

pytestmark = pytest.mark.integration

SCHEMA = """
CREATE TABLE ri_default (id int PRIMARY KEY, code text NOT NULL, v text);
CREATE TABLE ri_full (id int PRIMARY KEY, code text NOT NULL, v text);
ALTER TABLE ri_full REPLICA IDENTITY FULL;
CREATE TABLE ri_index (id int PRIMARY KEY, code text NOT NULL, v text);
CREATE UNIQUE INDEX ri_index_code ON ri_index (code);
ALTER TABLE ri_index REPLICA IDENTITY USING INDEX ri_index_code;
CREATE TABLE ri_full_nopk (code text, v text);
ALTER TABLE ri_full_nopk REPLICA IDENTITY FULL;
CREATE TABLE ri_nothing (id int PRIMARY KEY, v text);
ALTER TABLE ri_nothing REPLICA IDENTITY NOTHING;
CREATE TABLE ri_nopk (code text, v text);
"""
TABLES = ("ri_default", "ri_full", "ri_index", "ri_full_nopk", "ri_nothing", "ri_nopk")


def test_key_and_before_follow_each_replica_identity(pg_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    # given
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
    env = bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": ",".join(f"public.{t}" for t in TABLES),
                            "PGBRIDGE_SNAPSHOT__MODE": "never"})
    with BridgeProcess(env).start() as bridge:
        bridge.wait_confirmed(pg_dsn, topic_prefix, timeout=60)
        # when
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            for table in ("ri_default", "ri_full", "ri_index"):
                conn.execute(f"INSERT INTO {table} VALUES (1, 'a', 'x')")
                conn.execute(f"UPDATE {table} SET v = 'y'")
                conn.execute(f"DELETE FROM {table}")
            conn.execute("INSERT INTO ri_full_nopk VALUES ('a', 'x')")
            conn.execute("UPDATE ri_full_nopk SET v = 'y'")
            conn.execute("DELETE FROM ri_full_nopk")
            for table in ("ri_nothing", "ri_nopk"):
                conn.execute(f"INSERT INTO {table} VALUES ({'1' if table == 'ri_nothing' else repr('a')}, 'x')")
                # Postgres itself refuses updates and deletes without a replica identity
                with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState):
                    conn.execute(f"UPDATE {table} SET v = 'y'")
        topics = [f"{topic_prefix}.public.{t}" for t in TABLES]
        counts = {f"{topic_prefix}.public.{t}": 4 for t in ("ri_default", "ri_full", "ri_index")}
        counts |= {f"{topic_prefix}.public.ri_full_nopk": 3, f"{topic_prefix}.public.ri_nothing": 1,
                   f"{topic_prefix}.public.ri_nopk": 1}
        records = read_topics(kafka_broker.bootstrap, topics, min_count=counts, timeout=60)
        assert bridge.terminate() == 0, bridge.log()
    store = load_schemas(kafka_broker.bootstrap, topic_prefix)

    def events(table: str) -> list[tuple[Any, str | None, Any]]:
        return [(store.decode(r.key), None if r.value is None else store.decode(r.value)["op"],
                 None if r.value is None else store.decode(r.value)["before"])
                for r in records[f"{topic_prefix}.public.{table}"]]

    # then: DEFAULT with a primary key: keyed by it; before holds the key columns only
    assert events("ri_default") == [({"id": 1}, "c", None), ({"id": 1}, "u", None),
                                    ({"id": 1}, "d", {"id": 1, "code": None, "v": None}), ({"id": 1}, None, None)]
    # FULL: keyed by the primary key; before is the whole old row on updates and deletes
    full_row = {"id": 1, "code": "a", "v": "x"}
    assert events("ri_full") == [({"id": 1}, "c", None), ({"id": 1}, "u", full_row),
                                 ({"id": 1}, "d", {**full_row, "v": "y"}), ({"id": 1}, None, None)]
    # USING INDEX on other columns than the primary key: keyed by the index (the only key a delete
    # carries); before = the index columns
    assert events("ri_index") == [({"code": "a"}, "c", None), ({"code": "a"}, "u", None),
                                  ({"code": "a"}, "d", {"id": None, "code": "a", "v": None}),
                                  ({"code": "a"}, None, None)]
    # FULL without a primary key: null key, whole old row
    assert events("ri_full_nopk") == [(None, "c", None), (None, "u", {"code": "a", "v": "x"}),
                                      (None, "d", {"code": "a", "v": "y"})]
    # NOTHING: keyed by the primary key for inserts; no primary key and DEFAULT: null key
    assert events("ri_nothing") == [({"id": 1}, "c", None)]
    assert events("ri_nopk") == [(None, "c", None)]
