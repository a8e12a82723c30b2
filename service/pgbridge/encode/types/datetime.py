"""Dates and times: ``date``, ``time``, ``timetz``, ``timestamp``, ``timestamptz``.

Datums are Avro's: days since 1970 for dates, microseconds since midnight for times, microseconds
since 1970 for timestamps (``timestamptz`` in UTC). Text is parsed as Postgres prints it with
``DateStyle=ISO``; ``±infinity``, ``24:00:00`` and timestamps past what a long of microseconds
holds are ``Unrepresentable`` (their codecs are companions). ``timetz`` is published as its text.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Final

from pgbridge.decode.messages import PG_EPOCH_UNIX_US
from pgbridge.encode.types.base import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    Converter,
    Unrepresentable,
    unpack_int4,
    unpack_int8,
)

# --- calendar arithmetic and Postgres's literals --------------------------------------------------

US_PER_SECOND: Final = 1_000_000
_SECONDS_PER_DAY: Final = 86_400
_US_PER_DAY: Final = _SECONDS_PER_DAY * US_PER_SECOND
_PG_EPOCH_UNIX_DAYS: Final = PG_EPOCH_UNIX_US // _US_PER_DAY


def civil_to_unix_days(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date; ``year`` is astronomical (1 BC = 0).

    H. Hinnant's ``days_from_civil``: pure integer arithmetic valid over Postgres's whole range
    (4714 BC to 5874897 AD), which ``datetime`` (years 1 to 9999) does not cover.
    """
    if not (1 <= month <= 12 and 1 <= day <= 31):
        raise ValueError("month or day out of range")
    year -= month <= 2
    era = year // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def unix_days_to_civil(days: int) -> tuple[int, int, int]:
    """Inverse of ``civil_to_unix_days`` (Hinnant's ``civil_from_days``)."""
    days += 719468
    era = days // 146097
    doe = days - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month, day


def format_date(unix_days: int) -> str:
    """A date literal as Postgres prints it with ``DateStyle=ISO`` (``BC`` for years before 1)."""
    year, month, day = unix_days_to_civil(unix_days)
    if year <= 0:
        return f"{1 - year:04d}-{month:02d}-{day:02d} BC"
    return f"{year:04d}-{month:02d}-{day:02d}"


def format_time(micros: int) -> str:
    """``HH:MM:SS[.ffffff]`` with trailing zeros of the fraction dropped, as Postgres prints."""
    seconds, us = divmod(micros, US_PER_SECOND)
    minutes, sec = divmod(seconds, 60)
    hours, minute = divmod(minutes, 60)
    text = f"{hours:02d}:{minute:02d}:{sec:02d}"
    return f"{text}.{us:06d}".rstrip("0") if us else text


def format_timestamp(unix_us: int, with_zone: bool) -> str:
    """A timestamp literal (``timestamptz`` in UTC, ``+00``) from microseconds since 1970."""
    days, micros = divmod(unix_us, _US_PER_DAY)
    date = format_date(days)
    bc = date.endswith(" BC")
    text = f"{date[:-3] if bc else date} {format_time(micros)}{'+00' if with_zone else ''}"
    return f"{text} BC" if bc else text


@lru_cache(maxsize=4096)
def _iso_date_days(text: bytes) -> int:
    """``YYYY-MM-DD`` with an optional `` BC`` suffix; cached because rows share dates."""
    bc = text.endswith(b" BC")
    if bc:
        text = text[:-3]
    parts = text.split(b"-")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise ValueError("date is not in ISO form (DateStyle=ISO)")
    year = int(parts[0])
    return civil_to_unix_days(1 - year if bc else year, int(parts[1]), int(parts[2]))


def date_from_text(raw: bytes) -> int:
    if raw == b"infinity" or raw == b"-infinity":
        raise Unrepresentable(raw.decode())
    return _iso_date_days(raw)


def date_from_binary(raw: bytes) -> int:
    days: int = unpack_int4(raw)[0]
    if days == INT32_MAX:
        raise Unrepresentable("infinity")
    if days == INT32_MIN:
        raise Unrepresentable("-infinity")
    return days + _PG_EPOCH_UNIX_DAYS


def date_text_of_binary(raw: bytes) -> str:
    try:
        return format_date(date_from_binary(raw))
    except Unrepresentable as exc:
        assert exc.text is not None
        return exc.text


def _time_of_day_micros(t: bytes) -> int:
    """``HH:MM:SS[.ffffff]`` → microseconds since midnight (``24:00:00`` is allowed, as in Postgres)."""
    if t[2:3] != b":" or t[5:6] != b":" or (len(t) > 8 and t[8:9] != b"."):
        raise ValueError("time is not in ISO form (DateStyle=ISO)")
    seconds = int(t[0:2]) * 3600 + int(t[3:5]) * 60 + int(t[6:8])
    frac = t[9:]
    return seconds * US_PER_SECOND + (int(frac.ljust(6, b"0")) if frac else 0)


