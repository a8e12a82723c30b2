"""One field per column, and values a field cannot hold in the envelope's ``unrepresentable`` map.

For every type family of ``docs/types.md`` (issue 14, must-show 1): the row record's fields are
exactly the table's columns, and a value the column's Avro type cannot hold is null in the row
with its exact Postgres text under ``before.<column>`` / ``after.<column>``, in text and binary
format, with the compiled kernel and without it (the package's fixture runs both). Key fields of
such types keep the text in their ``string`` branch, so distinct rows keep distinct Kafka keys.
"""

from __future__ import annotations

from datetime import date, datetime, time
from decimal import Decimal
from typing import Any, NamedTuple

import pytest

from pgbridge.assemble.units import RowChange
from pgbridge.decode.messages import Relation, TupleData
from pgbridge.encode import ChangeEncoder, EventContext, OutRecord, SingleObjectRegistrar
from pgbridge.encode.types import NumericPolicy, TypeCatalog
from pgbridge.lsn import Lsn
from pgbridge.publish.routing import TopicRouter
from pgbridge.source.type_catalog import CompositeAttribute, PgTypeInfo
from tests.unit.encode.avro_helpers import SchemaLog, fastavro_bytes, relation, strip_logical_types

INT8, INT4, TEXT, NUMERIC, DATE, TIME, TIMESTAMP, TIMESTAMPTZ, INTERVAL = 20, 23, 25, 1700, 1082, 1083, 1114, 1184, 1186
INT4_ARRAY, DATE_ARRAY, TEXT_ARRAY = 1007, 1182, 1009
INT4RANGE, INT8RANGE, NUMRANGE, TSRANGE, TSTZRANGE, DATERANGE = 3904, 3926, 3906, 3908, 3910, 3912
DATEMULTIRANGE, INT4MULTIRANGE = 4535, 4451
PAIR = 16700
CATALOG = {PAIR: PgTypeInfo(PAIR, "public", "pair", "c", "C", 0, -1, 0, ",", "record_send",
                            (CompositeAttribute("a", INT4, -1), CompositeAttribute("d", DATE, -1)))}
POLICY = NumericPolicy(precision=12, scale=3)
CTX = EventContext(commit_lsn=0x200, xid=77, ts_us=1_700_000_000_000_000, origin=None, total_order=1,
                   collection_order=1)


def numeric_mod(precision: int, scale: int) -> int:
    return ((precision << 16) | (scale & 0x7FF)) + 4


class Family(NamedTuple):
    """A column type, a value its field holds (as sent, and as a consumer reads it) and one it
    cannot hold (as sent and the text published for it; ``None``: the type has no such value)."""

    name: str
    oid: int
    typmod: int
    fits: bytes
    fits_value: Any
    odd: bytes | None
    odd_text: str | None
    binary: bool = False  # ``fits``/``odd`` are send-format bytes
    numeric: NumericPolicy | None = None


def rng(lower: Any, upper: Any, lower_inclusive: bool, upper_inclusive: bool, empty: bool) -> dict[str, Any]:
    """A range as a consumer reads it."""
    return {"lower": lower, "upper": upper, "lower_inclusive": lower_inclusive, "upper_inclusive": upper_inclusive,
            "empty": empty}


def be(n: int, size: int) -> bytes:
    return n.to_bytes(size, "big", signed=True)


