"""Composite types as Avro records: the ``record_out`` literal parser, the codec in both formats."""

from __future__ import annotations

import io
from decimal import Decimal
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_reader
from hypothesis import given
from hypothesis import strategies as st

from pgbridge.encode.types import codec_for, parse_record_literal, quote_record_field, record_literal
from pgbridge.source.type_catalog import CompositeAttribute, PgTypeInfo
from tests.unit.encode.avro_helpers import relation
from tests.unit.encode.test_type_codecs import field

INT4, TEXT, DATE, NUMERIC = 23, 25, 1082, 1700
INNER, OUTER, INNER_ARRAY, EMPTY = 16600, 16601, 16602, 16603

CATALOG = {
    INNER: PgTypeInfo(INNER, "public", "inner_t", "c", "C", 0, -1, 0, ",", "record_send",
                      (CompositeAttribute("x", INT4, -1), CompositeAttribute("y-z", TEXT, -1),
                       CompositeAttribute("d", DATE, -1))),
    INNER_ARRAY: PgTypeInfo(INNER_ARRAY, "public", "_inner_t", "b", "A", 0, -1, INNER, ",", "array_send"),
    OUTER: PgTypeInfo(OUTER, "my schema", "outer_t", "c", "C", 0, -1, 0, ",", "record_send",
                      (CompositeAttribute("i", INNER, -1), CompositeAttribute("arr", INNER_ARRAY, -1),
                       CompositeAttribute("n", NUMERIC, ((5 << 16) | 2) + 4))),
    EMPTY: PgTypeInfo(EMPTY, "public", "nothing", "c", "C", 0, -1, 0, ",", "record_send"),
}


def _codec(oid: int) -> Any:
    return codec_for(oid, -1, catalog=CATALOG.get)


# --- the literal ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("literal", "fields"), [
    (b"(1,2)", [b"1", b"2"]),
    (b"(,,)", [None, None, None]),
    (b'("",)', [b"", None]),
    (b"()", [None]),
    (b'("a b","q""\\\\x",\\,y)', [b"a b", b'q"\\x', b",y"]),
    (b'("(1,""x y"")",{1})', [b'(1,"x y")', b"{1}"]),
    (b"( a ,b)", [b" a ", b"b"]),
    ('(zwölf,"😀 x")'.encode(), ["zwölf".encode(), "😀 x".encode()]),
])
def test_record_literals_split_like_record_in(literal: bytes, fields: list[bytes | None]) -> None:
    assert parse_record_literal(literal) == fields


@pytest.mark.parametrize("literal", [b"", b"1,2", b"(1,2", b'("a)', b"(1)x", b"(1,\\"])
def test_malformed_record_literals_are_refused(literal: bytes) -> None:
    with pytest.raises(ValueError):
        parse_record_literal(literal)


_field_text = st.none() | st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), max_size=12)


@given(st.lists(_field_text, min_size=1, max_size=6))
def test_record_literals_parse_back_what_record_out_quotes(fields: list[str | None]) -> None:
    literal = record_literal(fields)
    expected = [None if f is None else f.encode() for f in fields]
    if fields == [None]:
        assert literal == "()"
    assert parse_record_literal(literal.encode()) == expected


@pytest.mark.parametrize(("text", "quoted"), [
    ("abc", "abc"), ("", '""'), ("a b", '"a b"'), ('q"', '"q"""'), ("b\\s", '"b\\\\s"'), ("(x)", '"(x)"'),
    ("a,b", '"a,b"'), ("tab\there", '"tab\there"'), ("{1,2}", '"{1,2}"'), ("[1,2)", '"[1,2)"'), ("é", "é"),
])
def test_fields_are_quoted_as_record_out_quotes_them(text: str, quoted: str) -> None:
    assert quote_record_field(text) == quoted


# --- the codec ------------------------------------------------------------------------------------


def test_a_composite_is_a_record_of_nullable_fields_named_after_its_type() -> None:
    codec = _codec(INNER)
    assert codec.companion and codec.pg_type == "public.inner_t"
    assert codec.avro == {"type": "record", "name": "inner_t", "namespace": "pgbridge.types.public", "fields": [
        {"name": "x", "type": ["null", "int"], "default": None, "pg_type": "int4"},
        {"name": "y_z", "type": ["null", "string"], "default": None, "pg_type": "text", "pg_name": "y-z"},
        {"name": "d", "type": ["null", {"type": "int", "logicalType": "date"}], "default": None, "pg_type": "date"}]}
    assert _codec(OUTER).avro["namespace"] == "pgbridge.types.my_schema"


