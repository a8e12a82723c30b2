"""Debezium's JSON column values mapped to the Python values pgbridge's Avro decodes to.

One rule per Postgres type family, for the connector configured as in
``tests/integration/test_debezium_differential.py`` (``decimal.handling.mode=string``,
``time.precision.mode=adaptive_time_microseconds``, ``binary.handling.mode=hex``,
``interval.handling.mode=string``, ``include.unknown.datatypes=true``, JSON converter without
schemas). Each rule is written down, with why it is exact, in docs/migrating-from-debezium.md
("Normalisation rules"). A rule never guesses: a value it cannot map raises ``Unmappable`` and
the comparison fails.

The values Debezium publishes where pgbridge puts the exact text in ``unrepresentable`` (its
sentinels) are in ``UNREPRESENTABLE_AS``; the comparison asserts them one by one.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any, Final
from uuid import UUID

EPOCH_DATE: Final = date(1970, 1, 1)
EPOCH: Final = datetime(1970, 1, 1)


class Unmappable(ValueError):
    """A Debezium value no rule maps: the comparison reports it as a difference."""


# Debezium's value for each value pgbridge publishes as text in ``unrepresentable`` (pg type family,
# Postgres text) → what Debezium 3.6 writes. Observed on Postgres 15 and 18; the test asserts each.
UNREPRESENTABLE_AS: Final[Mapping[tuple[str, str], object]] = {
    ("decimal", "NaN"): "NAN",                          # a string that is not a number of the column
    ("date", "infinity"): -2147472692,                  # a day count: year -5877641, a real-looking date
    ("date", "-infinity"): -2147472691,                 # ... one day later than +infinity's
    ("time", "24:00:00"): 86400000000,                  # µs since midnight: one past the last time of day
    ("timestamp", "infinity"): 9223372036825200000,     # close to Long.MAX_VALUE, not equal to it
    ("timestamp", "-infinity"): -9223372036832400000,   # close to Long.MIN_VALUE
    ("timestamptz", "infinity"): "infinity",            # the text, in a field that otherwise holds ISO-8601
    ("timestamptz", "-infinity"): "-infinity",
}

# Families Debezium publishes as Postgres's text anyway: an unrepresentable value (a range with an
# ``infinity`` bound) is the same text in Debezium's field and in pgbridge's map.
TEXT_WHEN_UNREPRESENTABLE: Final = frozenset({"int4range", "tsrange"})


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise Unmappable(f"{value!r} is not an integer")
    return value


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise Unmappable(f"{value!r} is not a string")
    return value


def identity(value: object) -> object:
    """Same JSON value: integers, booleans, text-like types (text, varchar, char with its padding,
    json/jsonb text, enum label, inet/cidr/macaddr, xml, tsvector)."""
    return value


def uuid_text(value: object) -> UUID:
    """``io.debezium.data.Uuid`` is the text; pgbridge's Avro ``uuid`` logical type reads as a UUID."""
    try:
        return UUID(_str(value))
    except ValueError as exc:
        raise Unmappable(f"{value!r} is not a UUID") from exc


def decimal_text(value: object) -> Decimal:
    """``decimal.handling.mode=string``: the exact decimal as text (``NaN`` spelled ``NAN``)."""
    try:
        return Decimal(_str(value))
    except InvalidOperation as exc:
        raise Unmappable(f"{value!r} is not a decimal") from exc


def numeric_text(value: object) -> str:
    """Unconstrained ``numeric``: both publish text; Debezium's comes from Java's BigDecimal
    (``NAN`` for NaN), pgbridge's is Postgres's (``NaN``): the same number either way."""
    number = decimal_text(value)
    return "NaN" if number.is_nan() else str(value)


