"""Binary (send) forms of the types published as Postgres's text: the same string as text mode.

Every fixture is ``(type oid, send bytes, text)`` as a Postgres 18 server produced them
(``<type>_send(value)`` and ``format('%s', value)``, extra_float_digits=3); Postgres 15 gives the
same bytes and text for each. Binary mode must publish exactly the text mode string.
"""

from __future__ import annotations

import math
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pgbridge.encode.types import BUILTIN_TYPES, EncodeError, codec_for, float4_text, float8_text
from tests.unit.encode.test_type_codecs import field

INET, CIDR, MACADDR, MACADDR8, BIT, VARBIT = 869, 650, 829, 774, 1560, 1562
POINT, LSEG, PATH, BOX, POLYGON, LINE, CIRCLE = 600, 601, 602, 603, 604, 628, 718
TID, INT2VECTOR, OIDVECTOR, TXID_SNAPSHOT, PG_SNAPSHOT, PG_LSN = 27, 22, 30, 2970, 5038, 3220
TSVECTOR, TSQUERY, JSONPATH, CHAR = 3614, 3615, 4072, 18
INET_ARRAY, BOX_ARRAY, FLOAT8_ARRAY = 1041, 1020, 1022

SENT: list[tuple[int, str, str]] = [
    (CHAR, "61", "a"), (CHAR, "00", ""), (CHAR, "7f", "\x7f"), (CHAR, "ff", "\\377"), (CHAR, "c3", "\\303"),
    (INET, '02180004c0a80001', '192.168.0.1/24'),
    (INET, '022000040a000001', '10.0.0.1'),
    (INET, '0200000400000000', '0.0.0.0/0'),
    (INET, '0380001000000000000000000000000000000001', '::1'),
    (INET, '03400010fe800000000000000000000000010002', 'fe80::1:2/64'),
    (INET, '0380001020010db8000000000001000000000001', '2001:db8::1:0:0:1'),
    (INET, '0380001000000000000000000000ffff01020304', '::ffff:1.2.3.4'),
    (INET, '0380001000000000000000000000000001020304', '::1.2.3.4'),
    (INET, '038000100000000000000000ffff000001020304', '::ffff:0:102:304'),
    (INET, '0380001000010000000000020000000000000003', '1:0:0:2::3'),
    (INET, '0380001000010000000200000003000000040000', '1:0:2:0:3:0:4:0'),
    (INET, '0380001000000000000100000000000000000000', '0:0:1::'),
    (INET, '037f0010ffffffffffffffffffffffffffffffff', 'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/127'),
    (CIDR, '020801040a000000', '10.0.0.0/8'),
    (CIDR, '0200010400000000', '0.0.0.0/0'),
    (CIDR, '02200104c0a80105', '192.168.1.5/32'),
    (CIDR, '0300011000000000000000000000000000000000', '::/0'),
    (CIDR, '0380011000000000000000000000000000000001', '::1/128'),
    (CIDR, '0320011020010db8000000000000000000000000', '2001:db8::/32'),
    (CIDR, '0360011000000000000000000000ffff00000000', '::ffff:0.0.0.0/96'),
    (MACADDR, '08002b010203', '08:00:2b:01:02:03'),
    (MACADDR, 'ffffffffffff', 'ff:ff:ff:ff:ff:ff'),
    (MACADDR8, '08002b0102030405', '08:00:2b:01:02:03:04:05'),
    (MACADDR8, '08002bfffe010203', '08:00:2b:ff:fe:01:02:03'),
    (BIT, '0000000180', '1'),
    (BIT, '00000009aa80', '101010101'),
    (BIT, '000000408000000000000001', '1000000000000000000000000000000000000000000000000000000000000001'),
    (VARBIT, '00000000', ''),
    (VARBIT, '0000000100', '0'),
    (VARBIT, '00000009aa80', '101010101'),
    (VARBIT, '00000040ffffffffffffffff', '1111111111111111111111111111111111111111111111111111111111111111'),
    (POINT, '3ff8000000000000c000000000000000', '(1.5,-2)'),
    (POINT, '7ff80000000000007ff0000000000000', '(NaN,Infinity)'),
    (POINT, 'fff00000000000008000000000000000', '(-Infinity,-0)'),
    (POINT, '7e37e43c8800759c01a56e1fc2f8f359', '(1e+300,1e-300)'),
    (POINT, '3fb999999999999a3f1a36e2eb1c432d', '(0.1,0.0001)'),
    (POINT, '430c6bf52634000042dc12218377de40', '(1e+15,123456789012345)'),
    (POINT, '000000000000000144a52d02c7e14af6', '(5e-324,4.9999999999999996e+22)'),
    (LSEG, '000000000000000000000000000000003ff00000000000003ff8000000000000', '[(0,0),(1,1.5)]'),
    (BOX, '3ff00000000000003ff000000000000000000000000000000000000000000000', '(1,1),(0,0)'),
    (BOX, '40080000000000004010000000000000bff0000000000000c004000000000000', '(3,4),(-1,-2.5)'),
    (PATH, '0100000003000000000000000000000000000000003ff00000000000003ff000000000000040000000000000000000000000000000', '((0,0),(1,1),(2,0))'),
    (PATH, '0000000002000000000000000000000000000000003ff00000000000003ff0000000000000', '[(0,0),(1,1)]'),
    (POLYGON, '00000003000000000000000000000000000000003ff00000000000003ff000000000000040000000000000000000000000000000', '((0,0),(1,1),(2,0))'),
    (POLYGON, '000000013ff80000000000004004000000000000', '((1.5,2.5))'),
    (LINE, '3ff0000000000000bff00000000000000000000000000000', '{1,-1,0}'),
    (LINE, '3fe00000000000004000000000000000c43043561a882930', '{0.5,2,-3e+20}'),
    (CIRCLE, '000000000000000000000000000000003ff0000000000000', '<(0,0),1>'),
    (CIRCLE, '3ff8000000000000c0040000000000003f50624dd2f1a9fc', '<(1.5,-2.5),0.001>'),
    (TID, '000000000000', '(0,0)'),
    (TID, 'ffffffffffff', '(4294967295,65535)'),
    (INT2VECTOR, '0000000100000000000000150000000000000000', ''),
    (INT2VECTOR, '000000010000000000000015000000030000000000000002000100000002000200000002fffd', '1 2 -3'),
    (INT2VECTOR, '0000000100000000000000150000000200000000000000027fff000000028000', '32767 -32768'),
    (OIDVECTOR, '00000001000000000000001a0000000000000000', ''),
    (OIDVECTOR, '00000001000000000000001a0000000200000000000000040000000100000004ffffffff', '1 4294967295'),
    (TXID_SNAPSHOT, '00000000000000000000000a0000000000000014', '10:20:'),
    (TXID_SNAPSHOT, '00000003000000000000000a0000000000000014000000000000000a000000000000000b000000000000000f', '10:20:10,11,15'),
    (PG_SNAPSHOT, '00000003000000000000000a0000000000000014000000000000000a000000000000000b000000000000000f', '10:20:10,11,15'),
    (PG_LSN, '0000000000000000', '0/0'),
    (PG_LSN, '00000016b374d848', '16/B374D848'),
    (PG_LSN, 'ffffffffffffffff', 'FFFFFFFF/FFFFFFFF'),
    (TSVECTOR, '00000000', ''),
    (TSVECTOR, '0000000361000000636174000000666174000000', "'a' 'cat' 'fat'"),
    (TSVECTOR, '0000000261000004c001800240030004620000013fff', "'a':1A,2B,3C,4 'b':16383"),
    (TSVECTOR, '000000036261636b5c736c617368000000697427730000007a77c3b66c660000010005', "'back\\\\slash' 'it''s' 'zwölf':5"),
    (TSQUERY, '00000000', ''),
    (TSQUERY, '0000000502030202010000630001000062000100006100', "'a' | 'b' & 'c'"),
    (TSQUERY, '0000000502020100006300020301000062000100006100', "( 'a' | 'b' ) & 'c'"),
    (TSQUERY, '000000040201020201000062000100006100', "!( 'a' & 'b' )"),
    (TSQUERY, '000000050204000102040001010000630001000062000100006100', "'a' <-> ( 'b' <-> 'c' )"),
    (TSQUERY, '000000050204000101000063000204000101000062000100006100', "'a' <-> 'b' <-> 'c'"),
    (TSQUERY, '0000000302020101006200010c016100', "'a':*AB & 'b':D"),
    (TSQUERY, '0000000402040003020101000078000100006974277300', "'it''s' <3> !'x'"),
    (TSQUERY, '0000000702040000020301000064000100006300020201000062000100006100', "( 'a' & 'b' ) <0> ( 'c' | 'd' )"),
    (JSONPATH, '01242e2261225b2a5d3f2840203e203129', '$."a"[*]?(@ > 1)'),
    (JSONPATH, '0173747269637420242e226b6579207822', 'strict $."key x"'),
]


