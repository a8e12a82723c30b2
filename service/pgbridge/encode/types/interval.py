"""``interval`` as a record ``(months, days, microseconds)``: Postgres's own three fields.

No single duration expresses an interval (a month has no fixed length), so the record keeps the
three apart. Text is parsed as printed with ``IntervalStyle=postgres``; ``±infinity`` (Postgres
17+) is ``Unrepresentable`` and goes to the envelope's ``unrepresentable`` map.
"""

from __future__ import annotations

import struct
from typing import Final

from pgbridge.encode.types.base import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, TypeCodec, Unrepresentable
from pgbridge.encode.types.datetime import US_PER_SECOND, format_time
from pgbridge.encode.wire import write_int, write_long

INTERVAL_AVRO: Final = {"type": "record", "name": "Interval", "namespace": "pgbridge.types", "fields": [
    {"name": "months", "type": "int"}, {"name": "days", "type": "int"},
    {"name": "microseconds", "type": "long"}]}
_unpack_interval = struct.Struct("!qii").unpack
_INTERVAL_UNITS: Final = {b"year": 12, b"years": 12, b"mon": 1, b"mons": 1}


def interval_from_text(raw: bytes) -> tuple[int, int, int]:
    """``IntervalStyle=postgres`` text (``1 year -2 mons +3 days -04:05:06.5``) → (months, days, µs)."""
    if raw == b"infinity" or raw == b"-infinity":
        raise Unrepresentable(raw.decode())
    months = days = micros = 0
    tokens = raw.split()
    i, n = 0, len(tokens)
    while i < n:
        token = tokens[i]
        if b":" in token:
            negative = token[:1] == b"-"
            hms = token.lstrip(b"+-").split(b":")
            if len(hms) != 3:
                raise ValueError("interval time is not HH:MM:SS (IntervalStyle=postgres)")
            whole, _, frac = hms[2].partition(b".")
            us = ((int(hms[0]) * 60 + int(hms[1])) * 60 + int(whole)) * US_PER_SECOND
            if frac:
                us += int(frac.ljust(6, b"0"))
            micros += -us if negative else us
            i += 1
            continue
        if i + 1 >= n:
            raise ValueError("interval number without a unit (IntervalStyle=postgres)")
        count, unit = int(token), tokens[i + 1]
        if unit in (b"day", b"days"):
            days += count
        else:
            months += count * _INTERVAL_UNITS[unit]
        i += 2
    return months, days, micros


def _interval_from_binary(raw: bytes) -> tuple[int, int, int]:
    micros, days, months = _unpack_interval(raw)
    if micros == INT64_MAX and days == INT32_MAX and months == INT32_MAX:
        raise Unrepresentable("infinity")
    if micros == INT64_MIN and days == INT32_MIN and months == INT32_MIN:
        raise Unrepresentable("-infinity")
    return months, days, micros


def _interval_text_of_binary(raw: bytes) -> str:
    try:
        months, days, micros = _interval_from_binary(raw)
    except Unrepresentable as exc:
        assert exc.text is not None
        return exc.text
    sign = "-" if micros < 0 else ""
    return f"{months} mons {days} days {sign}{format_time(abs(micros))}"


def _write_interval(value: tuple[int, int, int]) -> bytes:
    return write_int(value[0]) + write_int(value[1]) + write_long(value[2])


def interval_codec(name: str, typmod: int) -> TypeCodec:
    return TypeCodec(name, INTERVAL_AVRO, interval_from_text, _interval_from_binary, _write_interval,
                     companion=True, text_of_binary=_interval_text_of_binary)
