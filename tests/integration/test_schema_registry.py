"""Registry mode through the real bridge, against a real Schema Registry (Apicurio Registry's
Confluent-compatible API, ``tests/support/registry.py``), which enforces compatibility itself.

Records are framed in the Confluent wire format under subjects ``{topic}-key`` / ``{topic}-value``;
a compatibility rejection by the registry stops pgbridge (exit 1, one line naming the subject)
without confirming the rejected change, which a restart then delivers once the subject allows it; a
compatible evolution is registered and still readable by a consumer holding the old schema; a
registry that is down at start is retried until it is up, and one that hangs mid-stream loses nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from pgbridge.consumer import RegistrySchemaStore
from tests.support.bridge import BridgeProcess, bridge_env
from tests.support.broker import Broker
from tests.support.kafka import list_topics, read_topic, read_topics
from tests.support.ports import free_port
from tests.support.postgres import commit_bound, run_sql, slot_confirmed_flush_lsn
from tests.support.registry import SchemaRegistry, start_registry
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

TABLE = "CREATE TABLE public.items (id int PRIMARY KEY, v int, note text)"


def _env(dsn: str, broker: Broker, prefix: str, registry_url: str, snapshot: str = "never") -> dict[str, str]:
    return bridge_env(dsn, broker.bootstrap, prefix,
                      extra={"PGBRIDGE_POSTGRES__TABLES": "public.items", "PGBRIDGE_SNAPSHOT__MODE": snapshot,
                             "PGBRIDGE_SCHEMA_REGISTRY__URL": registry_url})



def _slot_exists(dsn: str, slot: str) -> bool:
    return slot_confirmed_flush_lsn(dsn, slot) is not None


def test_records_round_trip_through_the_registry_in_confluent_framing(pg_dsn: str, kafka_broker: Broker,
                                                                      registry: SchemaRegistry,
                                                                      topic_prefix: str) -> None:
    # given
    run_sql(pg_dsn, TABLE)
    topic = f"{topic_prefix}.public.items"
    with BridgeProcess(_env(pg_dsn, kafka_broker, topic_prefix, registry.url)).start() as bridge:
        wait_until(lambda: _slot_exists(pg_dsn, topic_prefix), timeout=60, message=f"no slot: {bridge.log()}")
        # when
        run_sql(pg_dsn, "INSERT INTO items VALUES (1, 10, 'one'), (2, 20, NULL)",
             "UPDATE items SET v = 11 WHERE id = 1", "DELETE FROM items WHERE id = 2")
        records = read_topics(kafka_broker.bootstrap, [topic, f"{topic_prefix}.transactions"],
                              min_count={topic: 5, f"{topic_prefix}.transactions": 6}, timeout=60)
        assert bridge.terminate() == 0, bridge.log()
        subjects = registry.subjects()
        store = RegistrySchemaStore({"url": registry.url})
        # then: every key and value is byte 0, the 4-byte id the subject holds, the Avro body
        value_ids = {store.schema_id_of(r.value) for r in records[topic] if r.value is not None}
        key_ids = {store.schema_id_of(r.key) for r in records[topic] if r.key is not None}
        assert value_ids == set(subjects[f"{topic}-value"]) and len(value_ids) == 1
        assert key_ids == set(subjects[f"{topic}-key"]) and len(key_ids) == 1
        assert f"{topic_prefix}.transactions-value" in subjects
        assert store.schema(value_ids.pop())["fields"][0]["name"] == "before"
        assert [f["name"] for f in store.schema(key_ids.pop())["fields"]] == ["id"]
        events = [(store.decode(r.key), store.decode(r.value)) for r in records[topic]]
        boundaries = [store.decode(r.value)["status"] for r in records[f"{topic_prefix}.transactions"]]
        store.close()
    assert [(key, value and value["op"]) for key, value in events] == [
        ({"id": 1}, "c"), ({"id": 2}, "c"), ({"id": 1}, "u"), ({"id": 2}, "d"), ({"id": 2}, None)]
    first, second = events[0][1], events[1][1]
    assert first is not None and first["after"] == {"id": 1, "v": 10, "note": "one"}
    assert second is not None and second["after"] == {"id": 2, "v": 20, "note": None}
    assert first["source"]["commit_lsn"] == second["source"]["commit_lsn"]
    assert boundaries == ["BEGIN", "END"] * 3
    assert f"{topic_prefix}._schemas" not in list_topics(kafka_broker.bootstrap)  # registry mode only


def test_a_compatibility_rejection_stops_without_confirming_the_rejected_change(
        pg_dsn: str, kafka_broker: Broker, registry: SchemaRegistry, topic_prefix: str) -> None:
    # given: the value subject holds the table's first schema, under BACKWARD compatibility
    run_sql(pg_dsn, TABLE)
    topic = f"{topic_prefix}.public.items"
    subject = f"{topic}-value"
    env = _env(pg_dsn, kafka_broker, topic_prefix, registry.url)
    with BridgeProcess(env).start() as bridge:
        wait_until(lambda: _slot_exists(pg_dsn, topic_prefix), timeout=60, message=f"no slot: {bridge.log()}")
        run_sql(pg_dsn, "INSERT INTO items VALUES (1, 10, 'one')")
        read_topic(kafka_broker.bootstrap, topic, min_count=1, timeout=60)
        client = SchemaRegistryClient({"url": registry.url})
        client.set_compatibility(subject, "BACKWARD")
        # when: a column changes type int → text, which a reader of the new schema cannot resolve
        run_sql(pg_dsn, "ALTER TABLE items ALTER COLUMN v TYPE text")
        bound = commit_bound(pg_dsn, "INSERT INTO items VALUES (2, 'two', 'second')")
        # then: pgbridge stops with one line that names the subject and the registry's reason
        assert bridge.process is not None
        assert bridge.process.wait(60) == 1, bridge.log()
        log = bridge.log()
        errors = [line for line in log.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, log
        assert f"rejected the writer schema for subject {subject} as incompatible" in errors[0]
        # the registry's own reason, quoted (Apicurio: "Incompatible artifact: <subject> [AVRO], ... diffs")
        assert f"Incompatible artifact: {subject}" in errors[0] and "evolve tables compatibly" in errors[0], errors[0]
        assert "Traceback" not in log
    # ... and the rejected transaction was not confirmed, nor registered
    confirmed = slot_confirmed_flush_lsn(pg_dsn, topic_prefix)
    assert confirmed is not None and confirmed <= bound
    assert len(registry.subjects()[subject]) == 1
    first = read_topic(kafka_broker.bootstrap, topic, timeout=10)
    assert len([r for r in first if r.value is not None]) == 1

    # when the operator relaxes the subject and restarts, the rejected change arrives
    client.set_compatibility(subject, "NONE")
    with BridgeProcess(env).start() as bridge:
        records = read_topic(kafka_broker.bootstrap, topic, min_count=2, timeout=60)
        assert bridge.terminate() == 0, bridge.log()
    client.close()
    store = RegistrySchemaStore({"url": registry.url})
    latest = store.decode(records[-1].value)
    assert latest["after"] == {"id": 2, "v": "two", "note": "second"}
    assert store.schema_id_of(records[-1].payload) == registry.subjects()[subject][1]
    assert store.decode(records[0].value)["after"]["v"] == 10  # the old id still decodes
    store.close()


def test_an_unreachable_registry_at_start_is_retried_until_it_is_up(pg_dsn: str, kafka_broker: Broker,
                                                                    topic_prefix: str) -> None:
    # given: existing rows, and a registry that is not listening yet
    run_sql(pg_dsn, TABLE, "INSERT INTO items VALUES (1, 10, 'one'), (2, 20, 'two')")
    topic = f"{topic_prefix}.public.items"
    registry = SchemaRegistry()
    with BridgeProcess(_env(pg_dsn, kafka_broker, topic_prefix, registry.url, snapshot="initial")).start() \
            as bridge:
        # when
        wait_until(lambda: bridge.log().count(f"Schema Registry at {registry.url} is unreachable") >= 2,
                   timeout=60, message=f"no retries logged: {bridge.log()}")
        assert bridge.alive() and "transient failure; reconnecting" in bridge.log()
        with registry.start():
            # then: it snapshots and streams once the registry is up
            wait_until(lambda: _slot_exists(pg_dsn, topic_prefix), timeout=90, message=f"no slot: {bridge.log()}")
            run_sql(pg_dsn, "INSERT INTO items VALUES (3, 30, 'three')")
            records = read_topic(kafka_broker.bootstrap, topic, min_count=3, timeout=60)
            assert bridge.terminate() == 0, bridge.log()
            store = RegistrySchemaStore({"url": registry.url})
            events = [store.decode(r.value) for r in records]
            store.close()
    assert [(e["op"], e["after"]["id"]) for e in events] == [("r", 1), ("r", 2), ("c", 3)]


def test_a_registry_outage_mid_stream_is_retried_and_loses_nothing(pg_dsn: str, kafka_broker: Broker,
                                                                   topic_prefix: str) -> None:
    # given: streaming, with the first schema of the table registered
    run_sql(pg_dsn, TABLE)
    topic = f"{topic_prefix}.public.items"
    # The hang is the condition, not its length: each request gives up after 3 s (default 10 s), so
    # the failure is logged and retried sooner.
    with start_registry() as registry, \
            BridgeProcess({**_env(pg_dsn, kafka_broker, topic_prefix, registry.url),
                           "PGBRIDGE_SCHEMA_REGISTRY__TIMEOUT_S": "3"}).start() as bridge:
        wait_until(lambda: _slot_exists(pg_dsn, topic_prefix), timeout=60, message=f"no slot: {bridge.log()}")
        run_sql(pg_dsn, "INSERT INTO items VALUES (1, 10, 'one')")
        read_topic(kafka_broker.bootstrap, topic, min_count=1, timeout=60)
        # when: the registry hangs (SIGSTOP: connections open, no answers), then a change of the known
        # shape and, at once, one whose new shape must be registered: the registration hangs before
        # the first change's delivery report is served or confirmed by the streaming loop
        registry.pause()
        known = commit_bound(pg_dsn, "INSERT INTO items VALUES (2, 20, 'two')")
        bound = commit_bound(pg_dsn, "ALTER TABLE items ADD COLUMN extra int; "
                                     "INSERT INTO items VALUES (3, 30, 'three', 3)")
        wait_until(lambda: f"for subject {topic}-value" in bridge.log() and "reconnecting" in bridge.log(),
                   timeout=120, message=f"no registration failure and reconnect logged: {bridge.log()}")
        assert bridge.alive()
        # then: the reconnect confirmed what Kafka had acknowledged (so row 2 is not read again),
        # and nothing of the change that waits for the registry
        confirmed = slot_confirmed_flush_lsn(pg_dsn, topic_prefix)
        assert confirmed is not None and known < confirmed <= bound, (known, confirmed, bound, bridge.log())
        registry.resume()  # the same registry, with its state, answering again
        records = read_topic(kafka_broker.bootstrap, topic, min_count=3, timeout=90)
        assert bridge.terminate() == 0, bridge.log()
        store = RegistrySchemaStore({"url": registry.url})
        events = [store.decode(r.value) for r in records]
        store.close()
        assert len(registry.subjects()[f"{topic}-value"]) == 2
    assert [e["after"] for e in events] == [{"id": 1, "v": 10, "note": "one"}, {"id": 2, "v": 20, "note": "two"},
                                            {"id": 3, "v": 30, "note": "three", "extra": 3}]


def test_check_reports_an_unreachable_registry_and_schemas_still_prints(pg_dsn: str,
                                                                        kafka_broker: Broker,
                                                                        registry: SchemaRegistry,
                                                                        topic_prefix: str) -> None:
    run_sql(pg_dsn, TABLE)
    down = f"http://127.0.0.1:{free_port()}"
    env = _env(pg_dsn, kafka_broker, topic_prefix, down)
    check = subprocess.run([sys.executable, "-m", "pgbridge", "check"], env=env, capture_output=True,
                           text=True, timeout=120)
    assert check.returncode == 1, check.stdout + check.stderr
    assert f"error: Schema Registry at {down} is unreachable" in check.stdout
    ok = subprocess.run([sys.executable, "-m", "pgbridge", "check"],
                        env={**env, "PGBRIDGE_SCHEMA_REGISTRY__URL": registry.url},
                        capture_output=True, text=True, timeout=120)
    assert "Schema Registry" not in ok.stdout, ok.stdout
    schemas = subprocess.run([sys.executable, "-m", "pgbridge", "schemas"], env=env, capture_output=True,
                             text=True, timeout=120)
    assert schemas.returncode == 0, schemas.stderr
    assert [t["topic"] for t in json.loads(schemas.stdout)] == [f"{topic_prefix}.public.items"]


def test_a_compatible_evolution_is_registered_and_an_old_consumer_still_reads_it(
        pg_dsn: str, kafka_broker: Broker, registry: SchemaRegistry, topic_prefix: str) -> None:
    # given: BACKWARD on the value subject, and a consumer that knows only the first schema
    import io

    import fastavro

    run_sql(pg_dsn, TABLE)
    topic = f"{topic_prefix}.public.items"
    subject = f"{topic}-value"
    registry.set_compatibility("BACKWARD", subject)
    with BridgeProcess(_env(pg_dsn, kafka_broker, topic_prefix, registry.url)).start() as bridge:
        wait_until(lambda: _slot_exists(pg_dsn, topic_prefix), timeout=60, message=f"no slot: {bridge.log()}")
        run_sql(pg_dsn, "INSERT INTO items VALUES (1, 10, 'one')")
        read_topic(kafka_broker.bootstrap, topic, min_count=1, timeout=60)
        store = RegistrySchemaStore({"url": registry.url})
        old_reader = fastavro.parse_schema(store.schema(registry.subjects()[subject][0]))
        # when: a nullable column is added (a BACKWARD-compatible change) and used
        run_sql(pg_dsn, "ALTER TABLE items ADD COLUMN extra int", "INSERT INTO items VALUES (2, 20, 'two', 2)")
        records = read_topic(kafka_broker.bootstrap, topic, min_count=2, timeout=60)
        assert bridge.terminate() == 0, bridge.log()
    # then: the registry accepted a second version, and the old consumer resolves the new records
    versions = registry.subjects()[subject]
    assert len(versions) == 2
    newest = records[-1].value
    assert newest is not None and store.schema_id_of(newest) == versions[1]
    writer = fastavro.parse_schema(store.schema(versions[1]))
    old_view = fastavro.schemaless_reader(io.BytesIO(newest[5:]), writer, old_reader)
    assert isinstance(old_view, dict) and old_view["after"] == {"id": 2, "v": 20, "note": "two"}
    assert store.decode(newest)["after"] == {"id": 2, "v": 20, "note": "two", "extra": 2}
    store.close()
