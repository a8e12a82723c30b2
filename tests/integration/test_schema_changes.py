"""Schema changes as events (``postgres.ddl_events``) through the real bridge, Postgres and Kafka.

One table lives through a column rename, an add (in one transaction with a row), a drop, a retype,
a rename of its key column and a table rename, with rows before and after each, and pgbridge is
killed (-9) and restarted in the middle. Then:

* every schema change is on ``{prefix}.schema_changes``, in commit order with the row changes
  (merged by ``(commit_lsn, total_order)`` the topics replay the script), saying what changed by
  attribute number, whether a retype converts exactly, and which topic each name publishes on;
* Apache Avro for Java, holding the table's newest writer schemas (key and value) as its reader
  schemas, reads every record of the table's topic with the values under the new names: the
  aliases survived the restart. Both encodings: ``{prefix}._schemas`` and a real Schema Registry;
  and under exactly-once, where the history record commits in the DDL's Kafka transaction.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from fastavro import parse_schema, schemaless_reader
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgbridge.consumer import RegistrySchemaStore
from tests.support.avro_java import read_with_java
from tests.support.bridge import BridgeProcess, bridge_env, load_schemas, read_events
from tests.support.broker import Broker
from tests.support.kafka import Record, read_topics
from tests.support.postgres import slot_confirmed_flush_lsn
from tests.support.registry import SchemaRegistry
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

TABLE = "CREATE TABLE public.evo (id int PRIMARY KEY, a text, n int)"

# (statements of one transaction, what the topics show for it in order: a row op with its id, or a change)
BEFORE_RESTART: list[tuple[list[str], list[str]]] = [
    (["INSERT INTO evo VALUES (1, 'one', 1)"], ["c1"]),
    (["ALTER TABLE evo RENAME COLUMN a TO title"], ["column_renamed"]),
    (["INSERT INTO evo VALUES (2, 'two', 2)"], ["c2"]),
    (["ALTER TABLE evo ADD COLUMN extra text", "INSERT INTO evo VALUES (3, 'three', 3, 'x')"],
     ["column_added", "c3"]),
    (["ALTER TABLE evo DROP COLUMN extra"], ["column_dropped"]),
    (["INSERT INTO evo VALUES (4, 'four', 4)"], ["c4"]),
]
AFTER_RESTART: list[tuple[list[str], list[str]]] = [
    (["ALTER TABLE evo ALTER COLUMN n TYPE bigint"], ["column_retyped"]),
    (["INSERT INTO evo VALUES (5, 'five', 5000000000)"], ["c5"]),
    (["ALTER TABLE evo RENAME COLUMN id TO ident"], ["column_renamed"]),
    (["INSERT INTO evo VALUES (6, 'six', 6)", "UPDATE evo SET title = 'uno' WHERE ident = 1"], ["c6", "u1"]),
    (["ALTER TABLE evo RENAME TO evo2"], ["table_renamed"]),
    (["INSERT INTO evo2 VALUES (7, 'seven', 7)"], ["c7"]),
]
# Every row of public.evo's topic as a reader on its newest schema must see it.
NEWEST_VIEW = [{"ident": 1, "title": "one", "n": 1}, {"ident": 2, "title": "two", "n": 2},
               {"ident": 3, "title": "three", "n": 3}, {"ident": 4, "title": "four", "n": 4},
               {"ident": 5, "title": "five", "n": 5_000_000_000}, {"ident": 6, "title": "six", "n": 6},
               {"ident": 1, "title": "uno", "n": 1}]


def _run(dsn: str, steps: list[tuple[list[str], list[str]]]) -> None:
    """Each step in its own transaction; a warning (the trigger's "DDL capture failed") fails it."""
    warnings: list[str] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.add_notice_handler(lambda notice: warnings.append(f"{notice.severity}: {notice.message_primary}"))
        for statements, _ in steps:
            with conn.transaction():
                for statement in statements:
                    conn.execute(statement)
    assert not [w for w in warnings if w.startswith("WARNING")], warnings


def _wal_position(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        # the insert position: with asynchronous commit the write position can trail the commits
        row = conn.execute("SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint").fetchone()
    assert row is not None
    return int(str(row[0]))


@dataclass
class Decoder:
    """Writer schema and Avro body of a framed key or value, for one of the two encodings."""

    writer_of: Callable[[bytes], dict[str, Any]]
    header: int  # bytes before the Avro body: 10 single-object, 5 Confluent
    newest: Callable[[str], dict[str, Any]]  # subject ({topic}-key / -value) → newest schema

    def decode(self, data: bytes, reader: dict[str, Any] | None = None) -> Any:
        writer = parse_schema(self.writer_of(data))
        return schemaless_reader(io.BytesIO(data[self.header:]), writer,
                                 None if reader is None else parse_schema(reader))

    def body(self, data: bytes) -> tuple[dict[str, Any], bytes]:
        return self.writer_of(data), data[self.header:]


def _capture(dsn: str, broker: Broker, prefix: str, extra: dict[str, str], *,
             kill_when_committed: bool = False) -> dict[str, list[Record]]:
    """Run the whole script through pgbridge, killed -9 and restarted halfway; every record.

    Killed once the first half is confirmed (the history comes back from Kafka), or, with
    ``kill_when_committed`` (exactly-once), as soon as it is committed in Kafka, most likely before
    the slot confirmed it: the restart then decodes those transactions again and skips them as
    whole in Kafka, and the history must still learn their DDL."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(TABLE)
    env = bridge_env(dsn, broker.bootstrap, prefix, extra={
        "PGBRIDGE_POSTGRES__TABLES": "public.evo", "PGBRIDGE_SNAPSHOT__MODE": "never",
        "PGBRIDGE_POSTGRES__DDL_EVENTS": "true", **extra})
    with BridgeProcess(env).start() as bridge:
        bridge.wait_confirmed(dsn, prefix, timeout=60)
        _run(dsn, BEFORE_RESTART)
        if kill_when_committed:
            first = [f"{prefix}.public.evo", f"{prefix}.schema_changes"]
            try:
                read_topics(broker.bootstrap, first, min_count=dict(zip(first, [4, 3], strict=True)), timeout=60, idle=0)
            except AssertionError as exc:  # say what Kafka holds, committed or not, and what the bridge did
                every = [*first, f"{prefix}._snapshot", f"{prefix}.transactions"]
                uncommitted = read_topics(broker.bootstrap, every, timeout=10, idle=2, isolation="read_uncommitted")
                held = {topic: [(r.partition, r.offset, len(r.value or b""),
                                 re.findall(rb"column_\w+|table_renamed|\"version[^}]*}", r.value or b"")[-3:],
                                 (r.value or b"")[-40:]) for r in rows]
                        for topic, rows in uncommitted.items()}
                raise AssertionError(f"{exc}\nread_uncommitted: {held}\n{bridge.log()}") from None
        else:
            written = _wal_position(dsn)
            wait_until(lambda: (slot_confirmed_flush_lsn(dsn, prefix) or 0) >= written or not bridge.alive(),
                       timeout=60, message="first half never confirmed")
        assert bridge.alive(), bridge.log()
        bridge.kill()
        first_log = bridge.log()
        assert "DDL event trigger installed" in first_log
    with BridgeProcess(env).start() as bridge:
        # with postgres.tables the table must still have its listed name when pgbridge starts
        wait_until(lambda: "replicating" in bridge.log() or not bridge.alive(), timeout=60, message="no restart")
        assert bridge.alive(), bridge.log()
        _run(dsn, AFTER_RESTART)
        topics = [f"{prefix}.public.evo", f"{prefix}.public.evo2", f"{prefix}.schema_changes"]
        try:
            records = read_topics(broker.bootstrap, topics, min_count=dict(zip(topics, [7, 1, 6], strict=True)),
                                  timeout=90)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{first_log}\n{bridge.log()}") from None
        assert bridge.terminate() == 0, bridge.log()
    return records


def _label(value: dict[str, Any]) -> str:
    if "changes" in value:
        kinds = [change["change"] for change in value["changes"]]
        assert len(kinds) == 1, kinds
        return str(kinds[0])
    row = value["after"] or value["before"]
    return f"{value['op']}{row.get('id', row.get('ident'))}"


def _check(records: dict[str, list[Record]], decoder: Decoder, prefix: str) -> None:
    evo, evo2, changes = (records[f"{prefix}.{name}"] for name in ("public.evo", "public.evo2", "schema_changes"))
    # then: merged by (commit_lsn, total_order) the topics replay the script, each event once
    timeline: dict[tuple[int, int], str] = {}
    for record in [*evo, *evo2, *changes]:
        if record.value is None:
            continue
        value = decoder.decode(record.value)
        timeline[(value["source"]["commit_lsn"], value["transaction"]["total_order"])] = _label(value)
    assert [timeline[position] for position in sorted(timeline)] == \
        [label for _, labels in BEFORE_RESTART + AFTER_RESTART for label in labels], sorted(timeline.items())
    events = [decoder.decode(r.payload) for r in changes]
    by_offset = sorted(zip(((r.partition, r.offset) for r in changes), events, strict=True))
    order = [(position, event["source"]["commit_lsn"]) for position, event in by_offset]
    assert order == sorted(order, key=lambda item: (item[0][0], item[1])), order  # per partition: commit order
    renamed, added, dropped, retyped, key_renamed, table_renamed = sorted(
        events, key=lambda e: e["source"]["commit_lsn"])
    # what each event says
    assert renamed["changes"] == [{"change": "column_renamed", "attnum": 2, "name_before": "a", "name_after": "title",
                                   "type_before": "text", "type_after": "text", "converts_exactly": None,
                                   "aliases": ["a"]}]
    assert renamed["command"] == "ALTER TABLE" and renamed["object_identity"] == "public.evo"
    assert [c["name"] for c in renamed["before"]["columns"]] == ["id", "a", "n"]
    assert [c["name"] for c in renamed["after"]["columns"]] == ["id", "title", "n"]
    assert [(c["change"], c["attnum"], c["name_after"]) for c in added["changes"]] == [("column_added", 4, "extra")]
    assert [(c["change"], c["attnum"], c["name_before"]) for c in dropped["changes"]] == \
        [("column_dropped", 4, "extra")]
    assert [(c["change"], c["type_before"], c["type_after"], c["converts_exactly"]) for c in retyped["changes"]] == \
        [("column_retyped", "integer", "bigint", True)]
    assert [(c["change"], c["name_before"], c["name_after"], c["aliases"]) for c in key_renamed["changes"]] == \
        [("column_renamed", "id", "ident", ["id"])]
    assert [(c["name"], c["key"]) for c in key_renamed["after"]["columns"]] == [("ident", True), ("title", False), ("n", False)]
    assert [(c["change"], c["name_before"], c["name_after"]) for c in table_renamed["changes"]] == \
        [("table_renamed", "public.evo", "public.evo2")]
    assert (table_renamed["before"]["topic"], table_renamed["after"]["topic"]) == \
        (f"{prefix}.public.evo", f"{prefix}.public.evo2")
    assert decoder.decode(next(r for r in changes if decoder.decode(r.payload) == table_renamed).key or b"") == \
        {"schema": "public", "table": "evo2"}
    assert {e["source"]["table"] for e in events} == {"evo", "evo2"} and all(e["transaction"] for e in events)
    # Java on the newest schemas reads every record of the old topic under the new names
    topic = f"{prefix}.public.evo"
    value_reader, key_reader = decoder.newest(f"{topic}-value"), decoder.newest(f"{topic}-key")
    fields = {f["name"]: f for f in value_reader["fields"][0]["type"][1]["fields"]}
    assert fields["title"]["aliases"] == ["a"] and fields["ident"]["aliases"] == ["id"]
    values = [r for r in evo if r.value is not None]
    java_values = read_with_java(value_reader, [decoder.body(r.payload) for r in values])
    assert [v["after"] for v in java_values] == NEWEST_VIEW
    java_keys = read_with_java(key_reader, [decoder.body(r.key or b"") for r in values])
    assert java_keys == [{"ident": row["ident"]} for row in NEWEST_VIEW]


@pytest.mark.parametrize("exactly_once", [False, True], ids=["at_least_once", "exactly_once"])
def test_schema_changes_arrive_in_commit_order_and_java_reads_old_records_under_new_names(
        pg_dsn: str, apache_kafka: Broker, topic_prefix: str, exactly_once: bool) -> None:
    # exactly-once: the history record and the event commit in the DDL's Kafka transaction
    records = _capture(pg_dsn, apache_kafka, topic_prefix,
                       {"PGBRIDGE_KAFKA__EXACTLY_ONCE": "true"} if exactly_once else {},
                       kill_when_committed=exactly_once)
    store = load_schemas(apache_kafka.bootstrap, topic_prefix)
    table_topic = f"{topic_prefix}.public.evo"
    newest_records = [r for r in records[table_topic] if r.value is not None]

    def newest(subject: str) -> dict[str, Any]:
        last = newest_records[-1]
        data = last.value if subject.endswith("-value") else last.key
        assert data is not None
        return store.schema(store.fingerprint_of(data))

    _check(records, Decoder(lambda data: store.schema(store.fingerprint_of(data)), 10, newest), topic_prefix)


def test_schema_changes_through_a_schema_registry(pg_dsn: str, apache_kafka: Broker, registry: SchemaRegistry,
                                                  topic_prefix: str) -> None:
    # BACKWARD, as a Confluent registry defaults to: the key rename passes only through its alias
    # (a key field has no default to fall back on)
    for subject in (f"{topic_prefix}.public.evo-key", f"{topic_prefix}.public.evo-value"):
        registry.set_compatibility("BACKWARD", subject)
    records = _capture(pg_dsn, apache_kafka, topic_prefix, {"PGBRIDGE_SCHEMA_REGISTRY__URL": registry.url})
    store = RegistrySchemaStore({"url": registry.url})
    with SchemaRegistryClient({"url": registry.url}) as client:

        def newest(subject: str) -> dict[str, Any]:
            schema: dict[str, Any] = json.loads(client.get_latest_version(subject).schema.schema_str or "")
            return schema

        try:
            _check(records, Decoder(lambda data: store.schema(store.schema_id_of(data)), 5, newest), topic_prefix)
        finally:
            store.close()


def _pgbridge_check(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pgbridge", "check"], env=env, capture_output=True, text=True,
                          timeout=120, check=False)


def test_check_prints_the_trigger_sql_and_a_least_privilege_role_captures_once_a_superuser_ran_it(
        pg_dsn: str, apache_kafka: Broker, topic_prefix: str) -> None:
    # given: pgbridge as a role that may replicate and read the table, not create an event trigger
    role = f"{topic_prefix}_bridge"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(TABLE)
        conn.execute(f"CREATE PUBLICATION {topic_prefix} FOR TABLE evo")
        conn.execute(f"CREATE ROLE {role} LOGIN REPLICATION")
        conn.execute(f"GRANT SELECT ON evo TO {role}")
    role_dsn = make_conninfo("", **{**conninfo_to_dict(pg_dsn), "user": role})
    env = bridge_env(role_dsn, apache_kafka.bootstrap, topic_prefix, extra={
        "PGBRIDGE_POSTGRES__PUBLICATION_MODE": "disabled", "PGBRIDGE_SNAPSHOT__MODE": "never",
        "PGBRIDGE_POSTGRES__DDL_EVENTS": "true"})
    # when: check names the problem and the SQL, which a superuser runs as printed
    first = _pgbridge_check(env)
    lines = [line for line in first.stdout.splitlines() if "DDL event trigger" in line]
    assert first.returncode == 1 and len(lines) == 1, first.stdout + first.stderr
    script = lines[0].split(f"as a superuser, in database {conninfo_to_dict(pg_dsn)['dbname']}: ", 1)[1]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(script.encode())
    second = _pgbridge_check(env)
    assert "DDL event trigger" not in second.stdout, second.stdout
    # then: the role streams, and a rename is an event and an alias
    with BridgeProcess(env).start() as bridge:
        wait_until(lambda: "replicating" in bridge.log() or not bridge.alive(), timeout=60, message="no start")
        assert bridge.alive(), bridge.log()
        assert "DDL event trigger" not in bridge.log()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO evo VALUES (1, 'one', 1)")
            conn.execute("ALTER TABLE evo RENAME COLUMN a TO title")
            conn.execute("INSERT INTO evo VALUES (2, 'two', 2)")
        changes = read_events(apache_kafka.bootstrap, f"{topic_prefix}.schema_changes", topic_prefix, min_count=1)
        rows = read_events(apache_kafka.bootstrap, f"{topic_prefix}.public.evo", topic_prefix, min_count=2)
        assert bridge.terminate() == 0, bridge.log()
    assert [c["change"] for e in changes if e.value for c in e.value["changes"]] == ["column_renamed"]
    assert [e.value["after"] for e in rows if e.value] == [{"id": 1, "a": "one", "n": 1},
                                                            {"id": 2, "title": "two", "n": 2}]


def test_a_renamed_table_is_snapshotted_onto_its_new_topic(pg_dsn: str, apache_kafka: Broker,
                                                           topic_prefix: str) -> None:
    # given: a table with rows, snapshotted at start (snapshot.mode initial)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(TABLE)
        conn.execute("INSERT INTO evo SELECT g, 'row ' || g, g FROM generate_series(1, 3) g")
    env = bridge_env(pg_dsn, apache_kafka.bootstrap, topic_prefix, extra={
        "PGBRIDGE_POSTGRES__TABLES": "public.evo", "PGBRIDGE_POSTGRES__DDL_EVENTS": "true",
        "PGBRIDGE_SNAPSHOT__PUBLICATION_CHECK_S": "1"})
    with BridgeProcess(env).start() as bridge:
        wait_until(lambda: "replicating" in bridge.log() or not bridge.alive(), timeout=60, message="no start")
        assert bridge.alive(), bridge.log()
        # when
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("ALTER TABLE evo RENAME TO evo2")
            conn.execute("INSERT INTO evo2 VALUES (4, 'row 4', 4)")
        new = read_events(apache_kafka.bootstrap, f"{topic_prefix}.public.evo2", topic_prefix, min_count=5)
        changes = read_events(apache_kafka.bootstrap, f"{topic_prefix}.schema_changes", topic_prefix, min_count=1)
        assert bridge.terminate() == 0, bridge.log()
    # then: the event, and the new topic holds every row: the insert and a snapshot read of each
    assert [c["change"] for e in changes if e.value for c in e.value["changes"]] == ["table_renamed"]
    assert sorted((e.value["op"], e.value["after"]["id"]) for e in new if e.value) == \
        [("c", 4), ("r", 1), ("r", 2), ("r", 3), ("r", 4)]
