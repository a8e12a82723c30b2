"""Postgres types → Avro: one table row per builtin type OID, the catalog for the rest.

Each column gets a ``TypeCodec``: the Avro schema fragment of its (non-null) value, a converter
from Postgres's text output to the Avro datum, one from the binary (``send``) form, and the
writer of the datum's Avro binary body. A datum is the value as Avro stores it, not a rich
Python object: an ``int`` of microseconds for timestamps, of days for dates, the *unscaled*
``int`` for decimals, a ``list`` for arrays, a ``tuple`` for records. Converting straight to that
form keeps the hot loop free of ``datetime``/``Decimal`` objects that would only be taken apart.

A value must never be silently wrong, and one odd value must not stop the stream. Some types
have values their natural Avro type cannot hold: ``±infinity`` dates and timestamps, ``NaN`` and
``±Infinity`` in a constrained ``numeric``, arrays with several dimensions or a lower bound other
than 1, ranges with an infinite bound, ``infinity`` intervals (Postgres 17+). Such a type's codec
is marked ``companion``: its row field keeps the natural type (so Spark sees a real ``date``,
``timestamp`` or ``decimal`` column), and a sibling field ``{column}__text`` (``["null",
"string"]``) is added after it. For every representable value the sibling is null; for a value
the natural type cannot hold the typed field is null and the sibling carries a Postgres literal
of the value (its text output; ``'infinity'``, ``'NaN'``, ``'{{1,2},{3,4}}'``). Converters signal
this with ``Unrepresentable``. The full table with the reasons is ``docs/types.md``.

Other choices, in short:

* Unconstrained ``numeric`` is a ``string`` with Postgres's exact text: its values carry any
  scale (up to 16383 fraction digits) and ``NaN``/``±Infinity``, so no single decimal scale holds
  them without rounding. ``numeric(p,s)`` is an exact ``decimal(p,s)`` (negative scales and
  scales above the precision, Postgres 15+, get ``scale = max(s, 0)`` and room for every value).
* ``interval`` is a record ``(months, days, microseconds)``: Postgres's own three fields, which
  no single duration can express (a month has no fixed length). Ranges are records ``(lower,
  upper, lower_inclusive, upper_inclusive, empty)`` with a null bound for an unbounded side;
  multiranges are arrays of those records.
* Text forms are parsed as Postgres prints them with ``DateStyle=ISO``, ``IntervalStyle=postgres``,
  ``bytea_output`` hex or escape and ``client_encoding=UTF8`` (see ``source/connection.py``).
* Domains encode as their base type (named after the domain); arrays of catalog types as arrays
  of their element's codec; composite types as records of their attributes (a companion: a value
  the record cannot hold goes whole to ``__text``); enums, ``money``, geometric, network and
  text-search types, and any unknown OID are ``string`` with Postgres's text: always exact and
  decodable.
* Binary (pgoutput ``binary 'true'``, a session-wide option) sends every type that has a send
  function in binary. Every type in the table that has a natural Avro type has a binary decoder,
  as have text-like catalog types (enums, ``citext``, ``hstore``); so do the network, bit-string,
  geometric, text-search, ``pg_lsn``, ``tid``, vector, snapshot and ``jsonpath`` types, whose
  converters rebuild exactly the text their output function prints. A type pgbridge cannot read
  in binary (``money``: its text depends on ``lc_monetary``; ``reg*``: a catalog name; unknown
  extension types; composites with such an attribute) stops with an ``EncodeError`` naming the
  column: turn ``postgres.binary`` off for such tables (``pgbridge check`` reports them up front).
"""

from __future__ import annotations

import binascii
import math
import re
import struct
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from functools import lru_cache
from typing import Any, Final, Literal

from pgbridge.decode.messages import PG_EPOCH_UNIX_US
from pgbridge.encode.wire import (
    EMPTY_ARRAY,
    FALSE,
    NULL_BRANCH,
    TRUE,
    VALUE_BRANCH,
    AvroSchema,
    write_boolean,
    write_bytes,
    write_decimal_bytes,
    write_double,
    write_float,
    write_int,
    write_length,
    write_long,
    write_string,
)
from pgbridge.errors import FatalError

# --- errors ---------------------------------------------------------------------------------------


class EncodeError(FatalError):
    """A value or relation that cannot be written faithfully in the contract's Avro form.

    Raised instead of writing a value that would misrepresent the row; the encoder adds the table
    and column. With the ``__text`` companion fields this is left for malformed input and for
    binary values of types pgbridge cannot read in binary.
    """


class Unrepresentable(Exception):
    """The value is valid but its codec's Avro type cannot hold it: write it to the companion.

    ``text`` is a Postgres literal of the value when the converter knows one (always in binary
    mode when it can be built); in text mode the encoder uses the raw text itself.
    """

    def __init__(self, text: str | None = None) -> None:
        super().__init__(text)
        self.text = text


_BINARY_HINT: Final = "set postgres.binary to false: pgbridge reads this type only in text format"

# --- type modifiers -------------------------------------------------------------------------------

INT32_MIN: Final = -(1 << 31)
INT32_MAX: Final = (1 << 31) - 1
INT64_MIN: Final = -(1 << 63)
INT64_MAX: Final = (1 << 63) - 1
_VARHDRSZ: Final = 4


def numeric_typmod(typmod: int) -> tuple[int, int] | None:
    """``(precision, scale)`` of ``numeric(p,s)``, or ``None`` for unconstrained numeric.

    The modifier is ``((p << 16) | (s & 0x7FF)) + 4``; the scale is an 11-bit signed field since
    Postgres 15 (negative scales), which reads the same for the non-negative scales of older ones.
    """
    if typmod < _VARHDRSZ:
        return None
    t = typmod - _VARHDRSZ
    return (t >> 16) & 0xFFFF, ((t & 0x7FF) ^ 0x400) - 0x400


def length_typmod(typmod: int) -> int | None:
    """Declared length of ``varchar(n)``/``char(n)`` (the modifier is ``n + 4``), else ``None``."""
    return typmod - _VARHDRSZ if typmod >= _VARHDRSZ else None


# --- codecs ---------------------------------------------------------------------------------------

Converter = Callable[[bytes], Any]
Writer = Callable[[Any], bytes]
FieldEncoder = Callable[[bytes], bytes]
_NULL_THEN_TEXT: Final = NULL_BRANCH + VALUE_BRANCH


@dataclass(frozen=True, slots=True)
class TypeCodec:
    """How one Postgres type (with its modifier) becomes Avro.

    ``avro`` is the non-null fragment; row fields wrap it as ``["null", avro]``. ``text_to_avro``
    is an optional fused fast path equal to ``write(from_text(raw))``. ``companion`` codecs may
    raise ``Unrepresentable`` and get a ``{column}__text`` sibling field. ``text_of_binary`` turns
    a binary value into a Postgres literal (for companions and for arrays' element texts).
    """

    pg_type: str
    avro: AvroSchema
    from_text: Converter
    from_binary: Converter | None
    write: Writer
    attributes: Mapping[str, Any] = field(default_factory=dict)
    text_to_avro: Callable[[bytes], bytes] | None = None
    companion: bool = False
    text_of_binary: Callable[[bytes], str] | None = None

    def renamed(self, pg_type: str, **attributes: Any) -> TypeCodec:
        return replace(self, pg_type=pg_type, attributes={**self.attributes, **attributes})

    def text_encoder(self) -> Callable[[bytes], bytes]:
        """Raw text bytes → Avro body of the value (may raise ``Unrepresentable``)."""
        if self.text_to_avro is not None:
            return self.text_to_avro
        convert, write = self.from_text, self.write
        return lambda raw: write(convert(raw))

    def binary_encoder(self) -> Callable[[bytes], bytes]:
        """Raw binary (send) bytes → Avro body; raises ``EncodeError`` if the type has none."""
        convert = self.from_binary
        if convert is None:
            pg_type = self.pg_type

            def unsupported(raw: bytes) -> bytes:
                raise EncodeError(f"binary format of type {pg_type} is not supported", hint=_BINARY_HINT)

            return unsupported
        write = self.write
        return lambda raw: write(convert(raw))

    @property
    def null_field(self) -> bytes:
        """The field (and companion) bytes of a NULL or absent value."""
        return NULL_BRANCH + NULL_BRANCH if self.companion else NULL_BRANCH

    def field_text_encoder(self) -> FieldEncoder:
        """Raw text → the bytes of the nullable field, and of its companion when it has one.

        The hot path of the encoder: each is one call per column, fused where a type allows."""
        convert, write = self.from_text, self.write
        if not self.companion:
            fused = _FUSED_TEXT_FIELDS.get(self.text_to_avro) if self.text_to_avro is not None else None
            if fused is not None:
                return fused
            body = self.text_to_avro
            if body is not None:
                return lambda raw: VALUE_BRANCH + body(raw)
            return lambda raw: VALUE_BRANCH + write(convert(raw))

        def encode(raw: bytes) -> bytes:
            try:
                return VALUE_BRANCH + write(convert(raw)) + NULL_BRANCH
            except Unrepresentable:
                return _NULL_THEN_TEXT + string_raw_to_avro(raw)

        return encode

    def field_binary_encoder(self) -> FieldEncoder:
        """Raw binary → the bytes of the nullable field, and of its companion when it has one."""
        body = self.binary_encoder()
        if not self.companion:
            return lambda raw: VALUE_BRANCH + body(raw)
        pg_type = self.pg_type

        def encode(raw: bytes) -> bytes:
            try:
                return VALUE_BRANCH + body(raw) + NULL_BRANCH
            except Unrepresentable as exc:
                if exc.text is None:
                    raise EncodeError(f"a binary value of type {pg_type} has no Avro form and pgbridge "
                                      "cannot print it as text", hint=_BINARY_HINT) from None
                return _NULL_THEN_TEXT + write_string(exc.text)

        return encode


# --- scalar converters ----------------------------------------------------------------------------

_unpack_int2 = struct.Struct("!h").unpack
_unpack_int4 = struct.Struct("!i").unpack
_unpack_uint4 = struct.Struct("!I").unpack
_unpack_int8 = struct.Struct("!q").unpack
_unpack_float4 = struct.Struct("!f").unpack
_unpack_float8 = struct.Struct("!d").unpack


def text_from_utf8(raw: bytes) -> str:
    return raw.decode()


def string_raw_to_avro(raw: bytes) -> bytes:
    """Text output is already UTF-8 (client_encoding=UTF8): validate and write it unchanged."""
    if not raw.isascii():
        raw.decode()  # raises UnicodeDecodeError on bytes that are not UTF-8
    return write_length(len(raw)) + raw


