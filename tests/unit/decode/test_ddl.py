"""The DDL trigger's message format (decode/ddl.py): every field checked, every refusal fatal and named."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pgbridge.decode.ddl import DDL_FORMAT, DdlColumn, TableShape, parse_ddl_message, shape_of
from pgbridge.errors import FatalError


def shape(table: str = "orders", *columns: tuple[int, str, str, int]) -> dict[str, Any]:
    return {"schema": "public", "table": table, "replica_identity": "d", "publications": ["pgbridge"],
            "columns": [{"attnum": attnum, "name": name, "type": kind, "type_oid": oid, "typmod": -1,
                         "not_null": attnum == 1, "key": attnum == 1} for attnum, name, kind, oid in columns]}


def message(**fields: Any) -> bytes:
    body = {"format": DDL_FORMAT, "command": "ALTER TABLE", "identity": "public.orders", "relid": 16390,
            "before": shape("orders", (1, "id", "integer", 23), (2, "a", "text", 25)),
            "after": shape("orders", (1, "id", "integer", 23), (2, "b", "text", 25)), **fields}
    return json.dumps(body).encode()


def test_a_message_parses_into_shapes_by_attribute_number() -> None:
    command = parse_ddl_message(message())
    assert (command.command, command.identity, command.relid) == ("ALTER TABLE", "public.orders", 16390)
    assert command.before is not None and command.after is not None
    assert command.after.columns[1] == DdlColumn(attnum=2, name="b", type="text", type_oid=25, typmod=-1,
                                                 not_null=False, key=False)
    assert command.after.by_attnum()[1].key and command.after.publications == ("pgbridge",)
    assert command.current is command.after


def test_a_dropped_table_has_no_after_and_is_named_by_before() -> None:
    command = parse_ddl_message(message(command="DROP TABLE", after=None))
    assert command.after is None and command.current is command.before


def test_columns_come_out_in_attribute_number_order_and_round_trip() -> None:
    parsed = shape_of(shape("t", (3, "c", "bigint", 20), (1, "id", "integer", 23)))
    assert [c.attnum for c in parsed.columns] == [1, 3]
    assert shape_of(parsed.to_json()) == parsed
    assert isinstance(parsed, TableShape)


@pytest.mark.parametrize(("content", "says"), [
    (b"\xff", "malformed"),
    (b"[]", "not a JSON object"),
    (message(format=99), "format 99"),
    (message(before=None, after=None), "neither before nor after"),
    (message(relid="16390"), "message.relid"),
    (message(relid=True), "message.relid"),
    (message(after={**shape("t", (1, "id", "integer", 23)), "publications": [1]}), "after.publications"),
    (message(after=shape("t", (1, "id", "integer", 23)) | {"columns": [{"attnum": 1}]}), "after.columns[0].name"),
])
def test_a_malformed_message_is_fatal_and_says_what_is_wrong(content: bytes, says: str) -> None:
    with pytest.raises(FatalError) as caught:
        parse_ddl_message(content, lsn=0x1_0000_0010)
    assert says in str(caught.value) and "1/10" in str(caught.value)
    assert caught.value.hint is not None and "trigger" in caught.value.hint
