"""The compiled row writer (``encode/_native.pyx``) writes exactly what the Python encoder writes.

Each example is one change on a table with a column of every type the kernel converts itself, plus
one it hands back to Python, filled with values as Postgres prints them and with text Postgres
never sends (other years, signs, spellings, junk): records, or the error raised, must be identical
with the kernel and without it. The records are also decoded against their announced schema, so
"identical" cannot mean "identically wrong" for the cases the other encode tests pin down.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, Literal

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pgbridge.assemble.units import RowChange
from pgbridge.decode.messages import IDENTITY_FULL, Relation, TupleData
from pgbridge.encode import ChangeEncoder, EventContext, SingleObjectRegistrar, plan
from pgbridge.encode.plan import native_binary_code, native_code
from pgbridge.encode.schemas import column_codecs
from pgbridge.lsn import Lsn
from pgbridge.publish.routing import TopicRouter
from tests.support.kernels import compiled
from tests.support.properties import examples
from tests.unit.encode.avro_helpers import SchemaLog, relation


@pytest.fixture(autouse=True)
def kernel(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Overrides the package's two-way fixture: these tests compare the two ways themselves."""
    monkeypatch.setattr(plan, "_native", compiled("pgbridge.encode._native"))
    yield "native"


def numeric_typmod(precision: int, scale: int) -> int:
    return ((precision << 16) | (scale & 0x7FF)) + 4


# name, type oid, typmod, the kernel's conversion for it
COLUMNS: tuple[tuple[str, int, int, str], ...] = (
    ("i8", 20, -1, "long"), ("i4", 23, -1, "long"), ("i2", 21, -1, "long"), ("o", 26, -1, "long"),
    ("t", 25, -1, "string"), ("vc", 1043, 14, "string"), ("u", 2950, -1, "string"), ("n_any", 1700, -1, "string"),
    ("b", 16, -1, "bool"), ("f8", 701, -1, "double"), ("f4", 700, -1, "float"),
    ("n12_2", 1700, numeric_typmod(12, 2), "decimal"), ("n38_10", 1700, numeric_typmod(38, 10), "decimal"),
    ("n5_0", 1700, numeric_typmod(5, 0), "decimal"), ("n18_18", 1700, numeric_typmod(18, 18), "decimal"),
    ("tz", 1184, -1, "timestamptz"), ("ts", 1114, -1, "timestamp"), ("d", 1082, -1, "date"),
    ("iv", 1186, -1, "fallback"), ("arr", 1007, -1, "fallback"),
)
KEYS = ("t", "tz", "n12_2", "i4", "b", "f8", "d")


def table(name: str, keys: tuple[str, ...], identity: str = "d") -> Relation:
    rel = relation(*((c, oid, typmod, c in keys) for c, oid, typmod, _ in COLUMNS), name=name)
    return Relation(rel.xid, rel.rel_id, rel.namespace, rel.name, identity, rel.columns)


KEYED = table("keyed", ("i8",))
MULTI_KEYED = table("multi", KEYS)
FULL = table("full", (), IDENTITY_FULL)


def test_every_column_above_gets_the_conversion_named_for_it() -> None:
    codecs = column_codecs(KEYED, None, None)
    assert [native_code(codec)[0] for codec in codecs] == [kind for *_, kind in COLUMNS]


# --- values as Postgres prints them, and text it never sends ---------------------------------------

def pg_timestamp(moment: datetime, with_zone: bool, offset_seconds: int) -> str:
    local = moment + timedelta(seconds=offset_seconds)
    text = local.strftime("%Y-%m-%d %H:%M:%S")
    if local.microsecond:
        text += f".{local.microsecond:06d}".rstrip("0")
    if with_zone:
        sign = "-" if offset_seconds < 0 else "+"
        hours, rest = divmod(abs(offset_seconds), 3600)
        minutes, seconds = divmod(rest, 60)
        text += f"{sign}{hours:02d}" + (f":{minutes:02d}" if minutes or seconds else "") + (
            f":{seconds:02d}" if seconds else "")
    return text


moments = st.datetimes(min_value=datetime(1000, 1, 2), max_value=datetime(9999, 12, 30))
offsets = st.one_of(st.sampled_from([0, 3600, -18000, 19800, 20700, -12600, 50400]),
                    st.integers(-15 * 3600, 15 * 3600))
