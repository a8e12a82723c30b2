"""Postgres types → Avro: one table row per builtin type OID.

Each column gets a ``TypeCodec``: the Avro schema fragment of its (non-null) value, a converter
from Postgres's text output to the Avro datum, one from the binary (``send``) form where that is
simple, and the writer of the datum's Avro binary body. A datum is the value as Avro stores it,
not a rich Python object: an ``int`` of microseconds for timestamps, of days for dates, the
*unscaled* ``int`` for decimals, a ``list`` for arrays. Converting straight to that form keeps the
hot loop free of ``datetime``/``Decimal`` objects that would only be taken apart again.

Why the mappings are what they are:

* ``numeric(p,s)`` is a ``decimal`` with a fixed scale, exact. Postgres allows ``NaN`` even in a
  constrained numeric; a decimal cannot hold it, so encoding stops with ``EncodeError`` instead of
  inventing a number. Postgres 15+ also allows a negative scale or one above the precision; the
  Avro decimal then gets ``scale = max(s, 0)`` and enough precision for every allowed value.
* Unconstrained ``numeric`` is a ``string`` holding Postgres's exact text: its values carry any
  scale (up to 16383 fraction digits) and ``NaN``/``±Infinity``, so no single Avro decimal scale
  can hold them without rounding.
* ``date`` ``±infinity`` → int32 max/min; ``timestamp``/``timestamptz`` ``±infinity`` → int64
  max/min (the sentinels Postgres itself uses in its binary form). Finite timestamps after about
  year 294247 do not fit a long of microseconds since 1970 and stop encoding with ``EncodeError``.
* Text forms are parsed as Postgres prints them with ``DateStyle=ISO`` (any ``TimeZone``: offsets
  such as ``+05:30`` or ``+00:53:28`` and ``BC`` years are handled), ``bytea_output`` hex or
  escape, and ``client_encoding=UTF8``; the replication connection must use those settings.
* Arrays are one-dimensional Avro arrays of nullable elements. A value with several dimensions or
  a lower bound other than 1 has no faithful form in that schema and stops with ``EncodeError``
  (as Debezium fails on it) rather than being flattened.
* Every other type, and every OID not in the table (enums, domains, extension types), is a
  ``string`` with Postgres's text representation: always exact, decodable, and what ``psql``
  shows. Its ``pg_type`` names the type (from the pgoutput Type message for non-builtins).

Extending to more builtin types (ranges, intervals, geometric types...) is adding a row to
``_BUILTINS`` with a builder; nothing else changes.
"""

from __future__ import annotations

