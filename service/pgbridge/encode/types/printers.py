"""Binary forms of types published as Postgres's text: each printer rebuilds the text output.

These types are Avro strings holding Postgres's text output. Their send formats carry the same
information, so each printer here rebuilds, byte for byte, the text the type's output function
prints in the replication session (client_encoding UTF8, extra_float_digits > 0): binary mode then
publishes what text mode does. Types whose text needs more than the value (money: lc_monetary;
reg*: a catalog lookup) have no printer (see docs/types.md). Text search types are in
``textsearch``, ``hstore`` in ``extensions``.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from typing import Any, Final

from pgbridge.encode.types.arrays import ARRAY_DIM, ARRAY_HEAD
from pgbridge.encode.types.base import unpack_float4, unpack_int4

_INF: Final = float("inf")
_unpack_uint8 = struct.Struct("!Q").unpack

# --- floats (also the coordinates of the geometric types) -----------------------------------------


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
    below = unpack_float4(_pack_float4_bits(bits - 1))[0]
    above = unpack_float4(_pack_float4_bits(bits + 1))[0]
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


# --- geometric types ------------------------------------------------------------------------------


def _float8s(raw: bytes, count: int, offset: int = 0) -> list[str]:
    return [float8_text(v) for v in struct.unpack_from(f"!{count}d", raw, offset)]


def _points_text(coordinates: list[str]) -> str:
    return ",".join(f"({coordinates[i]},{coordinates[i + 1]})" for i in range(0, len(coordinates), 2))


def point_text_of_binary(raw: bytes) -> str:
    """``point_send`` (x, y) → ``(x,y)``."""
    return _points_text(_float8s(raw, 2))


def lseg_text_of_binary(raw: bytes) -> str:
    """``lseg_send`` (two points) → ``[(x1,y1),(x2,y2)]``."""
    return f"[{_points_text(_float8s(raw, 4))}]"


def box_text_of_binary(raw: bytes) -> str:
    """``box_send`` (high corner, low corner) → ``(x2,y2),(x1,y1)``."""
    return _points_text(_float8s(raw, 4))


def path_text_of_binary(raw: bytes) -> str:
    """``path_send`` (closed flag, point count, points) → ``((…))`` closed or ``[(…)]`` open."""
    (count,) = unpack_int4(raw[1:5])
    points = _points_text(_float8s(raw, 2 * count, 5))
    return f"({points})" if raw[0] else f"[{points}]"


def polygon_text_of_binary(raw: bytes) -> str:
    """``poly_send`` (point count, points) → ``((x1,y1),…)``."""
    (count,) = unpack_int4(raw[:4])
    return f"({_points_text(_float8s(raw, 2 * count, 4))})"


def line_text_of_binary(raw: bytes) -> str:
    """``line_send`` (A, B, C of Ax + By + C = 0) → ``{A,B,C}``."""
    return "{" + ",".join(_float8s(raw, 3)) + "}"


def circle_text_of_binary(raw: bytes) -> str:
    """``circle_send`` (center, radius) → ``<(x,y),r>``."""
    x, y, radius = _float8s(raw, 3)
    return f"<({x},{y}),{radius}>"


# --- network types --------------------------------------------------------------------------------

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


def inet_text_of_binary(raw: bytes) -> str:
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


def macaddr_text_of_binary(raw: bytes) -> str:
    """``macaddr_send``/``macaddr8_send`` (6 or 8 bytes) → ``08:00:2b:01:02:03``."""
    if len(raw) not in (6, 8):
        raise ValueError(f"a MAC address has 6 or 8 bytes, not {len(raw)}")
    return ":".join(f"{b:02x}" for b in raw)


# --- bit strings, "char", and system types --------------------------------------------------------


def varbit_text_of_binary(raw: bytes) -> str:
    """``varbit_send`` (bit count, bits packed from the high bit) → ``0101…``; ``bit(n)`` too."""
    (count,) = unpack_int4(raw[:4])
    bits = "".join(f"{b:08b}" for b in raw[4:])
    if len(bits) < count:
        raise ValueError("bit string shorter than its length")
    return bits[:count]


def char_text_of_binary(raw: bytes) -> str:
    """``charsend`` (one byte) → ``charout`` of Postgres 15+: empty for NUL, ``\\ooo`` octal for a
    byte with the high bit set (not UTF-8 on its own), else the ASCII character."""
    if len(raw) != 1:
        raise ValueError(f'"char" is one byte, not {len(raw)}')
    byte = raw[0]
    return "" if byte == 0 else f"\\{byte:03o}" if byte & 0x80 else chr(byte)


def pg_lsn_text_of_binary(raw: bytes) -> str:
    """``pg_lsn_send`` (uint64) → ``%X/%X``."""
    (lsn,) = _unpack_uint8(raw)
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def tid_text_of_binary(raw: bytes) -> str:
    """``tidsend`` (block uint32, offset uint16) → ``(block,offset)``."""
    block, offset = struct.unpack("!IH", raw)
    return f"({block},{offset})"


def vector_text(unpack: Callable[[bytes], tuple[Any, ...]]) -> Callable[[bytes], str]:
    """``int2vector``/``oidvector`` send as a one-dimensional array (lower bound 0) of non-null
    elements; their text is the elements separated by spaces."""
    def text_of_binary(raw: bytes) -> str:
        ndim, _flags, _oid = ARRAY_HEAD.unpack_from(raw)
        if ndim == 0:
            return ""
        (count, _lower), pos, out = ARRAY_DIM.unpack_from(raw, 12), 12 + 8 * ndim, []
        for _ in range(count):
            (size,) = unpack_int4(raw[pos:pos + 4])
            if size < 0:
                raise ValueError("NULL element in a vector type")
            out.append(str(unpack(raw[pos + 4:pos + 4 + size])[0]))
            pos += 4 + size
        return " ".join(out)
    return text_of_binary


def snapshot_text_of_binary(raw: bytes) -> str:
    """``pg_snapshot_send``/``txid_snapshot_send`` (count, xmin, xmax, in-progress xids) →
    ``xmin:xmax:xip,xip``."""
    (count,) = unpack_int4(raw[:4])
    xmin, xmax, *xips = struct.unpack_from(f"!{count + 2}Q", raw, 4)
    return f"{xmin}:{xmax}:" + ",".join(str(x) for x in xips)


def versioned_text(raw: bytes) -> str:
    """``jsonb_send``/``jsonpath_send``: a version byte (1) and the value's text."""
    if raw[:1] != b"\x01":
        raise ValueError(f"unknown binary version {raw[:1]!r}")
    return raw[1:].decode()
