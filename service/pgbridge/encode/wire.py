"""Avro bytes on the wire: binary primitives, schema fingerprints and the framing around a body.

Everything here is pure and stateless except ``SingleObjectRegistrar``, which remembers which
fingerprints it has announced. The encoder writes Avro binary itself instead of going through
fastavro's generic writer, because the hot loop knows each column's type up front and fastavro
would re-resolve every ``["null", T]`` union per value; the primitives below are the whole of the
Avro binary format that pgbridge needs, and the tests check them byte for byte against fastavro.

Framing is pluggable through ``SchemaRegistrar``: the encoder asks it once per (subject, schema)
for the bytes to put in front of each body. Registry-less mode (``SingleObjectRegistrar``) answers
with the Avro single-object header (``C3 01`` + the 8-byte little-endian CRC-64-AVRO fingerprint
of the schema's Parsing Canonical Form) after the schema JSON has been announced to
``{prefix}._schemas``. A Schema Registry registrar answers ``confluent_header(schema_id)``.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any, Final, Protocol, TypeAlias

AvroSchema: TypeAlias = "dict[str, Any] | list[Any] | str"
"""An Avro schema as parsed JSON: a primitive or reference name, a union list or a complex type."""

# --- Avro binary primitives -----------------------------------------------------------------------

NULL_BRANCH: Final = b"\x00"
"""Union branch 0 (``"null"``) of a ``["null", T]`` union, the whole encoding of a null field."""
VALUE_BRANCH: Final = b"\x02"
"""Union branch 1 (``T``) of a ``["null", T]`` union; the value's body follows."""
EMPTY_ARRAY: Final = b"\x00"
"""An Avro array or map with no blocks: just the terminating zero count."""
TRUE: Final = b"\x01"
FALSE: Final = b"\x00"

# Zig-zag varints, 14 bits at a time: the table holds every 14-bit chunk as two bytes with both
# continuation bits set, the ``_LAST`` table every final chunk (one or two bytes, last one without
# the continuation bit). A 16-digit microsecond timestamp then costs four lookups instead of eight
# loop turns, which halves the cost of the commonest long in the stream.
_CHUNK: Final = tuple(bytes(((i & 0x7F) | 0x80, ((i >> 7) & 0x7F) | 0x80)) for i in range(1 << 14))
_LAST: Final = tuple(bytes(((i & 0x7F) | 0x80, i >> 7)) if i >= 0x80 else bytes((i,)) for i in range(1 << 14))
_LONG_MIN: Final = -(1 << 63)
_LONG_MAX: Final = (1 << 63) - 1


def write_long(n: int) -> bytes:
    """Avro ``long`` (and ``int``): zig-zag then base-128 varint, least significant group first."""
    z = (n << 1) ^ (n >> 63)
    if z < 0x4000:
        if z < 0:
            raise OverflowError(f"{n} does not fit an Avro long")
        return _LAST[z]
    if z < 0x1000_0000:
        return _CHUNK[z & 0x3FFF] + _LAST[z >> 14]
    if z < 0x400_0000_0000:
        return _CHUNK[z & 0x3FFF] + _CHUNK[(z >> 14) & 0x3FFF] + _LAST[z >> 28]
    if z < 0x100_0000_0000_0000:
        return _CHUNK[z & 0x3FFF] + _CHUNK[(z >> 14) & 0x3FFF] + _CHUNK[(z >> 28) & 0x3FFF] + _LAST[z >> 42]
    if z >> 64 or not _LONG_MIN <= n <= _LONG_MAX:  # checked last: values this large are rare
        raise OverflowError(f"{n} does not fit an Avro long")
    return (_CHUNK[z & 0x3FFF] + _CHUNK[(z >> 14) & 0x3FFF] + _CHUNK[(z >> 28) & 0x3FFF]
            + _CHUNK[(z >> 42) & 0x3FFF] + _LAST[z >> 56])


def write_length(n: int) -> bytes:
    """The length prefix of ``bytes``/``string`` (a non-negative long), short lengths by lookup."""
    return _LAST[n << 1] if n < 0x2000 else write_long(n)


def write_int(n: int) -> bytes:
    """Avro ``int``: the same varint as ``long`` but the value must fit 32 bits."""
    if not -0x8000_0000 <= n <= 0x7FFF_FFFF:
        raise OverflowError(f"{n} does not fit an Avro int")
    return write_long(n)


def write_bytes(b: bytes) -> bytes:
    """Avro ``bytes``: length as a long, then the bytes."""
    return write_length(len(b)) + b


def write_string(s: str) -> bytes:
    """Avro ``string``: UTF-8 bytes with their length."""
    b = s.encode()
    return write_length(len(b)) + b


def write_boolean(v: bool) -> bytes:
    return TRUE if v else FALSE


