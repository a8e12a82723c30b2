"""Differential test: one workload, captured by Debezium and by pgbridge, compared event by event.

Both systems read the same database through their own slot and publication (same tables), so
they decode the same WAL. Debezium runs as a user comparing would run it (the connector
properties below, each one explained in docs/migrating-from-debezium.md); its JSON is mapped to
pgbridge's representation by the rules of ``tests.support.debezium_diff`` (also in the doc), and
then every event must be equal, except the intended differences, which are asserted one by one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.bridge import BridgeProcess, bridge_env, load_schemas
from tests.support.broker import Broker
from tests.support.debezium import CONNECTOR_CLASS, ConnectWorker, connection_properties, worker_properties
from tests.support.debezium_diff import (
    TableSpec,
    Tally,
    commit_lsns,
    compare_messages,
    compare_table,
    compare_transactions,
)
from tests.support.kafka import read_topics
from tests.support.replay import wait_caught_up
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.debezium]

BIG = "".join(f"{i:05d}" for i in range(8000))  # 40 kB, stored out of line (STORAGE EXTERNAL: uncompressed)

SCHEMA = """
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TYPE pair AS (a int, b text);
CREATE TABLE types_all (
    id int PRIMARY KEY,
    num numeric(10, 2), num_free numeric, i2 smallint, i4 int, i8 bigint, f4 real, f8 double precision,
    t text, vc varchar(10), ch char(5), ba bytea, b bool,
    d date, tm time, ts timestamp, tstz timestamptz, iv interval, u uuid, j json, jb jsonb,
    ai int[], at text[], r4 int4range, rts tsrange, e mood, cp pair,
    ip inet, net cidr, mac macaddr, m money, bt bit(4), vb varbit, tv tsvector
);
CREATE TABLE ri_default (id int PRIMARY KEY, code text NOT NULL, v text);
CREATE TABLE ri_full (id int PRIMARY KEY, code text NOT NULL, v text);
ALTER TABLE ri_full REPLICA IDENTITY FULL;
CREATE TABLE ri_index (id int PRIMARY KEY, code text NOT NULL, v text);
CREATE UNIQUE INDEX ri_index_code ON ri_index (code);
ALTER TABLE ri_index REPLICA IDENTITY USING INDEX ri_index_code;
CREATE TABLE toasted (id int PRIMARY KEY, n int, doc text);
ALTER TABLE toasted ALTER COLUMN doc SET STORAGE EXTERNAL;
CREATE TABLE fence (id int PRIMARY KEY);
"""

TYPES_ALL = {
    "id": "int", "num": "decimal", "num_free": "numeric", "i2": "int", "i4": "int", "i8": "int", "f4": "float",
    "f8": "float", "t": "text", "vc": "text", "ch": "text", "ba": "bytea", "b": "bool", "d": "date",
    "tm": "time", "ts": "timestamp", "tstz": "timestamptz", "iv": "interval", "u": "uuid", "j": "text",
    "jb": "text", "ai": "array", "at": "array", "r4": "int4range", "rts": "tsrange", "e": "text", "cp": "pair",
    "ip": "text", "net": "text", "mac": "text", "m": "money", "bt": "bits", "vb": "bits", "tv": "text",
}
ROW = {"id": "int", "code": "text", "v": "text"}
SPECS = (
    TableSpec("types_all", TYPES_ALL, ("id",), ("id",), ("id",), frozenset({"id"})),
    TableSpec("ri_default", ROW, ("id",), ("id",), ("id",), frozenset({"id", "code"})),
    TableSpec("ri_full", ROW, ("id",), ("id",), None, frozenset({"id", "code"})),
    TableSpec("ri_index", ROW, ("code",), ("id",), ("code",), frozenset({"id", "code"})),
    TableSpec("toasted", {"id": "int", "n": "int", "doc": "text"}, ("id",), ("id",), ("id",), frozenset({"id"})),
    TableSpec("fence", {"id": "int"}, ("id",), ("id",), ("id",), frozenset({"id"})),
)
WORKLOAD_TABLES = tuple(spec.name for spec in SPECS)
# what the workload below publishes (pgbridge's count; Debezium's after folding key changes) and how
# many distinct documented differences it shows: the comparison cannot pass on a partial stream
EXPECTED_EVENTS = {"c": 13, "u": 9, "d": 4, "t": 1, "tombstone": 7, "m": 2}
EXPECTED_DIFFERENCES = {  # each documented difference (tests.support.debezium_diff.RULES) and how often
    "key-change": 3, "index-key": 7, "transaction-id": 27, "commit-position": 26, "unchanged-toast": 1, "old-key-default": 4,
    "message-collection-order": 1, "message-commit-time": 1, "end-message-collection": 1,
    "unrepresentable decimal NaN": 1, "unrepresentable date infinity": 1, "unrepresentable date -infinity": 1,
    "unrepresentable time 24:00:00": 1, "unrepresentable timestamp infinity": 1,
    "unrepresentable timestamp -infinity": 1, "unrepresentable timestamptz infinity": 1,
    "unrepresentable timestamptz -infinity": 1, 'unrepresentable tsrange ["2020-01-01 00:00:00",infinity)': 1,
}

TYPES_ROWS = [
    """INSERT INTO types_all VALUES (1, 12.5, 3.14159, 1, 2, 3, 1.5, 2.25, 'text', 'vc', 'ab', '\\x00ff10',
       true, '2024-02-29', '13:14:15.123456', '2024-02-29 13:14:15.654321', '2024-02-29 13:14:15.5+02',
       '1 year 2 mons 3 days 04:05:06.5', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"a": [1, 2]}',
       '{"b": {"c": null}}', '{1,NULL,3}', '{"x","y z"}', '[1,10)', '[2020-01-01 00:00,2021-01-01 00:00)',
       'happy', '(7,"seven")', '192.168.0.1/24', '10.0.0.0/8', '08:00:2b:01:02:03', 12.34, B'1010',
       B'101', 'a fat cat')""",
    """INSERT INTO types_all VALUES (2, 'NaN', 'NaN', -32768, -2147483648, -9223372036854775808,
       'NaN', 'Infinity', '', '', '', '', false, 'infinity', '24:00:00', '-infinity', 'infinity',
       '-1 days', '00000000-0000-0000-0000-000000000000', '[]', '{}', '{}', '{}', 'empty', '[,)',
       'sad', '(,)', '::1', '::/0', 'ff:ff:ff:ff:ff:ff', -0.01, B'0000', B'', '')""",
    "INSERT INTO types_all (id) VALUES (3)",
]


KEY_CHANGED = ("ri_default", "ri_full", "ri_index")  # the tables whose workload changes a key once


def workload(conn: psycopg.Connection[Any]) -> None:
    """Every kind of change the comparison covers, committed in a known order."""
    for row in TYPES_ROWS:
        conn.execute(row)
    conn.execute("UPDATE types_all SET num = 99.99, d = '-infinity', ts = 'infinity', tstz = '-infinity', "
                 "rts = '[2020-01-01,infinity)' WHERE id = 1")
    for table in KEY_CHANGED:
        conn.execute(f"INSERT INTO {table} VALUES (1, 'a', 'x'), (2, 'b', 'y')")
        conn.execute(f"UPDATE {table} SET v = 'z' WHERE id = 1")
        conn.execute(f"UPDATE {table} SET id = 3, code = 'c' WHERE id = 2")  # the key changes
        conn.execute(f"DELETE FROM {table} WHERE id = 1")
    conn.execute("INSERT INTO toasted VALUES (1, 0, %s)", (BIG,))
    conn.execute("UPDATE toasted SET n = 1")  # doc is TOASTed and unchanged: Postgres does not send it
    conn.execute("SELECT pg_logical_emit_message(false, 'diff', 'not transactional')")
    with conn.transaction():  # several statements and tables in one transaction
        conn.execute("INSERT INTO ri_default VALUES (10, 'k', 'multi')")
        conn.execute("SELECT pg_logical_emit_message(true, 'diff', 'in a transaction')")
        conn.execute("INSERT INTO ri_full VALUES (10, 'k', 'multi')")
        conn.execute("UPDATE ri_default SET v = 'multi 2' WHERE id = 10")
        conn.execute("DELETE FROM types_all WHERE id = 3")
    conn.execute("TRUNCATE ri_index")
    conn.execute("INSERT INTO fence VALUES (1)")


def debezium_connector(dsn: str, prefix: str, slot: str) -> dict[str, str]:
    """The connector as a user comparing would configure it: exact values, every operation.

    Why each property: docs/migrating-from-debezium.md, "How the test runs Debezium".
    """
    return {
        "name": prefix,
        "connector.class": CONNECTOR_CLASS,
        "tasks.max": "1",
        **connection_properties(dsn),
        "topic.prefix": prefix,
        "plugin.name": "pgoutput",
        "slot.name": slot,
        "publication.name": slot,
        "publication.autocreate.mode": "disabled",
        "table.include.list": ",".join(f"public.{t}" for t in WORKLOAD_TABLES),
        "snapshot.mode": "no_data",
        "decimal.handling.mode": "string",  # exact (precise is schema-bound bytes, double rounds)
        "time.precision.mode": "adaptive_time_microseconds",  # µs, as Postgres (connect: ms)
        "binary.handling.mode": "hex",  # readable bytes (base64 would do as well)
        "interval.handling.mode": "string",  # exact fields (numeric folds a month into 30 days)
        "include.unknown.datatypes": "true",  # else a composite column is left out of the row
        "skipped.operations": "none",  # the default skips truncates
        "tombstones.on.delete": "true",
        "provide.transaction.metadata": "true",  # the transaction block and topic, as pgbridge
        "topic.creation.default.replication.factor": "1",
        "topic.creation.default.partitions": "1",
    }


def slot_active(dsn: str, slot: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone()
    return bool(row and row[0])


def test_pgbridge_publishes_what_debezium_publishes(pg_dsn: str, kafka_broker: Broker, topic_prefix: str,
                                                   tmp_path: Path) -> None:
    # given: the schema, a publication per system, both systems streaming from their own slot
    ours, theirs = topic_prefix, f"{topic_prefix}_dbz"
    tables = ",".join(f"public.{t}" for t in WORKLOAD_TABLES)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
        conn.execute(f"CREATE PUBLICATION {theirs} FOR TABLE {tables}")
    bootstrap = kafka_broker.bootstrap
    env = bridge_env(pg_dsn, bootstrap, ours, extra={"PGBRIDGE_POSTGRES__TABLES": tables,
                                                      "PGBRIDGE_SNAPSHOT__MODE": "never"})
    work = tmp_path / "connect"
    worker = ConnectWorker(work, worker_properties(bootstrap, work), debezium_connector(pg_dsn, theirs, theirs))
    with BridgeProcess(env).start() as bridge, worker:
        worker.start()
        wait_until(lambda: slot_active(pg_dsn, ours), timeout=120, message=f"pgbridge never streamed: {bridge.log()}")
        wait_until(lambda: slot_active(pg_dsn, theirs) or not worker.alive(), timeout=300, interval=0.5,
                   message=f"Debezium never streamed: {worker.log()[-3000:]}")
        assert worker.alive(), worker.log()[-3000:]
        # when
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            workload(conn)
        wait_caught_up(pg_dsn, ours, timeout=120)
        # pgbridge confirmed every commit, so all its records are in Kafka; Debezium confirms lazily,
        # so wait for as many records as pgbridge published (plus one per key change: its extra
        # create), topic by topic
        suffixes = [f"public.{t}" for t in WORKLOAD_TABLES]
        our_topics = [f"{ours}.{s}" for s in suffixes] + [f"{ours}.messages", f"{ours}.transactions"]
        their_topics = [f"{theirs}.{s}" for s in suffixes] + [f"{theirs}.message", f"{theirs}.transaction"]
        ours_read = read_topics(bootstrap, our_topics, timeout=60)
        wanted = {theirs_topic: len(ours_read[our_topic]) + (our_topic.rsplit(".", 1)[-1] in KEY_CHANGED)
                  for our_topic, theirs_topic in zip(our_topics, their_topics, strict=True)}
        theirs_read = read_topics(bootstrap, their_topics, min_count=wanted, timeout=300)
        assert bridge.terminate() == 0, bridge.log()
    store = load_schemas(bootstrap, ours)

    def our_records(topic: str) -> list[tuple[Any, Any]]:
        return [(store.decode(r.key), store.decode(r.value)) for r in ours_read[topic]]

    def their_records(topic: str) -> list[tuple[Any, Any]]:
        return [(_json(r.key), _json(r.value)) for r in theirs_read[topic]]

    # then: every table's events, the messages and the transaction boundaries are the same, apart
    # from the documented differences (each asserted)
    boundaries = [v for _, v in our_records(f"{ours}.transactions")]
    tally = Tally(commits=commit_lsns(boundaries))
    for spec in SPECS:
        compare_table(spec, our_records(f"{ours}.public.{spec.name}"), their_records(f"{theirs}.public.{spec.name}"),
                      tally)
    compare_messages([v for _, v in our_records(f"{ours}.messages")],
                     [v for _, v in their_records(f"{theirs}.message")], tally)
    compare_transactions(boundaries, [v for _, v in their_records(f"{theirs}.transaction")], tally)
    print(tally.report())
    assert not tally.differences, "\n".join(tally.differences)
    # the workload reached every kind of event and every documented difference
    assert {op: tally.events[op] for op in ("c", "u", "d", "t", "tombstone", "m")} == EXPECTED_EVENTS, tally.events
    assert dict(tally.documented) == EXPECTED_DIFFERENCES, tally.report()


def _json(data: bytes | None) -> Any:
    return None if data is None else json.loads(data)
