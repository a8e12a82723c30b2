"""Ranges, intervals, catalog types, schema resolution verdicts and the TOAST cache, without servers."""

from __future__ import annotations

import io
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_reader, schemaless_writer
from hypothesis import given
from hypothesis import strategies as st

from pgbridge.assemble.units import RowChange
from pgbridge.decode.messages import TupleData
from pgbridge.encode import ChangeEncoder, EventContext, SingleObjectRegistrar
from pgbridge.encode.envelope import TOAST_CACHE, ToastPolicy
from pgbridge.encode.schemas import resolution_problem
from pgbridge.encode.types import codec_for, interval_from_text, parse_range_literal
from pgbridge.lsn import Lsn
from pgbridge.publish.routing import TopicRouter
from pgbridge.source.type_catalog import PgTypeInfo
from tests.unit.encode.avro_helpers import SchemaLog, relation
from tests.unit.encode.test_type_codecs import field

INT4RANGE, TSRANGE, NUMRANGE, INT4MULTIRANGE, INTERVAL, INT4 = 3904, 3908, 3906, 4451, 1186, 23


def test_ranges_are_records_with_bounds_inclusivity_and_emptiness() -> None:
    codec = codec_for(INT4RANGE, -1)
    assert field(codec, b"[1,5)")[0] == {"lower": 1, "upper": 5, "lower_inclusive": True,
                                         "upper_inclusive": False, "empty": False}
    assert field(codec, b"(,5]")[0]["lower"] is None
    assert field(codec, b"empty")[0]["empty"] is True
    assert field(codec_for(NUMRANGE, -1), b"[-Infinity,1.5)")[0]["lower"] == "-Infinity"
    assert field(codec_for(TSRANGE, -1), b'["2020-01-01 00:00:00",infinity)') == (
        None, '["2020-01-01 00:00:00",infinity)')


def test_binary_ranges_and_multiranges_read_like_their_text() -> None:
    one_to_five = b"\x02" + b"\x00\x00\x00\x04\x00\x00\x00\x01" + b"\x00\x00\x00\x04\x00\x00\x00\x05"
    assert field(codec_for(INT4RANGE, -1), one_to_five, binary=True) == field(codec_for(INT4RANGE, -1), b"[1,5)")
    multi = b"\x00\x00\x00\x02" + (b"\x00\x00\x00\x11" + one_to_five) * 2
    assert field(codec_for(INT4MULTIRANGE, -1), multi, binary=True)[0] == [field(codec_for(INT4RANGE, -1),
                                                                                 b"[1,5)")[0]] * 2


@given(st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), max_size=20),
       st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), min_size=1, max_size=20),
       st.booleans(), st.booleans())
def test_range_literals_parse_back_what_range_out_quotes(lower: str, upper: str, li: bool, ui: bool) -> None:
    def quote(text: str) -> str:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    literal = f"{'[' if li else '('}{quote(lower)},{quote(upper)}{']' if ui else ')'}".encode()
    assert parse_range_literal(literal) == (lower.encode(), upper.encode(), li, ui)


@pytest.mark.parametrize(("text", "expected"), [
    (b"00:00:00", (0, 0, 0)), (b"1 day", (0, 1, 0)), (b"-1 years -2 mons +3 days -04:05:06.5", (-14, 3, -14706500000)),
    (b"178000000 years", (2136000000, 0, 0)), (b"2562047788:00:54.775807", (0, 0, 9223372036854775807)),
])
def test_intervals_are_months_days_and_microseconds(text: bytes, expected: tuple[int, int, int]) -> None:
    assert interval_from_text(text) == expected
    assert field(codec_for(INTERVAL, -1), text)[0] == dict(zip(("months", "days", "microseconds"), expected,
                                                               strict=True))


def test_interval_infinity_of_postgres_17_goes_to_the_companion_in_both_formats() -> None:
    codec = codec_for(INTERVAL, -1)
    assert field(codec, b"infinity") == (None, "infinity")
    assert field(codec, b"\x7f\xff\xff\xff\xff\xff\xff\xff\x7f\xff\xff\xff\x7f\xff\xff\xff", binary=True) == (
        None, "infinity")


CATALOG = {
    16500: PgTypeInfo(16500, "public", "price", "d", "N", 1700, ((12 << 16) | 2) + 4, 0, ",", "domain_send"),
    16501: PgTypeInfo(16501, "public", "mood", "e", "E", 0, -1, 0, ",", "enum_send"),
    16502: PgTypeInfo(16502, "public", "_mood", "b", "A", 0, -1, 16501, ",", "array_send"),
    16503: PgTypeInfo(16503, "public", "hstore", "b", "U", 0, -1, 0, ",", "hstore_send"),
    16504: PgTypeInfo(16504, "public", "citext", "b", "S", 0, -1, 0, ",", "textsend"),
    16505: PgTypeInfo(16505, "public", "geometry", "b", "U", 0, -1, 0, ":", "geometry_send"),
}