junk = st.sampled_from([b"", b" ", b"-", b"+1", b" 1", b"1_000", b"0x10", b"1e3", b"NaN", b"Infinity",
                        b"-Infinity", b"infinity", b"-infinity", b"\xff\xfe", b"12.", b".5", b"1..2", b"--1",
                        b"2024-02-30", b"2024-13-01", b"0999-01-01", b"10000-01-01", b"2024-01-01 BC",
                        b"2024-01-01 24:00:00", b"2024-01-01 12:00:00.1234567", b"2024-01-01 12:00:00+",
                        b"2024-01-01 12:00:00+05:3", b"2024-01-01T12:00:00+00", b"99999999999999999999",
                        b"-9223372036854775808", b"9223372036854775807", b"9223372036854775808",
                        b"1.0000000000000000001", b"123456789012345678.9", b"t", b"f", b"true", b"\x00"])


def canonical(kind: str, name: str) -> st.SearchStrategy[bytes]:
    if kind == "long":
        bits = {"i8": 64, "i4": 32, "i2": 16}.get(name)
        ints = st.integers(0, 2**32 - 1) if bits is None else st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
        return ints.map(lambda v: str(v).encode())
    if kind == "string":
        return st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=40).map(str.encode)
    if kind == "bool":
        return st.sampled_from([b"t", b"f"])
    if kind in ("double", "float"):
        floats = st.floats(width=64 if kind == "double" else 32)
        return floats.map(lambda v: b"NaN" if v != v else b"Infinity" if v == float("inf")
                          else b"-Infinity" if v == float("-inf") else repr(v).encode())
    if kind == "decimal":
        scale = {"n12_2": 2, "n38_10": 10, "n5_0": 0, "n18_18": 18}[name]
        whole = {"n12_2": 10, "n38_10": 28, "n5_0": 5, "n18_18": 0}[name]
        unscaled = st.integers(-(10 ** (whole + scale)) + 1, 10 ** (whole + scale) - 1)

        def text(v: int) -> bytes:
            sign, digits = ("-" if v < 0 else ""), str(abs(v)).rjust(scale + 1, "0")
            return f"{sign}{digits[:-scale]}.{digits[-scale:]}".encode() if scale else f"{sign}{digits}".encode()

        return st.one_of(unscaled.map(text), st.sampled_from([b"NaN", b"Infinity", b"-Infinity", b"7", b"-0" if scale == 0 else b"-0.5"]))
    if kind in ("timestamptz", "timestamp"):
        return st.builds(lambda m, o: pg_timestamp(m, kind == "timestamptz", o).encode(), moments, offsets)
    if kind == "date":
        return moments.map(lambda m: m.strftime("%Y-%m-%d").encode())
    if name == "iv":
        return st.sampled_from([b"1 year 2 mons 3 days 04:05:06.5", b"-00:00:01", b"00:00:00"])
    return st.sampled_from([b"{1,2,NULL}", b"{}", b"[0:1]={1,2}"])


def binary(kind: str, name: str) -> st.SearchStrategy[bytes]:
    """Send-format values: every bit pattern of the fixed-size types (NaN payloads, ±infinity
    timestamps and dates included), UTF-8 text, and for the rest a few arbitrary bytes."""
    sizes = {"i8": 8, "i4": 4, "i2": 2, "o": 4, "f8": 8, "f4": 4, "b": 1, "tz": 8, "ts": 8, "d": 4}
    if name in sizes:
        edges = [b"\x7f" + b"\xff" * (sizes[name] - 1), b"\x80" + b"\x00" * (sizes[name] - 1)]
        return st.one_of(st.binary(min_size=sizes[name], max_size=sizes[name]), st.sampled_from(edges))
    if kind == "string":
        return st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=20).map(str.encode)
    if kind == "decimal":
        return canonical(kind, name).map(numeric_send_of)
    return st.binary(max_size=8)


