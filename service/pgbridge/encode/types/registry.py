"""The builtin type table and ``codec_for``: which codec a column of a given type OID gets.

One row per builtin type OID (stable across Postgres versions) with its array type and the codec
builder, and the catalog (``source/type_catalog.py``) for the rest: domains encode as their base
type (named after the domain), arrays of catalog types as arrays of their element's codec,
composites as records of their attributes, enums and text-like types as their text; anything
unknown is Postgres's text. The rows also declare which compiled-kernel conversions apply.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

from pgbridge.encode.types.arrays import array_codec
from pgbridge.encode.types.base import (
    Converter,
    KernelBinary,
    KernelText,
    TypeCodec,
    Writer,
    length_typmod,
    long_text_to_avro,
    numeric_typmod,
    string_raw_to_avro,
    text_codec,
    text_from_utf8,
    unpack_int2,
    unpack_uint4,
)
from pgbridge.encode.types.composite import composite_codec
from pgbridge.encode.types.datetime import (
    date_from_binary,
    date_from_text,
    date_text_of_binary,
    format_time,
    time_from_binary,
    time_from_text,
    timestamp_from_binary,
    timestamp_from_text,
    timestamp_text_of_binary,
    timestamptz_from_binary,
    timestamptz_from_text,
    timestamptz_text_of_binary,
    timetz_text_of_binary,
)
from pgbridge.encode.types.extensions import catalog_text_codec
from pgbridge.encode.types.interval import interval_codec
from pgbridge.encode.types.numeric import NumericPolicy, numeric_codec, policy_decimal_codec
from pgbridge.encode.types.printers import (
    box_text_of_binary,
    char_text_of_binary,
    circle_text_of_binary,
    float4_text,
    float8_text,
    inet_text_of_binary,
    line_text_of_binary,
    lseg_text_of_binary,
    macaddr_text_of_binary,
    path_text_of_binary,
    pg_lsn_text_of_binary,
    point_text_of_binary,
    polygon_text_of_binary,
    snapshot_text_of_binary,
    tid_text_of_binary,
    varbit_text_of_binary,
    vector_text,
    versioned_text,
)
from pgbridge.encode.types.ranges import multirange_codec, range_codec
from pgbridge.encode.types.scalars import (
    as_text,
    bool_from_text,
    bool_text_to_avro,
    bytea_from_text,
    float4_binary,
    float8_binary,
    float_from_text,
    int2_binary,
    int4_binary,
    int8_binary,
    int_binary,
    jsonb_from_binary,
    oid_binary,
    uuid_from_binary,
)
from pgbridge.encode.types.textsearch import tsquery_text_of_binary, tsvector_text_of_binary
from pgbridge.encode.wire import (
    AvroSchema,
    write_boolean,
    write_bytes,
    write_double,
    write_float,
    write_int,
    write_long,
    write_string,
)
from pgbridge.source.type_catalog import PgTypeInfo

# --- builders -------------------------------------------------------------------------------------

Builder = Callable[[str, int], TypeCodec]
"""``(type name, type modifier) → TypeCodec``."""


def _fixed(avro: AvroSchema, from_text: Converter, from_binary: Converter | None, write: Writer,
           text_to_avro: Callable[[bytes], bytes] | None = None, *, companion: bool = False,
           text_of_binary: Callable[[bytes], str] | None = None, kernel: KernelText | None = None,
           kernel_binary: KernelBinary | None = None) -> Builder:
    """A type whose codec does not depend on its modifier; ``kernel``/``kernel_binary`` name the
    compiled kernel's conversions that write what its converters write (see ``TypeCodec``)."""
    def build(name: str, typmod: int) -> TypeCodec:
        return TypeCodec(name, avro, from_text, from_binary, write, text_to_avro=text_to_avro,
                         companion=companion, text_of_binary=text_of_binary, kernel=kernel,
                         kernel_binary=kernel_binary)
    return build


def _string_like(avro: AvroSchema = "string", printer: Callable[[bytes], str] | None = None,
                 with_length: bool = False) -> Builder:
    """A type published as its text. ``printer`` rebuilds that text from the send form; without one
    the send form is the text itself (UTF-8), which the kernel copies (``binary_string``)."""
    def build(name: str, typmod: int) -> TypeCodec:
        length = length_typmod(typmod) if with_length else None
        attributes = {} if length is None else {"pg_length": length}
        from_binary = text_from_utf8 if printer is None else printer
        return TypeCodec(name, avro, text_from_utf8, from_binary, write_string, attributes, string_raw_to_avro,
                         text_of_binary=from_binary, kernel="string",
                         kernel_binary="binary_string" if printer is None else None)
    return build


