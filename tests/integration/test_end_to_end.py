"""A mixed workload on three tables comes out of Kafka as exactly the committed changes, in order."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.support.bridge import BridgeProcess, bridge_env, load_schemas
from tests.support.broker import Broker
from tests.support.kafka import read_topics

pytestmark = pytest.mark.integration

SCHEMA = """
CREATE TABLE public.customers (id bigint PRIMARY KEY, name text NOT NULL, balance numeric(12,2),
                               created timestamptz, tags int4[]);
CREATE TABLE public.orders (id int PRIMARY KEY, customer_id bigint, note varchar(40), paid bool,
                            ordered date, uid uuid, payload jsonb, raw bytea, ratio float8);
CREATE TABLE public.audit (ts timestamp, message text);
ALTER TABLE public.audit REPLICA IDENTITY FULL;
"""


def _workload(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        with conn.transaction():
            conn.execute("INSERT INTO customers VALUES (1, 'ann', 10.50, '2024-01-02 03:04:05+00', '{1,2}'),"
                         " (2, 'bob', NULL, NULL, NULL)")
            conn.execute("INSERT INTO orders VALUES (10, 1, 'first', true, '2024-02-29',"
                         " 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{\"k\": [1, 2]}', '\\x00ff', 0.5)")
        conn.execute("UPDATE customers SET balance = 99.99, name = 'ann2' WHERE id = 1")
        conn.execute("INSERT INTO audit VALUES ('2024-01-01 00:00:00', 'hello')")
        conn.execute("UPDATE audit SET message = 'changed'")
        with conn.transaction():
            conn.execute("DELETE FROM orders WHERE id = 10")
            conn.execute("SELECT pg_logical_emit_message(true, 'app', 'inside')")
            conn.execute("UPDATE customers SET id = 3 WHERE id = 2")
        conn.execute("SELECT pg_logical_emit_message(false, 'app', 'outside')")
        conn.execute("TRUNCATE audit")
        conn.execute("INSERT INTO orders (id, note) VALUES (11, 'after truncate')")


def _events(records: list[Any], store: Any) -> list[dict[str, Any]]:
    return [store.decode(r.value) for r in records if r.value is not None]


def test_mixed_workload_arrives_exactly_once_in_commit_order(pg_dsn: str, kafka_broker: Broker,
                                                             topic_prefix: str) -> None:
    # given
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
    env = bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": "public.customers,public.orders,public.audit",
                            "PGBRIDGE_SNAPSHOT__MODE": "never"})
    with BridgeProcess(env).start() as bridge:
        bridge.wait_confirmed(pg_dsn, topic_prefix, timeout=60)
        # when
        _workload(pg_dsn)
        with psycopg.connect(pg_dsn) as conn:
            row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        topics = {name: f"{topic_prefix}.public.{name}" for name in ("customers", "orders", "audit")}
        records = read_topics(kafka_broker.bootstrap,
                              [*topics.values(), f"{topic_prefix}.messages", f"{topic_prefix}.transactions"],
                              min_count={topics["customers"]: 5, topics["orders"]: 3, topics["audit"]: 3,
                                         f"{topic_prefix}.messages": 2}, timeout=60)
        assert bridge.terminate() == 0, bridge.log()
    assert row is not None
    # then
    store = load_schemas(kafka_broker.bootstrap, topic_prefix)
    customers = records[topics["customers"]]
    ops = [(store.decode(r.key), None if r.value is None else store.decode(r.value)["op"]) for r in customers]
    assert ops == [({"id": 1}, "c"), ({"id": 2}, "c"), ({"id": 1}, "u"), ({"id": 2}, None), ({"id": 3}, "u")]

    inserted = store.decode(customers[0].value)
    assert inserted["after"]["name"] == "ann"
    assert str(inserted["after"]["balance"]) == "10.50"
    assert inserted["after"]["tags"] == [1, 2]
    assert inserted["before"] is None
    source = inserted["source"]
    assert (source["schema"], source["table"], source["snapshot"]) == ("public", "customers", False)
    assert source["xid"] > 0 and source["ts_us"] > 1_600_000_000_000_000
    assert source["lsn"] <= source["commit_lsn"]
    assert inserted["transaction"]["total_order"] == 1
    assert inserted["transaction"]["data_collection_order"] == 1

    second = store.decode(customers[1].value)
    assert second["transaction"]["total_order"] == 2
    assert second["source"]["commit_lsn"] == source["commit_lsn"]
    assert second["transaction"]["id"] == inserted["transaction"]["id"]

    updated = store.decode(customers[2].value)
    assert updated["before"] is None  # REPLICA IDENTITY DEFAULT with an unchanged key: no old image
    assert updated["after"]["name"] == "ann2" and str(updated["after"]["balance"]) == "99.99"

    orders = records[topics["orders"]]
    order_events = [None if r.value is None else store.decode(r.value) for r in orders]
    assert [e and e["op"] for e in order_events] == ["c", "d", None, "c"]
    created = order_events[0]
    assert created is not None
    assert created["after"]["raw"] == b"\x00\xff"
    assert created["after"]["payload"] == '{"k": [1, 2]}'
    assert str(created["after"]["uid"]) == "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"
    assert created["after"]["paid"] is True and created["after"]["ratio"] == 0.5
    deleted = order_events[1]
    assert deleted is not None and deleted["before"]["id"] == 10 and deleted["after"] is None
    assert deleted["transaction"]["total_order"] == 1

    audit = [store.decode(r.value) for r in records[topics["audit"]]]
    assert [e["op"] for e in audit] == ["c", "u", "t"]
    assert audit[1]["before"]["message"] == "hello"  # REPLICA IDENTITY FULL: the whole old row
    assert audit[1]["after"]["message"] == "changed"
    assert records[topics["audit"]][0].key is None  # no key columns: null Kafka key

    messages = [store.decode(r.value) for r in records[f"{topic_prefix}.messages"]]
    assert [(m["prefix"], m["content"]) for m in messages] == [("app", b"inside"), ("app", b"outside")]

    # commit order across tables: every event's (commit_lsn, total_order) is increasing per topic
    all_events = [e for t in topics.values() for e in _events(records[t], store)]
    commits = sorted({e["source"]["commit_lsn"] for e in all_events})
    assert len(commits) == 7  # seven transactions touched tables
    for topic in topics.values():
        keys = [(e["source"]["commit_lsn"], e["transaction"]["total_order"]) for e in _events(records[topic], store)]
        assert keys == sorted(keys)

    boundaries = [store.decode(r.value) for r in records[f"{topic_prefix}.transactions"]]
    assert [b["status"] for b in boundaries].count("BEGIN") == [b["status"] for b in boundaries].count("END")
    ends = [b for b in boundaries if b["status"] == "END"]
    assert sum(b["event_count"] for b in ends) == len(all_events) + 1  # + the transactional message