def _bool_from_text(raw: bytes) -> bool:
    if raw == b"t":
        return True
    if raw == b"f":
        return False
    raise ValueError("boolean text is neither 't' nor 'f'")


def _bool_text_to_avro(raw: bytes) -> bytes:
    if raw == b"t":
        return TRUE
    if raw == b"f":
        return FALSE
    raise ValueError("boolean text is neither 't' nor 'f'")


def _long_text_to_avro(raw: bytes) -> bytes:
    return write_long(int(raw))


def _string_text_field(raw: bytes) -> bytes:
    if not raw.isascii():
        raw.decode()
    return VALUE_BRANCH + write_length(len(raw)) + raw


def _long_text_field(raw: bytes) -> bytes:
    return VALUE_BRANCH + write_long(int(raw))


_FUSED_TEXT_FIELDS: Final[Mapping[Callable[[bytes], bytes], FieldEncoder]] = {
    string_raw_to_avro: _string_text_field, _long_text_to_avro: _long_text_field}


def _float_from_text(raw: bytes) -> float:
    # float() reads Postgres's NaN, Infinity and -Infinity spellings as they are.
    return float(raw)


def bytea_from_text(raw: bytes) -> bytes:
    r"""``bytea`` output: ``\x`` + hex (``bytea_output=hex``, the default) or the escape format."""
    if raw[:2] == b"\\x":
        return binascii.unhexlify(raw[2:])
    if b"\\" not in raw:
        return raw
    out = bytearray()
    i, n = 0, len(raw)
    while i < n:
        c = raw[i]
        if c != 0x5C:  # backslash
            out.append(c)
            i += 1
        elif raw[i + 1:i + 2] == b"\\":
            out.append(0x5C)
            i += 2
        else:
            out.append(int(raw[i + 1:i + 4], 8))
            i += 4
    return bytes(out)


def _uuid_from_binary(raw: bytes) -> str:
    return str(uuid.UUID(bytes=raw))


def _jsonb_from_binary(raw: bytes) -> str:
    if raw[:1] != b"\x01":
        raise ValueError(f"unknown jsonb binary version {raw[:1]!r}")
    return raw[1:].decode()


# --- numeric --------------------------------------------------------------------------------------

_NUMERIC_POS: Final = 0x0000
_NUMERIC_NEG: Final = 0x4000
_NUMERIC_NAN: Final = 0xC000
_NUMERIC_PINF: Final = 0xD000
_NUMERIC_NINF: Final = 0xF000
_unpack_numeric_head = struct.Struct("!hhHh").unpack_from


def numeric_text_from_binary(raw: bytes) -> str:
    """Postgres's binary numeric (base-10000 digits, weight, sign, display scale) as its text form."""
    ndigits, weight, sign, dscale = _unpack_numeric_head(raw)
    if sign == _NUMERIC_NAN:
        return "NaN"
    if sign == _NUMERIC_PINF:
        return "Infinity"
    if sign == _NUMERIC_NINF:
        return "-Infinity"
    if sign not in (_NUMERIC_POS, _NUMERIC_NEG):
        raise ValueError(f"invalid numeric sign 0x{sign:04X}")
    groups = struct.unpack_from(f"!{ndigits}H", raw, 8)
    digits = "".join(f"{g:04d}" for g in groups)
    point = (weight + 1) * 4  # the decimal point sits after weight+1 groups
    if point <= 0:
        digits = "0" * -point + digits
        point = 0
    elif point > len(digits):
        digits += "0" * (point - len(digits))
    whole = digits[:point].lstrip("0") or "0"
    text = whole if dscale <= 0 else f"{whole}.{digits[point:point + dscale].ljust(dscale, '0')}"
    return f"-{text}" if sign == _NUMERIC_NEG else text


_POW10: Final[tuple[int, ...]] = tuple(10**i for i in range(1001))


def decimal_unscaled(raw: bytes, scale: int) -> int:
    """Numeric text → the unscaled integer at ``scale`` (``"-1.50"``, 2 → ``-150``), exactly.

    ``NaN`` and ``±Infinity`` have no decimal form and raise ``Unrepresentable``; digits past ``scale``
    that are not zero would need rounding and raise ``ValueError`` (Postgres never sends them for
    a column of that scale).
    """
    dot = raw.find(b".")
    if raw[-1] <= 0x39:  # ends in a digit, so not NaN/Infinity: the fast paths
        if dot < 0:
            return int(raw) * _POW10[scale]
        if len(raw) - dot - 1 == scale:  # the usual case: Postgres prints exactly the column's scale
            return int(raw.replace(b".", b""))
    if raw in (b"NaN", b"Infinity", b"-Infinity"):
        raise Unrepresentable(raw.decode())
    if dot < 0:
        return int(raw) * _POW10[scale]
    whole, frac = raw[:dot], raw[dot + 1:]
    n = len(frac)
    if not frac.isdigit():
        raise ValueError("numeric fraction is not all digits")
    if n < scale:
        return int(whole + frac) * _POW10[scale - n]
    if frac[scale:].strip(b"0"):
        raise ValueError(f"numeric has more than {scale} fraction digits")
    return int(whole + frac[:scale])


def _decimal_codec(precision: int, scale: int) -> TypeCodec:
    avro_scale = max(scale, 0)
    avro_precision = max(precision - scale, 0) + avro_scale

    def from_text(raw: bytes) -> int:
        return decimal_unscaled(raw, avro_scale)

    def from_binary(raw: bytes) -> int:
        return decimal_unscaled(numeric_text_from_binary(raw).encode(), avro_scale)

    def text_to_avro(raw: bytes) -> bytes:
        return write_decimal_bytes(decimal_unscaled(raw, avro_scale))

    return TypeCodec(
        "numeric",
        {"type": "bytes", "logicalType": "decimal", "precision": avro_precision, "scale": avro_scale},
        from_text, from_binary, write_decimal_bytes,
        {"pg_precision": precision, "pg_scale": scale}, text_to_avro,
        companion=True, text_of_binary=numeric_text_from_binary,
    )


@dataclass(frozen=True, slots=True)
class NumericPolicy:
    """``numeric`` without a declared precision as an Avro ``decimal(precision, scale)`` (opt-in).

    Postgres allows such a column any value up to 131072 digits before the point and 16383 after,
    so no fixed decimal holds every value. A value that fits exactly is the decimal; one that does
    not (more integer digits than ``precision - scale``, a non-zero digit beyond ``scale``, NaN,
    ±Infinity) is never rounded: with ``overflow="text"`` it is published in ``{column}__text``
    with the decimal null, with ``overflow="fail"`` pgbridge stops with an error naming the
    column, before confirming anything past it. (NaN and ±Infinity always go to ``__text``.)
    """

    precision: int = 38
    scale: int = 10
    overflow: Literal["text", "fail"] = "text"

    def __post_init__(self) -> None:
        if not 1 <= self.precision <= 1000 or not 0 <= self.scale <= self.precision:
            raise ValueError("numeric precision must be 1-1000 and scale 0-precision")


_PLAIN_NUMERIC: Final = re.compile(rb"-?[0-9]+(\.[0-9]+)?")


def _policy_decimal_codec(policy: NumericPolicy) -> TypeCodec:
    precision, scale, fail = policy.precision, policy.scale, policy.overflow == "fail"
    limit = _POW10[precision]

    def from_text(raw: bytes) -> int:
        try:
            unscaled: int | None = decimal_unscaled(raw, scale)
        except ValueError:
            if not _PLAIN_NUMERIC.fullmatch(raw):
                raise
            unscaled = None  # a non-zero digit beyond the scale: it would need rounding
        if unscaled is None or not -limit < unscaled < limit:
            if fail:
                raise EncodeError(f"numeric value {raw[:40].decode(errors='replace')} does not fit "
                                  f"decimal({precision},{scale})",
                                  hint="raise types.numeric_precision/numeric_scale, or set "
                                       "types.numeric_overflow to text to keep such values in {column}__text")
            raise Unrepresentable(raw.decode())
        return unscaled

    def from_binary(raw: bytes) -> int:
        return from_text(numeric_text_from_binary(raw).encode())

    return TypeCodec(
        "numeric",
        {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale},
        from_text, from_binary, write_decimal_bytes,
        {"pg_numeric": "unconstrained"}, None,
        companion=True, text_of_binary=numeric_text_from_binary,
    )


def _numeric_codec(name: str, typmod: int) -> TypeCodec:
    ps = numeric_typmod(typmod)
    if ps is not None:
        return _decimal_codec(*ps)
    return TypeCodec(name, "string", text_from_utf8, numeric_text_from_binary, write_string,
                     text_to_avro=string_raw_to_avro, text_of_binary=numeric_text_from_binary)


# --- dates and times ------------------------------------------------------------------------------

_US_PER_SECOND: Final = 1_000_000
_SECONDS_PER_DAY: Final = 86_400
_US_PER_DAY: Final = _SECONDS_PER_DAY * _US_PER_SECOND
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
    seconds, us = divmod(micros, _US_PER_SECOND)
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


def _date_from_binary(raw: bytes) -> int:
    days: int = _unpack_int4(raw)[0]
    if days == INT32_MAX:
        raise Unrepresentable("infinity")
    if days == INT32_MIN:
        raise Unrepresentable("-infinity")
    return days + _PG_EPOCH_UNIX_DAYS


def _date_text_of_binary(raw: bytes) -> str:
    try:
        return format_date(_date_from_binary(raw))
    except Unrepresentable as exc:
        assert exc.text is not None
        return exc.text


def _time_of_day_micros(t: bytes) -> int:
    """``HH:MM:SS[.ffffff]`` → microseconds since midnight (``24:00:00`` is allowed, as in Postgres)."""
    if t[2:3] != b":" or t[5:6] != b":" or (len(t) > 8 and t[8:9] != b"."):
        raise ValueError("time is not in ISO form (DateStyle=ISO)")
    seconds = int(t[0:2]) * 3600 + int(t[3:5]) * 60 + int(t[6:8])
    frac = t[9:]
    return seconds * _US_PER_SECOND + (int(frac.ljust(6, b"0")) if frac else 0)


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
    micros = (days * _SECONDS_PER_DAY - offset) * _US_PER_SECOND + _time_of_day_micros(rest)
    if not INT64_MIN < micros < INT64_MAX:
        # Beyond about year 294247 a long of microseconds since 1970 overflows; Postgres allows
        # timestamps up to 294276 AD. Kept exactly in the companion.
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
        us: int = _unpack_int8(raw)[0]
        if us == INT64_MAX:
            raise Unrepresentable("infinity")
        if us == INT64_MIN:
            raise Unrepresentable("-infinity")
        unix_us = us + PG_EPOCH_UNIX_US
        if unix_us >= INT64_MAX:
            raise Unrepresentable(format_timestamp(unix_us, with_zone))
        return unix_us

    def text_of_binary(raw: bytes) -> str:
        us: int = _unpack_int8(raw)[0]
        if us == INT64_MAX:
            return "infinity"
        if us == INT64_MIN:
            return "-infinity"
        return format_timestamp(us + PG_EPOCH_UNIX_US, with_zone)

    return from_binary, text_of_binary


