"""Every type family's edge values arrive as exactly the expected Python value, in text and binary."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

import psycopg
import pytest

from tests.support.bridge import BridgeProcess, bridge_env, load_schemas
from tests.support.broker import Broker
from tests.support.kafka import read_topic
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

TYPES = """
CREATE TYPE mood AS ENUM ('sad', 'happy');
CREATE DOMAIN price AS numeric(12,2);
CREATE TYPE pair AS (a int, b text);
CREATE TYPE dpair AS (a int, d date);
"""


def RANGE(lo: Any, hi: Any, li: bool, ui: bool, empty: bool = False) -> dict[str, Any]:
    """A range as a consumer reads it."""
    return {"lower": lo, "upper": hi, "lower_inclusive": li, "upper_inclusive": ui, "empty": empty}


# column, type, edge literal, expected value (a dict: the field and, for a value its Avro type cannot
# hold, the entry "after.<column>" of the envelope's unrepresentable map)
BINARY_COLUMNS: list[tuple[str, str, str, dict[str, Any]]] = [
    ("i2", "int2", "-32768", {"i2": -32768}),
    ("i4", "int4", "-2147483648", {"i4": -2147483648}),
    ("i8", "int8", "9223372036854775807", {"i8": 9223372036854775807}),
    ("o", "oid", "4294967295", {"o": 4294967295}),
    ("f8", "float8", "'-Infinity'", {"f8": float("-inf")}),
    ("n", "numeric", "'NaN'", {"n": "NaN"}),
    ("nc", "numeric(12,2)", "'NaN'", {"nc": None, "after.nc": "NaN"}),
    ("nc2", "numeric(12,2)", "-9999999999.99", {"nc2": Decimal("-9999999999.99")}),
    ("huge", "numeric", "1e100 + 0.000000000000000000001", {"huge": "1" + "0" * 100 + ".000000000000000000001"}),
    ("b", "bool", "true", {"b": True}),
    ("tx", "text", "'zwölf 😀 \"q\" \\ back'", {"tx": 'zwölf 😀 "q" \\ back'}),
    ("vc", "varchar(10)", "''", {"vc": ""}),
    ("ch", "char(3)", "'ab'", {"ch": "ab "}),
    ("by", "bytea", "'\\x00ff'", {"by": b"\x00\xff"}),
    ("d", "date", "'infinity'", {"d": None, "after.d": "infinity"}),
    ("d2", "date", "'0001-01-01'", {"d2": date(1, 1, 1)}),
    ("ts", "timestamp", "'-infinity'", {"ts": None, "after.ts": "-infinity"}),
    ("tzi", "timestamptz", "'infinity'", {"tzi": None, "after.tzi": "infinity"}),
    ("tstz", "timestamptz", "'2024-02-29 23:59:59.999999+05:30'",
     {"tstz": datetime(2024, 2, 29, 18, 29, 59, 999999, tzinfo=UTC)}),
    ("tm", "time", "'24:00:00'", {"tm": None, "after.tm": "24:00:00"}),
    ("ttz", "timetz", "'04:05:06.5-08'", {"ttz": "04:05:06.5-08"}),
    ("iv", "interval", "'1 year -2 mons +3 days -04:05:06.5'",
     {"iv": {"months": 10, "days": 3, "microseconds": -14706500000}}),
    ("u", "uuid", "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'", {"u": UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")}),
    ("j", "json", "'{\"k\": [1, null]}'", {"j": '{"k": [1, null]}'}),
    ("jb", "jsonb", "'{\"k\": [1, null]}'", {"jb": '{"k": [1, null]}'}),
    ("r4", "int4range", "'[1,5)'", {"r4": RANGE(1, 5, True, False)}),
    ("r4u", "int4range", "'(,)'", {"r4u": RANGE(None, None, False, False)}),
    ("rts", "tsrange", "'[\"2020-01-01 00:00:00\",infinity)'",
     {"rts": None, "after.rts": '["2020-01-01 00:00:00",infinity)'}),
    ("rd", "daterange", "'empty'", {"rd": RANGE(None, None, False, False, True)}),
    ("rdi", "daterange", "'[2024-01-01,infinity)'", {"rdi": None, "after.rdi": "[2024-01-01,infinity)"}),
    ("rtz", "tstzrange", "'(-infinity,\"2024-01-01 00:00:00+00\"]'",
     {"rtz": None, "after.rtz": '(-infinity,"2024-01-01 00:00:00+00"]'}),
    ("mrd", "datemultirange", "'{[2024-01-01,infinity)}'", {"mrd": None, "after.mrd": "{[2024-01-01,infinity)}"}),
    ("mr", "int4multirange", "'{[1,3),[5,7)}'", {"mr": [RANGE(1, 3, True, False), RANGE(5, 7, True, False)]}),
    ("a1", "int4[]", "'{1,NULL,3}'", {"a1": [1, None, 3]}),
    ("a0", "int4[]", "'{}'", {"a0": []}),
    ("alb", "int4[]", "'[0:1]={1,2}'", {"alb": None, "after.alb": "[0:1]={1,2}"}),
    ("a2", "int4[]", "'{{1,2},{3,NULL}}'", {"a2": None, "after.a2": "{{1,2},{3,NULL}}"}),
    ("at", "text[]", "'{\"a b\",\"NULL\",NULL,\"\"}'", {"at": ["a b", "NULL", None, ""]}),
    ("ad", "date[]", "'{2024-01-01,infinity}'", {"ad": None, "after.ad": "{2024-01-01,infinity}"}),
    ("e", "mood", "'happy'", {"e": "happy"}),
    ("dom", "price", "9.99", {"dom": Decimal("9.99")}),
    ("domn", "price", "'NaN'", {"domn": None, "after.domn": "NaN"}),
    ("cpi", "dpair", "'(1,infinity)'", {"cpi": None, "after.cpi": "(1,infinity)"}),
    ("nul", "int4", "NULL", {"nul": None}),
    # Published as Postgres's text; in binary mode rebuilt from the send form, to the same string.
    ("ip", "inet", "'192.168.0.1/24'", {"ip": "192.168.0.1/24"}),
    ("ip1", "inet", "'10.0.0.1'", {"ip1": "10.0.0.1"}),
    ("ip6", "inet", "'::ffff:1.2.3.4'", {"ip6": "::ffff:1.2.3.4"}),
    ("ip6m", "inet", "'fe80:0:0:0:0:0:1:2/64'", {"ip6m": "fe80::1:2/64"}),
    ("cid", "cidr", "'10.0.0.0/8'", {"cid": "10.0.0.0/8"}),
    ("cid0", "cidr", "'0.0.0.0/0'", {"cid0": "0.0.0.0/0"}),
    ("cid6", "cidr", "'::1/128'", {"cid6": "::1/128"}),
    ("mac", "macaddr", "'08:00:2b:01:02:03'", {"mac": "08:00:2b:01:02:03"}),
    ("mac8", "macaddr8", "'08:00:2b:01:02:03:04:05'", {"mac8": "08:00:2b:01:02:03:04:05"}),
    ("bt", "bit(4)", "B'1010'", {"bt": "1010"}),
    ("bt9", "bit(9)", "B'101010101'", {"bt9": "101010101"}),
    ("vb", "varbit", "B'10'", {"vb": "10"}),
    ("vb0", "varbit", "B''", {"vb0": ""}),
    ("vb64", "varbit", "B'" + "1" * 64 + "'", {"vb64": "1" * 64}),
    ("tsv", "tsvector", "$$'a':1A,2B 'it''s':3C fat$$", {"tsv": "'a':1A,2B 'fat' 'it''s':3C"}),
    ("tsq", "tsquery", "'(a | b) & !c <-> d:*A'", {"tsq": "( 'a' | 'b' ) & !'c' <-> 'd':*A"}),
    ("pt", "point", "'(1.5,-2)'", {"pt": "(1.5,-2)"}),
    ("ptn", "point", "'(NaN,-Infinity)'", {"ptn": "(NaN,-Infinity)"}),
    ("ls", "lseg", "'[(1,2),(3e-5,4)]'", {"ls": "[(1,2),(3e-05,4)]"}),
    ("bx", "box", "'((0,0),(1,1))'", {"bx": "(1,1),(0,0)"}),
    ("pa", "path", "'[(0,0),(1e20,0.1)]'", {"pa": "[(0,0),(1e+20,0.1)]"}),
    ("pac", "path", "'((0,0),(1,1),(2,0))'", {"pac": "((0,0),(1,1),(2,0))"}),
    ("pol", "polygon", "'((0,0),(1,-0.5),(2,0))'", {"pol": "((0,0),(1,-0.5),(2,0))"}),
    ("ln", "line", "'{1,-1,0}'", {"ln": "{1,-1,0}"}),
    ("ci", "circle", "'<(0,0),1.5>'", {"ci": "<(0,0),1.5>"}),
    ("lsn", "pg_lsn", "'FFFFFFFF/FFFFFFFF'", {"lsn": "FFFFFFFF/FFFFFFFF"}),
    ("tid", "tid", "'(4294967295,65535)'", {"tid": "(4294967295,65535)"}),
    ("i2v", "int2vector", "'1 2 -3'", {"i2v": "1 2 -3"}),
    ("oidv", "oidvector", "'1 4294967295'", {"oidv": "1 4294967295"}),
    ("snap", "pg_snapshot", "'10:20:10,11,15'", {"snap": "10:20:10,11,15"}),
    ("txs", "txid_snapshot", "'10:20:'", {"txs": "10:20:"}),
    ("jp", "jsonpath", "'$.a[*] ? (@ > 1)'", {"jp": '$."a"[*]?(@ > 1)'}),
    ("chr", '"char"', "'a'", {"chr": "a"}),
    ("ipa", "inet[]", "'{192.168.0.1/24,NULL,::1}'", {"ipa": ["192.168.0.1/24", None, "::1"]}),
    ("bxa", "box[]", "'{((0,0),(1,1));((2,2),(3,3))}'", {"bxa": ["(1,1),(0,0)", "(3,3),(2,2)"]}),
    ("comp", "pair", "'(1,\"x y\")'", {"comp": {"a": 1, "b": "x y"}}),
    ("f8a", "float8[]", "'{{1e15,0.1},{-0,NaN}}'", {"f8a": None, "after.f8a": "{{1e+15,0.1},{-0,NaN}}"}),
]
# Types pgbridge reads only as text: Postgres's text output, exactly (binary mode stops on them).
TEXT_COLUMNS: list[tuple[str, str, str, dict[str, Any]]] = [
    ("m", "money", "12.34", {"m": "$12.34"}),
    ("rc", "regclass", "'pg_class'", {"rc": "pg_class"}),
]


def _decoded_rows(pg_dsn: str, broker: Broker, prefix: str, columns: list[tuple[str, str, str, dict[str, Any]]],
                  *, binary: bool, pure_python: bool = False) -> list[dict[str, Any]]:
    """The ``after`` rows of the two inserts, each with its envelope's ``unrepresentable`` entries."""
    definition = ", ".join(f"{name} {pg_type}" for name, pg_type, _, _ in columns)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(TYPES + f"CREATE TABLE public.t (id int PRIMARY KEY, {definition})")
    env = bridge_env(pg_dsn, broker.bootstrap, prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": "public.t", "PGBRIDGE_SNAPSHOT__MODE": "never",
                            "PGBRIDGE_POSTGRES__BINARY": "true" if binary else "false",
                            "PGBRIDGE_PURE_PYTHON": "1" if pure_python else "0"})
    with BridgeProcess(env).start() as bridge:
        bridge.wait_confirmed(pg_dsn, prefix, timeout=60)
        wait_until(lambda: " replicating " in bridge.log(), timeout=60, message=f"never streamed: {bridge.log()}")
        kernels = "compiled_kernels=['pgbridge.decode._native', 'pgbridge.encode._native']"
        assert ("compiled_kernels=[]" in bridge.log()) if pure_python else (kernels in bridge.log()), bridge.log()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f"INSERT INTO t VALUES (1, {', '.join(literal for _, _, literal, _ in columns)})")
            conn.execute("INSERT INTO t (id) VALUES (2)")
        records = read_topic(broker.bootstrap, f"{prefix}.public.t", min_count=2, timeout=60)
        assert bridge.terminate() == 0, bridge.log()
    store = load_schemas(broker.bootstrap, prefix)
    events = [store.decode(r.value) for r in records if r.value is not None]
    return [{**event["after"], **(event["unrepresentable"] or {})} for event in events]