_pack_float = struct.Struct("<f").pack
_pack_double = struct.Struct("<d").pack


def write_float(v: float) -> bytes:
    """Avro ``float``: IEEE 754 single precision, little-endian."""
    return _pack_float(v)


def write_double(v: float) -> bytes:
    """Avro ``double``: IEEE 754 double precision, little-endian."""
    return _pack_double(v)


def write_decimal_bytes(unscaled: int) -> bytes:
    """Avro ``bytes``/``decimal``: the unscaled value as big-endian two's complement, with its length.

    The width is ``bit_length // 8 + 1``, as fastavro and the Java library write it, so the same
    value always yields the same bytes whichever implementation produced it.
    """
    size = (unscaled.bit_length() + 8) // 8
    return write_length(size) + unscaled.to_bytes(size, "big", signed=True)


def write_string_array(items: list[str] | tuple[str, ...]) -> bytes:
    """Avro ``{"type": "array", "items": "string"}`` as one block."""
    if not items:
        return EMPTY_ARRAY
    return write_long(len(items)) + b"".join(write_string(s) for s in items) + EMPTY_ARRAY


def write_string_map(items: list[tuple[str, str]] | tuple[tuple[str, str], ...]) -> bytes:
    """Avro ``{"type": "map", "values": "string"}`` as one block, entries in the order given (the
    order is the caller's, so the same entries always yield the same bytes)."""
    if not items:
        return EMPTY_ARRAY
    return (write_long(len(items)) + b"".join(write_string(k) + write_string(v) for k, v in items)
            + EMPTY_ARRAY)


# --- Parsing Canonical Form and fingerprints ------------------------------------------------------

PRIMITIVES: Final = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_NAMED: Final = frozenset({"record", "error", "enum", "fixed"})


def _fullname(name: str, namespace: str | None) -> str:
    if "." in name or not namespace:
        return name
    return f"{namespace}.{name}"


def _pcf(schema: Any, namespace: str | None, seen: set[str], out: list[str]) -> None:
    """Append the canonical form of ``schema`` to ``out`` (Avro spec, "Parsing Canonical Form")."""
    if isinstance(schema, str):
        if schema in PRIMITIVES:
            out.append(json.dumps(schema))
        else:
            out.append(json.dumps(_fullname(schema, namespace), ensure_ascii=False))
        return
    if isinstance(schema, list):
        out.append("[")
        for i, branch in enumerate(schema):
            if i:
                out.append(",")
            _pcf(branch, namespace, seen, out)
        out.append("]")
        return
    if not isinstance(schema, dict):
        raise TypeError(f"not an Avro schema: {schema!r}")
    kind = schema["type"]
    if not isinstance(kind, str):  # {"type": {...}} wraps another schema
        _pcf(kind, namespace, seen, out)
        return
    if kind in PRIMITIVES or kind not in _NAMED | {"array", "map"}:
        # [PRIMITIVES]: {"type": "long", "logicalType": ...} is just "long"; any other string is a
        # reference to a named type.
        _pcf(kind, namespace, seen, out)
        return
    if kind == "array":
        out.append('{"type":"array","items":')
        _pcf(schema["items"], namespace, seen, out)
        out.append("}")
        return
    if kind == "map":
        out.append('{"type":"map","values":')
        _pcf(schema["values"], namespace, seen, out)
        out.append("}")
        return
    # Named types: [FULLNAMES], and a type already defined is written as its name only.
    fullname = _fullname(schema["name"], schema.get("namespace") or namespace)
    name_json = json.dumps(fullname, ensure_ascii=False)
    if fullname in seen:
        out.append(name_json)
        return
    seen.add(fullname)
    inner = fullname.rpartition(".")[0] or None
    out.append(f'{{"name":{name_json},"type":{json.dumps(kind)},')
    if kind in ("record", "error"):
        out.append('"fields":[')
        for i, field in enumerate(schema["fields"]):
            if i:
                out.append(",")
            out.append(f'{{"name":{json.dumps(field["name"], ensure_ascii=False)},"type":')
            _pcf(field["type"], inner, seen, out)
            out.append("}")
        out.append("]}")
    elif kind == "enum":
        symbols = ",".join(json.dumps(s, ensure_ascii=False) for s in schema["symbols"])
        out.append(f'"symbols":[{symbols}]}}')
    else:  # fixed; [INTEGERS]: int() drops quotes and leading zeros
        out.append(f'"size":{int(schema["size"])}}}')


def parsing_canonical_form(schema: AvroSchema) -> str:
    """The Avro spec's Parsing Canonical Form: full names, only the attributes that affect parsing
    (``name``, ``type``, ``fields``, ``symbols``, ``items``, ``values``, ``size``) in that order, no
    whitespace, strings unescaped as UTF-8. Logical types, ``doc``, ``default`` and custom
    attributes such as ``pg_type`` do not change it, so they never change a fingerprint either.

    Written here rather than taken from fastavro because fastavro's version skips JSON escaping of
    names; the tests cross-check the two on every schema pgbridge produces.
    """
    out: list[str] = []
    _pcf(schema, None, set(), out)
    return "".join(out)