def _time_from_binary(raw: bytes) -> int:
    us: int = _unpack_int8(raw)[0]
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


_unpack_timetz = struct.Struct("!qi").unpack


def _timetz_text_of_binary(raw: bytes) -> str:
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


# --- interval -------------------------------------------------------------------------------------

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
            us = ((int(hms[0]) * 60 + int(hms[1])) * 60 + int(whole)) * _US_PER_SECOND
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


# --- arrays ---------------------------------------------------------------------------------------

_WHITESPACE: Final = frozenset(b" \t\n\r\v\f")


def split_array_bounds(text: bytes) -> tuple[tuple[tuple[int, int], ...] | None, bytes]:
    """Split the ``[lo:hi][lo:hi]=`` decoration Postgres prints for arrays whose lower bound is
    not 1 from the ``{...}`` literal; bounds are ``None`` when there is no decoration."""
    if text[:1] != b"[":
        return None, text
    decoration, eq, body = text.partition(b"=")
    if not eq:
        raise ValueError("array dimension decoration without '='")
    bounds = []
    for dim in decoration.strip()[1:-1].split(b"]["):
        lo, _, hi = dim.partition(b":")
        bounds.append((int(lo), int(hi)) if hi else (1, int(lo)))
    return tuple(bounds), body


def parse_array_literal(text: bytes, delimiter: bytes = b",") -> list[Any]:
    r"""Postgres array text → nested lists of element texts (``bytes``), ``None`` for ``NULL``.

    Follows ``array_in``: elements may be double-quoted with ``\`` escapes, unquoted elements
    lose surrounding whitespace, an unquoted ``NULL`` (any case) is null while ``"NULL"`` is the
    string, nested braces are sub-arrays. Dimension decoration is skipped (see
    ``split_array_bounds``). Raises ``ValueError`` on a malformed literal.
    """
    _, body = split_array_bounds(text)
    body = body.strip()
    if body[:1] != b"{" or body[-1:] != b"}":
        raise ValueError("array literal must be enclosed in braces")
    inner = body[1:-1]
    if b'"' not in inner and b"\\" not in inner and b"{" not in inner and b"}" not in inner:
        # Fast path for flat arrays of plain elements (numbers, booleans, simple words).
        if not inner.strip():
            return []
        out: list[Any] = []
        for element in inner.split(delimiter):
            element = element.strip()
            if not element:
                raise ValueError("empty unquoted array element")
            out.append(None if len(element) == 4 and element.upper() == b"NULL" else element)
        return out
    result, pos = _parse_array_level(body, 0, delimiter[0])
    if pos != len(body):
        raise ValueError("junk after array literal")
    return result


def _parse_array_level(text: bytes, pos: int, delim: int) -> tuple[list[Any], int]:
    """Parse ``{...}`` starting at ``text[pos] == '{'``; return the items and the index after ``}``."""
    n = len(text)
    items: list[Any] = []
    pos += 1
    while pos < n and text[pos] in _WHITESPACE:
        pos += 1
    if pos < n and text[pos] == 0x7D:  # '}'
        return items, pos + 1
    while True:
        while pos < n and text[pos] in _WHITESPACE:
            pos += 1
        if pos >= n:
            raise ValueError("unterminated array literal")
        c = text[pos]
        if c == 0x7B:  # '{'
            sub, pos = _parse_array_level(text, pos, delim)
            items.append(sub)
        elif c == 0x22:  # '"'
            buf = bytearray()
            pos += 1
            while True:
                if pos >= n:
                    raise ValueError("unterminated quoted array element")
                c = text[pos]
                if c == 0x5C:  # backslash
                    pos += 1
                    if pos >= n:
                        raise ValueError("dangling backslash in array literal")
                    buf.append(text[pos])
                elif c == 0x22:
                    pos += 1
                    break
                else:
                    buf.append(c)
                pos += 1
            items.append(bytes(buf))
        else:
            buf = bytearray()
            escaped_to = 0  # length of buf up to the last escaped byte: whitespace before it stays
            while pos < n:
                c = text[pos]
                if c == delim or c == 0x7D:
                    break
                if c in (0x7B, 0x22):
                    raise ValueError("unexpected character in unquoted array element")
                if c == 0x5C:
                    pos += 1
                    if pos >= n:
                        raise ValueError("dangling backslash in array literal")
                    buf.append(text[pos])
                    escaped_to = len(buf)
                else:
                    buf.append(c)
                pos += 1
            end = len(buf)
            while end > escaped_to and buf[end - 1] in _WHITESPACE:
                end -= 1
            element = bytes(buf[:end])
            if not element:
                raise ValueError("empty unquoted array element")
            if escaped_to == 0 and len(element) == 4 and element.upper() == b"NULL":
                items.append(None)
            else:
                items.append(element)
        while pos < n and text[pos] in _WHITESPACE:
            pos += 1
        if pos >= n:
            raise ValueError("unterminated array literal")
        c = text[pos]
        pos += 1
        if c == delim:
            continue
        if c == 0x7D:
            return items, pos
        raise ValueError("expected delimiter or '}' in array literal")


_ARRAY_HEAD: Final = struct.Struct("!iiI")
_ARRAY_DIM: Final = struct.Struct("!ii")
_ARRAY_SPECIAL: Final = frozenset(b'{}"\\ \t\n\r\v\f')


def quote_array_element(text: str, delimiter: str) -> str:
    """An element as ``array_out`` writes it: double-quoted when it needs to be."""
    if (not text or text.upper() == "NULL" or delimiter in text
            or any(ord(c) in _ARRAY_SPECIAL for c in text if ord(c) < 128)):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


def _binary_array_text(raw: bytes, element_text: Callable[[bytes], str] | None, delimiter: str) -> str | None:
    """The text literal of a binary array of any shape (``None`` if elements have no text form)."""
    if element_text is None:
        return None
    ndim, _flags, _oid = _ARRAY_HEAD.unpack_from(raw)
    if ndim == 0:
        return "{}"
    dims = [_ARRAY_DIM.unpack_from(raw, 12 + 8 * d) for d in range(ndim)]
    pos = 12 + 8 * ndim
    texts: list[str] = []
    total = 1
    for count, _lower in dims:
        total *= count
    for _ in range(total):
        (size,) = _unpack_int4(raw[pos:pos + 4])
        pos += 4
        if size < 0:
            texts.append("NULL")
        else:
            texts.append(quote_array_element(element_text(raw[pos:pos + size]), delimiter))
            pos += size
    it = iter(texts)

    def nest(level: int) -> str:
        count = dims[level][0]
        if level == ndim - 1:
            return "{" + delimiter.join(next(it) for _ in range(count)) + "}"
        return "{" + delimiter.join(nest(level + 1) for _ in range(count)) + "}"

    body = nest(0)
    if any(lower != 1 for _, lower in dims):
        body = "".join(f"[{lower}:{lower + count - 1}]" for count, lower in dims) + "=" + body
    return body


def _array_codec(name: str, element: TypeCodec, delimiter: bytes) -> TypeCodec:
    """A one-dimensional Avro array of nullable elements; any other shape goes to the companion."""
    elem_text, elem_binary, elem_write = element.from_text, element.from_binary, element.write
    elem_text_of_binary = element.text_of_binary
    delim = delimiter.decode()

    def from_text(raw: bytes) -> list[Any]:
        if raw[:1] == b"[":
            raise Unrepresentable()  # a lower bound other than 1
        items = parse_array_literal(raw, delimiter)
        if items and any(isinstance(e, list) for e in items):
            raise Unrepresentable()  # several dimensions
        return [None if e is None else elem_text(e) for e in items]

    def text_of_binary(raw: bytes) -> str:
        text = _binary_array_text(raw, elem_text_of_binary, delim)
        if text is None:
            raise EncodeError(f"binary format of type {element.pg_type} is not supported", hint=_BINARY_HINT)
        return text

    def from_binary(raw: bytes) -> list[Any]:
        assert elem_binary is not None
        ndim, _flags, _elem_oid = _ARRAY_HEAD.unpack_from(raw)
        if ndim == 0:
            return []
        count, lower = _ARRAY_DIM.unpack_from(raw, 12)
        if ndim != 1 or lower != 1:
            raise Unrepresentable(_binary_array_text(raw, elem_text_of_binary, delim))
        out: list[Any] = []
        pos = 20
        try:
            for _ in range(count):
                (size,) = _unpack_int4(raw[pos:pos + 4])
                pos += 4
                if size < 0:
                    out.append(None)
                else:
                    out.append(elem_binary(raw[pos:pos + size]))
                    pos += size
        except Unrepresentable:
            raise Unrepresentable(_binary_array_text(raw, elem_text_of_binary, delim)) from None
        return out

    def write(items: list[Any]) -> bytes:
        if not items:
            return EMPTY_ARRAY
        body = [write_long(len(items))]
        for item in items:
            body.append(NULL_BRANCH if item is None else VALUE_BRANCH + elem_write(item))
        body.append(EMPTY_ARRAY)
        return b"".join(body)

    return TypeCodec(name, {"type": "array", "items": ["null", element.avro]}, from_text,
                     from_binary if elem_binary is not None else None, write, companion=True,
                     text_of_binary=text_of_binary if elem_text_of_binary is not None else None)


# --- ranges and multiranges -----------------------------------------------------------------------

_RANGE_EMPTY: Final = 0x01
_RANGE_LB_INC: Final = 0x02
_RANGE_UB_INC: Final = 0x04
_RANGE_LB_INF: Final = 0x08
_RANGE_UB_INF: Final = 0x10
_RANGE_SPECIAL: Final = frozenset(b'"\\()[],{} \t\n\r\v\f')

RangeDatum = tuple[Any, Any, bool, bool, bool]
"""(lower, upper, lower_inclusive, upper_inclusive, empty); a ``None`` bound is unbounded."""