def _range_builder(element_oid: int) -> Builder:
    def build(name: str, typmod: int) -> TypeCodec:
        element = _builtin_codec(element_oid, -1)
        assert element is not None
        return range_codec(name, element)
    return build


def _multirange_builder(range_oid: int, element_oid: int) -> Builder:
    def build(name: str, typmod: int) -> TypeCodec:
        range_codec, element = _builtin_codec(range_oid, -1), _builtin_codec(element_oid, -1)
        assert range_codec is not None and element is not None
        return multirange_codec(name, range_codec, element)
    return build


_JSON_AVRO: Final = {"type": "string", "connect.name": "io.debezium.data.Json"}


# --- the table ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BuiltinType:
    """One row of the table: a builtin type, its array type and how to encode it (``None``: text)."""

    oid: int
    name: str
    array_oid: int
    build: Builder | None = None
    delimiter: bytes = b","


_BUILTINS: Final[tuple[BuiltinType, ...]] = (
    BuiltinType(16, "bool", 1000, _fixed("boolean", bool_from_text, lambda raw: raw != b"\x00",
                                         write_boolean, bool_text_to_avro,
                                         text_of_binary=lambda raw: "f" if raw == b"\x00" else "t",
                                         kernel="bool", kernel_binary="binary_bool")),
    BuiltinType(17, "bytea", 1001, _fixed("bytes", bytea_from_text, bytes, write_bytes,
                                          text_of_binary=lambda raw: "\\x" + raw.hex())),
    BuiltinType(18, "char", 1002, _string_like(printer=char_text_of_binary)),
    BuiltinType(19, "name", 1003, _string_like()),
    BuiltinType(20, "int8", 1016, _fixed("long", int, int8_binary, write_long, long_text_to_avro,
                                         text_of_binary=as_text(int8_binary),
                                         kernel="long", kernel_binary="binary_int8")),
    BuiltinType(21, "int2", 1005, _fixed("int", int, int2_binary, write_int, long_text_to_avro,
                                         text_of_binary=as_text(int2_binary),
                                         kernel="long", kernel_binary="binary_int2")),
    BuiltinType(22, "int2vector", 1006, _string_like(printer=vector_text(unpack_int2))),
    BuiltinType(23, "int4", 1007, _fixed("int", int, int4_binary, write_int, long_text_to_avro,
                                         text_of_binary=as_text(int4_binary),
                                         kernel="long", kernel_binary="binary_int4")),
    BuiltinType(24, "regproc", 1008),
    BuiltinType(25, "text", 1009, _string_like()),
    BuiltinType(26, "oid", 1028, _fixed("long", int, oid_binary, write_long, long_text_to_avro,
                                        text_of_binary=as_text(oid_binary),
                                        kernel="long", kernel_binary="binary_oid")),
    BuiltinType(27, "tid", 1010, _string_like(printer=tid_text_of_binary)),
    BuiltinType(28, "xid", 1011, _string_like(printer=as_text(oid_binary))),
    BuiltinType(29, "cid", 1012, _string_like(printer=as_text(oid_binary))),
    BuiltinType(30, "oidvector", 1013, _string_like(printer=vector_text(unpack_uint4))),
    BuiltinType(114, "json", 199, _string_like(_JSON_AVRO)),
    BuiltinType(142, "xml", 143, _string_like()),
    BuiltinType(600, "point", 1017, _string_like(printer=point_text_of_binary)),
    BuiltinType(601, "lseg", 1018, _string_like(printer=lseg_text_of_binary)),
    BuiltinType(602, "path", 1019, _string_like(printer=path_text_of_binary)),
    BuiltinType(603, "box", 1020, _string_like(printer=box_text_of_binary), delimiter=b";"),
    BuiltinType(604, "polygon", 1027, _string_like(printer=polygon_text_of_binary)),
    BuiltinType(628, "line", 629, _string_like(printer=line_text_of_binary)),
    BuiltinType(650, "cidr", 651, _string_like(printer=inet_text_of_binary)),
    BuiltinType(700, "float4", 1021, _fixed("float", float_from_text, float4_binary, write_float,
                                            text_of_binary=as_text(float4_binary, float4_text),
                                            kernel="float", kernel_binary="binary_float4")),
    BuiltinType(701, "float8", 1022, _fixed("double", float_from_text, float8_binary, write_double,
                                            text_of_binary=as_text(float8_binary, float8_text),
                                            kernel="double", kernel_binary="binary_float8")),
    BuiltinType(718, "circle", 719, _string_like(printer=circle_text_of_binary)),
    BuiltinType(774, "macaddr8", 775, _string_like(printer=macaddr_text_of_binary)),
    BuiltinType(790, "money", 791),
    BuiltinType(829, "macaddr", 1040, _string_like(printer=macaddr_text_of_binary)),
    BuiltinType(869, "inet", 1041, _string_like(printer=inet_text_of_binary)),
    BuiltinType(1033, "aclitem", 1034),
    BuiltinType(1042, "bpchar", 1014, _string_like(with_length=True)),
    BuiltinType(1043, "varchar", 1015, _string_like(with_length=True)),
    BuiltinType(1082, "date", 1182, _fixed({"type": "int", "logicalType": "date"}, date_from_text,
                                           date_from_binary, write_int, lambda raw: write_long(date_from_text(raw)),
                                           companion=True, text_of_binary=date_text_of_binary,
                                           kernel="date", kernel_binary="binary_date")),
    BuiltinType(1083, "time", 1183, _fixed({"type": "long", "logicalType": "time-micros"}, time_from_text,
                                           time_from_binary, write_long, lambda raw: write_long(time_from_text(raw)),
                                           companion=True,
                                           text_of_binary=as_text(int8_binary, format_time))),
    BuiltinType(1114, "timestamp", 1115, _fixed({"type": "long", "logicalType": "local-timestamp-micros"},
                                                timestamp_from_text, timestamp_from_binary, write_long,
                                                lambda raw: write_long(timestamp_from_text(raw)),
                                                companion=True, text_of_binary=timestamp_text_of_binary,
                                                kernel="timestamp", kernel_binary="binary_timestamp")),
    BuiltinType(1184, "timestamptz", 1185, _fixed({"type": "long", "logicalType": "timestamp-micros"},
                                                  timestamptz_from_text, timestamptz_from_binary, write_long,
                                                  lambda raw: write_long(timestamptz_from_text(raw)),
                                                  companion=True, text_of_binary=timestamptz_text_of_binary,
                                                  kernel="timestamptz", kernel_binary="binary_timestamp")),
    BuiltinType(1186, "interval", 1187, interval_codec),
    BuiltinType(1266, "timetz", 1270, _string_like(printer=timetz_text_of_binary)),
    BuiltinType(1560, "bit", 1561, _string_like(printer=varbit_text_of_binary)),
    BuiltinType(1562, "varbit", 1563, _string_like(printer=varbit_text_of_binary)),
    BuiltinType(1700, "numeric", 1231, numeric_codec),
    BuiltinType(1790, "refcursor", 2201, _string_like()),
    BuiltinType(2202, "regprocedure", 2207),
    BuiltinType(2203, "regoper", 2208),
    BuiltinType(2204, "regoperator", 2209),
    BuiltinType(2205, "regclass", 2210),
    BuiltinType(2206, "regtype", 2211),
    BuiltinType(2950, "uuid", 2951, _fixed({"type": "string", "logicalType": "uuid"}, text_from_utf8,
                                           uuid_from_binary, write_string, string_raw_to_avro,
                                           text_of_binary=uuid_from_binary,
                                           kernel="string")),
    BuiltinType(2970, "txid_snapshot", 2949, _string_like(printer=snapshot_text_of_binary)),
    BuiltinType(3220, "pg_lsn", 3221, _string_like(printer=pg_lsn_text_of_binary)),
    BuiltinType(3614, "tsvector", 3643, _string_like(printer=tsvector_text_of_binary)),
    BuiltinType(3615, "tsquery", 3645, _string_like(printer=tsquery_text_of_binary)),
    BuiltinType(3734, "regconfig", 3735),
    BuiltinType(3769, "regdictionary", 3770),
    BuiltinType(3802, "jsonb", 3807, _string_like(_JSON_AVRO, jsonb_from_binary)),
    BuiltinType(3904, "int4range", 3905, _range_builder(23)),
    BuiltinType(3906, "numrange", 3907, _range_builder(1700)),
    BuiltinType(3908, "tsrange", 3909, _range_builder(1114)),
    BuiltinType(3910, "tstzrange", 3911, _range_builder(1184)),
    BuiltinType(3912, "daterange", 3913, _range_builder(1082)),
    BuiltinType(3926, "int8range", 3927, _range_builder(20)),
    BuiltinType(4072, "jsonpath", 4073, _string_like(printer=versioned_text)),
    BuiltinType(4089, "regnamespace", 4090),
    BuiltinType(4096, "regrole", 4097),
    BuiltinType(4191, "regcollation", 4192),
    BuiltinType(4451, "int4multirange", 6150, _multirange_builder(3904, 23)),
    BuiltinType(4532, "nummultirange", 6151, _multirange_builder(3906, 1700)),
    BuiltinType(4533, "tsmultirange", 6152, _multirange_builder(3908, 1114)),
    BuiltinType(4534, "tstzmultirange", 6153, _multirange_builder(3910, 1184)),
    BuiltinType(4535, "datemultirange", 6155, _multirange_builder(3912, 1082)),
    BuiltinType(4536, "int8multirange", 6157, _multirange_builder(3926, 20)),
    BuiltinType(5038, "pg_snapshot", 5039, _string_like(printer=snapshot_text_of_binary)),
    BuiltinType(5069, "xid8", 271, _string_like(printer=as_text(int_binary(struct.Struct("!Q").unpack)))),
)

