"""The shared schema files, how they compose, and Avro naming."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastavro import parse_schema

from pgbridge.encode import schemas
from pgbridge.encode.naming import avro_name
from pgbridge.encode.schemas import (
    SCHEMA_FILES,
    compose,
    field_names,
    load_schema,
    standalone_schema,
    table_namespace,
)
from pgbridge.errors import SchemaError
from tests.unit.encode.avro_helpers import relation


@pytest.mark.parametrize("name", SCHEMA_FILES)
def test_every_schema_file_loads_from_the_package(name: str) -> None:
    schema = load_schema(name)
    assert schema["type"] == "record"


@pytest.mark.parametrize("name", ["message", "message_key", "transaction_boundary", "transaction_key"])
def test_standalone_schemas_are_self_contained_avro(name: str) -> None:
    schema = standalone_schema(name)
    parse_schema(schema)  # raises on an unknown named type
    assert schema["namespace"] == "pgbridge"


def test_shared_types_are_defined_at_their_first_use_only() -> None:
    message = standalone_schema("message")
    transaction = next(f for f in message["fields"] if f["name"] == "transaction")
    assert transaction["type"][1]["name"] == "Transaction"
    assert [f["name"] for f in transaction["type"][1]["fields"]] == ["id", "total_order", "data_collection_order"]
    twice: dict[str, Any] = {"type": "record", "name": "R", "namespace": "x", "fields": [
        {"name": "a", "type": "pgbridge.Source"}, {"name": "b", "type": ["null", "pgbridge.Source"]}]}
    composed = compose(twice)
    assert composed["fields"][0]["type"]["name"] == "Source"
    assert composed["fields"][1]["type"] == ["null", "pgbridge.Source"]
    parse_schema(composed)


def test_returned_schemas_are_fresh_copies() -> None:
    standalone_schema("message")["fields"].clear()
    load_schema("source")["fields"].clear()
    assert standalone_schema("message")["fields"]
    assert load_schema("source")["fields"]


def test_envelope_files_that_drift_from_the_encoder_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    real = schemas.load_schema

    def reordered(name: str) -> dict[str, Any]:
        schema = real(name)
        if name == "source":
            schema["fields"].reverse()
        return schema

    monkeypatch.setattr(schemas, "load_schema", reordered)
    with pytest.raises(SchemaError, match=r"schemas/source\.avsc does not match"):
        schemas.check_envelope_layout.__wrapped__()


def test_the_shipped_envelope_files_match_the_encoder() -> None:
    schemas.check_envelope_layout.__wrapped__()


@pytest.mark.parametrize(("text", "name"), [
    ("orders", "orders"), ("Order Lines", "Order_Lines"), ("1st", "_1st"), ("", "_"), ("naïve", "na_ve"),
    ("a.b", "a_b"), ("_x9", "_x9"),
])
def test_avro_names_keep_valid_characters_and_replace_the_rest(text: str, name: str) -> None:
    assert avro_name(text) == name


def test_table_namespace_splits_the_prefix_but_not_schema_or_table() -> None:
    assert table_namespace("acme.cdc", "public", "a.b") == "acme.cdc.public.a_b"
    assert table_namespace("9x", "s", "t") == "_9x.s.t"


def test_field_names_are_unique_and_valid_names_keep_priority() -> None:
    rel = relation(("a-b", 25), ("a_b", 25), ("a b", 25), ("ok", 25))
    assert field_names(rel.columns) == ("a_b_2", "a_b", "a_b_3", "ok")


def test_announced_schema_json_round_trips_through_json() -> None:
    schema = standalone_schema("transaction_boundary")
    assert json.loads(json.dumps(schema)) == schema