def _read_token(text: bytes, pos: int, stops: bytes) -> tuple[bytes | None, int]:
    """One element of ``range_in``/``record_in`` syntax from ``pos`` up to a byte of ``stops`` (or
    the end): inside double quotes ``""`` is a quote and ``\\x`` is ``x``, outside them ``\\x`` is
    ``x``; nothing is trimmed; empty and unquoted is ``None`` (an unbounded bound, a NULL field).
    Raises ``ValueError`` on an unterminated quote or a trailing backslash."""
    buf = bytearray()
    quoted = False
    n = len(text)
    while pos < n and text[pos] not in stops:
        c = text[pos]
        if c == 0x22:  # '"'
            quoted = True
            pos += 1
            while True:
                if pos >= n:
                    raise ValueError("unterminated quoted value")
                c = text[pos]
                if c == 0x5C:
                    if pos + 1 >= n:
                        raise ValueError("backslash at the end of a value")
                    buf.append(text[pos + 1])
                    pos += 2
                elif c == 0x22:
                    if text[pos + 1:pos + 2] == b'"':
                        buf.append(0x22)
                        pos += 2
                    else:
                        pos += 1
                        break
                else:
                    buf.append(c)
                    pos += 1
        elif c == 0x5C:
            if pos + 1 >= n:
                raise ValueError("backslash at the end of a value")
            buf.append(text[pos + 1])
            pos += 2
        else:
            buf.append(c)
            pos += 1
    return (bytes(buf) if buf or quoted else None), pos


def parse_range_literal(text: bytes) -> tuple[bytes | None, bytes | None, bool, bool] | None:
    """``range_out`` text → (lower text, upper text, lower inclusive, upper inclusive); ``None``
    for ``empty``; an absent bound (unbounded side) is ``None``."""
    text = text.strip()
    if text.lower() == b"empty":
        return None
    if text[:1] not in (b"[", b"(") or text[-1:] not in (b"]", b")"):
        raise ValueError("range literal must be enclosed in [ or ( and ] or )")
    lower, pos = _read_token(text, 1, b",")
    if text[pos:pos + 1] != b",":
        raise ValueError("range literal has no comma between its bounds")
    upper, pos = _read_token(text, pos + 1, b")]")
    if pos != len(text) - 1:
        raise ValueError("junk after range literal")
    return lower, upper, text[:1] == b"[", text[-1:] == b"]"


def _quote_range_bound(text: str) -> str:
    if not text or any(ord(c) in _RANGE_SPECIAL for c in text if ord(c) < 128):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


def _range_avro(name: str, element: TypeCodec) -> dict[str, Any]:
    return {"type": "record", "name": avro_type_name(name), "namespace": "pgbridge.types", "fields": [
        {"name": "lower", "type": ["null", element.avro], "default": None},
        {"name": "upper", "type": ["null", element.avro], "default": None},
        {"name": "lower_inclusive", "type": "boolean"}, {"name": "upper_inclusive", "type": "boolean"},
        {"name": "empty", "type": "boolean"}]}


_INVALID_NAME_CHAR: Final = re.compile(r"[^A-Za-z0-9_]")
_VALID_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def avro_name(text: str) -> str:
    """A valid Avro name for ``text``: other characters become ``_``, a leading digit gets ``_``."""
    name = _INVALID_NAME_CHAR.sub("_", text)
    return name if name and not name[0].isdigit() else f"_{name}"


def distinct_avro_names(names: list[str]) -> tuple[str, ...]:
    """One distinct, valid Avro name per input name, in order.

    Names that are already valid keep priority, so ``a_b`` stays ``a_b`` even if ``a-b`` comes
    first; that one becomes ``a_b_2``.
    """
    out: list[str | None] = [n if _VALID_NAME.fullmatch(n) else None for n in names]
    used = {n for n in out if n is not None}
    for i, name in enumerate(names):
        if out[i] is not None:
            continue
        base = candidate = avro_name(name)
        suffix = 2
        while candidate in used:
            candidate = f"{base}_{suffix}"
            suffix += 1
        used.add(candidate)
        out[i] = candidate
    return tuple(n for n in out if n is not None)


def define_named_types_once(node: Any, defined: set[str]) -> Any:
    """``node`` with every named record after its first definition (full names in ``defined``)
    replaced by a reference to it: Avro allows one definition per name in a schema."""
    if isinstance(node, list):
        return [define_named_types_once(n, defined) for n in node]
    if not isinstance(node, dict):
        return node
    if node.get("type") == "record":
        name, namespace = node["name"], node.get("namespace")
        full = name if "." in name or not namespace else f"{namespace}.{name}"
        if full in defined:
            return full
        defined.add(full)
        return {**node, "fields": [{**f, "type": define_named_types_once(f["type"], defined)} for f in node["fields"]]}
    if node.get("type") == "array":
        return {**node, "items": define_named_types_once(node["items"], defined)}
    return node


def avro_type_name(pg_name: str) -> str:
    """``int4range`` → ``Int4range``: a record name for a Postgres type."""
    cleaned = "".join(c if c.isalnum() else "_" for c in pg_name)
    return cleaned[:1].upper() + cleaned[1:] if cleaned and not cleaned[0].isdigit() else f"T_{cleaned}"


def _range_parts(element: TypeCodec) -> tuple[Converter, Converter | None, Writer, Callable[[bytes], str] | None]:
    elem_text, elem_binary, elem_write = element.from_text, element.from_binary, element.write
    elem_text_of_binary = element.text_of_binary

    def from_text(raw: bytes) -> RangeDatum:
        parsed = parse_range_literal(raw)
        if parsed is None:
            return None, None, False, False, True
        lower, upper, lower_inc, upper_inc = parsed
        try:
            return (None if lower is None else elem_text(lower), None if upper is None else elem_text(upper),
                    lower_inc, upper_inc, False)
        except Unrepresentable:
            raise Unrepresentable(raw.decode()) from None

    def bounds_of_binary(raw: bytes) -> tuple[int, bytes | None, bytes | None]:
        flags = raw[0]
        pos = 1
        lower = upper = None
        if not flags & (_RANGE_EMPTY | _RANGE_LB_INF):
            (size,) = _unpack_int4(raw[pos:pos + 4])
            lower, pos = raw[pos + 4:pos + 4 + size], pos + 4 + size
        if not flags & (_RANGE_EMPTY | _RANGE_UB_INF):
            (size,) = _unpack_int4(raw[pos:pos + 4])
            upper = raw[pos + 4:pos + 4 + size]
        return flags, lower, upper

    def text_of_binary(raw: bytes) -> str:
        assert elem_text_of_binary is not None
        flags, lower, upper = bounds_of_binary(raw)
        if flags & _RANGE_EMPTY:
            return "empty"
        return ("[" if flags & _RANGE_LB_INC else "(") + \
            ("" if lower is None else _quote_range_bound(elem_text_of_binary(lower))) + "," + \
            ("" if upper is None else _quote_range_bound(elem_text_of_binary(upper))) + \
            ("]" if flags & _RANGE_UB_INC else ")")

    def from_binary(raw: bytes) -> RangeDatum:
        assert elem_binary is not None
        flags, lower, upper = bounds_of_binary(raw)
        if flags & _RANGE_EMPTY:
            return None, None, False, False, True
        try:
            return (None if lower is None else elem_binary(lower), None if upper is None else elem_binary(upper),
                    bool(flags & _RANGE_LB_INC), bool(flags & _RANGE_UB_INC), False)
        except Unrepresentable:
            raise Unrepresentable(text_of_binary(raw) if elem_text_of_binary is not None else None) from None

    def write(value: RangeDatum) -> bytes:
        lower, upper, lower_inc, upper_inc, empty = value
        return b"".join((NULL_BRANCH if lower is None else VALUE_BRANCH + elem_write(lower),
                         NULL_BRANCH if upper is None else VALUE_BRANCH + elem_write(upper),
                         TRUE if lower_inc else FALSE, TRUE if upper_inc else FALSE, TRUE if empty else FALSE))

    binary_ok = elem_binary is not None
    return (from_text, from_binary if binary_ok else None, write,
            text_of_binary if binary_ok and elem_text_of_binary is not None else None)


def _range_codec(name: str, element: TypeCodec) -> TypeCodec:
    from_text, from_binary, write, text_of_binary = _range_parts(element)
    return TypeCodec(name, _range_avro(name, element), from_text, from_binary, write,
                     {"pg_element_type": element.pg_type}, companion=element.companion,
                     text_of_binary=text_of_binary)


def split_multirange_literal(text: bytes) -> list[bytes]:
    """``{[1,3),[5,7)}`` → the ranges' texts."""
    text = text.strip()
    if text[:1] != b"{" or text[-1:] != b"}":
        raise ValueError("multirange literal must be enclosed in braces")
    out: list[bytes] = []
    pos, n = 1, len(text) - 1
    while pos < n:
        c = text[pos]
        if c in b" ,\t\n\r":
            pos += 1
            continue
        start = pos
        in_quotes = False
        while pos < n:
            c = text[pos]
            if c == 0x5C:
                pos += 2
                continue
            if c == 0x22:
                in_quotes = not in_quotes
            elif not in_quotes and c in b")]":
                pos += 1
                break
            pos += 1
        out.append(text[start:pos])
    return out


def _multirange_codec(name: str, range_codec: TypeCodec, element: TypeCodec) -> TypeCodec:
    range_text, range_binary, range_write, range_text_of_binary = _range_parts(element)

    def from_text(raw: bytes) -> list[RangeDatum]:
        try:
            return [range_text(part) for part in split_multirange_literal(raw)]
        except Unrepresentable:
            raise Unrepresentable(raw.decode()) from None

    def text_of_binary(raw: bytes) -> str:
        assert range_text_of_binary is not None
        return "{" + ",".join(range_text_of_binary(part) for part in _multirange_parts(raw)) + "}"

    def from_binary(raw: bytes) -> list[RangeDatum]:
        assert range_binary is not None
        try:
            return [range_binary(part) for part in _multirange_parts(raw)]
        except Unrepresentable:
            raise Unrepresentable(text_of_binary(raw) if range_text_of_binary is not None else None) from None

    def write(items: list[RangeDatum]) -> bytes:
        if not items:
            return EMPTY_ARRAY
        return write_long(len(items)) + b"".join(range_write(item) for item in items) + EMPTY_ARRAY

    return TypeCodec(name, {"type": "array", "items": range_codec.avro}, from_text,
                     from_binary if range_binary is not None else None, write,
                     {"pg_element_type": element.pg_type}, companion=element.companion,
                     text_of_binary=text_of_binary if range_text_of_binary is not None else None)


