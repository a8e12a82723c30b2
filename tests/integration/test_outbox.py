"""The outbox event router (docs/routing.md): inserts into outbox tables become one record each on
``outbox.topic`` keyed by the aggregate id, the payload as stored, headers ``id`` and ``type``, in
commit order per aggregate, plain and under ``kafka.exactly_once``; updates, deletes and existing
rows of the outbox table publish nothing, its own table topic stays empty, END counts leave it
out; ``pgbridge check`` names a missing column and an outbox topic inside the prefix."""

from __future__ import annotations

import psycopg
import pytest

from tests.support.bridge import BridgeProcess, bridge_env, load_schemas
from tests.support.broker import Broker
from tests.support.cli import check
from tests.support.kafka import Record, list_topics, read_topics
from tests.support.replay import wait_caught_up

pytestmark = pytest.mark.integration

SCHEMA = """
CREATE TABLE orders (id int PRIMARY KEY, v text);
CREATE TABLE outbox (id uuid PRIMARY KEY, aggregatetype text NOT NULL, aggregateid text NOT NULL,
                     type text NOT NULL, payload jsonb);
CREATE TABLE blobs (event_id bigint PRIMARY KEY, kind varchar NOT NULL, owner bigint NOT NULL,
                    event_type text NOT NULL, body bytea);
INSERT INTO outbox VALUES ('00000000-0000-0000-0000-000000000000', 'Order', '0', 'Old', '{}');
"""
U1, U2, U3, U4 = (f"00000000-0000-0000-0000-00000000000{i}" for i in range(1, 5))


def _headers(record: Record) -> dict[str, bytes | None]:
    return dict(record.headers)


