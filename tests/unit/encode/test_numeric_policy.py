"""``types.unconstrained_numeric: decimal``: exact decimals, and never a rounded or truncated value."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pgbridge.config import load_settings
from pgbridge.encode import EncodeError
from pgbridge.encode.types import NumericPolicy, codec_for
from pgbridge.errors import ConfigError
from pgbridge.source.type_catalog import PgTypeInfo
from tests.unit.encode.test_type_codecs import field

NUMERIC, NUMERIC_ARRAY = 1700, 1231
POLICY = NumericPolicy(precision=12, scale=3)


def test_without_a_policy_unconstrained_numeric_stays_the_exact_string() -> None:
    assert codec_for(NUMERIC, -1).avro == "string"
    assert codec_for(NUMERIC, -1, numeric=None).avro == "string"


def test_constrained_numeric_ignores_the_policy() -> None:
    codec = codec_for(NUMERIC, ((5 << 16) | 2) + 4, numeric=POLICY)
    assert codec.avro == {"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 2}


@pytest.mark.parametrize(("raw", "value", "text"), [
    (b"1.5", Decimal("1.500"), None),
    (b"-123456789.123", Decimal("-123456789.123"), None),
    (b"999999999.999", Decimal("999999999.999"), None),
    (b"0.50000000000000000000", Decimal("0.500"), None),  # zeros past the scale are exact
    (b"1000000000", None, "1000000000"),  # 10 integer digits > precision - scale = 9
    (b"0.0001", None, "0.0001"),  # a non-zero digit past the scale would need rounding
    (b"NaN", None, "NaN"),
    (b"Infinity", None, "Infinity"),
    (b"-Infinity", None, "-Infinity"),
])
def test_values_fit_exactly_or_go_whole_to_the_companion(raw: bytes, value: Decimal | None, text: str | None) -> None:
    codec = codec_for(NUMERIC, -1, numeric=POLICY)
    assert codec.avro == {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 3}
    assert codec.companion
    assert field(codec, raw) == (value, text)


def test_binary_values_read_like_their_text() -> None:
    codec = codec_for(NUMERIC, -1, numeric=POLICY)
    # numeric_send of 12.5 and of 0.0001 (ndigits, weight, sign, dscale, base-10000 digits)
    assert field(codec, bytes.fromhex("0002" "0000" "0000" "0001" "000c" "1388"), binary=True) == (Decimal("12.500"), None)
    assert field(codec, bytes.fromhex("0001" "ffff" "0000" "0004" "0001"), binary=True) == (None, "0.0001")


def test_fail_policy_stops_with_the_setting_to_change() -> None:
    codec = codec_for(NUMERIC, -1, numeric=NumericPolicy(12, 3, "fail"))
    assert field(codec, b"42") == (Decimal("42.000"), None)
    with pytest.raises(EncodeError, match=r"does not fit decimal\(12,3\)") as caught:
        codec.field_text_encoder()(b"0.0001")
    assert "types.numeric_precision" in (caught.value.hint or "")
    assert field(codec, b"NaN") == (None, "NaN")  # not an overflow: NaN has no decimal form at all


def test_junk_is_an_error_not_an_overflow() -> None:
    with pytest.raises(ValueError):
        codec_for(NUMERIC, -1, numeric=POLICY).field_text_encoder()(b"12abc")


def test_arrays_domains_and_composite_attributes_follow_the_policy() -> None:
    array = codec_for(NUMERIC_ARRAY, -1, numeric=POLICY)
    assert field(array, b"{1.5,NULL,2}") == ([Decimal("1.500"), None, Decimal("2.000")], None)
    catalog = {16600: PgTypeInfo(16600, "public", "amount", "d", "N", NUMERIC, -1, 0, ",", "domain_send")}
    domain = codec_for(16600, -1, catalog=catalog.get, numeric=POLICY)
    assert domain.pg_type == "public.amount" and field(domain, b"7.25") == (Decimal("7.250"), None)


@given(st.decimals(allow_nan=False, allow_infinity=False, places=3, min_value=-(10**9) + 1, max_value=10**9 - 1))
def test_every_value_within_precision_and_scale_is_exact(value: Decimal) -> None:
    assert field(codec_for(NUMERIC, -1, numeric=POLICY), str(value).encode()) == (value.quantize(Decimal("0.001")), None)


def test_settings_validate_scale_against_precision() -> None:
    base = {"PGBRIDGE_POSTGRES__DSN": "postgresql://x@h/db", "PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS": "k:9092"}
    settings = load_settings(None, environ={**base, "PGBRIDGE_TYPES__UNCONSTRAINED_NUMERIC": "decimal",
                                            "PGBRIDGE_TYPES__NUMERIC_PRECISION": "20"})
    assert (settings.types.unconstrained_numeric, settings.types.numeric_precision, settings.types.numeric_scale) == (
        "decimal", 20, 10)
    with pytest.raises(ConfigError, match="numeric_scale"):
        load_settings(None, environ={**base, "PGBRIDGE_TYPES__NUMERIC_PRECISION": "5",
                                     "PGBRIDGE_TYPES__NUMERIC_SCALE": "6"})