def _multirange_parts(raw: bytes) -> list[bytes]:
    (count,) = _unpack_int4(raw[:4])
    parts, pos = [], 4
    for _ in range(count):
        (size,) = _unpack_int4(raw[pos:pos + 4])
        parts.append(raw[pos + 4:pos + 4 + size])
        pos += 4 + size
    return parts


# --- extension types read in binary ---------------------------------------------------------------


def _hstore_text_of_binary(raw: bytes) -> str:
    """``hstore_send`` (count, then length-prefixed keys and values, -1 for NULL) → ``hstore_out``."""
    def quoted(b: bytes) -> str:
        return '"' + b.decode().replace("\\", "\\\\").replace('"', '\\"') + '"'

    (count,) = _unpack_int4(raw[:4])
    pos = 4
    pairs = []
    for _ in range(count):
        (klen,) = _unpack_int4(raw[pos:pos + 4])
        key = raw[pos + 4:pos + 4 + klen]
        pos += 4 + klen
        (vlen,) = _unpack_int4(raw[pos:pos + 4])
        pos += 4
        if vlen < 0:
            pairs.append(f"{quoted(key)}=>NULL")
        else:
            pairs.append(f"{quoted(key)}=>{quoted(raw[pos:pos + vlen])}")
            pos += vlen
    return ", ".join(pairs)


# --- binary forms of types published as Postgres's text -------------------------------------------
#
# These types are Avro strings holding Postgres's text output. Their send formats carry the same
# information, so each converter below rebuilds, byte for byte, the text the type's output function
# prints in the replication session (client_encoding UTF8, extra_float_digits > 0): binary mode then
# publishes what text mode does. Types whose text needs more than the value (money: lc_monetary;
# reg*: a catalog lookup) have no converter (see docs/types.md).

_unpack_uint2 = struct.Struct("!H").unpack
_INF: Final = float("inf")
_unpack_uint8 = struct.Struct("!Q").unpack


