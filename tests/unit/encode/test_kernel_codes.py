"""Which compiled-kernel conversion each codec declares, for every builtin type and its variants.

The kernel (``encode/_native.pyx``) converts a column itself only when its codec says which of its
conversions applies (``TypeCodec.kernel``/``kernel_binary``); every other column goes back to the
codec's Python field encoder. This table pins the declared conversion of every builtin type, its
array, a domain over it, and the typmod and catalog variants that change it, as the encoder chose
them when the choice was made by converter identity: a codec whose declaration drifts from what its
converters do shows up here as a changed row.
"""

from __future__ import annotations

from typing import NamedTuple, get_args

import pytest

from pgbridge.encode.plan import native_binary_code, native_code
from pgbridge.encode.types import (
    ARRAY_ELEMENTS,
    BUILTIN_TYPES,
    KernelBinary,
    KernelText,
    NumericPolicy,
    TypeCodec,
    codec_for,
    text_from_utf8,
)
from pgbridge.encode.wire import write_string
from pgbridge.source.type_catalog import CompositeAttribute, PgTypeInfo
from tests.support.kernels import compiled

NUMERIC, VARCHAR, BPCHAR, INT4, TEXT = 1700, 1043, 1042, 23, 25
DOMAIN_BASE = 900_000  # domain over builtin ``oid`` has OID DOMAIN_BASE + oid
ENUM, CITEXT, HSTORE, LTREE, COMPOSITE, ENUM_ARRAY, NUMERIC_DOMAIN, UNKNOWN = range(800_000, 800_008)


def numeric_mod(precision: int, scale: int) -> int:
    return ((precision << 16) | (scale & 0x7FF)) + 4


def _catalog_type(oid: int, name: str, kind: str, send: str, *, category: str = "U", base_oid: int = 0,
                  base_typmod: int = -1, element_oid: int = 0,
                  attributes: tuple[CompositeAttribute, ...] = ()) -> PgTypeInfo:
    return PgTypeInfo(oid, "public", name, kind, category, base_oid, base_typmod, element_oid, ",", send, attributes)


CATALOG: dict[int, PgTypeInfo] = {
    ENUM: _catalog_type(ENUM, "mood", "e", "enum_send", category="E"),
    CITEXT: _catalog_type(CITEXT, "citext", "b", "textsend", category="S"),
    HSTORE: _catalog_type(HSTORE, "hstore", "b", "hstore_send"),
    LTREE: _catalog_type(LTREE, "ltree", "b", "ltree_send"),
    COMPOSITE: _catalog_type(COMPOSITE, "pair", "c", "record_send", category="C",
                             attributes=(CompositeAttribute("a", INT4, -1), CompositeAttribute("b", TEXT, -1))),
    ENUM_ARRAY: _catalog_type(ENUM_ARRAY, "_mood", "b", "array_send", category="A", element_oid=ENUM),
    NUMERIC_DOMAIN: _catalog_type(NUMERIC_DOMAIN, "price", "d", "numeric_send", category="N",
                                  base_oid=NUMERIC, base_typmod=numeric_mod(12, 2)),
    **{DOMAIN_BASE + t.oid: _catalog_type(DOMAIN_BASE + t.oid, f"d_{t.name}", "d", "", base_oid=t.oid)
       for t in BUILTIN_TYPES.values()},
}


class Case(NamedTuple):
    label: str
    oid: int
    typmod: int = -1
    numeric: NumericPolicy | None = None


CASES: tuple[Case, ...] = (
    *(Case(t.name, t.oid) for t in BUILTIN_TYPES.values()),
    *(Case(f"_{t.name}", array_oid) for array_oid, t in ARRAY_ELEMENTS.items()),
    *(Case(f"domain d_{t.name}", DOMAIN_BASE + t.oid) for t in BUILTIN_TYPES.values()),
    Case("varchar(10)", VARCHAR, 14), Case("bpchar(3)", BPCHAR, 7),
    *(Case(f"numeric({p},{s})", NUMERIC, numeric_mod(p, s))
      for p, s in ((12, 2), (5, 0), (18, 18), (19, 18), (38, 10), (38, 19), (1000, 0), (5, -2), (3, 5))),
    Case("_numeric(12,2)", 1231, numeric_mod(12, 2)), Case("_numeric(38,19)", 1231, numeric_mod(38, 19)),
    Case("numeric policy", NUMERIC, -1, NumericPolicy()),
    Case("numeric(12,2) policy", NUMERIC, numeric_mod(12, 2), NumericPolicy()),
    Case("_numeric policy", 1231, -1, NumericPolicy(precision=20, scale=5, overflow="fail")),
    Case("domain price numeric(12,2)", NUMERIC_DOMAIN), Case("domain d_numeric policy", DOMAIN_BASE + NUMERIC,
                                                               -1, NumericPolicy()),
    Case("enum", ENUM), Case("citext", CITEXT), Case("hstore", HSTORE), Case("ltree", LTREE),
    Case("composite", COMPOSITE), Case("_enum", ENUM_ARRAY), Case("unknown oid", UNKNOWN),
)


