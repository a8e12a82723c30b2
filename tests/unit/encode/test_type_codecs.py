"""Postgres values → Avro, type by type, at their edges.

Text fixtures are what Postgres 18 prints (DateStyle=ISO, extra_float_digits=1); binary fixtures
are its ``send`` output, both captured from a real server. Each value is encoded with the column's
codec and decoded back with fastavro against the codec's own Avro fragment.
"""

from __future__ import annotations

import io
import uuid
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_reader
from hypothesis import given
from hypothesis import strategies as st

from pgbridge.encode.types import (
    EncodeError,
    TypeCodec,
    Unrepresentable,
    civil_to_unix_days,
    codec_for,
    decimal_unscaled,
    length_typmod,
    numeric_text_from_binary,
    numeric_typmod,
    parse_array_literal,
    split_array_bounds,
    timestamptz_from_text,
)
from tests.unit.encode.avro_helpers import strip_logical_types

INT2, INT4, INT8, OID, FLOAT4, FLOAT8, BOOL = 21, 23, 20, 26, 700, 701, 16
TEXT, VARCHAR, BPCHAR, NAME, CHAR, JSON, JSONB, UUID, BYTEA = 25, 1043, 1042, 19, 18, 114, 3802, 2950, 17
NUMERIC, DATE, TIME, TIMESTAMP, TIMESTAMPTZ, INTERVAL = 1700, 1082, 1083, 1114, 1184, 1186


def numeric_mod(precision: int, scale: int) -> int:
    return ((precision << 16) | (scale & 0x7FF)) + 4


def decode(codec: TypeCodec, raw: bytes, *, logical: bool = True, binary: bool = False) -> Any:
    """Encode ``raw`` with ``codec`` and read it back with fastavro, checking nothing is left over."""
    body = (codec.binary_encoder() if binary else codec.text_encoder())(raw)
    schema = codec.avro if logical else strip_logical_types(codec.avro)
    stream = io.BytesIO(body)
    value = schemaless_reader(stream, parse_schema(schema), None)
    assert stream.read() == b"", "the Avro body has trailing bytes"
    return value


def text_value(oid: int, raw: bytes, typmod: int = -1, **kwargs: Any) -> Any:
    return decode(codec_for(oid, typmod), raw, **kwargs)


def field(codec: TypeCodec, raw: bytes, *, binary: bool = False, logical: bool = True) -> tuple[Any, Any]:
    """(typed field, the text for the envelope's ``unrepresentable`` map) as a consumer reads them:
    a value the field cannot hold is a null field and its text (only companion codecs have such)."""
    encoder = codec.field_binary_encoder() if binary else codec.field_text_encoder()
    avro = codec.avro if logical else strip_logical_types(codec.avro)
    try:
        body = encoder(raw)
    except Unrepresentable as exc:
        assert codec.companion, f"{codec.pg_type} is not a companion codec but has unrepresentable values"
        assert isinstance(exc.text, str)
        return None, exc.text
    stream = io.BytesIO(body)
    schema = {"type": "record", "name": "R", "fields": [{"name": "v", "type": ["null", avro]}]}
    record = schemaless_reader(stream, parse_schema(schema), None)
    assert stream.read() == b"", "the Avro body has trailing bytes"
    assert isinstance(record, dict)
    return record["v"], None


# --- type modifiers -------------------------------------------------------------------------------


@pytest.mark.parametrize(("typmod", "expected"), [
    (786438, (12, 2)),  # numeric(12,2), as pg_attribute.atttypmod shows it
    (329730, (5, -2)),  # numeric(5,-2): Postgres 15+ negative scale
    (131081, (2, 5)),  # numeric(2,5): scale above precision
    (-1, None),
])
def test_numeric_type_modifier_decodes_precision_and_signed_scale(typmod: int, expected: Any) -> None:
    assert numeric_typmod(typmod) == expected


