"""Routing and filtering (docs/routing.md): ``kafka.skipped_operations`` publishes nothing for the
skipped ops while their LSNs are still confirmed and the transaction boundaries count only what
was published; ``kafka.tombstones_on_delete=false`` drops the tombstone after a keyed delete."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import psycopg
import pytest

from tests.support.bridge import BridgeProcess, bridge_env, load_schemas
from tests.support.broker import Broker
from tests.support.kafka import Record, read_topics
from tests.support.postgres import slot_confirmed_flush_lsn
from tests.support.replay import wait_caught_up
from tests.support.waiting import wait_until

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
        wait_until(lambda: slot_confirmed_flush_lsn(pg_dsn, topic_prefix), timeout=60,
                   message=f"slot never created: {bridge.log()}")
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
        wait_until(lambda: slot_confirmed_flush_lsn(pg_dsn, topic_prefix), timeout=60,
                   message=f"slot never created: {bridge.log()}")
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


def test_check_names_an_unknown_skipped_operation() -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PGBRIDGE_")}
    result = subprocess.run([sys.executable, "-m", "pgbridge", "check"], capture_output=True, text=True,
                            timeout=120, env={**clean, "PGBRIDGE_POSTGRES__DSN": "x",
                                              "PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS": "k",
                                              "PGBRIDGE_KAFKA__SKIPPED_OPERATIONS": "c,insert"})
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "kafka.skipped_operations" in result.stderr