import binascii
import struct
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any, Final

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

    Raised instead of writing a value that would misrepresent the row (``NaN`` in a decimal, a
    two-dimensional array in a one-dimensional schema); the encoder adds the table and column.
    """


_NUMERIC_NAN_HINT: Final = ("constrained numeric(p,s) columns map to Avro decimal, which has no NaN; "
                            "use unconstrained numeric (encoded as an exact string) for columns that hold NaN")
_ARRAY_SHAPE_HINT: Final = ("pgbridge encodes array columns as one-dimensional Avro arrays with lower bound 1; "
                            "store multi-dimensional or offset arrays as json/jsonb or text")
_BINARY_HINT: Final = "start replication without the pgoutput option binary 'true'"

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


@dataclass(frozen=True, slots=True)
class TypeCodec:
    """How one Postgres type (with its modifier) becomes Avro.

    ``avro`` is the non-null fragment; row fields wrap it as ``["null", avro]``. ``text_to_avro``
    is an optional fused fast path equal to ``write(from_text(raw))``.
    """

    pg_type: str
    avro: AvroSchema
    from_text: Converter
    from_binary: Converter | None
    write: Writer
    attributes: Mapping[str, Any] = field(default_factory=dict)
    text_to_avro: Callable[[bytes], bytes] | None = None

    def text_encoder(self) -> Callable[[bytes], bytes]:
        """Raw text bytes → Avro body of the value."""
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

    ``NaN`` and ``±Infinity`` have no decimal form and raise ``EncodeError``; digits past ``scale``
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
        raise EncodeError(f"numeric value {raw.decode()} cannot be an Avro decimal", hint=_NUMERIC_NAN_HINT)
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
    )


def _numeric_codec(name: str, typmod: int) -> TypeCodec:
    ps = numeric_typmod(typmod)
    if ps is not None:
        return _decimal_codec(*ps)
    return TypeCodec(name, "string", text_from_utf8, numeric_text_from_binary, write_string,
                     text_to_avro=string_raw_to_avro)


# --- dates and times ------------------------------------------------------------------------------

_US_PER_SECOND: Final = 1_000_000
_SECONDS_PER_DAY: Final = 86_400
_PG_EPOCH_UNIX_DAYS: Final = PG_EPOCH_UNIX_US // (_SECONDS_PER_DAY * _US_PER_SECOND)


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
    if raw == b"infinity":
        return INT32_MAX
    if raw == b"-infinity":
        return INT32_MIN
    return _iso_date_days(raw)


def _date_from_binary(raw: bytes) -> int:
    days: int = _unpack_int4(raw)[0]
    if days in (INT32_MAX, INT32_MIN):
        return days
    return days + _PG_EPOCH_UNIX_DAYS


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
    return (days * _SECONDS_PER_DAY - offset) * _US_PER_SECOND + _time_of_day_micros(rest)


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
    if raw == b"infinity":
        return INT64_MAX
    if raw == b"-infinity":
        return INT64_MIN
    raise ValueError("timestamp is not in ISO form (DateStyle=ISO)")


def _timestamp_from_binary(raw: bytes) -> int:
    us: int = _unpack_int8(raw)[0]
    if us in (INT64_MAX, INT64_MIN):
        return us
    return us + PG_EPOCH_UNIX_US


def _time_from_binary(raw: bytes) -> int:
    us: int = _unpack_int8(raw)[0]
    return us


def time_from_text(raw: bytes) -> int:
    return _time_of_day_micros(raw)


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


def _array_codec(name: str, element: TypeCodec, delimiter: bytes) -> TypeCodec:
    elem_text, elem_binary, elem_write = element.from_text, element.from_binary, element.write

    def from_text(raw: bytes) -> list[Any]:
        if raw[:1] == b"[":
            raise EncodeError("array with a lower bound other than 1", hint=_ARRAY_SHAPE_HINT)
        items = parse_array_literal(raw, delimiter)
        if items and any(isinstance(e, list) for e in items):
            raise EncodeError("multi-dimensional array", hint=_ARRAY_SHAPE_HINT)
        return [None if e is None else elem_text(e) for e in items]

    def from_binary(raw: bytes) -> list[Any]:
        assert elem_binary is not None
        ndim, _flags, _elem_oid = struct.unpack_from("!iiI", raw)
        if ndim == 0:
            return []
        if ndim != 1:
            raise EncodeError("multi-dimensional array", hint=_ARRAY_SHAPE_HINT)
        count, lower = struct.unpack_from("!ii", raw, 12)
        if lower != 1:
            raise EncodeError("array with a lower bound other than 1", hint=_ARRAY_SHAPE_HINT)
        out: list[Any] = []
        pos = 20
        for _ in range(count):
            (size,) = _unpack_int4(raw[pos:pos + 4])
            pos += 4
            if size < 0:
                out.append(None)
            else:
                out.append(elem_binary(raw[pos:pos + size]))
                pos += size
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
                     from_binary if elem_binary is not None else None, write)


# --- the table ------------------------------------------------------------------------------------

Builder = Callable[[str, int], TypeCodec]
"""``(type name, type modifier) → TypeCodec``."""


def _fixed(avro: AvroSchema, from_text: Converter, from_binary: Converter | None, write: Writer,
           text_to_avro: Callable[[bytes], bytes] | None = None) -> Builder:
    def build(name: str, typmod: int) -> TypeCodec:
        return TypeCodec(name, avro, from_text, from_binary, write, text_to_avro=text_to_avro)
    return build


def _string_like(avro: AvroSchema = "string", from_binary: Converter | None = text_from_utf8,
                 with_length: bool = False) -> Builder:
    def build(name: str, typmod: int) -> TypeCodec:
        length = length_typmod(typmod) if with_length else None
        attributes = {} if length is None else {"pg_length": length}
        return TypeCodec(name, avro, text_from_utf8, from_binary, write_string, attributes, string_raw_to_avro)
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


_JSON_AVRO: Final = {"type": "string", "connect.name": "io.debezium.data.Json"}


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
                                         write_boolean, _bool_text_to_avro)),
    BuiltinType(17, "bytea", 1001, _fixed("bytes", bytea_from_text, bytes, write_bytes)),
    BuiltinType(18, "char", 1002, _string_like()),
    BuiltinType(19, "name", 1003, _string_like()),
    BuiltinType(20, "int8", 1016, _fixed("long", int, _int_binary(_unpack_int8), write_long, _long_text_to_avro)),
    BuiltinType(21, "int2", 1005, _fixed("int", int, _int_binary(_unpack_int2), write_int, _long_text_to_avro)),
    BuiltinType(22, "int2vector", 1006),
    BuiltinType(23, "int4", 1007, _fixed("int", int, _int_binary(_unpack_int4), write_int, _long_text_to_avro)),
    BuiltinType(24, "regproc", 1008),
    BuiltinType(25, "text", 1009, _string_like()),
    BuiltinType(26, "oid", 1028, _fixed("long", int, _int_binary(_unpack_uint4), write_long, _long_text_to_avro)),
    BuiltinType(27, "tid", 1010),
    BuiltinType(28, "xid", 1011),
    BuiltinType(29, "cid", 1012),
    BuiltinType(30, "oidvector", 1013),
    BuiltinType(114, "json", 199, _string_like(_JSON_AVRO)),
    BuiltinType(142, "xml", 143),
    BuiltinType(600, "point", 1017),
    BuiltinType(601, "lseg", 1018),
    BuiltinType(602, "path", 1019),
    BuiltinType(603, "box", 1020, delimiter=b";"),
    BuiltinType(604, "polygon", 1027),
    BuiltinType(628, "line", 629),
    BuiltinType(650, "cidr", 651),
    BuiltinType(700, "float4", 1021, _fixed("float", _float_from_text, _float_binary(_unpack_float4), write_float)),
    BuiltinType(701, "float8", 1022, _fixed("double", _float_from_text, _float_binary(_unpack_float8), write_double)),
    BuiltinType(718, "circle", 719),
    BuiltinType(774, "macaddr8", 775),
    BuiltinType(790, "money", 791),
    BuiltinType(829, "macaddr", 1040),
    BuiltinType(869, "inet", 1041),
    BuiltinType(1033, "aclitem", 1034),
    BuiltinType(1042, "bpchar", 1014, _string_like(with_length=True)),
    BuiltinType(1043, "varchar", 1015, _string_like(with_length=True)),
    BuiltinType(1082, "date", 1182, _fixed({"type": "int", "logicalType": "date"}, date_from_text,
                                           _date_from_binary, write_int, lambda raw: write_long(date_from_text(raw)))),
    BuiltinType(1083, "time", 1183, _fixed({"type": "long", "logicalType": "time-micros"}, time_from_text,
                                           _time_from_binary, write_long, lambda raw: write_long(time_from_text(raw)))),
    BuiltinType(1114, "timestamp", 1115, _fixed({"type": "long", "logicalType": "local-timestamp-micros"},
                                                timestamp_from_text, _timestamp_from_binary, write_long,
                                                lambda raw: write_long(timestamp_from_text(raw)))),
    BuiltinType(1184, "timestamptz", 1185, _fixed({"type": "long", "logicalType": "timestamp-micros"},
                                                  timestamptz_from_text, _timestamp_from_binary, write_long,
                                                  lambda raw: write_long(timestamptz_from_text(raw)))),
    BuiltinType(1186, "interval", 1187),
    BuiltinType(1266, "timetz", 1270),
    BuiltinType(1560, "bit", 1561),
    BuiltinType(1562, "varbit", 1563),
    BuiltinType(1700, "numeric", 1231, _numeric_codec),
    BuiltinType(1790, "refcursor", 2201),
    BuiltinType(2202, "regprocedure", 2207),
    BuiltinType(2203, "regoper", 2208),
    BuiltinType(2204, "regoperator", 2209),
    BuiltinType(2205, "regclass", 2210),
    BuiltinType(2206, "regtype", 2211),
    BuiltinType(2950, "uuid", 2951, _fixed({"type": "string", "logicalType": "uuid"}, text_from_utf8,
                                           _uuid_from_binary, write_string, string_raw_to_avro)),
    BuiltinType(2970, "txid_snapshot", 2949),
    BuiltinType(3220, "pg_lsn", 3221),
    BuiltinType(3614, "tsvector", 3643),
    BuiltinType(3615, "tsquery", 3645),
    BuiltinType(3734, "regconfig", 3735),
    BuiltinType(3769, "regdictionary", 3770),
    BuiltinType(3802, "jsonb", 3807, _string_like(_JSON_AVRO, _jsonb_from_binary)),
    BuiltinType(3904, "int4range", 3905),
    BuiltinType(3906, "numrange", 3907),
    BuiltinType(3908, "tsrange", 3909),
    BuiltinType(3910, "tstzrange", 3911),
    BuiltinType(3912, "daterange", 3913),
    BuiltinType(3926, "int8range", 3927),
    BuiltinType(4072, "jsonpath", 4073),
    BuiltinType(4089, "regnamespace", 4090),
    BuiltinType(4096, "regrole", 4097),
    BuiltinType(4191, "regcollation", 4192),
    BuiltinType(4451, "int4multirange", 6150),
    BuiltinType(4532, "nummultirange", 6151),
    BuiltinType(4533, "tsmultirange", 6152),
    BuiltinType(4534, "tstzmultirange", 6153),
    BuiltinType(4535, "datemultirange", 6155),
    BuiltinType(4536, "int8multirange", 6157),
    BuiltinType(5038, "pg_snapshot", 5039),
    BuiltinType(5069, "xid8", 271),
)

BUILTIN_TYPES: Final[Mapping[int, BuiltinType]] = {t.oid: t for t in _BUILTINS}
"""Builtin types by OID (``pg_type.oid`` is stable across Postgres versions for builtins)."""
ARRAY_ELEMENTS: Final[Mapping[int, BuiltinType]] = {t.array_oid: t for t in _BUILTINS if t.array_oid}
"""Builtin array types by array OID → their element type."""

TypeNames = Callable[[int], "tuple[str, str] | None"]
"""``oid → (namespace, name)`` from pgoutput Type messages, for types outside the table."""


def _text_codec(name: str) -> TypeCodec:
    """The sound fallback: Postgres's own text representation, as an Avro string."""
    return TypeCodec(name, "string", text_from_utf8, None, write_string, text_to_avro=string_raw_to_avro)