FAMILIES = [
    Family("date", DATE, -1, b"2024-02-29", date(2024, 2, 29), b"infinity", "infinity"),
    Family("date binary", DATE, -1, be(0, 4), date(2000, 1, 1), be(2**31 - 1, 4), "infinity", binary=True),
    Family("timestamp", TIMESTAMP, -1, b"2024-01-01 00:00:00", datetime(2024, 1, 1), b"-infinity", "-infinity"),
    Family("timestamp binary", TIMESTAMP, -1, be(0, 8), datetime(2000, 1, 1), be(-(2**63), 8), "-infinity",
           binary=True),
    Family("timestamp past a long of µs", TIMESTAMP, -1, b"1970-01-01 00:00:00", datetime(1970, 1, 1),
           b"294277-01-01 00:00:00", "294277-01-01 00:00:00"),
    Family("timestamptz", TIMESTAMPTZ, -1, b"1970-01-01 00:00:00+00", 0, b"infinity", "infinity"),
    Family("timestamptz binary", TIMESTAMPTZ, -1, be(-946_684_800_000_000, 8), 0, be(2**63 - 1, 8), "infinity",
           binary=True),
    Family("time", TIME, -1, b"23:59:59.999999", time(23, 59, 59, 999999), b"24:00:00", "24:00:00"),
    Family("numeric(p,s)", NUMERIC, numeric_mod(12, 2), b"-9999999999.99", Decimal("-9999999999.99"), b"NaN", "NaN"),
    Family("numeric(p,s) binary", NUMERIC, numeric_mod(12, 2), bytes.fromhex("0001000000000002") + be(12, 2),
           Decimal("12.00"), bytes.fromhex("00000000c0000000"), "NaN", binary=True),
    Family("numeric decimal policy", NUMERIC, -1, b"1.5", Decimal("1.500"), b"0.0001", "0.0001", numeric=POLICY),
    Family("numeric decimal policy, infinity", NUMERIC, -1, b"-2", Decimal("-2.000"), b"-Infinity", "-Infinity",
           numeric=POLICY),
    Family("numeric unconstrained (text)", NUMERIC, -1, b"NaN", "NaN", None, None),
    Family("interval", INTERVAL, -1, b"1 mon 2 days 00:00:01", {"months": 1, "days": 2, "microseconds": 1_000_000},
           b"infinity", "infinity"),
    Family("int4range", INT4RANGE, -1, b"[1,5)", rng(1, 5, True, False, False), None, None),
    Family("int8range", INT8RANGE, -1, b"empty", rng(None, None, False, False, True), None, None),
    Family("numrange", NUMRANGE, -1, b"(,2.5]", rng(None, "2.5", False, True, False), None, None),
    Family("daterange", DATERANGE, -1, b"[2024-01-01,)", rng(date(2024, 1, 1), None, True, False, False),
           b"[2024-01-01,infinity)", "[2024-01-01,infinity)"),
    Family("tsrange", TSRANGE, -1, b"empty", rng(None, None, False, False, True),
           b'[-infinity,"2020-01-01 00:00:00")', '[-infinity,"2020-01-01 00:00:00")'),
    Family("tstzrange", TSTZRANGE, -1, b"empty", rng(None, None, False, False, True),
           b'["2020-01-01 00:00:00+00",infinity)', '["2020-01-01 00:00:00+00",infinity)'),
    Family("datemultirange", DATEMULTIRANGE, -1, b"{}", [], b"{[2024-01-01,infinity)}", "{[2024-01-01,infinity)}"),
    Family("int4multirange", INT4MULTIRANGE, -1, b"{[1,3)}", [rng(1, 3, True, False, False)],
           None, None),
    Family("int4[] of several dimensions", INT4_ARRAY, -1, b"{1,NULL}", [1, None], b"{{1,2},{3,4}}",
           "{{1,2},{3,4}}"),
    Family("int4[] not from 1", INT4_ARRAY, -1, b"{}", [], b"[0:1]={1,2}", "[0:1]={1,2}"),
    Family("date[] with infinity", DATE_ARRAY, -1, b"{2024-01-01}", [date(2024, 1, 1)], b"{2024-01-01,infinity}",
           "{2024-01-01,infinity}"),
    Family("composite", PAIR, -1, b"(1,2024-01-01)", {"a": 1, "d": date(2024, 1, 1)}, b"(1,infinity)",
           "(1,infinity)"),
    Family("composite newer than its schema", PAIR, -1, b"(,)", {"a": None, "d": None}, b"(1,2024-01-01,7)",
           "(1,2024-01-01,7)"),
    Family("text", TEXT, -1, b"infinity", "infinity", None, None),
]


def tuple_of(family: Family, *values: bytes | None) -> TupleData:
    kind = b"b" if family.binary else b"t"
    return TupleData(b"t" + b"".join(b"n" if v is None else kind for v in values[1:]), values)


