"""A row too large for Kafka, tried as a new user would: a 3 MB text value on Apache Kafka.

``stop`` (the default): the producer refuses the record (its message.max.bytes, 1 MB by default);
pgbridge exits with one line naming the table, the key, the size, the limit and both settings to
raise, after delivering and confirming the row committed before it; a restart stops at the same row
again, and the slot never confirms past the row before it.
``dead_letter``: the producer's limit raised, the topic created beforehand with a small
``max.message.bytes``, so the *broker* refuses the record in its delivery report; a record with its
position and key goes to ``{prefix}._dead_letter``, later changes arrive, the metric counts it.
"""

from __future__ import annotations

import json

import psycopg
import pytest
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from pgbridge.metrics import OVERSIZE_RECORDS_TOTAL
from tests.support.bridge import BridgeProcess, bridge_env, load_schemas, read_events
from tests.support.broker import Broker
from tests.support.http import metric, scrape
from tests.support.kafka import read_topic
from tests.support.postgres import commit_bound, slot_confirmed_flush_lsn, wal_insert_lsn
from tests.support.replay import wait_caught_up

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

BIG = 3_000_000  # characters of text: over both the producer's and the broker's default limits
TOPIC_LIMIT = 100_000  # the table topic's max.message.bytes in the dead-letter scenario
DDL = "CREATE TABLE docs (id int PRIMARY KEY, body text)"


def _env(pg_dsn: str, bootstrap: str, prefix: str, extra: dict[str, str]) -> dict[str, str]:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(DDL)
    return bridge_env(pg_dsn, bootstrap, prefix,
                      extra={"PGBRIDGE_POSTGRES__TABLES": "public.docs", "PGBRIDGE_SNAPSHOT__MODE": "never",
                             **extra})


def _insert_big(pg_dsn: str) -> int:
    """Insert the oversized row 2; return a position below its commit record (see ``commit_bound``):
    a keepalive may confirm WAL up to there, never the row's commit."""
    return commit_bound(pg_dsn, f"INSERT INTO docs VALUES (2, repeat('x', {BIG}))")


