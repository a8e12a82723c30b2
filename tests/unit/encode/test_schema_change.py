"""What a DDL command changed (encode/schema_change.py), and its record on {prefix}.schema_changes."""

from __future__ import annotations

import io
import json
from dataclasses import replace

from fastavro import parse_schema, schemaless_reader

from pgbridge.assemble.units import MessageChange
from pgbridge.decode.ddl import DDL_FENCE, DDL_FORMAT, DDL_PREFIX, DdlColumn, DdlCommand, TableShape
from pgbridge.decode.messages import Relation
from pgbridge.encode.envelope import ChangeEncoder, EventContext
from pgbridge.encode.renames import RenameHistory
from pgbridge.encode.schema_change import (
    KEY_SCHEMA,
    VALUE_SCHEMA,
    SchemaChanges,
    column_changes,
    schema_change_key,
    schema_change_value,
)
from pgbridge.encode.schemas import standalone_schema
from pgbridge.encode.wire import SingleObjectRegistrar
from pgbridge.lsn import Lsn
from pgbridge.publish.routing import TopicRouter
from tests.support.relations import relation as build_relation


def column(attnum: int, name: str, kind: str = "integer", oid: int = 23) -> DdlColumn:
    return DdlColumn(attnum=attnum, name=name, type=kind, type_oid=oid, typmod=-1, not_null=False, key=attnum == 1)


def shape(*columns: DdlColumn, table: str = "t", schema: str = "public") -> TableShape:
    return TableShape(schema=schema, table=table, replica_identity="d", publications=("p",), columns=columns)


BASE = shape(column(1, "id"), column(2, "a", "text", 25), column(3, "n"))


def kinds(changes: list[dict[str, object]]) -> list[tuple[object, ...]]:
    return [(c["change"], c["attnum"], c["name_before"], c["name_after"]) for c in changes]


def test_changes_are_found_by_attribute_number() -> None:
    after = shape(column(1, "id"), column(2, "title", "text", 25), column(3, "n", "bigint", 20),
                  column(5, "extra", "text", 25))
    before = shape(*BASE.columns, column(4, "gone"))
    changes = column_changes("ALTER TABLE", before, after, {2: ("a",)})
    assert kinds(changes) == [("column_renamed", 2, "a", "title"), ("column_retyped", 3, "n", "n"),
                              ("column_dropped", 4, "gone", None), ("column_added", 5, None, "extra")]
    assert changes[0]["aliases"] == ["a"] and changes[0]["converts_exactly"] is None
    assert (changes[1]["type_before"], changes[1]["type_after"], changes[1]["converts_exactly"]) == \
        ("integer", "bigint", True)


def test_table_level_changes() -> None:
    moved = replace(BASE, table="t2", schema="archive")
    assert kinds(column_changes("ALTER TABLE", BASE, moved, {})) == \
        [("table_renamed", None, "public.t", "archive.t2")]
    assert kinds(column_changes("CREATE TABLE", None, BASE, {})) == [("table_created", None, None, "public.t")]
    assert kinds(column_changes("DROP TABLE", BASE, None, {})) == [("table_dropped", None, "public.t", None)]
    assert column_changes("ALTER TABLE", None, BASE, {}) == []  # before unknown: nothing to compare
    assert column_changes("ALTER TABLE", BASE, BASE, {}) == []