def _shortest_digits(value: float) -> tuple[str, int]:
    """Postgres's (Ryu's) shortest decimal digits of a finite non-zero ``|value|`` and the decimal
    exponent of the first (``1.5e-05`` → ``("15", -5)``).

    ``repr`` gives the shortest digits that read back to the same double, closest to its exact
    value, counting a decimal exactly halfway to a neighbouring double as reading back when the
    mantissa is even. Postgres never accepts that halfway point (``5e+22`` prints as
    ``4.9999999999999996e+22``), so in that one case the digits are searched again, excluding it.
    """
    mantissa, _, exp_text = repr(abs(value)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0")
    exponent = len(whole) + (int(exp_text) if exp_text else 0) - 1 - (len(whole + fraction) - len(digits))
    digits = digits.rstrip("0")
    exact = Fraction(abs(value))
    low = (exact + Fraction(math.nextafter(abs(value), 0.0))) / 2
    above = math.nextafter(abs(value), _INF)
    high = (exact + Fraction(above)) / 2 if above != _INF else exact + (exact - low)
    found = Fraction(int(digits)) * Fraction(10) ** (exponent - len(digits) + 1)
    if low < found < high:
        return digits, exponent
    return _digits_inside(exact, low, high, len(digits), exponent)


def _digits_inside(exact: Fraction, low: Fraction, high: Fraction, length: int, exponent: int) -> tuple[str, int]:
    """The decimal of fewest significant digits (from ``length``, first digit at ``exponent``) strictly
    between ``low`` and ``high``, the closest to ``exact`` among those: digits and decimal exponent."""
    for n in range(length, 18):
        step = Fraction(10) ** (exponent - n + 1)
        nearest = round(exact / step)  # half to even, as Ryu's exact-tie rule
        inside = [c for c in (nearest, nearest - 1, nearest + 1) if low < c * step < high]
        if inside:
            best = min(inside, key=lambda c: abs(c * step - exact))
            text = str(best)
            return text.rstrip("0"), exponent - n + len(text)
    raise ValueError("no decimal of 17 digits inside a double's rounding interval")


def _special_float_text(value: float) -> str | None:
    if value != value:
        return "NaN"
    if value in (_INF, -_INF):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    return None


def float8_text(value: float) -> str:
    """``float8out`` with ``extra_float_digits > 0`` (Postgres 12+): the shortest exact digits,
    fixed-point for decimal exponents -4 to 14, else ``d.ddde+XX``; ``NaN``, ``±Infinity``, ``-0``."""
    special = _special_float_text(value)
    if special is not None:
        return special
    digits, exponent = _shortest_digits(value)
    return _float_layout(value < 0, digits, exponent, 15)


_pack_float4, _unpack_float4_bits = struct.Struct("!f").pack, struct.Struct("!I").unpack
_pack_float4_bits = struct.Struct("!I").pack


def float4_text(value: float) -> str:
    """``float4out`` with ``extra_float_digits > 0``: the shortest digits that read back to the same
    ``float4`` (never the point halfway to a neighbour), fixed-point for exponents -4 to 5."""
    special = _special_float_text(value)
    if special is not None:
        return special
    magnitude = abs(value)
    (bits,) = _unpack_float4_bits(_pack_float4(magnitude))
    below = _unpack_float4(_pack_float4_bits(bits - 1))[0]
    above = _unpack_float4(_pack_float4_bits(bits + 1))[0]
    exact = Fraction(magnitude)
    low = (exact + Fraction(below)) / 2
    high = (exact + Fraction(above)) / 2 if above != _INF else exact + (exact - low)
    digits, exponent = _digits_inside(exact, low, high, 1, Decimal(magnitude).adjusted())
    return _float_layout(value < 0, digits, exponent, 6)


def _float_layout(negative: bool, digits: str, exponent: int, fixed_below: int) -> str:
    """Ryu's layout in Postgres: fixed-point for decimal exponents from -4 to ``fixed_below - 1``
    (no trailing ``.0``), else one digit, the rest after a point, and ``e±XX``."""
    if -4 <= exponent < fixed_below:
        point = exponent + 1
        if point <= 0:
            text = "0." + "0" * -point + digits
        elif point >= len(digits):
            text = digits + "0" * (point - len(digits))
        else:
            text = f"{digits[:point]}.{digits[point:]}"
    else:
        text = digits[0] + (f".{digits[1:]}" if len(digits) > 1 else "") + \
            f"e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"
    return f"-{text}" if negative else text


def _float8s(raw: bytes, count: int, offset: int = 0) -> list[str]:
    return [float8_text(v) for v in struct.unpack_from(f"!{count}d", raw, offset)]


def _points_text(coordinates: list[str]) -> str:
    return ",".join(f"({coordinates[i]},{coordinates[i + 1]})" for i in range(0, len(coordinates), 2))


def _point_text_of_binary(raw: bytes) -> str:
    """``point_send`` (x, y) → ``(x,y)``."""
    return _points_text(_float8s(raw, 2))


def _lseg_text_of_binary(raw: bytes) -> str:
    """``lseg_send`` (two points) → ``[(x1,y1),(x2,y2)]``."""
    return f"[{_points_text(_float8s(raw, 4))}]"


def _box_text_of_binary(raw: bytes) -> str:
    """``box_send`` (high corner, low corner) → ``(x2,y2),(x1,y1)``."""
    return _points_text(_float8s(raw, 4))


def _path_text_of_binary(raw: bytes) -> str:
    """``path_send`` (closed flag, point count, points) → ``((…))`` closed or ``[(…)]`` open."""
    (count,) = _unpack_int4(raw[1:5])
    points = _points_text(_float8s(raw, 2 * count, 5))
    return f"({points})" if raw[0] else f"[{points}]"


def _polygon_text_of_binary(raw: bytes) -> str:
    """``poly_send`` (point count, points) → ``((x1,y1),…)``."""
    (count,) = _unpack_int4(raw[:4])
    return f"({_points_text(_float8s(raw, 2 * count, 4))})"


def _line_text_of_binary(raw: bytes) -> str:
    """``line_send`` (A, B, C of Ax + By + C = 0) → ``{A,B,C}``."""
    return "{" + ",".join(_float8s(raw, 3)) + "}"


def _circle_text_of_binary(raw: bytes) -> str:
    """``circle_send`` (center, radius) → ``<(x,y),r>``."""
    x, y, radius = _float8s(raw, 3)
    return f"<({x},{y}),{radius}>"


_PGSQL_AF_INET: Final = 2
_PGSQL_AF_INET6: Final = 3


def _ipv6_text(address: bytes) -> str:
    """Postgres's ``inet_net_ntop_ipv6`` layout: lowercase hex groups, the first longest run of two or
    more zero groups as ``::``, and the last 32 bits dotted for IPv4-compatible (``::1.2.3.4``) and
    IPv4-mapped (``::ffff:1.2.3.4``) addresses."""
    words = struct.unpack("!8H", address)
    best_base, best_len, base = -1, 0, -1
    for i, word in enumerate((*words, 1)):  # the sentinel closes a trailing run
        if word == 0:
            if base < 0:
                base = i
        elif base >= 0:
            if i - base > best_len:
                best_base, best_len = base, i - base
            base = -1
    if best_len < 2:
        best_base = -1
    out: list[str] = []
    for i, word in enumerate(words):
        if best_base >= 0 and best_base <= i < best_base + best_len:
            if i == best_base:
                out.append(":")
            continue
        if i:
            out.append(":")
        if i == 6 and best_base == 0 and (best_len == 6 or (best_len == 7 and words[7] != 1)
                                          or (best_len == 5 and words[5] == 0xFFFF)):
            out.append(".".join(str(b) for b in address[12:16]))
            break
        out.append(f"{word:x}")
    if best_base >= 0 and best_base + best_len == 8:
        out.append(":")
    return "".join(out)


def _inet_text_of_binary(raw: bytes) -> str:
    """``inet_send``/``cidr_send`` (family, mask bits, is-cidr flag, length, address) → ``network_out``:
    the mask is printed unless it covers the whole address, and always for ``cidr``."""
    family, bits, is_cidr, size = raw[0], raw[1], raw[2], raw[3]
    address = raw[4:4 + size]
    if family == _PGSQL_AF_INET and size == 4:
        text = ".".join(str(b) for b in address)
        full = 32
    elif family == _PGSQL_AF_INET6 and size == 16:
        text = _ipv6_text(address)
        full = 128
    else:
        raise ValueError(f"unknown inet address family {family} with {size} address bytes")
    return f"{text}/{bits}" if bits != full or is_cidr else text


def _macaddr_text_of_binary(raw: bytes) -> str:
    """``macaddr_send``/``macaddr8_send`` (6 or 8 bytes) → ``08:00:2b:01:02:03``."""
    if len(raw) not in (6, 8):
        raise ValueError(f"a MAC address has 6 or 8 bytes, not {len(raw)}")
    return ":".join(f"{b:02x}" for b in raw)


def _varbit_text_of_binary(raw: bytes) -> str:
    """``varbit_send`` (bit count, bits packed from the high bit) → ``0101…``; ``bit(n)`` too."""
    (count,) = _unpack_int4(raw[:4])
    bits = "".join(f"{b:08b}" for b in raw[4:])
    if len(bits) < count:
        raise ValueError("bit string shorter than its length")
    return bits[:count]


def _char_text_of_binary(raw: bytes) -> str:
    """``charsend`` (one byte) → ``charout`` of Postgres 15+: empty for NUL, ``\\ooo`` octal for a
    byte with the high bit set (not UTF-8 on its own), else the ASCII character."""
    if len(raw) != 1:
        raise ValueError(f'"char" is one byte, not {len(raw)}')
    byte = raw[0]
    return "" if byte == 0 else f"\\{byte:03o}" if byte & 0x80 else chr(byte)


def _pg_lsn_text_of_binary(raw: bytes) -> str:
    """``pg_lsn_send`` (uint64) → ``%X/%X``."""
    (lsn,) = _unpack_uint8(raw)
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def _tid_text_of_binary(raw: bytes) -> str:
    """``tidsend`` (block uint32, offset uint16) → ``(block,offset)``."""
    block, offset = struct.unpack("!IH", raw)
    return f"({block},{offset})"


def _vector_text(unpack: Callable[[bytes], tuple[Any, ...]]) -> Callable[[bytes], str]:
    """``int2vector``/``oidvector`` send as a one-dimensional array (lower bound 0) of non-null
    elements; their text is the elements separated by spaces."""
    def text_of_binary(raw: bytes) -> str:
        ndim, _flags, _oid = _ARRAY_HEAD.unpack_from(raw)
        if ndim == 0:
            return ""
        (count, _lower), pos, out = _ARRAY_DIM.unpack_from(raw, 12), 12 + 8 * ndim, []
        for _ in range(count):
            (size,) = _unpack_int4(raw[pos:pos + 4])
            if size < 0:
                raise ValueError("NULL element in a vector type")
            out.append(str(unpack(raw[pos + 4:pos + 4 + size])[0]))
            pos += 4 + size
        return " ".join(out)
    return text_of_binary


def _snapshot_text_of_binary(raw: bytes) -> str:
    """``pg_snapshot_send``/``txid_snapshot_send`` (count, xmin, xmax, in-progress xids) →
    ``xmin:xmax:xip,xip``."""
    (count,) = _unpack_int4(raw[:4])
    xmin, xmax, *xips = struct.unpack_from(f"!{count + 2}Q", raw, 4)
    return f"{xmin}:{xmax}:" + ",".join(str(x) for x in xips)


def _versioned_text(raw: bytes) -> str:
    """``jsonb_send``/``jsonpath_send``: a version byte (1) and the value's text."""
    if raw[:1] != b"\x01":
        raise ValueError(f"unknown binary version {raw[:1]!r}")
    return raw[1:].decode()


def _cstring_at(raw: bytes, pos: int) -> tuple[str, int]:
    """A NUL-terminated string (``pq_sendstring``) at ``pos`` and the position after its NUL."""
    end = raw.index(b"\x00", pos)
    return raw[pos:end].decode(), end + 1


def _ts_quote(word: str) -> str:
    """A lexeme as ``tsvectorout``/``tsqueryout`` print it: single-quoted, ``'`` and ``\\`` doubled."""
    return "'" + word.replace("'", "''").replace("\\", "\\\\") + "'"


_TSVECTOR_WEIGHTS: Final = ("", "C", "B", "A")  # the top two bits of a position; D prints nothing


def _tsvector_text_of_binary(raw: bytes) -> str:
    """``tsvectorsend`` (count; per lexeme its text, NUL, position count, positions with the weight in
    their top two bits) → ``'fat':2A,4 'cat':3``."""
    (count,) = _unpack_int4(raw[:4])
    pos, words = 4, []
    for _ in range(count):
        lexeme, pos = _cstring_at(raw, pos)
        (npos,) = _unpack_uint2(raw[pos:pos + 2])
        positions = struct.unpack_from(f"!{npos}H", raw, pos + 2)
        pos += 2 + 2 * npos
        text = _ts_quote(lexeme)
        if positions:
            text += ":" + ",".join(f"{p & 0x3FFF}{_TSVECTOR_WEIGHTS[p >> 14]}" for p in positions)
        words.append(text)
    return " ".join(words)


_QI_VAL: Final = 1
_QI_OPR: Final = 2
_OP_NOT, _OP_AND, _OP_OR, _OP_PHRASE = 1, 2, 3, 4
_TSQUERY_PRIORITY: Final = {_OP_NOT: 4, _OP_AND: 2, _OP_OR: 1, _OP_PHRASE: 3}
_TSQUERY_OPERAND_PRIORITY: Final = 5  # an operand never needs parentheses


def _tsquery_operand(weight: int, prefix: int, word: str) -> str:
    text = _ts_quote(word)
    if weight or prefix:
        text += ":" + ("*" if prefix else "") + "".join(
            letter for bit, letter in ((8, "A"), (4, "B"), (2, "C"), (1, "D")) if weight & bit)
    return text


def _tsquery_text_of_binary(raw: bytes) -> str:
    """``tsquerysend`` (item count; items in prefix order, an operator followed by its right then its
    left operand) → ``tsqueryout``'s infix text, with its spacing and parentheses.

    Evaluated right to left with a stack (no recursion, whatever the depth): each entry is the
    text, its operator's priority and whether it is a phrase. A child is parenthesized when its
    priority is below its parent's, or when it is a phrase that is a phrase's right operand.
    """
    (size,) = _unpack_int4(raw[:4])
    pos = 4
    items: list[tuple[int, str | int, int]] = []
    for _ in range(size):
        kind = raw[pos]
        if kind == _QI_VAL:
            word, end = _cstring_at(raw, pos + 3)
            items.append((_QI_VAL, _tsquery_operand(raw[pos + 1], raw[pos + 2], word), 0))
            pos = end
        elif kind == _QI_OPR:
            op, distance = raw[pos + 1], 0
            pos += 2
            if op == _OP_PHRASE:
                (distance,) = _unpack_int2(raw[pos:pos + 2])
                pos += 2
            elif op not in _TSQUERY_PRIORITY:
                raise ValueError(f"unknown tsquery operator {op}")
            items.append((_QI_OPR, op, distance))
        else:
            raise ValueError(f"unknown tsquery item type {kind}")

    def wrap(child: tuple[str, int, bool], priority: int, right_of_phrase: bool) -> str:
        text, child_priority, phrase = child
        return f"( {text} )" if child_priority < priority or (phrase and right_of_phrase) else text

    stack: list[tuple[str, int, bool]] = []
    for kind, value, distance in reversed(items):
        if kind == _QI_VAL:
            assert isinstance(value, str)
            stack.append((value, _TSQUERY_OPERAND_PRIORITY, False))
            continue
        assert isinstance(value, int)
        priority = _TSQUERY_PRIORITY[value]
        if value == _OP_NOT:
            stack.append(("!" + wrap(stack.pop(), priority, False), priority, False))
            continue
        right, left = stack.pop(), stack.pop()
        phrase = value == _OP_PHRASE
        sign = {_OP_AND: "&", _OP_OR: "|"}.get(value) or ("<->" if distance == 1 else f"<{distance}>")
        stack.append((f"{wrap(left, priority, False)} {sign} {wrap(right, priority, phrase)}", priority, phrase))
    if len(stack) > 1:
        raise ValueError("tsquery items do not form one tree")
    return stack[0][0] if stack else ""


# --- the table ------------------------------------------------------------------------------------

Builder = Callable[[str, int], TypeCodec]
"""``(type name, type modifier) → TypeCodec``."""


def _fixed(avro: AvroSchema, from_text: Converter, from_binary: Converter | None, write: Writer,
           text_to_avro: Callable[[bytes], bytes] | None = None, *, companion: bool = False,
           text_of_binary: Callable[[bytes], str] | None = None) -> Builder:
    def build(name: str, typmod: int) -> TypeCodec:
        return TypeCodec(name, avro, from_text, from_binary, write, text_to_avro=text_to_avro,
                         companion=companion, text_of_binary=text_of_binary)
    return build


def _string_like(avro: AvroSchema = "string", from_binary: Converter | None = text_from_utf8,
                 with_length: bool = False) -> Builder:
    def build(name: str, typmod: int) -> TypeCodec:
        length = length_typmod(typmod) if with_length else None
        attributes = {} if length is None else {"pg_length": length}
        return TypeCodec(name, avro, text_from_utf8, from_binary, write_string, attributes, string_raw_to_avro,
                         text_of_binary=from_binary)
    return build


def _int_binary(unpack: Callable[[bytes], tuple[Any, ...]]) -> Converter:
    def convert(raw: bytes) -> int:
        value: int = unpack(raw)[0]
        return value
    return convert


def _float_binary(unpack: Callable[[bytes], tuple[Any, ...]]) -> Converter:
    def convert(raw: bytes) -> float:
        value: float = unpack(raw)[0]
        return value
    return convert


def _as_text(convert: Converter, formatter: Callable[[Any], str] = str) -> Callable[[bytes], str]:
    return lambda raw: formatter(convert(raw))


def _interval_codec(name: str, typmod: int) -> TypeCodec:
    return TypeCodec(name, INTERVAL_AVRO, interval_from_text, _interval_from_binary, _write_interval,
                     companion=True, text_of_binary=_interval_text_of_binary)


def _range_builder(element_oid: int) -> Builder:
    def build(name: str, typmod: int) -> TypeCodec:
        element = _builtin_codec(element_oid, -1)
        assert element is not None
        return _range_codec(name, element)
    return build


def _multirange_builder(range_oid: int, element_oid: int) -> Builder:
    def build(name: str, typmod: int) -> TypeCodec:
        range_codec, element = _builtin_codec(range_oid, -1), _builtin_codec(element_oid, -1)
        assert range_codec is not None and element is not None
        return _multirange_codec(name, range_codec, element)
    return build


_JSON_AVRO: Final = {"type": "string", "connect.name": "io.debezium.data.Json"}
_ts_binary, _ts_text_of_binary = _timestamp_binary(False)
_tstz_binary, _tstz_text_of_binary = _timestamp_binary(True)
_int2_binary, _int4_binary = _int_binary(_unpack_int2), _int_binary(_unpack_int4)
_int8_binary, _oid_binary = _int_binary(_unpack_int8), _int_binary(_unpack_uint4)
_float4_binary, _float8_binary = _float_binary(_unpack_float4), _float_binary(_unpack_float8)


@dataclass(frozen=True, slots=True)
class BuiltinType:
    """One row of the table: a builtin type, its array type and how to encode it (``None``: text)."""

    oid: int
    name: str
    array_oid: int
    build: Builder | None = None
    delimiter: bytes = b","


_BUILTINS: Final[tuple[BuiltinType, ...]] = (
    BuiltinType(16, "bool", 1000, _fixed("boolean", _bool_from_text, lambda raw: raw != b"\x00",
                                         write_boolean, _bool_text_to_avro,
                                         text_of_binary=lambda raw: "f" if raw == b"\x00" else "t")),
    BuiltinType(17, "bytea", 1001, _fixed("bytes", bytea_from_text, bytes, write_bytes,
                                          text_of_binary=lambda raw: "\\x" + raw.hex())),
    BuiltinType(18, "char", 1002, _string_like(from_binary=_char_text_of_binary)),
    BuiltinType(19, "name", 1003, _string_like()),
    BuiltinType(20, "int8", 1016, _fixed("long", int, _int8_binary, write_long, _long_text_to_avro,
                                         text_of_binary=_as_text(_int8_binary))),
    BuiltinType(21, "int2", 1005, _fixed("int", int, _int2_binary, write_int, _long_text_to_avro,
                                         text_of_binary=_as_text(_int2_binary))),
    BuiltinType(22, "int2vector", 1006, _string_like(from_binary=_vector_text(_unpack_int2))),
    BuiltinType(23, "int4", 1007, _fixed("int", int, _int4_binary, write_int, _long_text_to_avro,
                                         text_of_binary=_as_text(_int4_binary))),
    BuiltinType(24, "regproc", 1008),
    BuiltinType(25, "text", 1009, _string_like()),
    BuiltinType(26, "oid", 1028, _fixed("long", int, _oid_binary, write_long, _long_text_to_avro,
                                        text_of_binary=_as_text(_oid_binary))),
    BuiltinType(27, "tid", 1010, _string_like(from_binary=_tid_text_of_binary)),
    BuiltinType(28, "xid", 1011, _string_like(from_binary=_as_text(_oid_binary))),
    BuiltinType(29, "cid", 1012, _string_like(from_binary=_as_text(_oid_binary))),
    BuiltinType(30, "oidvector", 1013, _string_like(from_binary=_vector_text(_unpack_uint4))),
    BuiltinType(114, "json", 199, _string_like(_JSON_AVRO)),
    BuiltinType(142, "xml", 143, _string_like()),
    BuiltinType(600, "point", 1017, _string_like(from_binary=_point_text_of_binary)),
    BuiltinType(601, "lseg", 1018, _string_like(from_binary=_lseg_text_of_binary)),
    BuiltinType(602, "path", 1019, _string_like(from_binary=_path_text_of_binary)),
    BuiltinType(603, "box", 1020, _string_like(from_binary=_box_text_of_binary), delimiter=b";"),
    BuiltinType(604, "polygon", 1027, _string_like(from_binary=_polygon_text_of_binary)),
    BuiltinType(628, "line", 629, _string_like(from_binary=_line_text_of_binary)),
    BuiltinType(650, "cidr", 651, _string_like(from_binary=_inet_text_of_binary)),
    BuiltinType(700, "float4", 1021, _fixed("float", _float_from_text, _float4_binary, write_float,
                                            text_of_binary=_as_text(_float4_binary, float4_text))),
    BuiltinType(701, "float8", 1022, _fixed("double", _float_from_text, _float8_binary, write_double,
                                            text_of_binary=_as_text(_float8_binary, float8_text))),
    BuiltinType(718, "circle", 719, _string_like(from_binary=_circle_text_of_binary)),
    BuiltinType(774, "macaddr8", 775, _string_like(from_binary=_macaddr_text_of_binary)),
    BuiltinType(790, "money", 791),
    BuiltinType(829, "macaddr", 1040, _string_like(from_binary=_macaddr_text_of_binary)),
    BuiltinType(869, "inet", 1041, _string_like(from_binary=_inet_text_of_binary)),
    BuiltinType(1033, "aclitem", 1034),
    BuiltinType(1042, "bpchar", 1014, _string_like(with_length=True)),
    BuiltinType(1043, "varchar", 1015, _string_like(with_length=True)),
    BuiltinType(1082, "date", 1182, _fixed({"type": "int", "logicalType": "date"}, date_from_text,
                                           _date_from_binary, write_int, lambda raw: write_long(date_from_text(raw)),
                                           companion=True, text_of_binary=_date_text_of_binary)),
    BuiltinType(1083, "time", 1183, _fixed({"type": "long", "logicalType": "time-micros"}, time_from_text,
                                           _time_from_binary, write_long, lambda raw: write_long(time_from_text(raw)),
                                           companion=True,
                                           text_of_binary=_as_text(_int_binary(_unpack_int8), format_time))),
    BuiltinType(1114, "timestamp", 1115, _fixed({"type": "long", "logicalType": "local-timestamp-micros"},
                                                timestamp_from_text, _ts_binary, write_long,
                                                lambda raw: write_long(timestamp_from_text(raw)),
                                                companion=True, text_of_binary=_ts_text_of_binary)),
    BuiltinType(1184, "timestamptz", 1185, _fixed({"type": "long", "logicalType": "timestamp-micros"},
                                                  timestamptz_from_text, _tstz_binary, write_long,
                                                  lambda raw: write_long(timestamptz_from_text(raw)),
                                                  companion=True, text_of_binary=_tstz_text_of_binary)),
    BuiltinType(1186, "interval", 1187, _interval_codec),
    BuiltinType(1266, "timetz", 1270, _string_like(from_binary=_timetz_text_of_binary)),
    BuiltinType(1560, "bit", 1561, _string_like(from_binary=_varbit_text_of_binary)),
    BuiltinType(1562, "varbit", 1563, _string_like(from_binary=_varbit_text_of_binary)),
    BuiltinType(1700, "numeric", 1231, _numeric_codec),
    BuiltinType(1790, "refcursor", 2201, _string_like()),
    BuiltinType(2202, "regprocedure", 2207),
    BuiltinType(2203, "regoper", 2208),
    BuiltinType(2204, "regoperator", 2209),
    BuiltinType(2205, "regclass", 2210),
    BuiltinType(2206, "regtype", 2211),
    BuiltinType(2950, "uuid", 2951, _fixed({"type": "string", "logicalType": "uuid"}, text_from_utf8,
                                           _uuid_from_binary, write_string, string_raw_to_avro,
                                           text_of_binary=_uuid_from_binary)),
    BuiltinType(2970, "txid_snapshot", 2949, _string_like(from_binary=_snapshot_text_of_binary)),
    BuiltinType(3220, "pg_lsn", 3221, _string_like(from_binary=_pg_lsn_text_of_binary)),
    BuiltinType(3614, "tsvector", 3643, _string_like(from_binary=_tsvector_text_of_binary)),
    BuiltinType(3615, "tsquery", 3645, _string_like(from_binary=_tsquery_text_of_binary)),
    BuiltinType(3734, "regconfig", 3735),
    BuiltinType(3769, "regdictionary", 3770),
    BuiltinType(3802, "jsonb", 3807, _string_like(_JSON_AVRO, _jsonb_from_binary)),
    BuiltinType(3904, "int4range", 3905, _range_builder(23)),
    BuiltinType(3906, "numrange", 3907, _range_builder(1700)),
    BuiltinType(3908, "tsrange", 3909, _range_builder(1114)),
    BuiltinType(3910, "tstzrange", 3911, _range_builder(1184)),
    BuiltinType(3912, "daterange", 3913, _range_builder(1082)),
    BuiltinType(3926, "int8range", 3927, _range_builder(20)),
    BuiltinType(4072, "jsonpath", 4073, _string_like(from_binary=_versioned_text)),
    BuiltinType(4089, "regnamespace", 4090),
    BuiltinType(4096, "regrole", 4097),
    BuiltinType(4191, "regcollation", 4192),
    BuiltinType(4451, "int4multirange", 6150, _multirange_builder(3904, 23)),
    BuiltinType(4532, "nummultirange", 6151, _multirange_builder(3906, 1700)),
    BuiltinType(4533, "tsmultirange", 6152, _multirange_builder(3908, 1114)),
    BuiltinType(4534, "tstzmultirange", 6153, _multirange_builder(3910, 1184)),
    BuiltinType(4535, "datemultirange", 6155, _multirange_builder(3912, 1082)),
    BuiltinType(4536, "int8multirange", 6157, _multirange_builder(3926, 20)),
    BuiltinType(5038, "pg_snapshot", 5039, _string_like(from_binary=_snapshot_text_of_binary)),
    BuiltinType(5069, "xid8", 271, _string_like(from_binary=_as_text(_int_binary(struct.Struct("!Q").unpack)))),
)

BUILTIN_TYPES: Final[Mapping[int, BuiltinType]] = {t.oid: t for t in _BUILTINS}
"""Builtin types by OID (``pg_type.oid`` is stable across Postgres versions for builtins)."""
ARRAY_ELEMENTS: Final[Mapping[int, BuiltinType]] = {t.array_oid: t for t in _BUILTINS if t.array_oid}
"""Builtin array types by array OID → their element type."""

TypeNames = Callable[[int], "tuple[str, str] | None"]
"""``oid → (namespace, name)`` from pgoutput Type messages, for types outside the table."""


@dataclass(frozen=True, slots=True)
class PgTypeInfo:
    """What ``pg_type`` says about a type outside the table (see ``source/type_catalog.py``)."""

    oid: int
    namespace: str
    name: str
    kind: str  # typtype: b base, c composite, d domain, e enum, p pseudo, r range, m multirange
    category: str  # typcategory: A for arrays
    base_oid: int  # typbasetype of a domain
    base_typmod: int  # typtypmod of a domain
    element_oid: int  # typelem of an array
    delimiter: str  # typdelim
    send: str  # prosrc of typsend: the C function, which is what tells the binary format
    attributes: tuple[CompositeAttribute, ...] = ()  # a composite's live attributes, in attnum order


@dataclass(frozen=True, slots=True)
class CompositeAttribute:
    """One attribute of a composite type (``pg_attribute`` of its ``typrelid``, dropped ones left out)."""

    name: str
    type_oid: int
    type_modifier: int


TypeCatalog = Callable[[int], "PgTypeInfo | None"]
"""``oid → PgTypeInfo``, ``None`` when the type is unknown."""


# --- composite types ------------------------------------------------------------------------------

_RECORD_QUOTE_TRIGGERS: Final = frozenset('"\\(),') | frozenset(" \t\n\v\f\r")  # C isspace


def parse_record_literal(text: bytes) -> list[bytes | None]:
    r"""``record_out`` text ``(1,"a b",,"")`` → the fields' texts, ``None`` for NULL.

    Follows ``record_in``: a field is NULL only when it is empty and unquoted; inside double quotes
    ``""`` is a quote and ``\x`` is ``x``, outside them ``\x`` is ``x``; nothing is trimmed. Raises
    ``ValueError`` on a malformed literal. A one-field record holding NULL and a record of no
    fields both print ``()``: this returns ``[None]``, the caller knows how many fields it has.
    """
    if text[:1] != b"(":
        raise ValueError("record literal must start with '('")
    fields: list[bytes | None] = []
    pos, n = 1, len(text)
    while True:
        value, pos = _read_token(text, pos, b",)")
        if pos >= n:
            raise ValueError("unterminated record literal")
        fields.append(value)
        pos += 1
        if text[pos - 1] == 0x29:  # ')'
            break
    if pos != n:
        raise ValueError("junk after record literal")
    return fields


def quote_record_field(text: str) -> str:
    """A field as ``record_out`` writes it: double-quoted (``"`` and ``\\`` doubled) when empty or
    when it holds a quote, backslash, parenthesis, comma or white space."""
    if text and not any(c in _RECORD_QUOTE_TRIGGERS for c in text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '""') + '"'


def record_literal(fields: list[str | None]) -> str:
    """The ``record_out`` text of the fields' texts (``None`` for NULL)."""
    return "(" + ",".join("" if f is None else quote_record_field(f) for f in fields) + ")"


_unpack_record_field = struct.Struct("!Ii").unpack_from


def _record_fields_of_binary(raw: bytes) -> list[tuple[int, bytes | None]]:
    """``record_send``: field count, then per live attribute its type OID and length-prefixed value."""
    (count,) = _unpack_int4(raw[:4])
    pos = 4
    out: list[tuple[int, bytes | None]] = []
    for _ in range(count):
        oid, size = _unpack_record_field(raw, pos)
        pos += 8
        if size < 0:
            out.append((oid, None))
        else:
            out.append((oid, raw[pos:pos + size]))
            pos += size
    return out


CompositeMember = tuple["CompositeAttribute", TypeCodec]


def _composite_avro(info: PgTypeInfo, members: list[CompositeMember]) -> dict[str, Any]:
    """A record ``pgbridge.types.<schema>.<type>`` of nullable fields in attribute order; renamed
    fields keep the attribute's name in ``pg_name``, like row fields do."""
    fields = []
    for field_name, (attribute, codec) in zip(distinct_avro_names([a.name for a, _ in members]), members,
                                              strict=True):
        avro_field: dict[str, Any] = {"name": field_name, "type": ["null", codec.avro], "default": None,
                                      "pg_type": codec.pg_type}
        if field_name != attribute.name:
            avro_field["pg_name"] = attribute.name
        avro_field.update(codec.attributes)
        fields.append(avro_field)
    record = {"type": "record", "name": avro_name(info.name),
              "namespace": f"pgbridge.types.{avro_name(info.namespace)}", "fields": fields}
    result: dict[str, Any] = define_named_types_once(record, set())
    return result


def _composite_codec(name: str, info: PgTypeInfo, members: list[CompositeMember]) -> TypeCodec:
    """A composite as an Avro record of its attributes.

    Always a companion: a value the record cannot hold exactly goes whole, as its ``record_out``
    literal, to ``{column}__text``. That covers an attribute value its field cannot hold
    (``infinity`` in a date attribute) and a value whose shape no longer matches the attributes
    read from the catalog (``ALTER TYPE ... ADD/DROP ATTRIBUTE`` reaches the encoder only with the
    next Relation message, which Postgres does not send for it).
    """
    count = len(members)
    oids = [attribute.type_oid for attribute, _ in members]
    texts = [codec.from_text for _, codec in members]
    binaries = [codec.from_binary for _, codec in members]
    texts_of_binary = [codec.text_of_binary for _, codec in members]
    writers = [codec.write for _, codec in members]

    def from_text(raw: bytes) -> tuple[Any, ...]:
        try:
            fields = parse_record_literal(raw)
            if len(fields) != count:
                raise Unrepresentable()
            return tuple(None if f is None else convert(f) for f, convert in zip(fields, texts, strict=True))
        except (Unrepresentable, ValueError):
            raise Unrepresentable() from None

    def field_text(oid: int, value: bytes, known: Callable[[bytes], str] | None) -> str:
        convert = known
        if convert is None:
            builtin = _builtin_codec(oid, -1)
            convert = builtin.text_of_binary if builtin is not None else None
        if convert is None:
            raise Unrepresentable()
        return convert(value)

    def text_of_binary(raw: bytes) -> str:
        fields = _record_fields_of_binary(raw)
        matching = [oid for oid, _ in fields] == oids
        return record_literal([None if value is None else
                               field_text(oid, value, texts_of_binary[i] if matching else None)
                               for i, (oid, value) in enumerate(fields)])

    def literal_or_none(raw: bytes) -> str | None:
        try:
            return text_of_binary(raw)
        except Unrepresentable:
            return None

    def from_binary(raw: bytes) -> tuple[Any, ...]:
        fields = _record_fields_of_binary(raw)
        if [oid for oid, _ in fields] != oids:
            raise Unrepresentable(literal_or_none(raw))
        try:
            return tuple(None if value is None else convert(value)  # type: ignore[misc]
                         for (_, value), convert in zip(fields, binaries, strict=True))
        except Unrepresentable:
            raise Unrepresentable(literal_or_none(raw)) from None

    def write(value: tuple[Any, ...]) -> bytes:
        return b"".join(NULL_BRANCH if v is None else VALUE_BRANCH + w(v) for v, w in zip(value, writers, strict=True))

    def text_of_binary_or_raise(raw: bytes) -> str:
        text = literal_or_none(raw)
        if text is None:
            raise EncodeError(f"a binary value of type {name} has an attribute pgbridge cannot print as text",
                              hint=_BINARY_HINT)
        return text

    return TypeCodec(name, _composite_avro(info, members), from_text,
                     from_binary if all(b is not None for b in binaries) else None, write, companion=True,
                     text_of_binary=text_of_binary_or_raise if all(t is not None for t in texts_of_binary) else None)

# C send functions whose binary form is the value's text in the client encoding.
_TEXT_SEND: Final = frozenset({"textsend", "enum_send", "varcharsend", "bpcharsend", "xml_send", "json_send"})
_MAX_TYPE_DEPTH: Final = 8  # domains over domains over arrays...: deeper means a cycle


def _text_codec(name: str, from_binary: Converter | None = None) -> TypeCodec:
    """The sound fallback: Postgres's own text representation, as an Avro string."""
    return TypeCodec(name, "string", text_from_utf8, from_binary, write_string, text_to_avro=string_raw_to_avro,
                     text_of_binary=from_binary)


_NUMERIC_OID: Final = 1700


@lru_cache(maxsize=1024)
def _builtin_codec(type_oid: int, type_modifier: int, numeric: NumericPolicy | None = None) -> TypeCodec | None:
    """A builtin type's codec; ``numeric`` applies to ``numeric`` without precision (and so to
    arrays of it, which recurse here)."""
    builtin = BUILTIN_TYPES.get(type_oid)
    if builtin is not None:
        if numeric is not None and type_oid == _NUMERIC_OID and numeric_typmod(type_modifier) is None:
            return _policy_decimal_codec(numeric)
        if builtin.build is None:
            return _text_codec(builtin.name)
        return builtin.build(builtin.name, type_modifier)
    element = ARRAY_ELEMENTS.get(type_oid)
    if element is not None:
        # An array column's modifier is its element's (numeric(10,2)[] carries (10,2)).
        element_codec = _builtin_codec(element.oid, type_modifier, numeric)
        assert element_codec is not None
        return _array_codec(f"_{element.name}", element_codec, element.delimiter)
    return None


def _qualified(namespace: str, name: str) -> str:
    return name if namespace in ("pg_catalog", "") else f"{namespace}.{name}"


def codec_for(type_oid: int, type_modifier: int, type_names: TypeNames | None = None,
              catalog: TypeCatalog | None = None, _depth: int = 0, numeric: NumericPolicy | None = None) -> TypeCodec:
    """The codec of a column: the table for builtin types and their arrays, else the catalog.

    With a ``catalog``, domains take their base type's codec (named after the domain), arrays of
    catalog types become arrays of their element's codec, and text-like types (enums, ``citext``)
    and ``hstore`` can be read in binary. Everything else is Postgres's text, named
    ``namespace.name`` (just ``name`` in ``pg_catalog``) or ``oid:<oid>`` when nothing names it.
    ``numeric`` turns ``numeric`` without precision (also in arrays, domains and composites; not in
    ``numrange``) into a decimal (``NumericPolicy``) instead of its exact string.
    """
    codec = _builtin_codec(type_oid, type_modifier, numeric)
    if codec is not None:
        return codec
    info = catalog(type_oid) if catalog is not None and _depth < _MAX_TYPE_DEPTH else None
    if info is None:
        names = type_names(type_oid) if type_names is not None else None
        return _text_codec(f"oid:{type_oid}" if names is None else _qualified(*names))
    name = _qualified(info.namespace, info.name)
    if info.kind == "d":
        base = codec_for(info.base_oid, type_modifier if type_modifier >= 0 else info.base_typmod,
                         type_names, catalog, _depth + 1, numeric)
        return base.renamed(name, pg_base_type=base.pg_type)
    if info.category == "A" and info.element_oid:
        element = codec_for(info.element_oid, type_modifier, type_names, catalog, _depth + 1, numeric)
        element_info = catalog(info.element_oid) if catalog is not None else None
        delimiter = (element_info.delimiter if element_info is not None else info.delimiter) or ","
        return _array_codec(name, element, delimiter.encode())
    if info.kind == "c" and info.attributes:
        members = [(a, codec_for(a.type_oid, a.type_modifier, type_names, catalog, _depth + 1, numeric))
                   for a in info.attributes]
        return _composite_codec(name, info, members)
    if info.send in _TEXT_SEND or info.kind == "e":
        return _text_codec(name, text_from_utf8)
    if info.send == "hstore_send":
        return _text_codec(name, _hstore_text_of_binary)
    return _text_codec(name)
