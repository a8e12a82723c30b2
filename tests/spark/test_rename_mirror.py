"""A column renamed in Postgres, as a writer schema whose field carries Avro ``aliases`` naming the
old column: the Delta table's column is renamed in place (column mapping) and keeps its values, and
records written before the rename fill the new name, with both decoders.

The records are produced here, framed as pgbridge frames them (single-object encoding, schemas in
``{prefix}._schemas``), so the test does not depend on how pgbridge learns of the rename.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from fastavro import parse_schema, schemaless_writer

from pgbridge.encode.wire import fingerprint64, fingerprint_hex, single_object_header
from pgbridge_spark.config import MirrorConfig
from pgbridge_spark.mirror import MirrorJob
from tests.spark.mirror_support import read_table, run_available_now
from tests.spark.test_decoders_agree import SOURCE, TRANSACTION
from tests.support.broker import Broker

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(1800)]


def envelope(name_field: dict[str, Any], namespace: str) -> dict[str, Any]:
    row = {"type": "record", "name": "Value", "fields": [
        {"name": "id", "type": ["null", "long"], "default": None, "pg_type": "int8"},
        {**name_field, "type": ["null", "string"], "default": None, "pg_type": "text"}]}
    return {"type": "record", "name": "Envelope", "namespace": namespace, "fields": [
        {"name": "before", "type": ["null", row], "default": None},
        {"name": "after", "type": ["null", "Value"], "default": None},
        {"name": "op", "type": "string"}, {"name": "source", "type": SOURCE},
        {"name": "transaction", "type": ["null", TRANSACTION], "default": None},
        {"name": "unchanged_toast_columns", "type": {"type": "array", "items": "string"}, "default": []},
        {"name": "unrepresentable", "type": ["null", {"type": "map", "values": "string"}], "default": None}]}


def framed(schema: dict[str, Any], datum: dict[str, Any]) -> bytes:
    header = single_object_header(fingerprint64(schema))
    buffer = io.BytesIO(header)
    buffer.seek(len(header))
    schemaless_writer(buffer, parse_schema(json.loads(json.dumps(schema))), datum)
    return buffer.getvalue()


def change(op: str, lsn: int, row: dict[str, Any]) -> dict[str, Any]:
    return {"before": None, "after": row, "op": op, "unchanged_toast_columns": [], "unrepresentable": None,
            "source": {"db": "d", "schema": "public", "table": "people", "lsn": lsn, "commit_lsn": lsn, "xid": lsn,
                       "ts_us": lsn, "snapshot": False, "origin": None},
            "transaction": {"id": f"{lsn}:{lsn}", "total_order": 1, "data_collection_order": 1}}


def test_a_renamed_column_keeps_its_values_and_old_records_fill_it(spark: Any, apache_kafka: Broker,
                                                                     topic_prefix: str, tmp_path: Path) -> None:
    # given: the table's writer schema before and after `ALTER TABLE people RENAME name TO full_name`
    namespace = f"{topic_prefix}.public.people"
    before = envelope({"name": "name"}, namespace)
    after = envelope({"name": "full_name", "aliases": ["name"]}, namespace)
    key = {"type": "record", "name": "Key", "namespace": namespace, "fields": [{"name": "id", "type": "long"}]}
    producer = Producer({"bootstrap.servers": apache_kafka.bootstrap})
    for schema in (before, after, key):
        producer.produce(f"{topic_prefix}._schemas", key=fingerprint_hex(fingerprint64(schema)).encode(),
                         value=json.dumps(schema).encode())

    def publish(schema: dict[str, Any], op: str, lsn: int, row: dict[str, Any]) -> None:
        producer.produce(namespace, key=framed(key, {"id": row["id"]}), value=framed(schema, change(op, lsn, row)))

    jobs = {decoder: MirrorJob(spark, MirrorConfig(
        bootstrap_servers=apache_kafka.bootstrap, prefix=topic_prefix, output=str(tmp_path / decoder / "mirror"),
        checkpoint=str(tmp_path / decoder / "checkpoint"), decoder=decoder)) for decoder in ("jvm", "python")}
    publish(before, "c", 100, {"id": 1, "name": "ann"})
    publish(before, "c", 101, {"id": 2, "name": "bob"})
    assert producer.flush(30) == 0
    for job in jobs.values():
        run_available_now(job)
    # when: one more row under the old name, then the rename, an update and an insert under the new one
    publish(before, "c", 150, {"id": 4, "name": "dan"})
    publish(after, "u", 200, {"id": 1, "full_name": "ann2"})
    publish(after, "c", 201, {"id": 3, "full_name": "cy"})
    assert producer.flush(30) == 0
    for job in jobs.values():
        run_available_now(job)
    # then: the column is renamed in place, stored values kept, old records under the new name
    for decoder in jobs:
        columns, rows = read_table(tmp_path / decoder / "mirror" / "public.people")
        assert [c for c in columns if not c.startswith("_pgbridge_")] == ["id", "full_name"], decoder
        assert sorted((r["id"], r["full_name"]) for r in rows) == [(1, "ann2"), (2, "bob"), (3, "cy"), (4, "dan")], (
            decoder)