def test_the_record_follows_its_avro_schemas() -> None:
    after = shape(column(1, "id"), column(2, "title", "text", 25), column(3, "n"))
    command = DdlCommand(command="ALTER TABLE", identity="public.t", relid=7, before=BASE, after=after)
    ctx = EventContext(commit_lsn=200, xid=9, ts_us=1_000, origin=None, total_order=2, collection_order=0)
    changes = column_changes(command.command, BASE, after, {2: ("a",)})
    value = schema_change_value(command, BASE, changes, database="db", lsn=150, ctx=ctx,
                                topic_of=lambda schema, table: f"p.{schema}.{table}")
    encoder = ChangeEncoder(topic_prefix="p", database="db", router=TopicRouter("p"), registrar=SingleObjectRegistrar(lambda *_: None))
    record = encoder.fixed_record("p.schema_changes", KEY_SCHEMA, schema_change_key(command), VALUE_SCHEMA, value)
    assert record.value is not None and record.key is not None
    read = schemaless_reader(io.BytesIO(record.value[10:]), parse_schema(standalone_schema(VALUE_SCHEMA)), None)
    assert read == value
    assert isinstance(read, dict) and read["after"]["topic"] == "p.public.t"
    assert read["source"] == {"db": "db", "schema": "public", "table": "t", "lsn": 150, "commit_lsn": 200, "xid": 9,
                              "ts_us": 1_000, "snapshot": False, "origin": None}
    key = schemaless_reader(io.BytesIO(record.key[10:]), parse_schema(standalone_schema(KEY_SCHEMA)), None)
    assert key == {"schema": "public", "table": "t"}


MESSAGE_LSN = Lsn(150)


def _message(command: DdlCommand | None, lsn: Lsn = MESSAGE_LSN) -> MessageChange:
    if command is None:
        return MessageChange(prefix=DDL_PREFIX, content=DDL_FENCE, lsn=lsn)
    body = {"format": DDL_FORMAT, "command": command.command, "identity": command.identity, "relid": command.relid,
            "before": None if command.before is None else command.before.to_json(),
            "after": None if command.after is None else command.after.to_json()}
    return MessageChange(prefix=DDL_PREFIX, content=json.dumps(body).encode(), lsn=lsn)


def test_schema_changes_take_only_captured_tables_and_publish_the_history_before_the_event() -> None:
    encoder = ChangeEncoder(topic_prefix="p", database="db", router=TopicRouter("p"),
                            registrar=SingleObjectRegistrar(lambda *_: None))
    changes = SchemaChanges(encoder=encoder, history=RenameHistory(), publication="p",
                            captured=lambda schema, table: table != "skipped", topic="p.schema_changes",
                            history_topic="p._snapshot", slot="s")
    after = shape(column(1, "id"), column(2, "title", "text", 25), column(3, "n"))
    renamed = DdlCommand(command="ALTER TABLE", identity="public.t", relid=7, before=BASE, after=after)
    other = replace(renamed, before=replace(BASE, publications=("q",)), after=replace(after, publications=("q",)))
    skipped = replace(renamed, before=replace(BASE, table="skipped"), after=replace(after, table="skipped"))
    assert changes.take(_message(None), Lsn(200)) is None  # the trigger's fence
    assert changes.take(_message(other), Lsn(200)) is None and changes.take(_message(skipped), Lsn(200)) is None
    assert encoder.column_aliases is not None and encoder.column_aliases.aliases(relation("id", "title")) == {}
    taken = changes.take(_message(renamed), Lsn(200))
    assert taken is not None and taken.version.former == {2: ("a",)}
    assert encoder.column_aliases.aliases(relation("id", "title")) == {"title": ("a",)}
    ctx = EventContext(commit_lsn=200, xid=9, ts_us=1_000, origin=None, total_order=1, collection_order=0)
    history, event = changes.records(taken, ctx)
    assert (history.topic, history.key) == ("p._snapshot", b"s/schema/7")
    assert history.value is not None and json.loads(history.value)["versions"][0]["former"] == {"2": ["a"]}
    assert event.topic == "p.schema_changes"
    # without the trigger's before (its unlogged table emptied by a crash): the previous event's after
    again = changes.take(_message(replace(renamed, before=None, after=replace(after, columns=after.columns[:2])), Lsn(300)),
                         Lsn(400))
    assert again is not None and again.before == after


def relation(*names: str) -> Relation:
    return build_relation(*((name, 23) for name in names), rel_id=7, key=1)