@lru_cache(maxsize=1024)
def _builtin_codec(type_oid: int, type_modifier: int) -> TypeCodec | None:
    builtin = BUILTIN_TYPES.get(type_oid)
    if builtin is not None:
        if builtin.build is None:
            return _text_codec(builtin.name)
        return builtin.build(builtin.name, type_modifier)
    element = ARRAY_ELEMENTS.get(type_oid)
    if element is not None:
        # An array column's modifier is its element's (numeric(10,2)[] carries (10,2)).
        element_codec = _builtin_codec(element.oid, type_modifier)
        assert element_codec is not None
        return _array_codec(f"_{element.name}", element_codec, element.delimiter)
    return None


def codec_for(type_oid: int, type_modifier: int, type_names: TypeNames | None = None) -> TypeCodec:
    """The codec of a column: the table for builtin types and their arrays, else Postgres's text.

    Non-builtin types are named ``namespace.name`` (just ``name`` in ``pg_catalog``) from
    ``type_names``; without a name they are ``oid:<oid>``.
    """
    codec = _builtin_codec(type_oid, type_modifier)
    if codec is not None:
        return codec
    names = type_names(type_oid) if type_names is not None else None
    if names is None:
        return _text_codec(f"oid:{type_oid}")
    namespace, name = names
    return _text_codec(name if namespace in ("pg_catalog", "") else f"{namespace}.{name}")
