"""Rename history and field aliases (encode/renames.py, encode/schemas.py): an old record's value is
read under the column's new name by Avro schema resolution, at every point of the stream."""

from __future__ import annotations

import io
from typing import Any

from fastavro import parse_schema, schemaless_reader, schemaless_writer

from pgbridge.decode.ddl import DdlColumn, TableShape
from pgbridge.decode.messages import Relation
from pgbridge.encode.envelope import ChangeEncoder
from pgbridge.encode.renames import RenameHistory, TableVersion, field_aliases, next_former
from pgbridge.encode.wire import SingleObjectRegistrar
from pgbridge.publish.routing import TopicRouter
from tests.support.relations import relation as build_relation


def shape(*names: str, table: str = "t") -> TableShape:
    return TableShape(schema="public", table=table, replica_identity="d", publications=("p",),
                      columns=tuple(DdlColumn(attnum=i + 1, name=name, type="integer", type_oid=23, typmod=-1,
                                              not_null=i == 0, key=i == 0)
                                    for i, name in enumerate(names) if name))


def relation(*names: str, rel_id: int = 7) -> Relation:
    return build_relation(*((name, 23) for name in names), rel_id=rel_id, key=1)


def test_a_rename_puts_the_old_name_first_and_a_rename_back_keeps_the_other() -> None:
    first = next_former({}, shape("id", "a"), shape("id", "b"))
    assert first == {2: ("a",)}
    second = next_former(first, shape("id", "b"), shape("id", "c"))
    assert second == {2: ("b", "a")}
    back = next_former(second, shape("id", "c"), shape("id", "a"))
    assert back == {2: ("c", "b")}  # its own name never counts


def test_a_dropped_column_loses_its_history_and_a_new_one_with_its_old_name_gets_none() -> None:
    renamed = next_former({}, shape("id", "a"), shape("id", "b"))
    dropped = next_former(renamed, shape("id", "b"), shape("id", ""))
    assert dropped == {}
    added = next_former(dropped, shape("id", ""), shape("id", "", "b"))
    assert added == {}


def test_field_aliases_are_avro_names_without_repeats_or_the_field_itself() -> None:
    assert field_aliases(("Old Name", "1st", "b", "old_name"), "b") == ("Old_Name", "_1st", "old_name")


def test_history_gives_aliases_by_attribute_number_for_the_relation_of_the_new_shape() -> None:
    history = RenameHistory()
    history.apply(7, shape("id", "a", "n"), shape("ident", "title", "n"), (100, 90))
    assert history.aliases(relation("ident", "title", "n")) == {"ident": ("id",), "title": ("a",)}
    assert history.aliases(relation("id", "a", "n", rel_id=8)) == {}


def test_a_restart_takes_the_version_below_the_confirmed_lsn_and_a_replay_writes_the_same_versions() -> None:
    history = RenameHistory()
    history.apply(7, shape("id", "a"), shape("id", "b"), (100, 90))
    history.apply(7, shape("id", "b"), shape("id", "c"), (200, 190))
    records = {RenameHistory.record_key("slot", 7): history.record(7), "other/schema/7": {"versions": []}}
    # confirmed between the two: the second rename is decoded again
    restarted = RenameHistory.load(records, "slot", 150)
    assert restarted.aliases(relation("id", "b")) == {"b": ("a",)}
    assert restarted.aliases(relation("id", "c")) == {}
    restarted.apply(7, shape("id", "b"), shape("id", "c"), (200, 190))
    assert restarted.record(7) == history.record(7)
    assert restarted.aliases(relation("id", "c")) == {"c": ("b", "a")}
    # a slot not created yet: the newest; confirmed before both: nothing yet
    assert RenameHistory.load(records, "slot", None).aliases(relation("id", "c")) == {"c": ("b", "a")}
    assert RenameHistory.load(records, "slot", 100).current(7) is None


def test_versions_round_trip_through_json() -> None:
    version = TableVersion(position=(5, 4), shape=shape("id", "b"), former={2: ("a",)})
    assert TableVersion.from_json(version.to_json()) == version
    dropped = TableVersion(position=(6, 5), shape=None, former={})
    assert TableVersion.from_json(dropped.to_json()) == dropped


def _encoder(history: RenameHistory, announced: list[str]) -> ChangeEncoder:
    encoder = ChangeEncoder(topic_prefix="p", database="db", router=TopicRouter("p"),
                            registrar=SingleObjectRegistrar(lambda _fp, text: announced.append(text)))
    encoder.column_aliases = history
    return encoder


def _row(schema: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = schema["fields"][0]["type"][1]
    return row


def test_the_new_writer_schemas_alias_the_old_names_and_read_old_rows_under_the_new_ones() -> None:
    history = RenameHistory()
    announced: list[str] = []
    encoder = _encoder(history, announced)
    old = relation("id", "a")
    old_value, old_key = encoder.value_schema(old), encoder.key_schema(old)
    history.apply(7, shape("id", "a"), shape("ident", "title"), (100, 90))
    encoder.forget(7)
    new = relation("ident", "title")
    new_value, new_key = encoder.value_schema(new), encoder.key_schema(new)
    assert [f.get("aliases") for f in _row(new_value)["fields"]] == [["id"], ["a"]]
    assert new_key is not None and new_key["fields"][0]["aliases"] == ["id"]
    body = io.BytesIO()
    schemaless_writer(body, parse_schema(_row(old_value)), {"id": 1, "a": 5})
    body.seek(0)
    read = schemaless_reader(body, parse_schema(_row(old_value)), parse_schema(_row(new_value)))
    assert read == {"ident": 1, "title": 5}
    assert old_key is not None and "aliases" not in old_key["fields"][0]


def test_a_schema_differing_only_by_aliases_is_announced_again() -> None:
    history = RenameHistory()
    announced: list[str] = []
    encoder = _encoder(history, announced)
    encoder.table_of(relation("id", "a"))
    history.apply(7, shape("id", "a"), shape("id", "b"), (100, 90))
    history.apply(7, shape("id", "b"), shape("id", "a"), (200, 190))  # renamed back: same fingerprint
    encoder.forget(7)
    encoder.table_of(relation("id", "a"))
    with_aliases = [text for text in announced if '"aliases":["b"]' in text]
    assert len(with_aliases) == 1  # the value schema, with the alias, under the same fingerprint
