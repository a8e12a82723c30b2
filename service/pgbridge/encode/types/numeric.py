"""``numeric``: its binary form, ``numeric(p,s)`` as an exact Avro decimal, and unconstrained ``numeric``.

Unconstrained ``numeric`` is a ``string`` with Postgres's exact text: its values carry any scale
(up to 16383 fraction digits) and ``NaN``/``±Infinity``, so no single decimal scale holds them
without rounding; ``NumericPolicy`` opts into a decimal with the overflow in the envelope's
``unrepresentable`` map.
``numeric(p,s)`` is an exact ``decimal(p,s)`` (negative scales and scales above the precision,
Postgres 15+, get ``scale = max(s, 0)`` and room for every value).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Final, Literal

from pgbridge.encode.types.base import EncodeError, TypeCodec, Unrepresentable, numeric_typmod, text_codec
from pgbridge.encode.wire import write_decimal_bytes

# --- the binary form ------------------------------------------------------------------------------

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


# --- numeric(p,s) ---------------------------------------------------------------------------------

KERNEL_MAX_SCALE: Final = 18
"""The compiled kernel reads decimals of up to 18 digits (an int64) and so scales up to 18; a larger
scale leaves the column to Python."""


def decimal_codec(precision: int, scale: int) -> TypeCodec:
    """``numeric(p,s)`` as an exact ``decimal``: Postgres keeps every value within the precision, so
    the kernel may convert it without checking one (``NumericPolicy`` decimals must not)."""
    avro_scale = max(scale, 0)
    avro_precision = max(precision - scale, 0) + avro_scale

    def from_text(raw: bytes) -> int:
        return decimal_unscaled(raw, avro_scale)

    def from_binary(raw: bytes) -> int:
        return decimal_unscaled(numeric_text_from_binary(raw).encode(), avro_scale)

    def text_to_avro(raw: bytes) -> bytes:
        return write_decimal_bytes(decimal_unscaled(raw, avro_scale))

    kernel = avro_scale <= KERNEL_MAX_SCALE
    return TypeCodec(
        "numeric",
        {"type": "bytes", "logicalType": "decimal", "precision": avro_precision, "scale": avro_scale},
        from_text, from_binary, write_decimal_bytes,
        {"pg_precision": precision, "pg_scale": scale}, text_to_avro,
        companion=True, text_of_binary=numeric_text_from_binary,
        kernel="decimal" if kernel else None, kernel_binary="binary_decimal" if kernel else None,
    )


# --- unconstrained numeric ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NumericPolicy:
    """``numeric`` without a declared precision as an Avro ``decimal(precision, scale)`` (opt-in).

    Postgres allows such a column any value up to 131072 digits before the point and 16383 after,
    so no fixed decimal holds every value. A value that fits exactly is the decimal; one that does
    not (more integer digits than ``precision - scale``, a non-zero digit beyond ``scale``, NaN,
    ±Infinity) is never rounded: with ``overflow="text"`` it is published in the envelope's
    ``unrepresentable`` map with the decimal null, with ``overflow="fail"`` pgbridge stops with an
    error naming the column, before confirming anything past it. (NaN and ±Infinity always go to
    the map.)
    """

    precision: int = 38
    scale: int = 10
    overflow: Literal["text", "fail"] = "text"

    def __post_init__(self) -> None:
        if not 1 <= self.precision <= 1000 or not 0 <= self.scale <= self.precision:
            raise ValueError("numeric precision must be 1-1000 and scale 0-precision")


_PLAIN_NUMERIC: Final = re.compile(rb"-?[0-9]+(\.[0-9]+)?")


def policy_decimal_codec(policy: NumericPolicy) -> TypeCodec:
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
                                       "types.numeric_overflow to text to publish such values as text in the "
                                       "envelope's unrepresentable map")
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


def numeric_codec(name: str, typmod: int) -> TypeCodec:
    """``numeric(p,s)`` a decimal; unconstrained ``numeric`` its exact text (see the module doc)."""
    ps = numeric_typmod(typmod)
    if ps is not None:
        return decimal_codec(*ps)
    return text_codec(name, numeric_text_from_binary)