BUILTIN_TYPES: Final[Mapping[int, BuiltinType]] = {t.oid: t for t in _BUILTINS}
"""Builtin types by OID (``pg_type.oid`` is stable across Postgres versions for builtins)."""
ARRAY_ELEMENTS: Final[Mapping[int, BuiltinType]] = {t.array_oid: t for t in _BUILTINS if t.array_oid}
"""Builtin array types by array OID → their element type."""

# --- choosing a column's codec --------------------------------------------------------------------

TypeNames = Callable[[int], "tuple[str, str] | None"]
"""``oid → (namespace, name)`` from pgoutput Type messages, for types outside the table."""


TypeCatalog = Callable[[int], "PgTypeInfo | None"]
"""``oid → PgTypeInfo``, ``None`` when the type is unknown."""

_MAX_TYPE_DEPTH: Final = 8  # domains over domains over arrays...: deeper means a cycle


_NUMERIC_OID: Final = 1700


@lru_cache(maxsize=1024)
def _builtin_codec(type_oid: int, type_modifier: int, numeric: NumericPolicy | None = None) -> TypeCodec | None:
    """A builtin type's codec; ``numeric`` applies to ``numeric`` without precision (and so to
    arrays of it, which recurse here)."""
    builtin = BUILTIN_TYPES.get(type_oid)
    if builtin is not None:
        if numeric is not None and type_oid == _NUMERIC_OID and numeric_typmod(type_modifier) is None:
            return policy_decimal_codec(numeric)
        if builtin.build is None:
            return text_codec(builtin.name)
        return builtin.build(builtin.name, type_modifier)
    element = ARRAY_ELEMENTS.get(type_oid)
    if element is not None:
        # An array column's modifier is its element's (numeric(10,2)[] carries (10,2)).
        element_codec = _builtin_codec(element.oid, type_modifier, numeric)
        assert element_codec is not None
        return array_codec(f"_{element.name}", element_codec, element.delimiter)
    return None


def _builtin_printer(type_oid: int) -> Callable[[bytes], str] | None:
    builtin = _builtin_codec(type_oid, -1)
    return builtin.text_of_binary if builtin is not None else None


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
        return text_codec(f"oid:{type_oid}" if names is None else _qualified(*names))
    name = _qualified(info.namespace, info.name)
    if info.kind == "d":
        base = codec_for(info.base_oid, type_modifier if type_modifier >= 0 else info.base_typmod,
                         type_names, catalog, _depth + 1, numeric)
        return base.renamed(name, pg_base_type=base.pg_type)
    if info.category == "A" and info.element_oid:
        element = codec_for(info.element_oid, type_modifier, type_names, catalog, _depth + 1, numeric)
        element_info = catalog(info.element_oid) if catalog is not None else None
        delimiter = (element_info.delimiter if element_info is not None else info.delimiter) or ","
        return array_codec(name, element, delimiter.encode())
    if info.kind == "c" and info.attributes:
        members = [(a, codec_for(a.type_oid, a.type_modifier, type_names, catalog, _depth + 1, numeric))
                   for a in info.attributes]
        return composite_codec(name, info, members, _builtin_printer)
    return catalog_text_codec(name, info)