def test_varchar_type_modifier_is_the_length_plus_four() -> None:
    assert length_typmod(14) == 10
    assert length_typmod(-1) is None
    assert codec_for(VARCHAR, 14).attributes == {"pg_length": 10}
    assert codec_for(BPCHAR, 7).attributes == {"pg_length": 3}
    assert codec_for(VARCHAR, -1).attributes == {}


# --- integers, floats, booleans -------------------------------------------------------------------


@pytest.mark.parametrize(("oid", "raw", "expected", "avro"), [
    (INT2, b"-32768", -32768, "int"), (INT2, b"32767", 32767, "int"),
    (INT4, b"-2147483648", -(1 << 31), "int"), (INT4, b"2147483647", (1 << 31) - 1, "int"),
    (INT8, b"-9223372036854775808", -(1 << 63), "long"), (INT8, b"9223372036854775807", (1 << 63) - 1, "long"),
    (INT8, b"0", 0, "long"), (OID, b"4294967295", (1 << 32) - 1, "long"),
])
def test_integers_keep_their_extremes(oid: int, raw: bytes, expected: int, avro: str) -> None:
    assert codec_for(oid, -1).avro == avro
    assert text_value(oid, raw) == expected


@pytest.mark.parametrize(("oid", "raw", "expected"), [
    (FLOAT8, b"Infinity", float("inf")), (FLOAT8, b"-Infinity", float("-inf")),
    (FLOAT4, b"Infinity", float("inf")), (FLOAT8, b"1e-320", 1e-320), (FLOAT8, b"0.1", 0.1),
    (FLOAT8, b"1.7976931348623157e+308", 1.7976931348623157e308),
])
def test_floats_read_postgres_spellings_of_infinity_and_extremes(oid: int, raw: bytes, expected: float) -> None:
    assert text_value(oid, raw) == expected


def test_float_nan_and_negative_zero_survive() -> None:
    assert text_value(FLOAT8, b"NaN") != text_value(FLOAT8, b"NaN")  # NaN
    assert text_value(FLOAT4, b"NaN") != text_value(FLOAT4, b"NaN")
    assert str(text_value(FLOAT8, b"-0")) == "-0.0"


def test_float4_is_exact_at_its_shortest_text_form() -> None:
    assert codec_for(FLOAT4, -1).avro == "float"
    assert text_value(FLOAT4, b"3.4028235e+38") == pytest.approx(3.4028235e38, rel=1e-7)
    import struct
    assert struct.pack("<f", text_value(FLOAT4, b"1.1")) == struct.pack("<f", 1.1)


def test_booleans_are_t_and_f() -> None:
    assert text_value(BOOL, b"t") is True
    assert text_value(BOOL, b"f") is False
    with pytest.raises(ValueError):
        codec_for(BOOL, -1).text_encoder()(b"true")


# --- numeric --------------------------------------------------------------------------------------


def test_constrained_numeric_is_an_exact_decimal_with_the_column_scale() -> None:
    codec = codec_for(NUMERIC, numeric_mod(12, 2))
    assert codec.avro == {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}
    assert codec.attributes == {"pg_precision": 12, "pg_scale": 2}
    assert decode(codec, b"1.50") == Decimal("1.50")
    assert decode(codec, b"-0.50") == Decimal("-0.50")
    assert decode(codec, b"9999999999.99") == Decimal("9999999999.99")
    assert decode(codec, b"-9999999999.99") == Decimal("-9999999999.99")
    assert decode(codec, b"0.00") == Decimal("0.00")


def test_huge_numeric_keeps_every_digit() -> None:
    digits = "9" * 998
    codec = codec_for(NUMERIC, numeric_mod(1000, 2))
    assert decode(codec, f"-{digits}.99".encode()) == Decimal(f"-{digits}.99")