@lru_cache(maxsize=256)
def _utc_offset_seconds(text: bytes) -> int:
    """``+HH``, ``+HH:MM`` or ``+HH:MM:SS`` (``TimeZone`` local mean times carry seconds)."""
    sign = -1 if text[:1] == b"-" else 1
    if text[:1] not in (b"+", b"-"):
        raise ValueError("UTC offset must start with + or -")
    parts = text[1:].split(b":")
    seconds = int(parts[0]) * 3600
    if len(parts) > 1:
        seconds += int(parts[1]) * 60
    if len(parts) > 2:
        seconds += int(parts[2])
    return sign * seconds


def _timestamp_micros(raw: bytes, with_zone: bool) -> int:
    date, _, rest = raw.partition(b" ")
    if rest.endswith(b" BC"):
        rest = rest[:-3]
        date += b" BC"
    offset = 0
    if with_zone:
        i = rest.find(b"+", 8)
        if i < 0:
            i = rest.find(b"-", 8)
        if i < 0:
            raise ValueError("timestamptz has no UTC offset (DateStyle=ISO)")
        offset = _utc_offset_seconds(rest[i:])
        rest = rest[:i]
    days = _iso_date_days(date)
    micros = (days * _SECONDS_PER_DAY - offset) * US_PER_SECOND + _time_of_day_micros(rest)
    if not INT64_MIN < micros < INT64_MAX:
        # Beyond about year 294247 a long of microseconds since 1970 overflows; Postgres allows
        # timestamps up to 294276 AD. Kept exactly in the unrepresentable map.
        raise Unrepresentable(raw.decode())
    return micros


_EPOCH_UTC: Final = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_LOCAL: Final = datetime(1970, 1, 1)
_ONE_US: Final = timedelta(microseconds=1)
_fromisoformat: Final = datetime.fromisoformat


def timestamp_from_text(raw: bytes) -> int:
    """``timestamp`` text → microseconds since 1970-01-01 00:00 (local time, no zone)."""
    if raw[4:5] == b"-" and raw[-1:] != b"C":
        # Years 1000-9999 AD: the C ISO parser is four times faster than the general one below.
        try:
            return (_fromisoformat(raw.decode("ascii")) - _EPOCH_LOCAL) // _ONE_US
        except (ValueError, TypeError):
            pass
    if raw[:1].isdigit():
        return _timestamp_micros(raw, False)
    return _infinite_timestamp(raw)


def timestamptz_from_text(raw: bytes) -> int:
    """``timestamptz`` text in any session ``TimeZone`` → microseconds since the Unix epoch, UTC."""
    if raw[4:5] == b"-" and raw[-1:] != b"C":
        try:
            return (_fromisoformat(raw.decode("ascii")) - _EPOCH_UTC) // _ONE_US
        except (ValueError, TypeError):
            pass
    if raw[:1].isdigit():
        return _timestamp_micros(raw, True)
    return _infinite_timestamp(raw)


def _infinite_timestamp(raw: bytes) -> int:
    if raw == b"infinity" or raw == b"-infinity":
        raise Unrepresentable(raw.decode())
    raise ValueError("timestamp is not in ISO form (DateStyle=ISO)")


def _timestamp_binary(with_zone: bool) -> tuple[Converter, Callable[[bytes], str]]:
    def from_binary(raw: bytes) -> int:
        us: int = unpack_int8(raw)[0]
        if us == INT64_MAX:
            raise Unrepresentable("infinity")
        if us == INT64_MIN:
            raise Unrepresentable("-infinity")
        unix_us = us + PG_EPOCH_UNIX_US
        if unix_us >= INT64_MAX:
            raise Unrepresentable(format_timestamp(unix_us, with_zone))
        return unix_us

    def text_of_binary(raw: bytes) -> str:
        us: int = unpack_int8(raw)[0]
        if us == INT64_MAX:
            return "infinity"
        if us == INT64_MIN:
            return "-infinity"
        return format_timestamp(us + PG_EPOCH_UNIX_US, with_zone)

    return from_binary, text_of_binary


def time_from_binary(raw: bytes) -> int:
    us: int = unpack_int8(raw)[0]
    if us >= _US_PER_DAY:
        raise Unrepresentable(format_time(us))
    return us


def time_from_text(raw: bytes) -> int:
    """Microseconds after midnight; ``24:00:00`` (which Postgres allows) is not a time of day in
    Avro's ``time-micros`` (readers turn it into a clock time and fail), so it is a companion."""
    micros = _time_of_day_micros(raw)
    if micros >= _US_PER_DAY:
        raise Unrepresentable(raw.decode())
    return micros


timestamp_from_binary, timestamp_text_of_binary = _timestamp_binary(False)
timestamptz_from_binary, timestamptz_text_of_binary = _timestamp_binary(True)


_unpack_timetz = struct.Struct("!qi").unpack


def timetz_text_of_binary(raw: bytes) -> str:
    """``timetz`` send form (microseconds, zone in seconds *west* of UTC) → its ISO text."""
    micros, zone = _unpack_timetz(raw)
    offset = -zone
    sign = "-" if offset < 0 else "+"
    hours, rest = divmod(abs(offset), 3600)
    minutes, seconds = divmod(rest, 60)
    text = f"{sign}{hours:02d}"
    if minutes or seconds:
        text += f":{minutes:02d}"
    if seconds:
        text += f":{seconds:02d}"
    return format_time(micros) + text