def test_catalog_types_domains_arrays_enums_and_extensions() -> None:
    price = codec_for(16500, -1, None, CATALOG.get)
    assert isinstance(price.avro, dict)
    assert (price.pg_type, price.attributes["pg_base_type"], price.avro["logicalType"]) == (
        "public.price", "numeric", "decimal")
    moods = codec_for(16502, -1, None, CATALOG.get)
    assert field(moods, b"{happy,NULL}")[0] == ["happy", None]
    assert field(codec_for(16501, -1, None, CATALOG.get), b"sad", binary=True) == ("sad", None)
    hstore = codec_for(16503, -1, None, CATALOG.get)
    binary = b"\x00\x00\x00\x02" + b"\x00\x00\x00\x01a\x00\x00\x00\x011" + b"\x00\x00\x00\x02b\"\xff\xff\xff\xff"
    assert field(hstore, binary, binary=True)[0] == '"a"=>"1", "b\\""=>NULL'
    assert field(codec_for(16504, -1, None, CATALOG.get), "Zwölf".encode(), binary=True)[0] == "Zwölf"
    geometry = codec_for(16505, -1, None, CATALOG.get)
    assert (geometry.pg_type, geometry.avro, geometry.from_binary) == ("public.geometry", "string", None)


def _record(*fields: tuple[str, Any]) -> dict[str, Any]:
    return {"type": "record", "name": "Value", "fields": [
        {"name": n, "type": ["null", t], "default": None} for n, t in fields]}


@pytest.mark.parametrize(("old", "new", "compatible"), [
    (_record(("a", "int")), _record(("a", "int"), ("b", "string")), True),  # ADD COLUMN
    (_record(("a", "int"), ("b", "string")), _record(("a", "int")), True),  # DROP COLUMN
    (_record(("a", "int")), _record(("aa", "int")), True),  # RENAME: old field reads its default
    (_record(("a", "long")), _record(("a", "int")), True),  # int -> long promotion for old readers
    (_record(("a", "int")), _record(("a", "long")), False),  # int4 -> int8
    (_record(("a", "int")), _record(("a", "string")), False),
    (_record(("a", {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2})),
     _record(("a", {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 3})), False),
])
def test_resolution_verdicts_agree_with_fastavro(old: dict[str, Any], new: dict[str, Any], compatible: bool) -> None:
    assert (resolution_problem(writer=new, reader=old) is None) == compatible
    datum = {f["name"]: {"int": 1, "long": 1 << 40, "string": "x"}.get(f["type"][1], b"\x01")
             if isinstance(f["type"][1], str) else b"\x01" for f in new["fields"]}
    buffer = io.BytesIO()
    schemaless_writer(buffer, parse_schema(new), datum)
    buffer.seek(0)
    if compatible:
        schemaless_reader(buffer, parse_schema(new), parse_schema(old))
    elif old != new and "decimal" not in str(old):
        with pytest.raises(Exception):  # noqa: B017 - fastavro raises several kinds
            schemaless_reader(buffer, parse_schema(new), parse_schema(old))


def test_toast_cache_fills_from_the_last_row_of_the_key_and_counts_hits_and_misses() -> None:
    class Observer:
        def __init__(self) -> None:
            self.hits: list[bool] = []

        def toast_cache(self, hit: bool) -> None:
            self.hits.append(hit)

        def schema_changed(self, table: str, compatibility: str, reason: str | None) -> None:
            pass

    docs = relation(("id", INT4, -1, True), ("doc", 25))
    observer = Observer()
    log = SchemaLog()
    encoder = ChangeEncoder(topic_prefix="p", router=TopicRouter("p"),
                            database="d", registrar=SingleObjectRegistrar(log.announce),
                            toast=ToastPolicy(default=TOAST_CACHE, cache_rows=1), observer=observer)
    ctx = EventContext(commit_lsn=1, xid=1, ts_us=0, origin=None, total_order=1, collection_order=1)

    def update(key: bytes) -> dict[str, Any]:
        (record,) = encoder.encode_row(RowChange("u", docs, Lsn(1), None, None, TupleData(b"tu", (key, None))), ctx)
        value: dict[str, Any] = log.decode(record.value)
        return value

    encoder.encode_row(RowChange("c", docs, Lsn(1), None, None, TupleData(b"tt", (b"1", b"big"))), ctx)
    assert update(b"1")["after"]["doc"] == "big"
    assert update(b"2")["unchanged_toast_columns"] == ["doc"]  # never seen: marked
    assert update(b"1")["unchanged_toast_columns"] == ["doc"]  # evicted by key 2 (one-row cache)
    assert observer.hits == [True, False, False]
