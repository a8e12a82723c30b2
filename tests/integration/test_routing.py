"""Routing and filtering (docs/routing.md): ``kafka.skipped_operations`` publishes nothing for the
skipped ops while their LSNs are still confirmed and the transaction boundaries count only what
was published; ``kafka.tombstones_on_delete=false`` drops the tombstone after a keyed delete;
``kafka.topic_routes`` sends tables (snapshot reads included) to their routed topics, two tables on
one topic keeping distinct keys; ``pgbridge check`` names bad routes."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import psycopg
import pytest

from pgbridge.snapshot.incremental import emit_signal_sql
from tests.support.bridge import BridgeProcess, bridge_env, load_schemas
from tests.support.broker import Broker
from tests.support.cli import check
from tests.support.kafka import Record, list_topics, read_topics
from tests.support.replay import wait_caught_up

pytestmark = pytest.mark.integration

SCHEMA = """
CREATE TABLE rt_a (id int PRIMARY KEY, v text);
CREATE TABLE rt_b (id int PRIMARY KEY, v text);
"""
TABLES = "public.rt_a,public.rt_b"


def _start_env(pg_dsn: str, kafka_broker: Broker, topic_prefix: str, **extra: str) -> dict[str, str]:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
    return bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix,
                      extra={"PGBRIDGE_POSTGRES__TABLES": TABLES, "PGBRIDGE_SNAPSHOT__MODE": "never", **extra})


def _events(records: list[Record], decode: Any) -> list[tuple[Any, str | None, int | None]]:
    """(key, op or None for a tombstone, transaction.total_order) per record."""
    out: list[tuple[Any, str | None, int | None]] = []
    for record in records:
        value = None if record.value is None else decode(record.value)
        out.append((decode(record.key), None if value is None else value["op"],
                    None if value is None else value["transaction"]["total_order"]))
    return out


def test_skipped_operations_publish_nothing_and_still_advance_the_slot(
        pg_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    # given: updates and truncates skipped
    env = _start_env(pg_dsn, kafka_broker, topic_prefix, PGBRIDGE_KAFKA__SKIPPED_OPERATIONS="u,t")
    a, b, transactions = (f"{topic_prefix}.public.rt_a", f"{topic_prefix}.public.rt_b",
                          f"{topic_prefix}.transactions")
    with BridgeProcess(env).start() as bridge:
        bridge.wait_confirmed(pg_dsn, topic_prefix, timeout=60)
        # when: one transaction mixing published and skipped ops, then one of skipped ops only
        with psycopg.connect(pg_dsn) as conn:
            conn.execute("INSERT INTO rt_a VALUES (1, 'x'), (2, 'x')")
            conn.execute("UPDATE rt_a SET v = 'y'")
            conn.execute("DELETE FROM rt_a WHERE id = 2")
            conn.execute("INSERT INTO rt_b VALUES (1, 'x')")
            conn.commit()
            conn.execute("UPDATE rt_b SET v = 'z'")
            conn.execute("TRUNCATE rt_b")
            conn.commit()
        # then: the slot confirms the skipped-only transaction too
        wait_caught_up(pg_dsn, topic_prefix, timeout=90)
        records = read_topics(kafka_broker.bootstrap, [a, b, transactions],
                              min_count={a: 4, b: 1, transactions: 4}, timeout=60)
        assert bridge.terminate() == 0, bridge.log()
    store = load_schemas(kafka_broker.bootstrap, topic_prefix)
    # no update, no truncate; the published events are numbered without gaps
    assert _events(records[a], store.decode) == [({"id": 1}, "c", 1), ({"id": 2}, "c", 2),
                                                 ({"id": 2}, "d", 3), ({"id": 2}, None, None)]
    assert _events(records[b], store.decode) == [({"id": 1}, "c", 4)]
    boundaries = [store.decode(record.value) for record in records[transactions]]
    ends = [value for value in boundaries if value["status"] == "END"]
    assert [value["status"] for value in boundaries] == ["BEGIN", "END", "BEGIN", "END"]
    # END counts what was published: the Spark consistent mirror waits for exactly these
    assert ends[0]["event_count"] == 4
    assert ends[0]["data_collections"] == [{"data_collection": "public.rt_a", "event_count": 3},
                                           {"data_collection": "public.rt_b", "event_count": 1}]
    assert ends[1]["event_count"] == 0 and ends[1]["data_collections"] == []


def test_without_tombstones_a_delete_is_its_delete_record_alone(
        pg_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    # given
    env = _start_env(pg_dsn, kafka_broker, topic_prefix, PGBRIDGE_KAFKA__TOMBSTONES_ON_DELETE="false")
    a = f"{topic_prefix}.public.rt_a"
    with BridgeProcess(env).start() as bridge:
        bridge.wait_confirmed(pg_dsn, topic_prefix, timeout=60)
        # when: a delete, then an insert after it (so a tombstone, had it come, would be before it)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO rt_a VALUES (1, 'x')")
            conn.execute("DELETE FROM rt_a")
            conn.execute("INSERT INTO rt_a VALUES (2, 'x')")
        wait_caught_up(pg_dsn, topic_prefix, timeout=90)
        records = read_topics(kafka_broker.bootstrap, [a], min_count={a: 3}, timeout=60)
        assert bridge.terminate() == 0, bridge.log()
    store = load_schemas(kafka_broker.bootstrap, topic_prefix)
    # then
    assert [(key, op) for key, op, _ in _events(records[a], store.decode)] == [
        ({"id": 1}, "c"), ({"id": 1}, "d"), ({"id": 2}, "c")]


ROUTES = json.dumps([{"match": r"public\.rt_(a|b)", "topic": "merged.ab"},
                     {"match": r"public\.(rt_c)", "topic": r"solo.\1"}])


def test_routed_tables_publish_to_their_topics_and_keys_stay_unique_on_a_shared_one(
        pg_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    # given: rows before the bridge starts (initial snapshot), equal ids in the two merged tables
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(SCHEMA + "CREATE TABLE rt_c (id int PRIMARY KEY, v text);")
        conn.execute("INSERT INTO rt_a VALUES (1, 'a1'); INSERT INTO rt_b VALUES (1, 'b1');"
                     "INSERT INTO rt_c VALUES (1, 'c1')")
    env = bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": TABLES + ",public.rt_c",
                            "PGBRIDGE_KAFKA__TOPIC_ROUTES": ROUTES})
    merged, solo = f"{topic_prefix}.merged.ab", f"{topic_prefix}.solo.rt_c"
    transactions = f"{topic_prefix}.transactions"
    with BridgeProcess(env).start() as bridge:
        bridge.wait_confirmed(pg_dsn, topic_prefix)
        # when: changes to every table, in one transaction, then an incremental snapshot of rt_c
        with psycopg.connect(pg_dsn) as conn:
            conn.execute("UPDATE rt_a SET v = 'a2'")
            conn.execute("INSERT INTO rt_b VALUES (2, 'b2')")
            conn.execute("DELETE FROM rt_b WHERE id = 2")
            conn.execute("INSERT INTO rt_c VALUES (2, 'c2')")
            conn.commit()
            conn.execute(emit_signal_sql(["public.rt_c"]))
            conn.commit()
        # snapshot a1 b1 c1, then a2, b2 c, b2 d + tombstone, c2, then the incremental reads c1 c2
        records = read_topics(kafka_broker.bootstrap, [merged, solo, transactions],
                              min_count={merged: 6, solo: 4, transactions: 2}, timeout=120)
        wait_caught_up(pg_dsn, topic_prefix, timeout=90)
        topics = list_topics(kafka_broker.bootstrap)
        assert bridge.terminate() == 0, bridge.log()
    store = load_schemas(kafka_broker.bootstrap, topic_prefix)

    def events(topic: str) -> list[tuple[Any, str | None, Any]]:
        out = []
        for record in records[topic]:
            value = None if record.value is None else store.decode(record.value)
            out.append((store.decode(record.key), None if value is None else value["op"],
                        None if value is None else (value["source"]["table"], (value["after"] or {}).get("v"))))
        return out

    # then: nothing on the tables' own topics
    assert not {f"{topic_prefix}.public.rt_a", f"{topic_prefix}.public.rt_b", f"{topic_prefix}.public.rt_c"} & topics
    # the merged topic's keys name their table; the value still says the real table
    a1, b1 = {"__pgbridge_table": "public.rt_a", "id": 1}, {"__pgbridge_table": "public.rt_b", "id": 1}
    b2 = {"__pgbridge_table": "public.rt_b", "id": 2}
    assert sorted(events(merged)[:2], key=str) == sorted([(a1, "r", ("rt_a", "a1")), (b1, "r", ("rt_b", "b1"))],
                                                         key=str)
    assert events(merged)[2:] == [(a1, "u", ("rt_a", "a2")), (b2, "c", ("rt_b", "b2")),
                                  (b2, "d", ("rt_b", None)), (b2, None, None)]
    # under compaction (last value per key bytes) both id-1 rows survive, id 2 of rt_b is gone
    latest: dict[bytes | None, bytes | None] = {}
    for record in records[merged]:
        latest[record.key] = record.value
    assert sorted((store.decode(k)["__pgbridge_table"], store.decode(v)["after"]["v"])
                  for k, v in latest.items() if v is not None) == [("public.rt_a", "a2"), ("public.rt_b", "b1")]
    # a one-table routed topic keeps the plain key; incremental snapshot reads go there too
    assert events(solo) == [({"id": 1}, "r", ("rt_c", "c1")), ({"id": 2}, "c", ("rt_c", "c2")),
                            ({"id": 1}, "r", ("rt_c", "c1")), ({"id": 2}, "r", ("rt_c", "c2"))]
    # END counts per real table
    end = next(store.decode(r.value) for r in records[transactions] if store.decode(r.value)["status"] == "END")
    assert end["data_collections"] == [{"data_collection": "public.rt_a", "event_count": 1},
                                       {"data_collection": "public.rt_b", "event_count": 2},
                                       {"data_collection": "public.rt_c", "event_count": 1}]
    # pgbridge schemas prints the routed topics and the key field, as run writes them
    clean = {k: v for k, v in env.items() if not k.startswith("PGBRIDGE_") or k in (
        "PGBRIDGE_POSTGRES__DSN", "PGBRIDGE_POSTGRES__PUBLICATION", "PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS",
        "PGBRIDGE_KAFKA__TOPIC_PREFIX", "PGBRIDGE_KAFKA__TOPIC_ROUTES")}
    printed = subprocess.run([sys.executable, "-m", "pgbridge", "schemas"], env=clean, capture_output=True,
                             text=True, timeout=120, check=True)
    by_table = {entry["table"]: entry for entry in json.loads(printed.stdout)}
    assert {table: entry["topic"] for table, entry in by_table.items()} == {
        "public.rt_a": merged, "public.rt_b": merged, "public.rt_c": solo}
    assert [f["name"] for f in by_table["public.rt_b"]["key"]["fields"]] == ["__pgbridge_table", "id"]
    assert [f["name"] for f in by_table["public.rt_c"]["key"]["fields"]] == ["id"]


def test_check_names_a_table_its_route_gives_an_invalid_topic(pg_dsn: str, kafka_broker: Broker) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute('CREATE TABLE "bad name" (id int PRIMARY KEY); CREATE TABLE good (id int PRIMARY KEY);'
                     'CREATE PUBLICATION pub FOR TABLE "bad name", good')
    routes = json.dumps([{"match": r"public\.(.*)", "topic": r"cdc.\1"}])
    result = check({"PGBRIDGE_POSTGRES__DSN": pg_dsn, "PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS": kafka_broker.bootstrap,
                    "PGBRIDGE_POSTGRES__PUBLICATION": "pub", "PGBRIDGE_KAFKA__TOPIC_ROUTES": routes})
    assert result.returncode == 1, result.stdout + result.stderr
    lines = [line for line in (result.stdout + result.stderr).splitlines() if "topic_routes" in line]
    assert len(lines) == 1, result.stdout + result.stderr
    assert "public.bad name" in lines[0] and "fix: change the route whose match is public\\.(.*)" in lines[0]