def _insert(pg_dsn: str, row_id: int, body: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO docs VALUES (%s, %s)", (row_id, body))


def _started(env: dict[str, str], pg_dsn: str, prefix: str, *, http: bool = False) -> BridgeProcess:
    bridge = BridgeProcess(env).start(http=http)
    bridge.wait_confirmed(pg_dsn, prefix, timeout=60)
    return bridge


def _exit_line(bridge: BridgeProcess) -> str:
    assert bridge.process is not None
    code = bridge.process.wait(90)
    assert code == 1, bridge.log()
    lines = [line for line in bridge.log().splitlines() if "record too large for Kafka" in line]
    assert lines, bridge.log()
    return lines[-1]


def test_stop_names_the_record_and_the_settings_and_every_restart_stops_there(
        pg_dsn: str, apache_kafka: Broker, topic_prefix: str) -> None:
    env = _env(pg_dsn, apache_kafka.bootstrap, topic_prefix, {})
    with _started(env, pg_dsn, topic_prefix) as bridge:
        before_small = wal_insert_lsn(pg_dsn)
        _insert(pg_dsn, 1, "small")
        before_big = _insert_big(pg_dsn)
        _insert(pg_dsn, 3, "after")
        line = _exit_line(bridge)
    # The stop delivered and confirmed what came before the refused row (docs/operations.md,
    # "Oversized rows"), however soon after it the big row arrived: no clock decides.
    confirmed = slot_confirmed_flush_lsn(pg_dsn, topic_prefix)
    assert confirmed is not None and before_small < confirmed <= before_big, \
        (before_small, confirmed, before_big, bridge.log()[-3000:])
    delivered = read_events(apache_kafka.bootstrap, f"{topic_prefix}.public.docs", topic_prefix, min_count=1,
                            timeout=10, idle=0.5)
    assert [e.value["after"]["id"] for e in delivered if e.value is not None] == [1]
    for part in ("table public.docs", "key {id=2}", "bytes encoded", "producer's message.max.bytes of 1,000,000",
                 "PGBRIDGE_KAFKA__PROPERTIES__MESSAGE.MAX.BYTES", "max.message.bytes=<bytes>",
                 f"--entity-name {topic_prefix}.public.docs", "PGBRIDGE_KAFKA__OVERSIZE_POLICY=dead_letter"):
        assert part in line, (part, line)
    assert "KafkaException" not in line and "x" * 100 not in line

    with BridgeProcess(env).start() as again:
        assert "key {id=2}" in _exit_line(again)
    assert slot_confirmed_flush_lsn(pg_dsn, topic_prefix) == confirmed
    events = read_events(apache_kafka.bootstrap, f"{topic_prefix}.public.docs", topic_prefix, min_count=1,
                         timeout=10, idle=1.0)
    assert [e.value["after"]["id"] for e in events if e.value is not None] == [1], "row 1 published again"


def _topic_with_limit(bootstrap: str, topic: str) -> None:
    """The table's topic created beforehand with a small ``max.message.bytes``."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=1,
                                            config={"max.message.bytes": str(TOPIC_LIMIT)})], request_timeout=30)
    futures[topic].result(timeout=30)


BROKER_DECIDES = {"PGBRIDGE_KAFKA__PROPERTIES__MESSAGE.MAX.BYTES": "10000000"}  # librdkafka lets it through


def test_stop_when_the_broker_refuses_names_the_topic_limit(
        pg_dsn: str, apache_kafka: Broker, topic_prefix: str) -> None:
    _topic_with_limit(apache_kafka.bootstrap, f"{topic_prefix}.public.docs")
    env = _env(pg_dsn, apache_kafka.bootstrap, topic_prefix, BROKER_DECIDES)
    with _started(env, pg_dsn, topic_prefix) as bridge:
        before_big = _insert_big(pg_dsn)
        _insert(pg_dsn, 3, "after")
        line = _exit_line(bridge)
    assert "table public.docs key {id=2}" in line and "event 1" in line, line
    assert f"over topic {topic_prefix}.public.docs's max.message.bytes of 100,000 (refused by the broker)" in line
    confirmed = slot_confirmed_flush_lsn(pg_dsn, topic_prefix)
    assert confirmed is not None and confirmed <= before_big, "the slot confirmed past the refused row"


def test_dead_letter_publishes_position_and_key_and_goes_on(
        pg_dsn: str, apache_kafka: Broker, topic_prefix: str) -> None:
    table_topic = f"{topic_prefix}.public.docs"
    _topic_with_limit(apache_kafka.bootstrap, table_topic)
    env = _env(pg_dsn, apache_kafka.bootstrap, topic_prefix,
               {"PGBRIDGE_KAFKA__OVERSIZE_POLICY": "dead_letter", **BROKER_DECIDES})
    with _started(env, pg_dsn, topic_prefix, http=True) as bridge:
        _insert(pg_dsn, 1, "small")
        big_lsn = _insert_big(pg_dsn)
        _insert(pg_dsn, 3, "after")
        wait_caught_up(pg_dsn, topic_prefix, timeout=90)
        assert bridge.alive(), bridge.log()
        letters = read_topic(apache_kafka.bootstrap, f"{topic_prefix}._dead_letter", min_count=1, timeout=30,
                             idle=1.0)
        events = read_events(apache_kafka.bootstrap, table_topic, topic_prefix, min_count=2, timeout=30, idle=1.0)
        assert bridge.http_port is not None
        counted = metric(scrape(bridge.http_port), OVERSIZE_RECORDS_TOTAL, table="public.docs")
    assert [e.value["after"]["id"] for e in events if e.value is not None] == [1, 3]
    assert len(letters) == 1 and letters[0].value is not None
    letter = json.loads(letters[0].value)
    assert (letter["reason"], letter["refused_by"], letter["table"], letter["key"], letter["limit_bytes"]) == (
        "record_too_large", "broker", "public.docs", "{id=2}", TOPIC_LIMIT)
    assert letter["size_bytes"] > BIG and letter["total_order"] == 1
    commit_lsn = int(letter["commit_lsn"].split("/")[0], 16) << 32 | int(letter["commit_lsn"].split("/")[1], 16)
    assert commit_lsn >= big_lsn  # the refused row's own commit
    assert load_schemas(apache_kafka.bootstrap, topic_prefix).decode(letters[0].key) == {"id": 2}
    assert len(letters[0].value) < 2_000  # a small record saying why, never the oversize value
    assert counted == 1