def test_numeric_with_negative_scale_or_scale_above_precision_fits_an_avro_decimal() -> None:
    negative = codec_for(NUMERIC, numeric_mod(5, -2))
    assert negative.avro == {"type": "bytes", "logicalType": "decimal", "precision": 7, "scale": 0}
    assert decode(negative, b"12300") == Decimal("12300")
    above = codec_for(NUMERIC, numeric_mod(2, 5))
    assert above.avro == {"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 5}
    assert decode(above, b"0.00012") == Decimal("0.00012")


@pytest.mark.parametrize("raw", [b"NaN", b"Infinity", b"-Infinity"])
def test_nan_and_infinity_in_a_constrained_numeric_go_to_the_companion_text(raw: bytes) -> None:
    codec = codec_for(NUMERIC, numeric_mod(12, 2))
    assert codec.companion
    assert field(codec, raw) == (None, raw.decode())
    assert field(codec, b"1.50") == (Decimal("1.50"), None)


@pytest.mark.parametrize("raw", [b"NaN", b"Infinity", b"-Infinity", b"0.00000000000000000001",
                                 b"123456789012345678901234567890.123456789"])
def test_unconstrained_numeric_is_its_exact_text(raw: bytes) -> None:
    codec = codec_for(NUMERIC, -1)
    assert codec.avro == "string"
    assert codec.pg_type == "numeric"
    assert decode(codec, raw) == raw.decode()


def test_numeric_text_with_fewer_digits_is_padded_and_extra_zero_digits_are_dropped() -> None:
    assert decimal_unscaled(b"5", 3) == 5000
    assert decimal_unscaled(b"-1.5", 3) == -1500
    assert decimal_unscaled(b"1.500", 2) == 150
    with pytest.raises(ValueError, match="fraction digits"):
        decimal_unscaled(b"1.234", 2)


@given(precision=st.integers(1, 60), data=st.data())
def test_numeric_text_becomes_the_exact_decimal(precision: int, data: st.DataObject) -> None:
    scale = data.draw(st.integers(0, precision))
    unscaled = data.draw(st.integers(-(10**precision) + 1, 10**precision - 1))
    # Postgres prints a numeric(p,s) value with exactly s fraction digits, "0." below one.
    text = str(Decimal(unscaled).scaleb(-scale, context=_wide)) if scale else str(unscaled)
    text = f"{Decimal(text):f}"
    assert decimal_unscaled(text.encode(), scale) == unscaled
    assert decode(codec_for(NUMERIC, numeric_mod(precision, scale)), text.encode()) == Decimal(text)


_wide = __import__("decimal").Context(prec=200)


@pytest.mark.parametrize(("binary", "text"), [
    (b"\x00\x00\x00\x00\xc0\x00\x00\x00", "NaN"),
    (b"\x00\x02\x00\x00\x00\x00\x00\x02\x00\x01\x13\x88", "1.50"),
    (b"\x00\x03\x00\x01@\x00\x00\x03\x00\x01\t)\x1a|", "-12345.678"),
    (b"\x00\x00\x00\x00\x00\x00\x00\x00", "0"),
    (b"\x00\x02\x00\x01\x00\x00\x00\x00\x00\x01\x08\xfc", "12300"),
    (b"\x00\x00\x00\x00\xd0\x00\x00 ", "Infinity"),
    (b"\x00\x00\x00\x00\xf0\x00\x00 ", "-Infinity"),
    (b"\x00\x02\xff\xff\x00\x00\x00\x05\x00\x01\x07\xd0", "0.00012"),
    (b"\x00\x01\x00\x02\x00\x00\x00\x00\x00\x01", "100000000"),
])
def test_binary_numeric_reads_as_its_text_form(binary: bytes, text: str) -> None:
    assert numeric_text_from_binary(binary) == text


def test_binary_numeric_encodes_like_its_text() -> None:
    codec = codec_for(NUMERIC, numeric_mod(12, 2))
    assert decode(codec, b"\x00\x02\x00\x00\x00\x00\x00\x02\x00\x01\x13\x88", binary=True) == Decimal("1.50")
    assert decode(codec_for(NUMERIC, -1), b"\x00\x00\x00\x00\xc0\x00\x00\x00", binary=True) == "NaN"


# --- dates and times ------------------------------------------------------------------------------


def test_dates_are_days_since_1970_over_the_whole_postgres_range() -> None:
    codec = codec_for(DATE, -1)
    assert codec.avro == {"type": "int", "logicalType": "date"}
    assert decode(codec, b"2023-11-14") == date(2023, 11, 14)
    assert decode(codec, b"0001-01-01") == date(1, 1, 1)
    # Expected values are Postgres's own date arithmetic ('0001-01-01 BC'::date - '1970-01-01').
    assert decode(codec, b"0001-01-01 BC", logical=False) == civil_to_unix_days(0, 1, 1) == -719528
    assert decode(codec, b"4714-11-24 BC", logical=False) == -2440588  # Julian day 0, the first date
    assert decode(codec, b"5874897-12-31", logical=False) == 2145042905  # the last date


def test_date_infinities_go_to_the_companion_and_finite_dates_stay_dates() -> None:
    codec = codec_for(DATE, -1)
    assert field(codec, b"infinity") == (None, "infinity")
    assert field(codec, b"-infinity") == (None, "-infinity")
    assert field(codec, b"2024-02-29") == (date(2024, 2, 29), None)


def test_dates_in_another_datestyle_are_refused() -> None:
    with pytest.raises(ValueError, match="ISO"):
        codec_for(DATE, -1).text_encoder()(b"11/14/2023")


@pytest.mark.parametrize(("raw", "micros"), [
    (b"00:00:00", 0), (b"00:00:00.5", 500_000), (b"23:59:59.999999", 86_399_999_999),
])
def test_time_is_microseconds_after_midnight(raw: bytes, micros: int) -> None:
    codec = codec_for(TIME, -1)
    assert codec.avro == {"type": "long", "logicalType": "time-micros"}
    assert decode(codec, raw, logical=False) == micros


def test_time_24_00_which_postgres_allows_is_kept_in_the_companion() -> None:
    assert field(codec_for(TIME, -1), b"24:00:00") == (None, "24:00:00")
    assert field(codec_for(TIME, -1), (86_400_000_000).to_bytes(8, "big"), binary=True) == (None, "24:00:00")


TSTZ_SAME_INSTANTS = [
    (b"2023-11-15 03:43:20.123456+05:30", b"2023-11-14 22:13:20.123456+00"),  # TimeZone Asia/Kolkata
    (b"1900-01-01 05:21:10+05:21:10", b"1900-01-01 00:00:00+00"),  # local mean time, offset with seconds
    (b"2024-05-01 12:34:56.5-03", b"2024-05-01 15:34:56.5+00"),
    (b"0044-03-15 12:00:00+05:53:28 BC", b"0044-03-15 06:06:32+00 BC"),
    (b"4713-11-24 00:17:30+00:17:30 BC", b"4713-11-24 00:00:00+00 BC"),
    (b"294247-01-01 05:29:59.999999+05:30", b"294246-12-31 23:59:59.999999+00"),
]


@pytest.mark.parametrize(("local", "utc"), TSTZ_SAME_INSTANTS)
def test_timestamptz_in_any_session_time_zone_is_the_same_utc_instant(local: bytes, utc: bytes) -> None:
    assert timestamptz_from_text(local) == timestamptz_from_text(utc)


def test_timestamptz_is_utc_timestamp_micros() -> None:
    codec = codec_for(TIMESTAMPTZ, -1)
    assert codec.avro == {"type": "long", "logicalType": "timestamp-micros"}
    assert decode(codec, b"2023-11-15 03:43:20.123456+05:30") == \
        datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=UTC)
    # extract(epoch from '0044-01-01 00:00:00+00 BC'::timestamptz) on Postgres 18
    assert decode(codec, b"0044-01-01 00:00:00+00 BC", logical=False) == -63524131200 * 1_000_000


