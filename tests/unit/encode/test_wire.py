"""Avro binary primitives, Parsing Canonical Form, CRC-64-AVRO and the framing of records."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest
from fastavro.schema import fingerprint as fastavro_fingerprint
from fastavro.schema import to_parsing_canonical_form
from hypothesis import given
from hypothesis import strategies as st

from pgbridge.encode.wire import (
    SingleObjectRegistrar,
    confluent_header,
    crc64_avro,
    fingerprint64,
    fingerprint_hex,
    parsing_canonical_form,
    read_single_object_fingerprint,
    single_object_header,
    write_bytes,
    write_decimal_bytes,
    write_double,
    write_float,
    write_int,
    write_long,
    write_string,
    write_string_array,
)
from tests.unit.encode.avro_helpers import fastavro_bytes

# The Avro project's own vectors (share/test/data/schema-tests.txt): input, canonical form and the
# fingerprint as Java prints it (a signed long).
AVRO_SPEC_VECTORS: list[tuple[Any, str, int | None]] = [
    ("null", '"null"', 7195948357588979594),
    ({"type": "null"}, '"null"', None),
    ("boolean", '"boolean"', -6970731678124411036),
    ("int", '"int"', 8247732601305521295),
    ({"type": "int"}, '"int"', None),
    ("long", '"long"', -3434872931120570953),
    ("float", '"float"', 5583340709985441680),
    ("double", '"double"', -8181574048448539266),
    ("bytes", '"bytes"', 5746618253357095269),
    ("string", '"string"', -8142146995180207161),
    ([], "[]", -1241056759729112623),
    (["int"], '["int"]', -5232228896498058493),
    (["int", {"type": "boolean"}], '["int","boolean"]', 5392556393470105090),
    ({"fields": [], "type": "record", "name": "foo"}, '{"name":"foo","type":"record","fields":[]}',
     -4824392279771201922),
    ({"fields": [], "type": "record", "name": "foo", "namespace": "x.y"},
     '{"name":"x.y.foo","type":"record","fields":[]}', 5916914534497305771),
    ({"fields": [], "type": "record", "name": "a.b.foo", "namespace": "x.y"},
     '{"name":"a.b.foo","type":"record","fields":[]}', -4616218487480524110),
    ({"fields": [], "type": "record", "name": "foo", "doc": "Useful info"},
     '{"name":"foo","type":"record","fields":[]}', -4824392279771201922),
    ({"fields": [], "type": "record", "name": "foo", "aliases": ["foo", "bar"]},
     '{"name":"foo","type":"record","fields":[]}', -4824392279771201922),
    ({"fields": [{"type": {"type": "boolean"}, "name": "f1"}], "type": "record", "name": "foo"},
     '{"name":"foo","type":"record","fields":[{"name":"f1","type":"boolean"}]}', 7843277075252814651),
    ({"fields": [{"type": "boolean", "aliases": [], "name": "f1", "default": "true"},
                 {"order": "descending", "name": "f2", "doc": "Hello", "type": "int"}],
      "type": "record", "name": "foo"},
     '{"name":"foo","type":"record","fields":[{"name":"f1","type":"boolean"},{"name":"f2","type":"int"}]}',
     -4860222112080293046),
    ({"type": "enum", "name": "foo", "symbols": ["A1"]}, '{"name":"foo","type":"enum","symbols":["A1"]}',
     -6342190197741309591),
    ({"namespace": "x.y.z", "type": "enum", "name": "foo", "doc": "foo bar", "symbols": ["A1", "A2"]},
     '{"name":"x.y.z.foo","type":"enum","symbols":["A1","A2"]}', -4448647247586288245),
    ({"name": "foo", "type": "fixed", "size": 15}, '{"name":"foo","type":"fixed","size":15}',
     1756455273707447556),
    ({"namespace": "x.y.z", "type": "fixed", "name": "foo", "doc": "foo bar", "size": 32},
     '{"name":"x.y.z.foo","type":"fixed","size":32}', -3064184465700546786),
    ({"items": {"type": "null"}, "type": "array"}, '{"type":"array","items":"null"}', -589620603366471059),
    ({"values": "string", "type": "map"}, '{"type":"map","values":"string"}', -8732877298790414990),
    ({"name": "PigValue", "type": "record",
      "fields": [{"name": "value", "type": ["null", "int", "long", "PigValue"]}]},
     '{"name":"PigValue","type":"record","fields":[{"name":"value","type":["null","int","long","PigValue"]}]}',
     -1759257747318642341),
]


@pytest.mark.parametrize(("schema", "canonical", "signed_fingerprint"), AVRO_SPEC_VECTORS)
def test_canonical_form_and_fingerprint_match_the_avro_spec_vectors(
        schema: Any, canonical: str, signed_fingerprint: int | None) -> None:
    assert parsing_canonical_form(schema) == canonical
    if signed_fingerprint is not None:
        assert fingerprint64(schema) == signed_fingerprint & 0xFFFF_FFFF_FFFF_FFFF


def test_the_fingerprint_of_int_is_the_known_value_and_agrees_with_fastavro() -> None:
    fp = fingerprint64("int")
    assert fp == 8247732601305521295
    # fastavro gives the same 8 bytes, but as the little-endian byte order's hex.
    assert fastavro_fingerprint('"int"', "CRC-64-AVRO") == fp.to_bytes(8, "little").hex()


def test_canonical_form_drops_logical_types_defaults_and_custom_attributes() -> None:
    schema = {"type": "record", "name": "Value", "namespace": "p.public.t", "doc": "x", "fields": [
        {"name": "ts", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}], "default": None,
         "pg_type": "timestamptz"},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2},
         "pg_type": "numeric", "pg_precision": 12},
        {"name": "inner", "type": {"type": "record", "name": "Inner", "fields": []}},
        {"name": "again", "type": "Inner"},
    ]}
    assert parsing_canonical_form(schema) == (
        '{"name":"p.public.t.Value","type":"record","fields":['
        '{"name":"ts","type":["null","long"]},{"name":"amount","type":"bytes"},'
        '{"name":"inner","type":{"name":"p.public.t.Inner","type":"record","fields":[]}},'
        '{"name":"again","type":"p.public.t.Inner"}]}')
    assert parsing_canonical_form(schema) == to_parsing_canonical_form(schema)


def test_canonical_form_keeps_non_ascii_names_as_utf8() -> None:
    assert parsing_canonical_form({"type": "enum", "name": "e", "symbols": ["é"]}) == \
        '{"name":"e","type":"enum","symbols":["é"]}'


def test_fingerprint_hex_is_16_lowercase_digits_of_the_unsigned_value() -> None:
    assert fingerprint_hex(0) == "0000000000000000"
    assert fingerprint_hex(0xABCDEF) == "0000000000abcdef"
    assert fingerprint_hex(-1) == "ffffffffffffffff"
    assert fingerprint_hex(fingerprint64("int")) == "7275d51a3f395c8f"


def test_single_object_header_is_c301_then_the_fingerprint_little_endian() -> None:
    fp = 0x0102030405060708
    header = single_object_header(fp)
    assert header == b"\xc3\x01\x08\x07\x06\x05\x04\x03\x02\x01"
    assert read_single_object_fingerprint(header + b"body") == fp
    with pytest.raises(ValueError, match="single-object"):
        read_single_object_fingerprint(b"\x00\x01" + header[2:])


def test_confluent_header_is_magic_zero_then_the_schema_id_big_endian() -> None:
    assert confluent_header(258) == b"\x00\x00\x00\x01\x02"


def test_crc64_of_empty_input_is_the_empty_fingerprint() -> None:
    assert crc64_avro(b"") == 0xC15D213AA4D7A795


@given(st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1))
def test_write_long_equals_fastavro_for_every_long(n: int) -> None:
    assert write_long(n) == fastavro_bytes("long", n)


@pytest.mark.parametrize("n", [0, -1, 1, 63, -64, 64, -65, 8191, 8192, 1 << 27, 1 << 55, 1 << 56,
                               (1 << 63) - 1, -(1 << 63)])
def test_write_long_equals_fastavro_at_the_varint_width_boundaries(n: int) -> None:
    assert write_long(n) == fastavro_bytes("long", n)


@pytest.mark.parametrize("n", [1 << 63, -(1 << 63) - 1, 1 << 64, -(1 << 64), 1 << 100])
def test_write_long_refuses_values_outside_64_bits(n: int) -> None:
    with pytest.raises(OverflowError):
        write_long(n)


def test_write_int_refuses_values_outside_32_bits() -> None:
    assert write_int(-(1 << 31)) == fastavro_bytes("int", -(1 << 31))
    with pytest.raises(OverflowError):
        write_int(1 << 31)


@given(st.text())
def test_write_string_equals_fastavro(s: str) -> None:
    assert write_string(s) == fastavro_bytes("string", s)


@given(st.binary(max_size=20000))
def test_write_bytes_equals_fastavro_including_long_lengths(b: bytes) -> None:
    assert write_bytes(b) == fastavro_bytes("bytes", b)


@given(st.floats(width=32) | st.just(float("nan")))
def test_write_float_equals_fastavro(v: float) -> None:
    assert write_float(v) == fastavro_bytes("float", v)


@given(st.floats())
def test_write_double_equals_fastavro(v: float) -> None:
    assert write_double(v) == fastavro_bytes("double", v)


@given(st.integers(min_value=-(10**40), max_value=10**40))
def test_write_decimal_bytes_equals_fastavro_for_the_same_decimal(unscaled: int) -> None:
    schema = {"type": "bytes", "logicalType": "decimal", "precision": 41, "scale": 3}
    assert write_decimal_bytes(unscaled) == fastavro_bytes(schema, Decimal(f"{unscaled}e-3"))


@given(st.lists(st.text(max_size=5), max_size=5))
def test_write_string_array_equals_fastavro(items: list[str]) -> None:
    assert write_string_array(items) == fastavro_bytes({"type": "array", "items": "string"}, items)


def test_single_object_registrar_announces_each_schema_once_before_answering() -> None:
    announced: list[tuple[str, str]] = []
    registrar = SingleObjectRegistrar(lambda fp, schema: announced.append((fp, schema)))
    schema = {"type": "record", "name": "K", "fields": [{"name": "id", "type": "long", "pg_type": "int8"}]}
    header = registrar.header_for("t-key", schema)
    assert header == single_object_header(fingerprint64(schema))
    assert announced == [(fingerprint_hex(fingerprint64(schema)), json.dumps(schema, separators=(",", ":")))]
    # Another subject with the same schema: the fingerprint alone identifies it, no second record.
    assert registrar.header_for("u-key", schema) == header
    assert len(announced) == 1
    # The announced JSON keeps the custom attributes and gives back the same fingerprint.
    assert fingerprint64(json.loads(announced[0][1])) == fingerprint64(schema)
    assert json.loads(announced[0][1])["fields"][0]["pg_type"] == "int8"


def test_single_object_registrar_retries_an_announcement_that_failed() -> None:
    calls: list[str] = []

    def announce(fp: str, schema: str) -> None:
        calls.append(fp)
        if len(calls) == 1:
            raise RuntimeError("broker down")

    registrar = SingleObjectRegistrar(announce)
    with pytest.raises(RuntimeError):
        registrar.header_for("s", {"type": "record", "name": "R", "fields": []})
    registrar.header_for("s", {"type": "record", "name": "R", "fields": []})
    assert len(calls) == 2
