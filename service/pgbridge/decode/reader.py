"""Cursor helpers for pgoutput bodies: precompiled big-endian unpackers, fixed layouts, C strings.

Everything here reads ``bytes``. ``decode_message`` copies a memoryview payload once up front
because slicing ``bytes`` is the cheapest way CPython has to produce each column's ``bytes`` value
(a memoryview slice costs an extra object per column), and ``bytes.find`` is what locates a C
string's NUL (memoryview has no ``find``). Every short read becomes a ``DecodeError`` naming the
offset of the field that was cut off, so a corrupt frame can be located in a hex dump.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sized
from typing import Final, cast

from pgbridge.errors import DecodeError
from pgbridge.lsn import Lsn

# Typed views of Struct.unpack_from (psycopg's _struct.py trick): mypy sees the result types and
# the call costs nothing extra at run time.
unpack_u8: Final = cast(Callable[[bytes, int], tuple[int]], struct.Struct("!B").unpack_from)
unpack_u16: Final = cast(Callable[[bytes, int], tuple[int]], struct.Struct("!H").unpack_from)
unpack_u32: Final = cast(Callable[[bytes, int], tuple[int]], struct.Struct("!I").unpack_from)
unpack_i32: Final = cast(Callable[[bytes, int], tuple[int]], struct.Struct("!i").unpack_from)
unpack_i64: Final = cast(Callable[[bytes, int], tuple[int]], struct.Struct("!q").unpack_from)
unpack_lsn: Final = cast(Callable[[bytes, int], tuple[Lsn]], struct.Struct("!Q").unpack_from)


def truncated(tag: str, offset: int, what: str) -> DecodeError:
    return DecodeError(f"message truncated: {what} does not fit", tag=tag, offset=offset)


def trailing(tag: str, offset: int, size: int) -> DecodeError:
    """Bytes left after the last field mean we misread the layout (or the protocol version)."""
    return DecodeError(f"{size - offset} unexpected trailing byte(s)", tag=tag, offset=offset)


class Layout:
    """A fixed run of fields read with one ``unpack_from`` call.

    It remembers where each field starts so that a short buffer is reported at the field that is
    cut off rather than as a bare "too short".
    """

    __slots__ = ("_fields", "size", "struct")

    def __init__(self, fmt: str, *names: str) -> None:
        if not fmt.startswith("!") or len(fmt) - 1 != len(names):
            raise ValueError(f"layout {fmt!r} needs '!' and one name per field, got {names}")
        self.struct: Final = struct.Struct(fmt)
        self.size: Final = self.struct.size
        fields: list[tuple[int, int, str]] = []
        offset = 0
        for code, name in zip(fmt[1:], names, strict=True):
            width = struct.calcsize("!" + code)
            fields.append((offset, width, name))
            offset += width
        self._fields: Final = tuple(fields)

    def error(self, buf: Sized, tag: str, start: int, *, exact: bool = False) -> DecodeError:
        """Explain why ``buf`` does not hold this layout at ``start``.

        With ``exact`` the layout must also end the buffer, so extra bytes are reported as trailing.
        """
        size = len(buf)
        for offset, width, name in self._fields:
            if start + offset + width > size:
                return truncated(tag, start + offset, name)
        if exact and size != start + self.size:
            return trailing(tag, start + self.size, size)
        raise AssertionError(f"{tag!r} layout fits at {start}; no error to report")


def read_cstring(buf: bytes, pos: int, tag: str, what: str) -> tuple[str, int]:
    """Read a NUL-terminated UTF-8 string; return it and the offset just past the NUL."""
    nul = buf.find(0, pos)
    if nul < 0:
        raise DecodeError(f"{what} has no NUL terminator", tag=tag, offset=pos)
    try:
        return buf[pos:nul].decode("utf-8"), nul + 1
    except UnicodeDecodeError as exc:
        raise DecodeError(f"{what} is not valid UTF-8 ({exc.reason})", tag=tag,
                          offset=pos + exc.start) from None


class Reader:
    """A sequential cursor for the variable-length, low-volume messages (Relation, Type, Origin,
    logical Message, two-phase), where readable field-by-field code beats a few saved calls."""

    __slots__ = ("buf", "pos", "tag")

    def __init__(self, buf: bytes, tag: str, pos: int = 1) -> None:
        self.buf = buf
        self.tag = tag
        self.pos = pos

    def u8(self, what: str) -> int:
        pos = self.pos
        try:
            value = self.buf[pos]
        except IndexError:
            raise truncated(self.tag, pos, what) from None
        self.pos = pos + 1
        return value

    def u16(self, what: str) -> int:
        return self._fixed(unpack_u16, 2, what)

    def u32(self, what: str) -> int:
        return self._fixed(unpack_u32, 4, what)

    def i32(self, what: str) -> int:
        return self._fixed(unpack_i32, 4, what)

    def i64(self, what: str) -> int:
        return self._fixed(unpack_i64, 8, what)

    def lsn(self, what: str) -> Lsn:
        pos = self.pos
        try:
            (value,) = unpack_lsn(self.buf, pos)
        except struct.error:
            raise truncated(self.tag, pos, what) from None
        self.pos = pos + 8
        return value

    def cstring(self, what: str) -> str:
        value, self.pos = read_cstring(self.buf, self.pos, self.tag, what)
        return value

    def raw(self, length: int, what: str) -> bytes:
        pos = self.pos
        end = pos + length
        if end > len(self.buf):
            raise truncated(self.tag, pos, f"{what} ({length} bytes)")
        self.pos = end
        return self.buf[pos:end]

    def finish(self) -> None:
        """Refuse trailing bytes: they mean the layout (or protocol version) is not what we think."""
        size = len(self.buf)
        if self.pos != size:
            raise trailing(self.tag, self.pos, size)

    def _fixed(self, unpack: Callable[[bytes, int], tuple[int]], width: int, what: str) -> int:
        pos = self.pos
        try:
            (value,) = unpack(self.buf, pos)
        except struct.error:
            raise truncated(self.tag, pos, what) from None
        self.pos = pos + width
        return value