class Bridge:
    """An encoder and the consumer side of its output: records decoded with the announced writer
    schema, after checking that fastavro writes the same bytes for what it decoded."""

    def __init__(self, family: Family, **kwargs: Any) -> None:
        self.log = SchemaLog()
        catalog: TypeCatalog = CATALOG.get
        self.encoder = ChangeEncoder(topic_prefix="p", router=TopicRouter("p"),
                                     database="db", registrar=SingleObjectRegistrar(self.log.announce),
                                     type_catalog=catalog, numeric=family.numeric, **kwargs)

    def decode(self, records: list[OutRecord]) -> list[tuple[Any, Any]]:
        out = []
        for record in records:
            for data in (record.key, record.value):
                if data is not None:
                    # raw logical types: fastavro would write the text "infinity" of a key's string
                    # branch as a date (it accepts ISO strings for dates)
                    raw = strip_logical_types(self.log.schema_of(data))
                    assert fastavro_bytes(raw, self.log.decode(data, logical=False)) == data[10:]
            out.append((self.log.decode(record.key), self.log.decode(record.value)))
        return out

    def change(self, op: str, rel: Relation, *, new: TupleData | None = None, old: TupleData | None = None,
               old_kind: str | None = None) -> list[tuple[Any, Any]]:
        change = RowChange(op, rel, Lsn(0x100), old_kind, old, new)  # type: ignore[arg-type]
        return self.decode(self.encoder.encode_row(change, CTX))


def table(family: Family, identity: str = "d") -> Relation:
    return relation(("id", INT8, -1, True), ("v", family.oid, family.typmod), identity=identity)


def value_fields(bridge: Bridge, rel: Relation) -> list[dict[str, Any]]:
    envelope = bridge.encoder.value_schema(rel)
    fields: list[dict[str, Any]] = envelope["fields"][0]["type"][1]["fields"]
    return fields