@pytest.mark.parametrize(("oid", "sent", "text"), SENT)
def test_binary_value_publishes_exactly_the_text_postgres_prints(oid: int, sent: str, text: str) -> None:
    codec = codec_for(oid, -1)
    assert codec.text_of_binary is not None
    assert codec.text_of_binary(bytes.fromhex(sent)) == text
    assert field(codec, bytes.fromhex(sent), binary=True) == field(codec, text.encode()) == (text, None)


@pytest.mark.parametrize(("oid", "sent", "text"), [
    (INET_ARRAY, "00000001000000010000036500000003000000010000000802180004c0a80001ffffffff0000001403800010"
                 "00000000000000000000000000000001", "{192.168.0.1/24,NULL,::1}"),
    (BOX_ARRAY, "00000001000000000000025b0000000200000001000000203ff00000000000003ff000000000000000000000"
                "00000000000000000000000000000020400000000000000040000000000000003ff00000000000003ff0000000000000",
     "{(1,1),(0,0);(2,2),(1,1)}"),
])
def test_arrays_of_these_types_read_in_binary_like_their_text(oid: int, sent: str, text: str) -> None:
    codec = codec_for(oid, -1)
    assert field(codec, bytes.fromhex(sent), binary=True) == field(codec, text.encode())
    assert codec.text_of_binary is not None and codec.text_of_binary(bytes.fromhex(sent)) == text


