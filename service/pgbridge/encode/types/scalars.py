"""Scalar types that map to one Avro primitive: booleans, integers, floats, ``bytea``, ``uuid``, ``jsonb``.

Text converters read what Postgres prints; binary ones read its ``send`` form (network byte order).
The codecs themselves are rows of the builtin table (``registry``).
"""

from __future__ import annotations

import binascii
import uuid
from collections.abc import Callable
from typing import Any

from pgbridge.encode.types.base import (
    Converter,
    unpack_float4,
    unpack_float8,
    unpack_int2,
    unpack_int4,
    unpack_int8,
    unpack_uint4,
)
from pgbridge.encode.wire import FALSE, TRUE


def bool_from_text(raw: bytes) -> bool:
    if raw == b"t":
        return True
    if raw == b"f":
        return False
    raise ValueError("boolean text is neither 't' nor 'f'")


def bool_text_to_avro(raw: bytes) -> bytes:
    if raw == b"t":
        return TRUE
    if raw == b"f":
        return FALSE
    raise ValueError("boolean text is neither 't' nor 'f'")


def float_from_text(raw: bytes) -> float:
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


def uuid_from_binary(raw: bytes) -> str:
    return str(uuid.UUID(bytes=raw))


def jsonb_from_binary(raw: bytes) -> str:
    if raw[:1] != b"\x01":
        raise ValueError(f"unknown jsonb binary version {raw[:1]!r}")
    return raw[1:].decode()


def int_binary(unpack: Callable[[bytes], tuple[Any, ...]]) -> Converter:
    def convert(raw: bytes) -> int:
        value: int = unpack(raw)[0]
        return value
    return convert


def float_binary(unpack: Callable[[bytes], tuple[Any, ...]]) -> Converter:
    def convert(raw: bytes) -> float:
        value: float = unpack(raw)[0]
        return value
    return convert


def as_text(convert: Converter, formatter: Callable[[Any], str] = str) -> Callable[[bytes], str]:
    return lambda raw: formatter(convert(raw))



int2_binary, int4_binary = int_binary(unpack_int2), int_binary(unpack_int4)
int8_binary, oid_binary = int_binary(unpack_int8), int_binary(unpack_uint4)
float4_binary, float8_binary = float_binary(unpack_float4), float_binary(unpack_float8)
