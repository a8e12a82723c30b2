"""Composite types arrive as Avro records, nested and in arrays, identically in text and binary."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import date
from typing import Any

import psycopg
import pytest

from tests.support.bridge import BridgeProcess, bridge_env, load_schemas
from tests.support.broker import Broker
from tests.support.kafka import read_topic

pytestmark = pytest.mark.integration

SETUP = """
CREATE TYPE pair AS (a int, "b c" text);
CREATE TYPE nested AS (p pair, tags text[], d date, ps pair[]);
CREATE TABLE public.t (id int PRIMARY KEY, c pair, n nested, ca pair[]);
"""
ROWS = [
    "(1, '(1,\"x y\")', ROW(ROW(2, 'q\"\\'), '{a,\"b c\",NULL}', '2024-02-29', ARRAY[ROW(3, '')::pair, NULL])::nested,"
    " ARRAY['(4,z)'::pair, '(,)'])",
    "(2, '(,)', ROW(NULL, '{}', 'infinity', NULL)::nested, '{}')",
    "(3, NULL, NULL, NULL)",
]
# (the after row, the envelope's unrepresentable map) of each insert
EXPECTED = [
    ({"id": 1, "c": {"a": 1, "b_c": "x y"},
      "n": {"p": {"a": 2, "b_c": 'q"\\'}, "tags": ["a", "b c", None], "d": date(2024, 2, 29),
            "ps": [{"a": 3, "b_c": ""}, None]},
      "ca": [{"a": 4, "b_c": "z"}, {"a": None, "b_c": None}]}, None),
    ({"id": 2, "c": {"a": None, "b_c": None}, "n": None, "ca": []}, {"after.n": "(,{},infinity,)"}),
    ({"id": 3, "c": None, "n": None, "ca": None}, None),
]


def _stream(pg_dsn: str, broker: Broker, prefix: str, *,
            binary: bool) -> tuple[list[tuple[dict[str, Any], dict[str, str] | None]], Any]:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(SETUP)
    env = bridge_env(pg_dsn, broker.bootstrap, prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": "public.t", "PGBRIDGE_SNAPSHOT__MODE": "never",
                            "PGBRIDGE_POSTGRES__BINARY": "true" if binary else "false"})
    with BridgeProcess(env).start() as bridge:
        bridge.wait_confirmed(pg_dsn, prefix, timeout=60)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            for row in ROWS:
                conn.execute(f"INSERT INTO t VALUES {row}")
        # The attributes are read from the catalog as the Relation is compiled: let that happen first.
        read_topic(broker.bootstrap, f"{prefix}.public.t", min_count=3, timeout=60)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            # Postgres sends no new Relation for this: the next value no longer fits the record.
            conn.execute("ALTER TYPE pair ADD ATTRIBUTE e int")
            conn.execute("INSERT INTO t (id, c) VALUES (4, '(5,w,6)')")
        records = read_topic(broker.bootstrap, f"{prefix}.public.t", min_count=4, timeout=60)
        assert bridge.terminate() == 0, bridge.log()
    store = load_schemas(broker.bootstrap, prefix)
    events = [store.decode(r.value) for r in records if r.value is not None]
    return [(event["after"], event["unrepresentable"]) for event in events], store


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_composites_are_records_in_both_formats(pg_dsn: str, kafka_broker: Broker, topic_prefix: str,
                                                binary: bool) -> None:
    rows, _ = _stream(pg_dsn, kafka_broker, topic_prefix, binary=binary)
    assert rows[:3] == EXPECTED
    # a value newer than the record (one attribute more) is null, its record_out text in the map
    assert rows[3] == ({"id": 4, "c": None, "n": None, "ca": None}, {"after.c": "(5,w,6)"})


def test_schemas_command_prints_composites_as_the_records_run_writes(pg_dsn: str, kafka_broker: Broker,
                                                                     topic_prefix: str) -> None:
    """``pgbridge schemas`` reads the same type catalog as ``run``: a composite is its record there too."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(SETUP)
    env = bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix, extra={"PGBRIDGE_POSTGRES__TABLES": "public.t"})
    printed = subprocess.run([sys.executable, "-m", "pgbridge", "schemas"], env=env, capture_output=True,
                             text=True, timeout=120)
    assert printed.returncode == 0, printed.stderr
    [table] = json.loads(printed.stdout)
    before = next(f for f in table["value"]["fields"] if f["name"] == "before")  # defines the Value record
    fields = {f["name"]: f["type"] for f in before["type"][1]["fields"]}
    pair = fields["c"][1]
    assert pair["type"] == "record" and [f["name"] for f in pair["fields"]] == ["a", "b_c"]
    assert list(fields) == ["id", "c", "n", "ca"]  # one field per column and no other field
    envelope = [f["name"] for f in table["value"]["fields"]]
    assert envelope[-2:] == ["unchanged_toast_columns", "unrepresentable"]