def _expected(columns: list[tuple[str, str, str, dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {"id": 1}
    for _, _, _, expected in columns:
        out.update(expected)
    return out


def _check(rows: list[dict[str, Any]], columns: list[tuple[str, str, str, dict[str, Any]]]) -> None:
    edge, nulls = rows
    expected = _expected(columns)
    # the row record holds exactly the table's columns; the map exactly the unrepresentable values
    assert edge == expected
    assert set(nulls) == {"id", *(name for name, _, _, _ in columns)}
    assert all(v is None for k, v in nulls.items() if k != "id")


def test_edge_values_of_every_type_family_decode_exactly_in_text_format(pg_dsn: str, kafka_broker: Broker,
                                                                         topic_prefix: str) -> None:
    _check(_decoded_rows(pg_dsn, kafka_broker, topic_prefix, BINARY_COLUMNS + TEXT_COLUMNS, binary=False),
           BINARY_COLUMNS + TEXT_COLUMNS)


def test_binary_format_decodes_exactly_like_text_for_the_types_it_covers(pg_dsn: str, kafka_broker: Broker,
                                                                         topic_prefix: str) -> None:
    _check(_decoded_rows(pg_dsn, kafka_broker, topic_prefix, BINARY_COLUMNS, binary=True), BINARY_COLUMNS)


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_the_pure_python_bridge_decodes_every_type_family_alike(pg_dsn: str, kafka_broker: Broker,
                                                                topic_prefix: str, binary: bool) -> None:
    """``PGBRIDGE_PURE_PYTHON=1`` (no compiled kernels) publishes exactly what the kernels do."""
    columns = BINARY_COLUMNS if binary else BINARY_COLUMNS + TEXT_COLUMNS
    _check(_decoded_rows(pg_dsn, kafka_broker, topic_prefix, columns, binary=binary, pure_python=True), columns)


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_infinite_timestamp_keys_stay_distinct_kafka_keys(pg_dsn: str, kafka_broker: Broker, topic_prefix: str,
                                                          binary: bool) -> None:
    """A key column's unrepresentable value keeps its text in the key field's string branch: rows
    keyed ``infinity`` and ``-infinity`` are two keys, not one null key (compaction keeps both)."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.tk (k timestamp PRIMARY KEY, v int)")
    env = bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": "public.tk", "PGBRIDGE_SNAPSHOT__MODE": "never",
                            "PGBRIDGE_POSTGRES__BINARY": "true" if binary else "false"})
    with BridgeProcess(env).start() as bridge:
        wait_until(lambda: " replicating " in bridge.log(), timeout=60, message=f"never streamed: {bridge.log()}")
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO tk VALUES ('infinity', 1), ('-infinity', 2), ('2024-01-01', 3)")
            conn.execute("DELETE FROM tk WHERE k = 'infinity'")
        records = read_topic(kafka_broker.bootstrap, f"{topic_prefix}.public.tk", min_count=5, timeout=60)
        assert bridge.terminate() == 0, bridge.log()
    store = load_schemas(kafka_broker.bootstrap, topic_prefix)
    assert len({r.key for r in records}) == 3
    events = sorted(((store.decode(r.key), store.decode(r.value)) for r in records),
                    key=lambda e: (repr(e[0]), e[1] is None, e[1] and e[1]["op"]))
    assert [(key, event and (event["op"], event["before"], event["after"], event["unrepresentable"]))
            for key, event in events] == [
        ({"k": "-infinity"}, ("c", None, {"k": None, "v": 2}, {"after.k": "-infinity"})),
        ({"k": "infinity"}, ("c", None, {"k": None, "v": 1}, {"after.k": "infinity"})),
        ({"k": "infinity"}, ("d", {"k": None, "v": None}, None, {"before.k": "infinity"})),
        ({"k": "infinity"}, None),  # the delete's tombstone, under the same key
        ({"k": datetime(2024, 1, 1)}, ("c", None, {"k": datetime(2024, 1, 1), "v": 3}, None)),
    ]