def test_timestamp_without_zone_is_local_timestamp_micros() -> None:
    codec = codec_for(TIMESTAMP, -1)
    assert codec.avro == {"type": "long", "logicalType": "local-timestamp-micros"}
    assert decode(codec, b"2024-05-01 12:34:56.789012") == datetime(2024, 5, 1, 12, 34, 56, 789012)
    assert decode(codec, b"10000-01-01 00:00:00", logical=False) == 253402300800 * 1_000_000


@pytest.mark.parametrize("oid", [TIMESTAMP, TIMESTAMPTZ])
def test_timestamp_infinities_go_to_the_companion(oid: int) -> None:
    codec = codec_for(oid, -1)
    assert field(codec, b"infinity", logical=False) == (None, "infinity")
    assert field(codec, b"-infinity", logical=False) == (None, "-infinity")


def test_timestamps_beyond_a_long_of_microseconds_since_1970_go_to_the_companion() -> None:
    assert text_value(TIMESTAMP, b"200000-01-01 00:00:00", logical=False) > 0
    assert field(codec_for(TIMESTAMP, -1), b"294276-12-31 23:59:59.999999") == (None, "294276-12-31 23:59:59.999999")


@given(st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)),
       st.integers(-15 * 3600, 15 * 3600))
def test_timestamptz_text_parses_to_the_instant_in_every_offset(moment: datetime, offset_s: int) -> None:
    zone = timezone(timedelta(seconds=offset_s))
    aware = moment.replace(tzinfo=zone)
    sign = "-" if offset_s < 0 else "+"
    h, rest = divmod(abs(offset_s), 3600)
    m, s = divmod(rest, 60)
    offset = f"{sign}{h:02d}" + (f":{m:02d}" if m or s else "") + (f":{s:02d}" if s else "")
    frac = f".{aware.microsecond:06d}".rstrip("0") if aware.microsecond else ""
    text = f"{aware:%Y-%m-%d %H:%M:%S}{frac}{offset}".encode()
    expected = (aware - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    assert timestamptz_from_text(text) == expected
    # The general parser (used for BC and years past 9999) agrees with the fast one.
    from pgbridge.encode.types.datetime import _timestamp_micros
    assert _timestamp_micros(text, True) == expected


def test_binary_dates_and_timestamps_shift_to_the_unix_epoch_and_keep_infinity() -> None:
    assert text_value(DATE, b"\x00\x00\x00\x01", binary=True) == date(2000, 1, 2)
    assert field(codec_for(DATE, -1), b"\x7f\xff\xff\xff", binary=True) == (None, "infinity")
    assert text_value(TIMESTAMP, b"\x00\x00\x00\x00\x00\x0fB@", binary=True) == datetime(2000, 1, 1, 0, 0, 1)
    assert field(codec_for(TIMESTAMPTZ, -1), b"\x80" + b"\x00" * 7, binary=True) == (None, "-infinity")
    assert text_value(TIME, b"\x00\x00\x00\x00\xd6\x93\xa4\x00", binary=True, logical=False) == 3_600_000_000


# --- strings, bytes, uuid, json -------------------------------------------------------------------


@pytest.mark.parametrize("oid", [TEXT, VARCHAR, BPCHAR, NAME, CHAR])
def test_character_types_are_strings_with_their_unicode_intact(oid: int) -> None:
    assert codec_for(oid, -1).avro == "string"
    assert text_value(oid, "é☃🎉".encode()) == "é☃🎉"
    assert text_value(oid, b"") == ""


def test_bpchar_keeps_its_padding() -> None:
    assert text_value(BPCHAR, b"ab ", 7) == "ab "


def test_text_that_is_not_utf8_is_refused() -> None:
    with pytest.raises(UnicodeDecodeError):
        codec_for(TEXT, -1).text_encoder()(b"caf\xe9")


def test_bytea_reads_the_hex_and_the_escape_output_formats() -> None:
    codec = codec_for(BYTEA, -1)
    assert codec.avro == "bytes"
    assert decode(codec, b"\\x00ff") == b"\x00\xff"
    assert decode(codec, b"\\x") == b""
    assert decode(codec, b"abc\\000\\\\\\377") == b"abc\x00\\\xff"
    assert decode(codec, b"\x00\xff", binary=True) == b"\x00\xff"


def test_uuid_is_a_string_with_the_uuid_logical_type() -> None:
    codec = codec_for(UUID, -1)
    assert codec.avro == {"type": "string", "logicalType": "uuid"}
    value = uuid.UUID("fcc4dbca-5a35-4b9b-b38a-96f99281814d")
    assert decode(codec, str(value).encode()) == value
    assert decode(codec, value.bytes, binary=True) == value


def test_json_and_jsonb_are_strings_marked_as_json() -> None:
    for oid in (JSON, JSONB):
        codec = codec_for(oid, -1)
        assert codec.avro == {"type": "string", "connect.name": "io.debezium.data.Json"}
        assert decode(codec, b'{"a": [1, 2], "b": 1}') == '{"a": [1, 2], "b": 1}'
    assert text_value(JSONB, b'\x01{"a": 1}', binary=True) == '{"a": 1}'
    assert text_value(JSON, b'{"a":1}', binary=True) == '{"a":1}'


# --- arrays ---------------------------------------------------------------------------------------


def test_int_array_with_nulls_is_an_avro_array_of_nullable_ints() -> None:
    codec = codec_for(1007, -1)
    assert codec.pg_type == "_int4"
    assert codec.avro == {"type": "array", "items": ["null", "int"]}
    assert decode(codec, b"{1,NULL,3}") == [1, None, 3]
    assert decode(codec, b"{}") == []


def test_text_array_unquotes_and_unescapes_every_element() -> None:
    raw = b'{"a\\"b","c,d","NULL",NULL,""," x ","back\\\\slash","{}"}'  # as Postgres prints it
    assert text_value(1009, raw) == ['a"b', "c,d", "NULL", None, "", " x ", "back\\slash", "{}"]


def test_arrays_of_other_element_types_convert_each_element() -> None:
    assert text_value(1231, b"{1.5,NULL}", numeric_mod(4, 1)) == [Decimal("1.5"), None]
    assert text_value(1185, b'{"2023-01-01 00:00:00+00"}') == [datetime(2023, 1, 1, tzinfo=UTC)]
    assert text_value(1001, b'{"\\\\x01"}') == [b"\x01"]
    assert text_value(1000, b"{t,f}") == [True, False]
    assert text_value(3807, b'{"{\\"a\\": 1}"}') == ['{"a": 1}']
    assert text_value(1041, b"{192.168.0.1/24,NULL}") == ["192.168.0.1/24", None]  # inet[]: text elements
    assert codec_for(1041, -1).pg_type == "_inet"


@pytest.mark.parametrize("raw", [b"{{1,2},{3,4}}", b"[0:1]={5,6}", b"{{{NULL}}}"])
def test_arrays_that_are_not_one_dimensional_from_one_keep_their_literal_in_the_companion(raw: bytes) -> None:
    assert field(codec_for(1007, -1), raw) == (None, raw.decode())


def test_binary_arrays_read_like_text_arrays() -> None:
    int_array = (b"\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00\x17\x00\x00\x00\x03\x00\x00\x00\x01"
                 b"\x00\x00\x00\x04\x00\x00\x00\x01\xff\xff\xff\xff\x00\x00\x00\x04\x00\x00\x00\x03")
    assert text_value(1007, int_array, binary=True) == [1, None, 3]
    assert text_value(1007, b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x17", binary=True) == []
    text_array = (b"\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00\x19\x00\x00\x00\x02\x00\x00\x00\x01"
                  b"\x00\x00\x00\x01a\xff\xff\xff\xff")
    assert text_value(1009, text_array, binary=True) == ["a", None]
    two_dims = (b"\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x17\x00\x00\x00\x02\x00\x00\x00\x01"
                b"\x00\x00\x00\x02\x00\x00\x00\x01" + b"\x00\x00\x00\x04\x00\x00\x00\x01" * 3
                + b"\xff\xff\xff\xff")
    assert field(codec_for(1007, -1), two_dims, binary=True) == (None, "{{1,1},{1,NULL}}")


def test_array_literal_parser_follows_array_in() -> None:
    assert parse_array_literal(b"{{1,2},{3,NULL}}") == [[b"1", b"2"], [b"3", None]]
    assert parse_array_literal(b"{ 1 , 2 }") == [b"1", b"2"]
    assert parse_array_literal(b'{ "a b" , c d }') == [b"a b", b"c d"]
    assert parse_array_literal(b"{null,NuLl}") == [None, None]
    assert parse_array_literal(b"{a\\,b,\\NULL}") == [b"a,b", b"NULL"]
    assert parse_array_literal(b"{x\\ }") == [b"x "]
    assert parse_array_literal(b"[0:1]={5,6}") == [b"5", b"6"]
    assert parse_array_literal(b"{(0,0),(1,1);(2,2),(3,3)}", b";") == [b"(0,0),(1,1)", b"(2,2),(3,3)"]
    assert split_array_bounds(b"[0:1][1:2]={{1,2},{3,4}}") == (((0, 1), (1, 2)), b"{{1,2},{3,4}}")


@pytest.mark.parametrize("raw", [b"1,2", b"{1,2", b'{"a}', b"{1,,2}", b"{1}x", b"{a\"b}", b"{1,2}}"])
def test_malformed_array_literals_are_refused(raw: bytes) -> None:
    with pytest.raises(ValueError):
        parse_array_literal(raw)


def _render_element(element: str | None) -> str:
    """How ``array_out`` prints one element: quoted when it could be misread."""
    if element is None:
        return "NULL"
    if element == "" or element.upper() == "NULL" or any(c in element for c in '{},"\\ \t\n\r\v\f'):
        escaped = element.replace("\\", "\\\\").replace('"', '\\"')
        return f'"{escaped}"'
    return element


def _render(items: list[Any]) -> str:
    return "{" + ",".join(_render(i) if isinstance(i, list) else _render_element(i) for i in items) + "}"


_elements = st.none() | st.text(alphabet=st.characters(codec="utf-8"), max_size=8)


@given(st.lists(_elements, max_size=8) | st.lists(st.lists(_elements, min_size=2, max_size=2), max_size=3))
def test_array_literal_parsing_inverts_array_out(items: list[Any]) -> None:
    def as_bytes(item: Any) -> Any:
        if isinstance(item, list):
            return [as_bytes(i) for i in item]
        return None if item is None else item.encode()
    assert parse_array_literal(_render(items).encode()) == as_bytes(items)


# --- the fallback ---------------------------------------------------------------------------------


def test_builtin_types_without_a_natural_avro_form_are_their_text() -> None:
    codec = codec_for(790, -1)
    assert (codec.pg_type, codec.avro) == ("money", "string")
    assert decode(codec, b"$12.34") == "$12.34"
    with pytest.raises(EncodeError, match="binary format of type money") as caught:
        codec.binary_encoder()(b"\x00\x00\x00\x00\x00\x00\x04\xd2")
    assert caught.value.hint is not None and "postgres.binary" in caught.value.hint


def test_types_outside_the_table_are_text_named_from_type_messages() -> None:
    names = {16385: ("public", "mood"), 16390: ("pg_catalog", "thing"), 16391: ("public", "_mood")}
    assert codec_for(16385, -1, names.get).pg_type == "public.mood"
    assert codec_for(16390, -1, names.get).pg_type == "thing"
    assert codec_for(16391, -1, names.get).avro == "string"  # an array of an enum: its text literal
    assert codec_for(99999, -1, names.get).pg_type == "oid:99999"
    assert codec_for(99999, -1).pg_type == "oid:99999"
    assert decode(codec_for(16385, -1, names.get), b"happy") == "happy"
