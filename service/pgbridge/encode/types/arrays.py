"""Arrays: a one-dimensional Avro array of nullable elements, any other shape unrepresentable.

Postgres arrays may have several dimensions and a lower bound other than 1; an Avro array has
neither, so such a value is ``Unrepresentable``: the field is null and the whole literal goes to
the envelope's ``unrepresentable`` map. The text parser follows ``array_in``; the binary reader ``array_send``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Final

from pgbridge.encode.types.base import BINARY_HINT, EncodeError, TypeCodec, Unrepresentable, unpack_int4
from pgbridge.encode.wire import EMPTY_ARRAY, NULL_BRANCH, VALUE_BRANCH, write_long

# --- the text form --------------------------------------------------------------------------------

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


# --- the binary form ------------------------------------------------------------------------------

ARRAY_HEAD: Final = struct.Struct("!iiI")
ARRAY_DIM: Final = struct.Struct("!ii")
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
    ndim, _flags, _oid = ARRAY_HEAD.unpack_from(raw)
    if ndim == 0:
        return "{}"
    dims = [ARRAY_DIM.unpack_from(raw, 12 + 8 * d) for d in range(ndim)]
    pos = 12 + 8 * ndim
    texts: list[str] = []
    total = 1
    for count, _lower in dims:
        total *= count
    for _ in range(total):
        (size,) = unpack_int4(raw[pos:pos + 4])
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


def array_codec(name: str, element: TypeCodec, delimiter: bytes) -> TypeCodec:
    """A one-dimensional Avro array of nullable elements; any other shape is ``Unrepresentable``."""
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
            raise EncodeError(f"binary format of type {element.pg_type} is not supported", hint=BINARY_HINT)
        return text

    def from_binary(raw: bytes) -> list[Any]:
        assert elem_binary is not None
        ndim, _flags, _elem_oid = ARRAY_HEAD.unpack_from(raw)
        if ndim == 0:
            return []
        count, lower = ARRAY_DIM.unpack_from(raw, 12)
        if ndim != 1 or lower != 1:
            raise Unrepresentable(_binary_array_text(raw, elem_text_of_binary, delim))
        out: list[Any] = []
        pos = 20
        try:
            for _ in range(count):
                (size,) = unpack_int4(raw[pos:pos + 4])
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