def comparable(value: Any) -> Any:
    """Timestamps with a zone as µs since the epoch, so the table above stays readable."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        return round(value.timestamp() * 1_000_000)
    return value


@pytest.mark.parametrize("family", FAMILIES, ids=[f.name for f in FAMILIES])
def test_the_row_record_holds_exactly_the_columns_each_nullable_with_its_pg_type(family: Family) -> None:
    bridge = Bridge(family)
    fields = value_fields(bridge, table(family))
    assert [f["name"] for f in fields] == ["id", "v"]
    assert all(f["type"][0] == "null" and f["default"] is None and "pg_type" in f for f in fields)
    envelope = bridge.encoder.value_schema(table(family))
    assert envelope["fields"][-1] == {"name": "unrepresentable", "type": ["null", {"type": "map", "values": "string"}],
                                      "default": None, "doc": envelope["fields"][-1]["doc"]}


@pytest.mark.parametrize("family", FAMILIES, ids=[f.name for f in FAMILIES])
def test_a_value_the_field_holds_leaves_the_map_null(family: Family) -> None:
    ((_, value),) = Bridge(family).change("c", table(family), new=tuple_of(family, b"1", family.fits))
    assert comparable(value["after"]["v"]) == family.fits_value
    assert value["unrepresentable"] is None


UNREPRESENTABLE = [f for f in FAMILIES if f.odd is not None]


@pytest.mark.parametrize("family", UNREPRESENTABLE, ids=[f.name for f in UNREPRESENTABLE])
def test_an_unrepresentable_value_is_null_with_its_exact_text_in_the_map(family: Family) -> None:
    bridge = Bridge(family)
    ((key, value),) = bridge.change("c", table(family), new=tuple_of(family, b"1", family.odd))
    assert key == {"id": 1}
    assert value["after"] == {"id": 1, "v": None}
    assert value["unrepresentable"] == {"after.v": family.odd_text}


@pytest.mark.parametrize("family", UNREPRESENTABLE, ids=[f.name for f in UNREPRESENTABLE])
def test_both_images_of_an_update_report_under_their_own_prefix(family: Family) -> None:
    bridge = Bridge(family)
    rel = table(family, identity="f")
    old, new = tuple_of(family, b"1", family.odd), tuple_of(family, b"1", family.fits)
    ((_, value),) = bridge.change("u", rel, new=new, old=old, old_kind="O")
    assert value["before"] == {"id": 1, "v": None}
    assert comparable(value["after"]["v"]) == family.fits_value
    assert value["unrepresentable"] == {"before.v": family.odd_text}
    ((_, value),) = bridge.change("u", rel, new=old, old=old, old_kind="O")
    assert value["unrepresentable"] == {"before.v": family.odd_text, "after.v": family.odd_text}


@pytest.mark.parametrize("family", [f for f in UNREPRESENTABLE if not f.binary], ids=lambda f: f.name)
def test_a_column_name_that_is_no_avro_name_keys_the_map_by_its_postgres_name(family: Family) -> None:
    rel = relation(("id", INT8, -1, True), ("at-when", family.oid, family.typmod))
    bridge = Bridge(family)
    ((_, value),) = bridge.change("c", rel, new=tuple_of(family, b"1", family.odd))
    assert value["after"] == {"id": 1, "at_when": None}
    assert value["unrepresentable"] == {"after.at-when": family.odd_text}


KEYED = [f for f in UNREPRESENTABLE if f.name in ("date", "date binary", "timestamp", "timestamp binary",
                                                   "timestamptz", "numeric(p,s)", "time", "interval")]


@pytest.mark.parametrize("family", KEYED, ids=[f.name for f in KEYED])
def test_a_key_column_keeps_an_unrepresentable_value_as_its_text_in_the_string_branch(family: Family) -> None:
    rel = relation(("v", family.oid, family.typmod, True), ("note", TEXT))
    bridge = Bridge(family)
    key_field = bridge.encoder.key_schema(rel)["fields"][0]  # type: ignore[index]
    assert key_field["type"][0] == "null" and key_field["type"][2] == "string" and len(key_field["type"]) == 3
    kind = b"b" if family.binary else b"t"
    ((key, value),) = bridge.change("c", rel, new=TupleData(kind + b"t", (family.odd, b"x")))
    assert key == {"v": family.odd_text}
    assert value["unrepresentable"] == {"after.v": family.odd_text}
    ((key, _),) = bridge.change("c", rel, new=TupleData(kind + b"t", (family.fits, b"x")))
    assert comparable(key["v"]) == family.fits_value


@pytest.mark.parametrize("oid", [DATE, TIMESTAMP, TIMESTAMPTZ])
def test_infinity_and_minus_infinity_keys_stay_two_distinct_kafka_keys(oid: int) -> None:
    rel = relation(("v", oid, -1, True), ("note", TEXT))
    bridge = Bridge(FAMILIES[0])
    records = [bridge.encoder.encode_row(RowChange("c", rel, Lsn(1), None, None, TupleData(b"tt", (raw, b"x"))), CTX)
               for raw in (b"infinity", b"-infinity")]
    keys = [record.key for (record,) in records]
    assert keys[0] != keys[1]
    assert [bridge.log.decode(k) for k in keys] == [{"v": "infinity"}, {"v": "-infinity"}]


def test_the_consumer_helper_reads_the_text_of_a_null_field_and_nothing_for_a_sql_null() -> None:
    from pgbridge.consumer import SchemaStore, unrepresentable_text

    family = FAMILIES[0]
    bridge = Bridge(family)
    rel = relation(("id", INT8, -1, True), ("valid until", DATE), ("d", DATE), identity="f")
    change = RowChange("u", rel, Lsn(1), "O", TupleData(b"ttn", (b"1", b"-infinity", None)),
                       TupleData(b"ttt", (b"1", b"infinity", b"2024-01-01")))
    (record,) = bridge.encoder.encode_row(change, CTX)
    store = SchemaStore()
    for fingerprint, schema in bridge.log.records:
        store.add(fingerprint, schema)
    event = store.decode(record.value)
    assert event["after"] == {"id": 1, "valid_until": None, "d": date(2024, 1, 1)}
    assert unrepresentable_text(event, "after", "valid until") == "infinity"
    assert unrepresentable_text(event, "before", "valid until") == "-infinity"
    assert unrepresentable_text(event, "before", "d") is None  # a SQL NULL
    assert unrepresentable_text(event, "after", "d") is None
    assert unrepresentable_text({"unrepresentable": None}, "after", "d") is None