def numeric_send_of(text: bytes) -> bytes:
    """``numeric_send`` of a numeric's text as Postgres lays it out: base-10000 groups aligned on
    the decimal point, zero groups stripped at both ends, the display scale = fraction digits."""
    special = {b"NaN": 0xC000, b"Infinity": 0xD000, b"-Infinity": 0xF000}
    if text in special:
        return struct.pack("!HhHH", 0, 0, special[text], 0)
    negative = text.startswith(b"-")
    whole, _, frac = text.lstrip(b"-").partition(b".")
    digits = whole.decode().rjust(-(-len(whole) // 4) * 4, "0") + frac.decode().ljust(-(-len(frac) // 4) * 4, "0")
    groups = [int(digits[i:i + 4]) for i in range(0, len(digits), 4)]
    weight = -(-len(whole) // 4) - 1
    while groups and groups[0] == 0:
        groups.pop(0)
        weight -= 1
    while groups and groups[-1] == 0:
        groups.pop()
    if not groups:
        weight = 0
    return struct.pack(f"!HhHH{len(groups)}H", len(groups), weight, 0x4000 if negative and groups else 0,
                       len(frac), *groups)


@st.composite
def numeric_send(draw: st.DrawFn) -> bytes:
    """Odd ``numeric_send`` layouts: digits past the display scale or the column's scale, groups
    over 9999, NaN/±Infinity signs, any weight."""
    groups = draw(st.lists(st.integers(0, 9999) | st.sampled_from([10000, 65535]), max_size=7))
    weight = draw(st.integers(-5, 6))
    sign = draw(st.sampled_from([0x0000, 0x4000, 0x0000, 0x4000, 0xC000, 0xD000, 0xF000]))
    dscale = draw(st.integers(0, 20))
    return struct.pack(f"!HhHH{len(groups)}H", len(groups), weight, sign, dscale, *groups)


def cell(kind: str, name: str) -> st.SearchStrategy[tuple[int, bytes | None]]:
    return st.one_of(
        canonical(kind, name).map(lambda v: (0x74, v)),
        st.just((0x6E, None)),
        junk.map(lambda v: (0x74, v)) | st.binary(max_size=12).map(lambda v: (0x74, v)),
        st.just((0x75, None)), st.binary(max_size=8).map(lambda v: (0x62, v)),
        binary(kind, name).map(lambda v: (0x62, v)),
    )


def rows(odd_one_in: int | None = 40) -> st.SearchStrategy[TupleData]:
    """Rows of canonical values where each column is, one time in ``odd_one_in``, something else
    (null, unchanged TOAST, binary, junk); ``None``: canonical values only, ``1``: anything."""
    def column(kind: str, name: str) -> st.SearchStrategy[tuple[int, bytes | None]]:
        valid = canonical(kind, name).map(lambda v: (0x74, v))
        if odd_one_in is None:
            return valid
        return st.tuples(st.integers(1, odd_one_in), valid, cell(kind, name)).map(
            lambda choice: choice[2] if choice[0] == 1 else choice[1])

    return st.tuples(*(column(kind, name) for name, _, _, kind in COLUMNS)).map(
        lambda cells: TupleData(bytes(k for k, _ in cells), tuple(v for _, v in cells)))


BINARY_IN_KERNEL = frozenset({"i8", "i4", "i2", "o", "t", "vc", "b", "f8", "f4", "tz", "ts", "d",
                              "n12_2", "n38_10", "n5_0", "n18_18"})


def binary_rows() -> st.SearchStrategy[TupleData]:
    """Rows as ``postgres.binary`` sends them: each column binary or, as Postgres does for types
    without a send function, text; sometimes null."""
    def column(kind: str, name: str) -> st.SearchStrategy[tuple[int, bytes | None]]:
        text = canonical(kind, name).map(lambda v: (0x74, v))
        if name not in BINARY_IN_KERNEL:  # (their binary goes to Python: kept valid, as text)
            return st.one_of(text, st.just((0x6E, None)))
        sent = binary(kind, name).map(lambda v: (0x62, v))
        if name == "i8":  # the key of KEYED: an insert must carry it
            return st.one_of(sent, text)
        return st.one_of(sent, sent, sent, text, st.just((0x6E, None)))

    return st.tuples(*(column(kind, name) for name, _, _, kind in COLUMNS)).map(
        lambda cells: TupleData(bytes(k for k, _ in cells), tuple(v for _, v in cells)))


# --- the comparison -------------------------------------------------------------------------------

CTX = EventContext(commit_lsn=0x16_B374_D900, xid=4242, ts_us=1_714_566_896_789_012, origin=None,
                   total_order=3, collection_order=70_000)


def outcome(native: bool, change: RowChange, ctx: EventContext) -> tuple[Any, SchemaLog]:
    log = SchemaLog()
    encoder = ChangeEncoder(topic_prefix="p", router=TopicRouter("p"),
                            database="db", registrar=SingleObjectRegistrar(log.announce),
                            native=native)
    try:
        return [tuple(record) for record in encoder.encode_row(change, ctx)], log
    except Exception as exc:  # the comparison is of whatever happens, errors included
        return (type(exc).__name__, str(exc), getattr(exc, "hint", None)), log


def same_both_ways(change: RowChange, ctx: EventContext = CTX) -> Any:
    native, log = outcome(True, change, ctx)
    python, _ = outcome(False, change, ctx)
    assert native == python
    if isinstance(native, list):  # decodable by a consumer, with the exact values the other tests pin
        for _topic, key, value in native:
            log.decode(key, logical=False)
            log.decode(value, logical=False)
    return native


@settings(max_examples=examples(400))
@given(rows(None))
def test_rows_of_canonical_values_are_encoded_alike(row: TupleData) -> None:
    for rel in (KEYED, MULTI_KEYED):
        assert isinstance(same_both_ways(RowChange("c", rel, Lsn(0x16_B374_D848), None, None, row)), list)


@settings(max_examples=examples(300))
@given(rows())
@example(TupleData(b"t" * len(COLUMNS), tuple(b"" for _ in COLUMNS)))
def test_inserts_with_odd_values(row: TupleData) -> None:
    same_both_ways(RowChange("c", KEYED, Lsn(0x16_B374_D848), None, None, row))
    same_both_ways(RowChange("c", MULTI_KEYED, Lsn(1), None, None, row))


@pytest.mark.parametrize("bits", [0x7F800001, 0xFF800001, 0x7FC00000, 0x7FBFFFFF, 0x7F800000, 0x00000001])
def test_binary_float4_bits_are_encoded_alike(bits: int) -> None:
    """A float4 NaN's payload survives and a signalling NaN comes out quiet in both paths (hypothesis
    found the kernel keeping the signalling bit while Python's float conversion set the quiet one)."""
    values: list[bytes | None] = [None] * len(COLUMNS)
    values[0] = (1).to_bytes(8, "big")
    values[[c for c, *_ in COLUMNS].index("f4")] = bits.to_bytes(4, "big")
    row = TupleData(b"".join(b"b" if v is not None else b"n" for v in values), tuple(values))
    [(_topic, _key, value)] = same_both_ways(RowChange("c", KEYED, Lsn(1), None, None, row))
    is_nan = (bits & 0x7F800000) == 0x7F800000 and bits & 0x007FFFFF
    expected = bits | 0x00400000 if is_nan else bits
    assert expected.to_bytes(4, "little") in value


@settings(max_examples=examples(300))
@given(binary_rows(), binary_rows())
def test_binary_rows_are_encoded_alike(row: TupleData, old: TupleData) -> None:
    assert isinstance(same_both_ways(RowChange("c", KEYED, Lsn(1), None, None, row)), list)
    same_both_ways(RowChange("c", MULTI_KEYED, Lsn(1), None, None, row))
    same_both_ways(RowChange("u", FULL, Lsn(1), "O", old, row))


@pytest.mark.parametrize("text", [b"0", b"-0.00", b"12.5", b"-12345678.90", b"0.0001", b"10000", b"99999999.99"])
def test_the_send_layout_helper_matches_postgres_text(text: bytes) -> None:
    from decimal import Decimal

    from pgbridge.encode.types import numeric_text_from_binary
    assert Decimal(numeric_text_from_binary(numeric_send_of(text))) == Decimal(text.decode())


@settings(max_examples=examples(300))
@given(numeric_send(), st.sampled_from(["n12_2", "n38_10", "n5_0", "n18_18"]))
def test_odd_numeric_send_layouts_encode_or_fail_alike(raw: bytes, name: str) -> None:
    values = {"i8": b"1", "i4": b"1", "i2": b"1", "o": b"1", "t": b"x", "vc": b"x", "u": b"x", "n_any": b"1",
              "b": b"t", "f8": b"1", "f4": b"1", "n12_2": b"1", "n38_10": b"1", "n5_0": b"1", "n18_18": b"0.5",
              "tz": b"2024-01-01 00:00:00+00", "ts": b"2024-01-01 00:00:00", "d": b"2024-01-01", "iv": b"1 day",
              "arr": b"{}"}
    kinds = bytes(0x62 if c == name else 0x74 for c, *_ in COLUMNS)
    row = TupleData(kinds, tuple(raw if c == name else values[c] for c, *_ in COLUMNS))
    same_both_ways(RowChange("c", KEYED, Lsn(1), None, None, row))


def test_every_column_above_gets_the_binary_conversion_named_for_it() -> None:
    codecs = column_codecs(KEYED, None, None)
    assert [native_binary_code(codec) for codec in codecs] == [
        "binary_int8", "binary_int4", "binary_int2", "binary_oid", "binary_string", "binary_string", "fallback",
        "fallback", "binary_bool", "binary_float8", "binary_float4", "binary_decimal", "binary_decimal",
        "binary_decimal", "binary_decimal",
        "binary_timestamp", "binary_timestamp", "binary_date", "fallback", "fallback"]


@given(rows(), rows(), st.sampled_from([None, "O"]))
def test_updates_with_and_without_the_old_row(old: TupleData, new: TupleData, old_kind: Literal["O"] | None) -> None:
    for rel in (KEYED, MULTI_KEYED, FULL):
        same_both_ways(RowChange("u", rel, Lsn(0x16_B374_D848), old_kind, old if old_kind else None, new))


@given(rows(1))
def test_deletes_of_any_row(old: TupleData) -> None:
    for rel in (KEYED, MULTI_KEYED, FULL):
        same_both_ways(RowChange("d", rel, Lsn(7), "O", old, None))


@given(rows(), st.integers(0, 2**63 - 1), st.integers(1, 2**40), st.integers(-(2**62), 2**62))
def test_order_and_source_fields_of_any_size(row: TupleData, lsn: int, order: int, ts_us: int) -> None:
    ctx = EventContext(commit_lsn=lsn, xid=2**32 - 1, ts_us=ts_us, origin="upstream", total_order=order,
                       collection_order=order)
    same_both_ways(RowChange("c", KEYED, Lsn(lsn), None, None, row), ctx)


def test_a_long_row_grows_past_the_kernels_stack_buffer() -> None:
    values = [b"1", b"2", b"3", b"4", b"x" * 100_000, "ü".encode() * 5000, b"u", b"1.5", b"t", b"1.5", b"1.5",
              b"1.00", b"1.5", b"1", b"0.5", b"2024-01-01 00:00:00+00", b"2024-01-01 00:00:00", b"2024-01-01",
              b"00:00:01", b"{}"]
    row = TupleData(b"t" * len(values), tuple(values))
    records = same_both_ways(RowChange("c", MULTI_KEYED, Lsn(1), None, None, row))
    assert len(records[0][2]) > 110_000


@pytest.mark.parametrize("odd", [b"\xc3\xa9", b"\xff", b"\x80"], ids=["utf8", "invalid", "continuation"])
def test_a_non_ascii_byte_anywhere_in_a_string_leaves_the_kernel_to_python(odd: bytes) -> None:
    """The kernel tests strings for ASCII eight bytes at a time, then byte by byte: one byte past
    0x7F in any word or in the tail, of any length, must go to Python's UTF-8 handling."""
    canonical_row = [b"1", b"2", b"3", b"4", b"", b"v", b"u", b"1.5", b"t", b"1.5", b"1.5", b"1.00", b"1.5", b"1",
                     b"0.5", b"2024-01-01 00:00:00+00", b"2024-01-01 00:00:00", b"2024-01-01", b"00:00:01", b"{}"]
    for length in range(0, 26):
        for at in range(length + 1):
            text = b"a" * at + odd + b"b" * (length - at)
            row = TupleData(b"t" * len(COLUMNS), (*canonical_row[:4], text, *canonical_row[5:]))
            same_both_ways(RowChange("c", KEYED, Lsn(1), None, None, row))


def test_known_values_decode_to_what_the_types_table_says() -> None:
    values = {"i8": b"-9223372036854775808", "i4": b"2147483647", "i2": b"-32768", "o": b"4294967295",
              "t": "naïve ☃".encode(), "vc": b"abc", "u": b"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
              "n_any": b"1e-3", "b": b"t", "f8": b"-1.5e-310", "f4": b"3.4028235e+38",
              "n12_2": b"-9999999999.99", "n38_10": b"1234567890123456789012345678.0123456789",
              "n5_0": b"-99999", "n18_18": b"0.000000000000000001",
              "tz": b"2024-05-01 12:34:56.789+05:30", "ts": b"1999-12-31 23:59:59.999999", "d": b"1000-01-01",
              "iv": b"1 day", "arr": b"{1,NULL}"}
    row = TupleData(b"t" * len(COLUMNS), tuple(values[name] for name, *_ in COLUMNS))
    log = SchemaLog()
    encoder = ChangeEncoder(topic_prefix="p", router=TopicRouter("p"),
                            database="db", registrar=SingleObjectRegistrar(log.announce))
    [(_, key, value)] = encoder.encode_row(RowChange("c", KEYED, Lsn(1), None, None, row), CTX)
    after = log.decode(value)["after"]
    assert log.decode(key) == {"i8": -(2**63)}
    assert after["tz"] == datetime(2024, 5, 1, 12, 34, 56, 789000, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    assert after["ts"] == datetime(1999, 12, 31, 23, 59, 59, 999999)
    assert after["tz"].astimezone(UTC) == datetime(2024, 5, 1, 7, 4, 56, 789000, tzinfo=UTC)
    assert str(after["n38_10"]) == "1234567890123456789012345678.0123456789"
    assert str(after["n18_18"]) == "1E-18"
    assert (after["f8"], after["o"], after["t"], after["n_any"]) == (-1.5e-310, 4294967295, "naïve ☃", "1e-3")


def test_values_the_kernel_hands_back_as_unrepresentable_give_the_same_envelope_and_map() -> None:
    values = {"i8": b"1", "i4": b"1", "i2": b"1", "o": b"1", "t": b"x", "vc": b"x", "u": b"x", "n_any": b"NaN",
              "b": b"t", "f8": b"NaN", "f4": b"-Infinity", "n12_2": b"NaN", "n38_10": b"1", "n5_0": b"1",
              "n18_18": b"0.5", "tz": b"infinity", "ts": b"-infinity", "d": b"infinity", "iv": b"1 day",
              "arr": b"{{1},{2}}"}
    row = TupleData(b"t" * len(COLUMNS), tuple(values[name] for name, *_ in COLUMNS))
    binary = TupleData(bytes(0x62 if name in ("ts", "d") else 0x74 for name, *_ in COLUMNS),
                       tuple(struct.pack("!q", -(2**63)) if name == "ts" else struct.pack("!i", 2**31 - 1)
                             if name == "d" else values[name] for name, *_ in COLUMNS))
    expected = {"after.n12_2": "NaN", "after.tz": "infinity", "after.ts": "-infinity", "after.d": "infinity",
                "after.arr": "{{1},{2}}"}
    for sent in (row, binary):
        for rel in (KEYED, MULTI_KEYED):
            [(_, key, value)] = same_both_ways(RowChange("c", rel, Lsn(1), None, None, sent))
            log = SchemaLog()
            encoder = ChangeEncoder(topic_prefix="p", router=TopicRouter("p"),
                                    database="db", registrar=SingleObjectRegistrar(log.announce))
            [(_, key, value)] = encoder.encode_row(RowChange("c", rel, Lsn(1), None, None, sent), CTX)
            decoded = log.decode(value, logical=False)
            assert decoded["unrepresentable"] == expected
            assert all(decoded["after"][label.removeprefix("after.")] is None for label in expected)
            if rel is MULTI_KEYED:  # the companion key fields hold the text in their string branch
                assert {k: v for k, v in log.decode(key, logical=False).items() if k in ("tz", "d", "n12_2")} == {
                    "tz": "infinity", "d": "infinity", "n12_2": "NaN"}
    full = same_both_ways(RowChange("u", FULL, Lsn(1), "O", row, binary))
    assert len(full) == 1
