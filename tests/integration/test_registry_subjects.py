"""Registry mode's subjects and the lookup-only mode, against the real registry (Apicurio Registry's
Confluent-compatible API, ``tests/support/registry.py``).

``schema_registry.subject_name_strategy`` names the subjects as Confluent's TopicNameStrategy
(``topic``), RecordNameStrategy (``record``) and TopicRecordNameStrategy (``topic_record``) do, and
``pgbridge schemas --subjects`` prints the same names. With ``schema_registry.auto_register: false``
(a registry with ``auto.register.schemas=false``) pgbridge registers nothing: it frames records with
the ids of schemas registered beforehand, and stops naming the subject, confirming nothing, when one
is missing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from pgbridge.consumer import RegistrySchemaStore
from tests.support.bridge import BridgeProcess, bridge_env
from tests.support.broker import Broker
from tests.support.kafka import read_topic, read_topics
from tests.support.postgres import commit_bound, run_sql, slot_confirmed_flush_lsn
from tests.support.registry import SchemaRegistry

pytestmark = pytest.mark.integration

TABLE = "CREATE TABLE public.items (id int PRIMARY KEY, v int)"


def _env(dsn: str, broker: Broker, prefix: str, registry_url: str, **registry: str) -> dict[str, str]:
    return bridge_env(dsn, broker.bootstrap, prefix,
                      extra={"PGBRIDGE_POSTGRES__TABLES": "public.items", "PGBRIDGE_SNAPSHOT__MODE": "never",
                             "PGBRIDGE_SCHEMA_REGISTRY__URL": registry_url,
                             **{f"PGBRIDGE_SCHEMA_REGISTRY__{name.upper()}": value
                                for name, value in registry.items()}})



def _schemas(env: dict[str, str], *args: str) -> Any:
    printed = subprocess.run([sys.executable, "-m", "pgbridge", "schemas", *args], env=env, capture_output=True,
                             text=True, timeout=120)
    assert printed.returncode == 0, printed.stderr
    return json.loads(printed.stdout)


def _stream_one_row(dsn: str, broker: Broker, prefix: str, env: dict[str, str]) -> list[Any]:
    """Start pgbridge, insert one row, return the table's and the transactions topic's records."""
    topic = f"{prefix}.public.items"
    with BridgeProcess(env).start() as bridge:
        bridge.wait_confirmed(dsn, prefix, timeout=60)
        run_sql(dsn, "INSERT INTO items VALUES (1, 10)")
        records = read_topics(broker.bootstrap, [topic, f"{prefix}.transactions"],
                              min_count={topic: 1, f"{prefix}.transactions": 2}, timeout=60)
        assert bridge.terminate() == 0, bridge.log()
    return [*records[topic], *records[f"{prefix}.transactions"]]


@pytest.mark.parametrize(("strategy", "expected"), [
    ("topic", ["{topic}-key", "{topic}-value", "{prefix}.transactions-key", "{prefix}.transactions-value"]),
    ("record", ["{ns}.Key", "{ns}.Envelope", "pgbridge.TransactionKey", "pgbridge.TransactionBoundary"]),
    ("topic_record", ["{topic}-{ns}.Key", "{topic}-{ns}.Envelope", "{prefix}.transactions-pgbridge.TransactionKey",
                      "{prefix}.transactions-pgbridge.TransactionBoundary"]),
])
def test_each_subject_name_strategy_registers_under_its_subjects(pg_dsn: str, kafka_broker: Broker,
                                                                 registry: SchemaRegistry, topic_prefix: str,
                                                                 strategy: str, expected: list[str]) -> None:
    # given
    run_sql(pg_dsn, TABLE)
    topic = f"{topic_prefix}.public.items"
    names = {"topic": topic, "prefix": topic_prefix, "ns": f"{topic_prefix.replace('-', '_')}.public.items"}
    subjects_of = [subject.format(**names) for subject in expected]  # table key, value; transaction key, value
    subjects = sorted(subjects_of)
    env = _env(pg_dsn, kafka_broker, topic_prefix, registry.url, subject_name_strategy=strategy)
    before = set(registry.subjects())
    # when
    records = _stream_one_row(pg_dsn, kafka_broker, topic_prefix, env)
    # then: these subjects hold the schemas, nothing else was registered (the record strategy's
    # transaction subjects are shared by every prefix, so an earlier test may have made them), and
    # each record carries the id of its subject
    after = registry.subjects()
    assert set(subjects) <= set(after) and set(after) - before <= set(subjects)
    assert {subject for subject in subjects if subject.startswith((topic, names["ns"]))} <= set(after) - before
    store = RegistrySchemaStore({"url": registry.url})
    framed = {store.schema_id_of(data) for record in records for data in (record.key, record.value)
              if data is not None}
    store.close()
    assert framed == {after[subject][0] for subject in subjects}
    # and pgbridge schemas names the same subjects
    assert [(t["key_subject"], t["value_subject"]) for t in _schemas(env)] == [tuple(subjects_of[:2])]
    assert [s["subject"] for s in _schemas(env, "--subjects") if s["topic"] != f"{topic_prefix}.messages"] == \
        subjects_of


def test_lookup_only_uses_the_schemas_registered_beforehand(pg_dsn: str, kafka_broker: Broker,
                                                             registry: SchemaRegistry, topic_prefix: str) -> None:
    # given: every subject pgbridge schemas --subjects lists, registered by the operator
    run_sql(pg_dsn, TABLE)
    env = _env(pg_dsn, kafka_broker, topic_prefix, registry.url, auto_register="false")
    ids = {entry["subject"]: registry.register(entry["subject"], entry["schema"])
           for entry in _schemas(env, "--subjects")}
    before = registry.subjects()
    # when
    records = _stream_one_row(pg_dsn, kafka_broker, topic_prefix, env)
    # then: the records carry those ids, and no version was added
    topic = f"{topic_prefix}.public.items"
    store = RegistrySchemaStore({"url": registry.url})
    row = records[0]
    assert row.key is not None and row.value is not None
    assert store.schema_id_of(row.key) == ids[f"{topic}-key"]
    assert store.schema_id_of(row.value) == ids[f"{topic}-value"]
    event = store.decode(row.value)
    store.close()
    assert event["after"] == {"id": 1, "v": 10}
    assert registry.subjects() == before


def test_lookup_only_stops_naming_a_missing_subject_and_confirms_nothing(pg_dsn: str, kafka_broker: Broker,
                                                                         registry: SchemaRegistry,
                                                                         topic_prefix: str) -> None:
    # given: everything registered except the table's value subject
    run_sql(pg_dsn, TABLE)
    topic = f"{topic_prefix}.public.items"
    missing = f"{topic}-value"
    env = _env(pg_dsn, kafka_broker, topic_prefix, registry.url, auto_register="false")
    for entry in _schemas(env, "--subjects"):
        if entry["subject"] != missing:
            registry.register(entry["subject"], entry["schema"])
    before = registry.subjects()
    with BridgeProcess(env).start() as bridge:
        bridge.wait_confirmed(pg_dsn, topic_prefix, timeout=60)
        # when
        bound = commit_bound(pg_dsn, "INSERT INTO items VALUES (1, 10)")
        # then: pgbridge stops with one line naming the subject
        assert bridge.process is not None
        assert bridge.process.wait(60) == 1, bridge.log()
        log = bridge.log()
    errors = [line for line in log.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, log
    assert f"has no subject {missing}" in errors[0] and "auto_register is false" in errors[0], errors[0]
    assert "Traceback" not in log
    # ... registered nothing, published no row and confirmed nothing of the transaction
    assert registry.subjects() == before
    confirmed = slot_confirmed_flush_lsn(pg_dsn, topic_prefix)
    assert confirmed is not None and confirmed <= bound
    assert read_topic(kafka_broker.bootstrap, topic, timeout=5) == []
