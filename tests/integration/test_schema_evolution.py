"""ALTER TABLE mid-stream: new writer schemas, readable with the old reader schema where Avro allows."""

from __future__ import annotations

import io
import json

import psycopg
import pytest
from fastavro import parse_schema, schemaless_reader

from tests.support.bridge import BridgeProcess, bridge_env, load_schemas
from tests.support.broker import Broker
from tests.support.kafka import read_topic

pytestmark = pytest.mark.integration


def test_alter_table_mid_stream_keeps_old_readers_reading_and_schemas_decode_everything(
        pg_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    # given
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.evo (id int PRIMARY KEY, a text, b int)")
    env = bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": "public.evo", "PGBRIDGE_SNAPSHOT__MODE": "never",
                            "PGBRIDGE_HTTP__HOST": "127.0.0.1"})
    with BridgeProcess(env).start(http=True) as bridge:
        bridge.wait_confirmed(pg_dsn, topic_prefix, timeout=60)
        # when
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO evo VALUES (1, 'one', 1)")
            conn.execute("ALTER TABLE evo ADD COLUMN c timestamptz")
            conn.execute("INSERT INTO evo VALUES (2, 'two', 2, '2024-01-01 00:00:00+00')")
            conn.execute("ALTER TABLE evo DROP COLUMN a")
            conn.execute("INSERT INTO evo VALUES (3, 3, NULL)")
            conn.execute("ALTER TABLE evo RENAME COLUMN b TO bb")
            conn.execute("INSERT INTO evo VALUES (4, 4, NULL)")
            conn.execute("ALTER TABLE evo ALTER COLUMN bb TYPE bigint")
            conn.execute("INSERT INTO evo VALUES (5, 5000000000, NULL)")
        records = read_topic(kafka_broker.bootstrap, f"{topic_prefix}.public.evo", min_count=5, timeout=60)
        import urllib.request
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{bridge.http_port}/metrics").read().decode()
        assert bridge.terminate() == 0, bridge.log()
    # then: a consumer reading _schemas decodes every record
    store = load_schemas(kafka_broker.bootstrap, topic_prefix)
    afters = [store.decode(r.value)["after"] for r in records]
    assert [a["id"] for a in afters] == [1, 2, 3, 4, 5]
    assert afters[1]["a"] == "two" and afters[1]["c"] is not None
    assert "a" not in afters[2] and afters[3]["bb"] == 4 and afters[4]["bb"] == 5_000_000_000
    # a consumer holding the first writer schema reads the compatible changes by schema resolution
    first_schema = store.schema(store.fingerprint_of(records[0].payload))
    old_reader = parse_schema(json.loads(json.dumps(first_schema)))
    old_view = []
    for record in records[:4]:
        writer = parse_schema(store.schema(store.fingerprint_of(record.payload)))
        decoded = schemaless_reader(io.BytesIO(record.payload[10:]), writer, old_reader)
        assert isinstance(decoded, dict), decoded  # an envelope is an Avro record
        old_view.append(decoded["after"])
    assert old_view == [{"id": 1, "a": "one", "b": 1}, {"id": 2, "a": "two", "b": 2},
                        {"id": 3, "a": None, "b": 3}, {"id": 4, "a": None, "b": None}]  # renamed: b reads null
    # int -> bigint cannot be read as int: still published, counted as incompatible
    assert 'pgbridge_schema_changes_total{compatibility="compatible"} 3.0' in metrics
    assert 'pgbridge_schema_changes_total{compatibility="incompatible"} 1.0' in metrics