def floating(value: object) -> float:
    """JSON numbers, and ``"NaN"``/``"Infinity"``/``"-Infinity"`` as strings (not JSON numbers)."""
    if isinstance(value, str) and value in ("NaN", "Infinity", "-Infinity"):
        return float(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise Unmappable(f"{value!r} is not a float")


def hex_bytes(value: object) -> bytes:
    """``binary.handling.mode=hex``: lower-case hex of the bytes."""
    return bytes.fromhex(_str(value))


def epoch_days(value: object) -> date:
    """``io.debezium.time.Date``: days since 1970-01-01."""
    return EPOCH_DATE + timedelta(days=_int(value))


def micro_time(value: object) -> time:
    """``io.debezium.time.MicroTime``: µs since midnight."""
    micros = _int(value)
    if not 0 <= micros < 86_400_000_000:
        raise Unmappable(f"{micros} µs is not a time of day")
    return (EPOCH + timedelta(microseconds=micros)).time()


def micro_timestamp(value: object) -> datetime:
    """``io.debezium.time.MicroTimestamp``: µs since the epoch, no zone (a local timestamp)."""
    return EPOCH + timedelta(microseconds=_int(value))


def zoned_timestamp(value: object) -> datetime:
    """``io.debezium.time.ZonedTimestamp``: ISO-8601 text in UTC (``...Z``)."""
    try:
        return datetime.fromisoformat(_str(value)).astimezone(UTC)
    except ValueError as exc:
        raise Unmappable(f"{value!r} is not an ISO-8601 timestamp") from exc


_ISO_INTERVAL = re.compile(r"P(-?\d+)Y(-?\d+)M(-?\d+)DT(-?\d+)H(-?\d+)M(-?\d+(?:\.\d+)?)S")


def iso_interval(value: object) -> dict[str, int]:
    """``interval.handling.mode=string``: ``P<y>Y<m>M<d>DT<h>H<m>M<s>S`` from Postgres's own
    fields, so months, days and time are exact (``numeric`` mode would fold months into 30 days)."""
    match = _ISO_INTERVAL.fullmatch(_str(value))
    if match is None:
        raise Unmappable(f"{value!r} is not Debezium's interval text")
    years, months, days, hours, minutes = (int(g) for g in match.groups()[:5])
    seconds = Decimal(match.group(6))
    micros = (hours * 3600 + minutes * 60) * 1_000_000 + int(seconds * 1_000_000)
    return {"months": years * 12 + months, "days": days, "microseconds": micros}


def bits(value: object) -> int:
    """``io.debezium.data.Bits``: the bit string as little-endian bytes (base64 in JSON). The width is
    lost (``B'0000'`` is empty bytes): only the number is comparable, see ``bits_value``."""
    return int.from_bytes(base64.b64decode(_str(value)), "little")


def bits_value(text: str) -> int:
    """pgbridge's ``bit``/``varbit`` text ``'1010'`` as the number Debezium's bytes hold."""
    return int(text, 2) if text else 0


def money(value: object) -> Decimal:
    """``money`` as a decimal string (``money.fraction.digits``, default 2)."""
    return decimal_text(value)


def money_value(text: str) -> Decimal:
    """pgbridge's ``money`` text as Postgres prints it (``$1,234.56``, ``-$0.01`` in the C and
    en_US locales) as the decimal Debezium publishes."""
    negative = text.startswith("-") or (text.startswith("(") and text.endswith(")"))
    digits = re.sub(r"[^0-9.]", "", text)
    amount = Decimal(digits)
    return -amount if negative else amount


def int_array(value: object) -> list[object]:
    """One-dimensional arrays of a primitive type: a JSON array with nulls kept."""
    if not isinstance(value, list):
        raise Unmappable(f"{value!r} is not an array")
    return value


_RANGE = re.compile(r'([\[(])("(?:[^"\\]|\\.)*"|[^,]*),("(?:[^"\\]|\\.)*"|[^\])]*)([\])])')


def range_of(bound: Callable[[str], object]) -> Callable[[object], dict[str, object]]:
    """Ranges are Postgres's range text (``[1,10)``, ``["2020-01-01 00:00:00",...)``, ``empty``);
    pgbridge publishes a record of typed bounds: parse the text into that record."""

    def parse(value: object) -> dict[str, object]:
        text = _str(value)
        if text == "empty":
            return {"lower": None, "upper": None, "lower_inclusive": False, "upper_inclusive": False,
                    "empty": True}
        match = _RANGE.fullmatch(text)
        if match is None:
            raise Unmappable(f"{text!r} is not a range literal")
        opening, lower, upper, closing = match.groups()
        return {"lower": bound(lower.strip('"')) if lower else None,
                "upper": bound(upper.strip('"')) if upper else None,
                "lower_inclusive": opening == "[", "upper_inclusive": closing == "]", "empty": False}

    return parse


def composite_of(attributes: Sequence[tuple[str, Callable[[str], object]]]) -> Callable[[object], dict[str, object]]:
    """A composite with ``include.unknown.datatypes=true`` is its ``record_out`` text as bytes (hex
    here); pgbridge publishes a record of typed attributes: parse the literal into that record."""

    def parse(value: object) -> dict[str, object]:
        text = hex_bytes(value).decode()
        if not (text.startswith("(") and text.endswith(")")):
            raise Unmappable(f"{text!r} is not a composite literal")
        fields = _split_record(text[1:-1])
        if len(fields) != len(attributes):
            raise Unmappable(f"{text!r} has {len(fields)} attributes, the type {len(attributes)}")
        return {name: None if raw is None else convert(raw) for (name, convert), raw in zip(attributes, fields, strict=True)}

    return parse


def _split_record(body: str) -> list[str | None]:
    """``record_out``'s fields: comma separated, quoted with ``""`` doubling, empty unquoted = NULL."""
    fields: list[str | None] = []
    current: list[str] = []
    quoted = in_quotes = False
    i = 0
    while i < len(body):
        char = body[i]
        if in_quotes:
            if char == '"' and body[i + 1:i + 2] == '"':
                current.append('"')
                i += 1
            elif char == '"':
                in_quotes = False
            elif char == "\\":
                i += 1
                current.append(body[i])
            else:
                current.append(char)
        elif char == '"':
            in_quotes = quoted = True
        elif char == ",":
            fields.append("".join(current) if current or quoted else None)
            current, quoted = [], False
        else:
            current.append(char)
        i += 1
    fields.append("".join(current) if current or quoted else None)
    return fields


def local_timestamp_text(text: str) -> datetime:
    return datetime.fromisoformat(text)


def same(left: object, right: object) -> bool:
    """Equality where NaN equals NaN (floats and decimals), recursively through lists and dicts."""
    if isinstance(left, float) and isinstance(right, float):
        return left == right or (math.isnan(left) and math.isnan(right))
    if isinstance(left, Decimal) and isinstance(right, Decimal):
        return left == right if not (left.is_nan() or right.is_nan()) else left.is_nan() and right.is_nan()
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(same(a, b) for a, b in zip(left, right, strict=True))
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(same(left[k], right[k]) for k in left)
    return type(left) is type(right) and left == right


def type_default(family: str) -> Any:
    """What Debezium puts in a NOT NULL column Postgres did not send (an old-key image): the Java
    default of the column's type."""
    return {"int": 0, "text": "", "bool": False}[family]