def codec_of(case: Case) -> TypeCodec:
    return codec_for(case.oid, case.typmod, None, CATALOG.get, numeric=case.numeric)


def kernel_codes(case: Case) -> tuple[str, int, str]:
    codec = codec_of(case)
    text, scale = native_code(codec)
    return text, scale, native_binary_code(codec)


EXPECTED: dict[str, tuple[str, int, str]] = {
    'bool': ('bool', 0, 'binary_bool'),
    'bytea': ('fallback', 0, 'fallback'),
    'char': ('string', 0, 'fallback'),
    'name': ('string', 0, 'binary_string'),
    'int8': ('long', 0, 'binary_int8'),
    'int2': ('long', 0, 'binary_int2'),
    'int2vector': ('string', 0, 'fallback'),
    'int4': ('long', 0, 'binary_int4'),
    'regproc': ('string', 0, 'fallback'),
    'text': ('string', 0, 'binary_string'),
    'oid': ('long', 0, 'binary_oid'),
    'tid': ('string', 0, 'fallback'),
    'xid': ('string', 0, 'fallback'),
    'cid': ('string', 0, 'fallback'),
    'oidvector': ('string', 0, 'fallback'),
    'json': ('string', 0, 'binary_string'),
    'xml': ('string', 0, 'binary_string'),
    'point': ('string', 0, 'fallback'),
    'lseg': ('string', 0, 'fallback'),
    'path': ('string', 0, 'fallback'),
    'box': ('string', 0, 'fallback'),
    'polygon': ('string', 0, 'fallback'),
    'line': ('string', 0, 'fallback'),
    'cidr': ('string', 0, 'fallback'),
    'float4': ('float', 0, 'binary_float4'),
    'float8': ('double', 0, 'binary_float8'),
    'circle': ('string', 0, 'fallback'),
    'macaddr8': ('string', 0, 'fallback'),
    'money': ('string', 0, 'fallback'),
    'macaddr': ('string', 0, 'fallback'),
    'inet': ('string', 0, 'fallback'),
    'aclitem': ('string', 0, 'fallback'),
    'bpchar': ('string', 0, 'binary_string'),
    'varchar': ('string', 0, 'binary_string'),
    'date': ('date', 0, 'binary_date'),
    'time': ('fallback', 0, 'fallback'),
    'timestamp': ('timestamp', 0, 'binary_timestamp'),
    'timestamptz': ('timestamptz', 0, 'binary_timestamp'),
    'interval': ('fallback', 0, 'fallback'),
    'timetz': ('string', 0, 'fallback'),
    'bit': ('string', 0, 'fallback'),
    'varbit': ('string', 0, 'fallback'),
    'numeric': ('string', 0, 'fallback'),
    'refcursor': ('string', 0, 'binary_string'),
    'regprocedure': ('string', 0, 'fallback'),
    'regoper': ('string', 0, 'fallback'),
    'regoperator': ('string', 0, 'fallback'),
    'regclass': ('string', 0, 'fallback'),
    'regtype': ('string', 0, 'fallback'),
    'uuid': ('string', 0, 'fallback'),
    'txid_snapshot': ('string', 0, 'fallback'),
    'pg_lsn': ('string', 0, 'fallback'),
    'tsvector': ('string', 0, 'fallback'),
    'tsquery': ('string', 0, 'fallback'),
    'regconfig': ('string', 0, 'fallback'),
    'regdictionary': ('string', 0, 'fallback'),
    'jsonb': ('string', 0, 'fallback'),
    'int4range': ('fallback', 0, 'fallback'),
    'numrange': ('fallback', 0, 'fallback'),
    'tsrange': ('fallback', 0, 'fallback'),
    'tstzrange': ('fallback', 0, 'fallback'),
    'daterange': ('fallback', 0, 'fallback'),
    'int8range': ('fallback', 0, 'fallback'),
    'jsonpath': ('string', 0, 'fallback'),
    'regnamespace': ('string', 0, 'fallback'),
    'regrole': ('string', 0, 'fallback'),
    'regcollation': ('string', 0, 'fallback'),
    'int4multirange': ('fallback', 0, 'fallback'),
    'nummultirange': ('fallback', 0, 'fallback'),
    'tsmultirange': ('fallback', 0, 'fallback'),
    'tstzmultirange': ('fallback', 0, 'fallback'),
    'datemultirange': ('fallback', 0, 'fallback'),
    'int8multirange': ('fallback', 0, 'fallback'),
    'pg_snapshot': ('string', 0, 'fallback'),
    'xid8': ('string', 0, 'fallback'),
    '_bool': ('fallback', 0, 'fallback'),
    '_bytea': ('fallback', 0, 'fallback'),
    '_char': ('fallback', 0, 'fallback'),
    '_name': ('fallback', 0, 'fallback'),
    '_int8': ('fallback', 0, 'fallback'),
    '_int2': ('fallback', 0, 'fallback'),
    '_int2vector': ('fallback', 0, 'fallback'),
    '_int4': ('fallback', 0, 'fallback'),
    '_regproc': ('fallback', 0, 'fallback'),
    '_text': ('fallback', 0, 'fallback'),
    '_oid': ('fallback', 0, 'fallback'),
    '_tid': ('fallback', 0, 'fallback'),
    '_xid': ('fallback', 0, 'fallback'),
    '_cid': ('fallback', 0, 'fallback'),
    '_oidvector': ('fallback', 0, 'fallback'),
    '_json': ('fallback', 0, 'fallback'),
    '_xml': ('fallback', 0, 'fallback'),
    '_point': ('fallback', 0, 'fallback'),
    '_lseg': ('fallback', 0, 'fallback'),
    '_path': ('fallback', 0, 'fallback'),
    '_box': ('fallback', 0, 'fallback'),
    '_polygon': ('fallback', 0, 'fallback'),
    '_line': ('fallback', 0, 'fallback'),
    '_cidr': ('fallback', 0, 'fallback'),
    '_float4': ('fallback', 0, 'fallback'),
    '_float8': ('fallback', 0, 'fallback'),
    '_circle': ('fallback', 0, 'fallback'),
    '_macaddr8': ('fallback', 0, 'fallback'),
    '_money': ('fallback', 0, 'fallback'),
    '_macaddr': ('fallback', 0, 'fallback'),
    '_inet': ('fallback', 0, 'fallback'),
    '_aclitem': ('fallback', 0, 'fallback'),
    '_bpchar': ('fallback', 0, 'fallback'),
    '_varchar': ('fallback', 0, 'fallback'),
    '_date': ('fallback', 0, 'fallback'),
    '_time': ('fallback', 0, 'fallback'),
    '_timestamp': ('fallback', 0, 'fallback'),
    '_timestamptz': ('fallback', 0, 'fallback'),
    '_interval': ('fallback', 0, 'fallback'),
    '_timetz': ('fallback', 0, 'fallback'),
    '_bit': ('fallback', 0, 'fallback'),
    '_varbit': ('fallback', 0, 'fallback'),
    '_numeric': ('fallback', 0, 'fallback'),
    '_refcursor': ('fallback', 0, 'fallback'),
    '_regprocedure': ('fallback', 0, 'fallback'),
    '_regoper': ('fallback', 0, 'fallback'),
    '_regoperator': ('fallback', 0, 'fallback'),
    '_regclass': ('fallback', 0, 'fallback'),
    '_regtype': ('fallback', 0, 'fallback'),
    '_uuid': ('fallback', 0, 'fallback'),
    '_txid_snapshot': ('fallback', 0, 'fallback'),
    '_pg_lsn': ('fallback', 0, 'fallback'),
    '_tsvector': ('fallback', 0, 'fallback'),
    '_tsquery': ('fallback', 0, 'fallback'),
    '_regconfig': ('fallback', 0, 'fallback'),
    '_regdictionary': ('fallback', 0, 'fallback'),
    '_jsonb': ('fallback', 0, 'fallback'),
    '_int4range': ('fallback', 0, 'fallback'),
    '_numrange': ('fallback', 0, 'fallback'),
    '_tsrange': ('fallback', 0, 'fallback'),
    '_tstzrange': ('fallback', 0, 'fallback'),
    '_daterange': ('fallback', 0, 'fallback'),
    '_int8range': ('fallback', 0, 'fallback'),
    '_jsonpath': ('fallback', 0, 'fallback'),
    '_regnamespace': ('fallback', 0, 'fallback'),
    '_regrole': ('fallback', 0, 'fallback'),
    '_regcollation': ('fallback', 0, 'fallback'),
    '_int4multirange': ('fallback', 0, 'fallback'),
    '_nummultirange': ('fallback', 0, 'fallback'),
    '_tsmultirange': ('fallback', 0, 'fallback'),
    '_tstzmultirange': ('fallback', 0, 'fallback'),
    '_datemultirange': ('fallback', 0, 'fallback'),
    '_int8multirange': ('fallback', 0, 'fallback'),
    '_pg_snapshot': ('fallback', 0, 'fallback'),
    '_xid8': ('fallback', 0, 'fallback'),
    'domain d_bool': ('bool', 0, 'binary_bool'),
    'domain d_bytea': ('fallback', 0, 'fallback'),
    'domain d_char': ('string', 0, 'fallback'),
    'domain d_name': ('string', 0, 'binary_string'),
    'domain d_int8': ('long', 0, 'binary_int8'),
    'domain d_int2': ('long', 0, 'binary_int2'),
    'domain d_int2vector': ('string', 0, 'fallback'),
    'domain d_int4': ('long', 0, 'binary_int4'),
    'domain d_regproc': ('string', 0, 'fallback'),
    'domain d_text': ('string', 0, 'binary_string'),
    'domain d_oid': ('long', 0, 'binary_oid'),
    'domain d_tid': ('string', 0, 'fallback'),
    'domain d_xid': ('string', 0, 'fallback'),
    'domain d_cid': ('string', 0, 'fallback'),
    'domain d_oidvector': ('string', 0, 'fallback'),
    'domain d_json': ('string', 0, 'binary_string'),
    'domain d_xml': ('string', 0, 'binary_string'),
    'domain d_point': ('string', 0, 'fallback'),
    'domain d_lseg': ('string', 0, 'fallback'),
    'domain d_path': ('string', 0, 'fallback'),
    'domain d_box': ('string', 0, 'fallback'),
    'domain d_polygon': ('string', 0, 'fallback'),
    'domain d_line': ('string', 0, 'fallback'),
    'domain d_cidr': ('string', 0, 'fallback'),
    'domain d_float4': ('float', 0, 'binary_float4'),
    'domain d_float8': ('double', 0, 'binary_float8'),
    'domain d_circle': ('string', 0, 'fallback'),
    'domain d_macaddr8': ('string', 0, 'fallback'),
    'domain d_money': ('string', 0, 'fallback'),
    'domain d_macaddr': ('string', 0, 'fallback'),
    'domain d_inet': ('string', 0, 'fallback'),
    'domain d_aclitem': ('string', 0, 'fallback'),
    'domain d_bpchar': ('string', 0, 'binary_string'),
    'domain d_varchar': ('string', 0, 'binary_string'),
    'domain d_date': ('date', 0, 'binary_date'),
    'domain d_time': ('fallback', 0, 'fallback'),
    'domain d_timestamp': ('timestamp', 0, 'binary_timestamp'),
    'domain d_timestamptz': ('timestamptz', 0, 'binary_timestamp'),
    'domain d_interval': ('fallback', 0, 'fallback'),
    'domain d_timetz': ('string', 0, 'fallback'),
    'domain d_bit': ('string', 0, 'fallback'),
    'domain d_varbit': ('string', 0, 'fallback'),
    'domain d_numeric': ('string', 0, 'fallback'),
    'domain d_refcursor': ('string', 0, 'binary_string'),
    'domain d_regprocedure': ('string', 0, 'fallback'),
    'domain d_regoper': ('string', 0, 'fallback'),
    'domain d_regoperator': ('string', 0, 'fallback'),
    'domain d_regclass': ('string', 0, 'fallback'),
    'domain d_regtype': ('string', 0, 'fallback'),
    'domain d_uuid': ('string', 0, 'fallback'),
    'domain d_txid_snapshot': ('string', 0, 'fallback'),
    'domain d_pg_lsn': ('string', 0, 'fallback'),
    'domain d_tsvector': ('string', 0, 'fallback'),
    'domain d_tsquery': ('string', 0, 'fallback'),
    'domain d_regconfig': ('string', 0, 'fallback'),
    'domain d_regdictionary': ('string', 0, 'fallback'),
    'domain d_jsonb': ('string', 0, 'fallback'),
    'domain d_int4range': ('fallback', 0, 'fallback'),
    'domain d_numrange': ('fallback', 0, 'fallback'),
    'domain d_tsrange': ('fallback', 0, 'fallback'),
    'domain d_tstzrange': ('fallback', 0, 'fallback'),
    'domain d_daterange': ('fallback', 0, 'fallback'),
    'domain d_int8range': ('fallback', 0, 'fallback'),
    'domain d_jsonpath': ('string', 0, 'fallback'),
    'domain d_regnamespace': ('string', 0, 'fallback'),
    'domain d_regrole': ('string', 0, 'fallback'),
    'domain d_regcollation': ('string', 0, 'fallback'),
    'domain d_int4multirange': ('fallback', 0, 'fallback'),
    'domain d_nummultirange': ('fallback', 0, 'fallback'),
    'domain d_tsmultirange': ('fallback', 0, 'fallback'),
    'domain d_tstzmultirange': ('fallback', 0, 'fallback'),
    'domain d_datemultirange': ('fallback', 0, 'fallback'),
    'domain d_int8multirange': ('fallback', 0, 'fallback'),
    'domain d_pg_snapshot': ('string', 0, 'fallback'),
    'domain d_xid8': ('string', 0, 'fallback'),
    'varchar(10)': ('string', 0, 'binary_string'),
    'bpchar(3)': ('string', 0, 'binary_string'),
    'numeric(12,2)': ('decimal', 2, 'binary_decimal'),
    'numeric(5,0)': ('decimal', 0, 'binary_decimal'),
    'numeric(18,18)': ('decimal', 18, 'binary_decimal'),
    'numeric(19,18)': ('decimal', 18, 'binary_decimal'),
    'numeric(38,10)': ('decimal', 10, 'binary_decimal'),
    'numeric(38,19)': ('fallback', 0, 'fallback'),
    'numeric(1000,0)': ('decimal', 0, 'binary_decimal'),
    'numeric(5,-2)': ('decimal', 0, 'binary_decimal'),
    'numeric(3,5)': ('decimal', 5, 'binary_decimal'),
    '_numeric(12,2)': ('fallback', 0, 'fallback'),
    '_numeric(38,19)': ('fallback', 0, 'fallback'),
    'numeric policy': ('fallback', 0, 'fallback'),
    'numeric(12,2) policy': ('decimal', 2, 'binary_decimal'),
    '_numeric policy': ('fallback', 0, 'fallback'),
    'domain price numeric(12,2)': ('decimal', 2, 'binary_decimal'),
    'domain d_numeric policy': ('fallback', 0, 'fallback'),
    'enum': ('string', 0, 'binary_string'),
    'citext': ('string', 0, 'binary_string'),
    'hstore': ('string', 0, 'fallback'),
    'ltree': ('string', 0, 'fallback'),
    'composite': ('fallback', 0, 'fallback'),
    '_enum': ('fallback', 0, 'fallback'),
    'unknown oid': ('string', 0, 'fallback'),
}


def test_the_cases_are_exactly_the_table() -> None:
    assert [case.label for case in CASES] == list(EXPECTED)


@pytest.mark.parametrize("case", CASES, ids=[case.label for case in CASES])
def test_each_codec_declares_the_kernel_conversion_of_the_table(case: Case) -> None:
    assert kernel_codes(case) == EXPECTED[case.label]


def test_every_declarable_conversion_is_one_the_built_kernel_has() -> None:
    codes = compiled("pgbridge.encode._native").CODES
    assert set(get_args(KernelText)) | set(get_args(KernelBinary)) <= set(codes)


def test_a_binary_conversion_needs_a_binary_converter() -> None:
    with pytest.raises(ValueError, match="declares a binary kernel conversion but reads no binary"):
        TypeCodec("x", "string", text_from_utf8, None, write_string, kernel="string", kernel_binary="binary_string")