def test_text_values_map_field_by_field_and_empty_unquoted_fields_are_null() -> None:
    codec = _codec(INNER)
    assert field(codec, b'(1,"a b",2020-01-01)', logical=False) == ({"x": 1, "y_z": "a b", "d": 18262}, None)
    assert field(codec, b'(,"",)') == ({"x": None, "y_z": "", "d": None}, None)


def test_nested_composites_and_arrays_of_composites_decode_in_both_formats() -> None:
    codec = _codec(OUTER)
    text = b'("(1,x,)","{""(2,y,)"",NULL}",1.50)'
    expected = ({"i": {"x": 1, "y_z": "x", "d": None}, "arr": [{"x": 2, "y_z": "y", "d": None}, None],
                 "n": Decimal("1.50")}, None)
    # record_send of the same value, as Postgres 18 sends it (attribute OIDs as in CATALOG)
    inner = _record([(INT4, b"\x00\x00\x00\x01"), (TEXT, b"x"), (DATE, None)])
    inner2 = _record([(INT4, b"\x00\x00\x00\x02"), (TEXT, b"y"), (DATE, None)])
    array = (b"\x00\x00\x00\x01\x00\x00\x00\x01" + INNER.to_bytes(4, "big") + b"\x00\x00\x00\x02\x00\x00\x00\x01"
             + len(inner2).to_bytes(4, "big") + inner2 + b"\xff\xff\xff\xff")
    numeric = b"\x00\x02\x00\x00\x00\x00\x00\x02\x00\x01\x13\x88"
    binary = _record([(INNER, inner), (INNER_ARRAY, array), (NUMERIC, numeric)])
    assert field(codec, text) == field(codec, binary, binary=True) == expected
    assert codec.text_of_binary is not None and codec.text_of_binary(binary) == text.decode()


def _record(fields: list[tuple[int, bytes | None]]) -> bytes:
    out = len(fields).to_bytes(4, "big")
    for oid, value in fields:
        out += oid.to_bytes(4, "big") + (b"\xff\xff\xff\xff" if value is None else len(value).to_bytes(4, "big") + value)
    return out


def test_values_the_record_cannot_hold_go_whole_to_the_unrepresentable_map() -> None:
    codec = _codec(INNER)
    assert field(codec, b"(1,x,infinity)") == (None, "(1,x,infinity)")
    binary = _record([(INT4, b"\x00\x00\x00\x01"), (TEXT, b"x y"), (DATE, b"\x7f\xff\xff\xff")])
    assert field(codec, binary, binary=True) == (None, '(1,"x y",infinity)')
    # After ALTER TYPE ... ADD ATTRIBUTE Postgres sends no new Relation: the shape no longer matches.
    assert field(codec, b"(1,x,2020-01-01,5)") == (None, "(1,x,2020-01-01,5)")
    drifted = _record([(INT4, b"\x00\x00\x00\x01"), (TEXT, b"x"), (DATE, None), (INT4, b"\x00\x00\x00\x05")])
    assert field(codec, drifted, binary=True) == (None, "(1,x,,5)")
    retyped = _record([(INT4, b"\x00\x00\x00\x01"), (INT4, b"\x00\x00\x00\x02"), (DATE, None)])
    assert field(codec, retyped, binary=True) == (None, "(1,2,)")


def test_composites_that_cannot_be_mapped_stay_text() -> None:
    assert _codec(EMPTY).avro == "string"
    no_attributes = {INNER: PgTypeInfo(INNER, "public", "inner_t", "c", "C", 0, -1, 0, ",", "record_send")}
    assert codec_for(INNER, -1, catalog=no_attributes.get).avro == "string"


def test_two_columns_of_one_composite_define_its_record_once() -> None:
    from pgbridge.encode.schemas import column_codecs, field_names, row_schema

    rel = relation(("a", INNER), ("b", INNER), ("c", OUTER))
    codecs = column_codecs(rel, None, CATALOG.get)
    schema = row_schema("ns", rel, codecs, field_names(rel.columns))
    parsed = parse_schema(schema)
    types = {f["name"]: f["type"] for f in schema["fields"]}
    assert types["b"] == ["null", "pgbridge.types.public.inner_t"]
    assert [f["name"] for f in schema["fields"]] == ["a", "b", "c"]
    body = b"".join(codecs[i].field_text_encoder()(raw) for i, raw in
                    enumerate([b"(1,x,)", b"(,,)", b'("(2,y,)",{},)']))
    row = schemaless_reader(io.BytesIO(body), parsed, None)
    assert isinstance(row, dict)
    assert row["c"]["i"] == {"x": 2, "y_z": "y", "d": None} and row["b"] == {"x": None, "y_z": None, "d": None}