@pytest.mark.parametrize("exactly_once", [False, True], ids=["at_least_once", "exactly_once"])
def test_outbox_inserts_become_events_per_aggregate_in_commit_order(
        pg_dsn: str, kafka_broker: Broker, topic_prefix: str, exactly_once: bool) -> None:
    # given: two outbox tables (jsonb payload with default names; bytea payload, other names)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
    outbox_topic = f"{topic_prefix}_outbox.{{aggregate_type}}"
    env = bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix, extra={
        "PGBRIDGE_POSTGRES__TABLES": "public.orders,public.outbox,public.blobs",
        "PGBRIDGE_OUTBOX__TABLES": "public.outbox", "PGBRIDGE_OUTBOX__TOPIC": outbox_topic,
        "PGBRIDGE_KAFKA__EXACTLY_ONCE": str(exactly_once).lower()})
    order_topic, customer_topic, blob_topic = (f"{topic_prefix}_outbox.{kind}" for kind in ("Order", "Customer", "Blob"))
    with BridgeProcess(env).start() as bridge:
        bridge.wait_confirmed(pg_dsn, topic_prefix)
        # when: an order with its event, events of two aggregates, a later event of the first,
        # then an update and a delete of outbox rows
        with psycopg.connect(pg_dsn) as conn:
            conn.execute("INSERT INTO orders VALUES (1, 'x')")
            conn.execute(f"INSERT INTO outbox VALUES ('{U1}', 'Order', '1', 'OrderCreated', '{{\"id\": 1}}')")
            conn.commit()
            conn.execute(f"INSERT INTO outbox VALUES ('{U2}', 'Order', '2', 'OrderCreated', '{{\"id\":2}}'),"
                         f" ('{U3}', 'Customer', 'c1', 'CustomerCreated', NULL)")
            conn.commit()
            conn.execute(f"INSERT INTO outbox VALUES ('{U4}', 'Order', '1', 'OrderShipped', '[1, \"a\"]')")
            conn.commit()
            conn.execute("UPDATE outbox SET type = 'Changed'")
            conn.execute("DELETE FROM outbox")
            conn.commit()
        wait_caught_up(pg_dsn, topic_prefix, timeout=90)
        records = read_topics(kafka_broker.bootstrap, [order_topic, customer_topic, f"{topic_prefix}.transactions"],
                              min_count={order_topic: 3, customer_topic: 1}, timeout=60)
        topics = list_topics(kafka_broker.bootstrap)
        assert bridge.terminate() == 0, bridge.log()
    # then: one record per insert, keyed by the aggregate id, payload as stored, headers id and type
    assert [(r.key, r.value, _headers(r)) for r in records[order_topic]] == [
        (b"1", b'{"id": 1}', {"id": U1.encode(), "type": b"OrderCreated"}),
        (b"2", b'{"id": 2}', {"id": U2.encode(), "type": b"OrderCreated"}),
        (b"1", b'[1, "a"]', {"id": U4.encode(), "type": b"OrderShipped"})]
    assert [(r.key, r.value, _headers(r)) for r in records[customer_topic]] == [
        (b"c1", None, {"id": U3.encode(), "type": b"CustomerCreated"})]
    # the outbox table's own topic got nothing (not the existing row, not the update or delete)
    assert f"{topic_prefix}.public.outbox" not in topics
    # END counts name the tables whose topics hold the events: the outbox's are not among them
    store = load_schemas(kafka_broker.bootstrap, topic_prefix)
    ends = [store.decode(r.value) for r in records[f"{topic_prefix}.transactions"]]
    ends = [end for end in ends if end["status"] == "END"]
    assert [(end["event_count"], end["data_collections"]) for end in ends] == [
        (1, [{"data_collection": "public.orders", "event_count": 1}]), (0, []), (0, []), (0, [])]

    # when: a second run takes a bytea outbox table with its own column names
    blob_env = env | {"PGBRIDGE_OUTBOX__TABLES": "public.blobs", "PGBRIDGE_OUTBOX__ID_COLUMN": "event_id",
                 "PGBRIDGE_OUTBOX__AGGREGATE_TYPE_COLUMN": "kind", "PGBRIDGE_OUTBOX__AGGREGATE_ID_COLUMN": "owner",
                 "PGBRIDGE_OUTBOX__TYPE_COLUMN": "event_type", "PGBRIDGE_OUTBOX__PAYLOAD_COLUMN": "body"}
    with BridgeProcess(blob_env).start() as bridge:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO blobs VALUES (7, 'Blob', 42, 'Stored', '\\x00ff10'::bytea)")
        records = read_topics(kafka_broker.bootstrap, [blob_topic], min_count=1, timeout=60)
        assert bridge.terminate() == 0, bridge.log()
    # then: the bytes as stored; integer ids as Postgres prints them
    assert [(r.key, r.value, _headers(r)) for r in records[blob_topic]] == [
        (b"42", b"\x00\xff\x10", {"id": b"7", "type": b"Stored"})]



def test_check_names_a_missing_outbox_column_and_a_topic_inside_the_prefix(
        pg_dsn: str, kafka_broker: Broker) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE outbox (id uuid PRIMARY KEY, aggregatetype text, aggregateid text, type text);"
                     "CREATE PUBLICATION pub FOR TABLE outbox")
    result = check({"PGBRIDGE_POSTGRES__DSN": pg_dsn, "PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS": kafka_broker.bootstrap,
                     "PGBRIDGE_POSTGRES__PUBLICATION": "pub", "PGBRIDGE_KAFKA__TOPIC_PREFIX": "app",
                     "PGBRIDGE_OUTBOX__TABLES": "public.outbox", "PGBRIDGE_OUTBOX__TOPIC": "app.events.{aggregate_type}"})
    assert result.returncode == 1, result.stdout + result.stderr
    lines = [line for line in (result.stdout + result.stderr).splitlines() if "outbox" in line]
    assert any("outbox table public.outbox has no column payload" in line and "fix:" in line for line in lines), lines
    assert any("outbox.topic 'app.events.{aggregate_type}' is inside kafka.topic_prefix 'app'" in line
               for line in lines), lines