def test_a_float8_array_the_avro_array_cannot_hold_gets_postgres_text_in_binary_too() -> None:
    sent = bytes.fromhex("0000000200000000000002bd0000000200000001000000020000000100000008430c6bf5263400000000000"
                         "83fb999999999999a000000088000000000000000000000087ff8000000000000")
    text = "{{1e+15,0.1},{-0,NaN}}"
    codec = codec_for(FLOAT8_ARRAY, -1)
    assert field(codec, sent, binary=True) == field(codec, text.encode()) == (None, text)


@pytest.mark.parametrize(("value", "text"), [
    (0.0, "0"), (-0.0, "-0"), (math.nan, "NaN"), (math.inf, "Infinity"), (-math.inf, "-Infinity"),
    (1.5, "1.5"), (100.0, "100"), (0.0001, "0.0001"), (0.00001, "1e-05"), (1e15, "1e+15"),
    (123456789012345.0, "123456789012345"), (1234567890123456.0, "1.234567890123456e+15"),
    (1e300, "1e+300"), (5e-324, "5e-324"), (1.7976931348623157e308, "1.7976931348623157e+308"),
    (0.1 + 0.2, "0.30000000000000004"), (-2.5e-5, "-2.5e-05"),
    # The decimal halfway to the next double reads back in Python but Postgres never prints it.
    (5e22, "4.9999999999999996e+22"), (1e23, "9.999999999999999e+22"),
    (5.299064834871378e16, "5.2990648348713776e+16"),
])
def test_float8_text_is_float8out_with_extra_float_digits(value: float, text: str) -> None:
    assert float8_text(value) == text