_CRC64_EMPTY: Final = 0xC15D213AA4D7A795


def _crc64_table() -> tuple[int, ...]:
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (_CRC64_EMPTY & -(fp & 1))
        table.append(fp)
    return tuple(table)


_CRC64_TABLE: Final = _crc64_table()


def crc64_avro(data: bytes) -> int:
    """CRC-64-AVRO (the Rabin fingerprint of the Avro spec) as an unsigned 64-bit integer."""
    fp = _CRC64_EMPTY
    table = _CRC64_TABLE
    for byte in data:
        fp = (fp >> 8) ^ table[(fp ^ byte) & 0xFF]
    return fp


def fingerprint64(schema: AvroSchema) -> int:
    """CRC-64-AVRO of the schema's Parsing Canonical Form, unsigned (Java shows it as a signed long)."""
    return crc64_avro(parsing_canonical_form(schema).encode())


def fingerprint_hex(fp: int) -> str:
    """The ``{prefix}._schemas`` key: the unsigned 64-bit fingerprint as 16 lowercase hex digits.

    This is the number, most significant digit first; the single-object header carries the same
    number little-endian, so ``fingerprint_hex(int.from_bytes(header[2:10], "little"))`` finds it.
    """
    return f"{fp & 0xFFFF_FFFF_FFFF_FFFF:016x}"


SINGLE_OBJECT_MAGIC: Final = b"\xc3\x01"


def single_object_header(fp: int) -> bytes:
    """Avro single-object encoding header: ``C3 01`` then the fingerprint, 8 bytes little-endian."""
    return SINGLE_OBJECT_MAGIC + (fp & 0xFFFF_FFFF_FFFF_FFFF).to_bytes(8, "little")


def read_single_object_fingerprint(data: bytes) -> int:
    """The fingerprint of a single-object encoded record (for consumers and tests)."""
    if data[:2] != SINGLE_OBJECT_MAGIC or len(data) < 10:
        raise ValueError("not Avro single-object encoding (missing C3 01 header)")
    return int.from_bytes(data[2:10], "little")


def read_confluent_schema_id(data: bytes) -> int:
    """The registry schema id of a Confluent-framed record (for consumers and tests)."""
    if data[:1] != b"\x00" or len(data) < 5:
        raise ValueError("not the Confluent wire format (expected byte 0 and a 4-byte schema id)")
    return int.from_bytes(data[1:5], "big")


def confluent_header(schema_id: int) -> bytes:
    """Confluent wire format header: magic byte 0 then the registry's schema id, 4 bytes big-endian."""
    return b"\x00" + schema_id.to_bytes(4, "big")


def schema_json(schema: AvroSchema) -> str:
    """The full schema as announced to ``_schemas``: compact JSON keeping logical types and
    ``pg_type``, so a consumer gets the exact writer schema (its PCF gives back the fingerprint)."""
    return json.dumps(schema, separators=(",", ":"), ensure_ascii=False)


# --- Registrars -----------------------------------------------------------------------------------


class SchemaRegistrar(Protocol):
    """Makes a writer schema known to consumers and says how records using it are framed."""

    def header_for(self, subject: str, schema: dict[str, Any]) -> bytes:
        """Bytes to prepend to every Avro body written with ``schema`` under ``subject``
        (``{topic}-key`` / ``{topic}-value``). Called once per (subject, schema); the encoder caches
        the answer, so an implementation may block (register, wait for an ack) and may raise."""
        ...


class SingleObjectRegistrar:
    """Registry-less mode: announce each schema once, then frame records as Avro single objects.

    ``announce(fingerprint_hex, schema_json)`` is the publish layer's job: produce the pair to
    ``{prefix}._schemas`` and return only once Kafka acknowledged it, so the schema is durable
    before any record that needs it. A fingerprint is remembered only after ``announce`` returned,
    so a failed announce is retried with the next record instead of being skipped. The subject is
    not part of the announcement: the fingerprint alone identifies the schema.
    """

    def __init__(self, announce: Callable[[str, str], None]) -> None:
        self._announce = announce
        self._announced: set[str] = set()

    def header_for(self, subject: str, schema: dict[str, Any]) -> bytes:
        fp = fingerprint64(schema)
        text = schema_json(schema)
        # By text: a schema that differs from an announced one only by field aliases (a rename,
        # encode/renames.py) has the same fingerprint, and is announced again under it with them.
        if text not in self._announced:
            self._announce(fingerprint_hex(fp), text)
            self._announced.add(text)
        return single_object_header(fp)
