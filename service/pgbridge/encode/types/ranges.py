"""Ranges as records ``(lower, upper, lower_inclusive, upper_inclusive, empty)``; multiranges as
arrays of those records.

An unbounded side is a null bound. A range is a companion exactly when its element type is (a
``daterange`` bound may be ``infinity``): the whole range then goes to the envelope's
``unrepresentable`` map. Text
follows ``range_in``/``multirange_in``, binary ``range_send``/``multirange_send``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from pgbridge.encode.naming import avro_type_name
from pgbridge.encode.types.base import Converter, TypeCodec, Unrepresentable, Writer, unpack_int4
from pgbridge.encode.wire import EMPTY_ARRAY, FALSE, NULL_BRANCH, TRUE, VALUE_BRANCH, write_long

_RANGE_EMPTY: Final = 0x01
_RANGE_LB_INC: Final = 0x02
_RANGE_UB_INC: Final = 0x04
_RANGE_LB_INF: Final = 0x08
_RANGE_UB_INF: Final = 0x10
_RANGE_SPECIAL: Final = frozenset(b'"\\()[],{} \t\n\r\v\f')

RangeDatum = tuple[Any, Any, bool, bool, bool]
"""(lower, upper, lower_inclusive, upper_inclusive, empty); a ``None`` bound is unbounded."""


def read_token(text: bytes, pos: int, stops: bytes) -> tuple[bytes | None, int]:
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
    lower, pos = read_token(text, 1, b",")
    if text[pos:pos + 1] != b",":
        raise ValueError("range literal has no comma between its bounds")
    upper, pos = read_token(text, pos + 1, b")]")
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
            (size,) = unpack_int4(raw[pos:pos + 4])
            lower, pos = raw[pos + 4:pos + 4 + size], pos + 4 + size
        if not flags & (_RANGE_EMPTY | _RANGE_UB_INF):
            (size,) = unpack_int4(raw[pos:pos + 4])
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


def range_codec(name: str, element: TypeCodec) -> TypeCodec:
    from_text, from_binary, write, text_of_binary = _range_parts(element)
    return TypeCodec(name, _range_avro(name, element), from_text, from_binary, write,
                     {"pg_element_type": element.pg_type}, companion=element.companion,
                     text_of_binary=text_of_binary)


# --- multiranges ----------------------------------------------------------------------------------


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


def multirange_codec(name: str, range_codec: TypeCodec, element: TypeCodec) -> TypeCodec:
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
    (count,) = unpack_int4(raw[:4])
    parts, pos = [], 4
    for _ in range(count):
        (size,) = unpack_int4(raw[pos:pos + 4])
        parts.append(raw[pos + 4:pos + 4 + size])
        pos += 4 + size
    return parts