@given(st.floats(allow_nan=False))
def test_float8_text_reads_back_to_the_same_double(value: float) -> None:
    text = float8_text(value)
    assert struct.pack("!d", float(text)) == struct.pack("!d", value)
    mantissa = text.lstrip("-").split("e")[0]
    assert not ("." in mantissa and mantissa.endswith("0")), "no trailing zeros after the point"


@pytest.mark.parametrize(("value", "text"), [
    (0.1, "0.1"), (123456.0, "123456"), (1234567.0, "1.234567e+06"), (1e6, "1e+06"), (0.0001, "0.0001"),
    (1e-5, "1e-05"), (16777216.0, "1.6777216e+07"), (3.4028234663852886e38, "3.4028235e+38"), (1e-45, "1e-45"),
    (-0.0, "-0"), (math.inf, "Infinity"), (math.nan, "NaN"), (-2.5, "-2.5"),
])
def test_float4_text_is_float4out_with_extra_float_digits(value: float, text: str) -> None:
    assert float4_text(struct.unpack("!f", struct.pack("!f", value))[0]) == text


@given(st.floats(width=32, allow_nan=False))
def test_float4_text_reads_back_to_the_same_float4(value: float) -> None:
    text = float4_text(value)
    assert struct.pack("!f", float(text)) == struct.pack("!f", value)
    assert len(text.lstrip("-").split("e")[0].replace(".", "").strip("0")) <= 9


def test_a_float4_array_the_avro_array_cannot_hold_gets_postgres_text_in_binary_too() -> None:
    sent = bytes.fromhex("0000000200000000000002bc00000001000000010000000200000001000000043dcccccd00000004"
                         "49742400")
    codec = codec_for(1021, -1)
    assert field(codec, sent, binary=True) == field(codec, b"{{0.1,1e+06}}") == (None, "{{0.1,1e+06}}")


def _tsquery_chain(count: int) -> bytes:
    """``'w0' & 'w1' & … & 'wN'`` as tsquerysend writes it: each ``&`` then its right, then its left."""
    items = [b""]
    for i in range(count - 1, 0, -1):
        items.append(b"\x02\x02" + b"\x01\x00\x00" + f"w{i}".encode() + b"\x00")
    items.append(b"\x01\x00\x00w0\x00")
    return struct.pack("!i", 2 * count - 1) + b"".join(items)


def test_a_tsquery_deeper_than_the_recursion_limit_prints_without_recursing() -> None:
    text = codec_for(TSQUERY, -1).text_of_binary(_tsquery_chain(5000))  # type: ignore[misc]
    assert text == " & ".join(f"'w{i}'" for i in range(5000))


def test_malformed_binary_values_raise_instead_of_printing_something_else() -> None:
    with pytest.raises(ValueError, match="address family"):
        field(codec_for(INET, -1), b"\x07\x20\x00\x04\x01\x02\x03\x04", binary=True)
    with pytest.raises(ValueError, match="6 or 8 bytes"):
        field(codec_for(MACADDR, -1), b"\x01\x02", binary=True)
    with pytest.raises(ValueError, match="unknown tsquery"):
        field(codec_for(TSQUERY, -1), b"\x00\x00\x00\x01\x09", binary=True)


TEXT_ONLY = {"money": "needs lc_monetary", "regproc": "an OID", "regprocedure": "", "regoper": "",
             "regoperator": "", "regclass": "", "regtype": "", "regconfig": "", "regdictionary": "",
             "regnamespace": "", "regrole": "", "regcollation": "", "aclitem": "no send function"}


def test_only_the_deliberately_text_only_builtins_lack_a_binary_reader() -> None:
    without = {t.name for t in BUILTIN_TYPES.values() if codec_for(t.oid, -1).from_binary is None}
    assert without == set(TEXT_ONLY)
    with pytest.raises(EncodeError, match="binary format of type regclass"):
        field(codec_for(2205, -1), b"\x00\x00\x04\xeb", binary=True)
