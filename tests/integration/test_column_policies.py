"""Column policies end to end (docs/columns.md): ``columns.exclude``, ``mask``, ``truncate`` and
``hash`` through real Postgres and Apache Kafka, in the initial snapshot and in
streamed inserts, updates and deletes, decoded with the writer schemas from ``{prefix}._schemas``;
and the configurations ``run`` and ``pgbridge check`` refuse."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from typing import Any

import psycopg
import pytest

from pgbridge.snapshot.incremental import emit_signal_sql
from tests.support.bridge import BridgeProcess, bridge_env, load_schemas
from tests.support.broker import Broker
from tests.support.cli import check
from tests.support.kafka import read_topic
from tests.support.replay import wait_caught_up
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

SALT = "integration-salt"
POLICIES = {
    "PGBRIDGE_POSTGRES__TABLES": 'public."Users"',
    # the catalog's spelling and the SQL-quoted one both match in full
    "PGBRIDGE_COLUMNS__EXCLUDE": json.dumps([r"public\.Users\.secret"]),
    "PGBRIDGE_COLUMNS__HASH": json.dumps([r"public\.Users\.(id|email)"]),
    "PGBRIDGE_COLUMNS__HASH_SALT": SALT,
    "PGBRIDGE_COLUMNS__MASK": json.dumps({r"public\.Users\.(ssn|born)": 4}),
    "PGBRIDGE_COLUMNS__TRUNCATE": json.dumps({r'public\."Users"\."Name"': 3}),
}


def sha(text: str) -> str:
    return hashlib.sha256((SALT + text).encode()).hexdigest()


def published(id_: int, email: str, name: str, ssn: str | None, born: str | None, note: str) -> dict[str, Any]:
    """The row as the policies publish it: id and email hashed, Name cut to 3 characters, ssn and
    born masked (null stays null), secret absent, note as it is."""
    return {"id": sha(str(id_)), "email": sha(email), "Name": name[:3], "ssn": None if ssn is None else "****",
            "born": None if born is None else "****", "note": note}


def test_policies_shape_snapshot_and_streamed_rows_and_their_schemas(
        pg_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    # given: a mixed-case table (REPLICA IDENTITY FULL, so before images carry every column) with two rows
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute('CREATE TABLE public."Users" (id int PRIMARY KEY, email text NOT NULL, "Name" varchar(40),'
                     " ssn text, born date, secret text, note text)")
        conn.execute('ALTER TABLE public."Users" REPLICA IDENTITY FULL')
        conn.execute('INSERT INTO public."Users" VALUES (1, \'ann@example.org\', \'Ånnä\', \'123\', \'1990-01-02\','
                     " 's1', 'first'), (2, 'bob@example.org', 'Bob', NULL, NULL, 's2', 'second')")
    env = bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix, extra=POLICIES)
    topic = f"{topic_prefix}.public.Users"
    with BridgeProcess(env).start() as bridge:
        wait_until(lambda: len(read_topic(kafka_broker.bootstrap, topic, timeout=2, idle=0.5)) >= 2, timeout=120,
                   interval=0.5, message=f"no snapshot rows: {bridge.log()[-2000:]}")
        # when: an insert, an update and a delete are streamed
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute('INSERT INTO public."Users" VALUES (3, \'cé@example.org\', \'Çédric\', \'999\', NULL,'
                         " 's3', 'third')")
            conn.execute('UPDATE public."Users" SET email = \'ann@new.org\', secret = \'s9\' WHERE id = 1')
            conn.execute('DELETE FROM public."Users" WHERE id = 2')
            # and an incremental snapshot of the table, on a signal
            conn.execute(emit_signal_sql(['public."Users"']))
        wait_until(lambda: "incremental snapshot of table done" in bridge.log(), timeout=120, interval=0.5,
                   message=f"the incremental snapshot never finished: {bridge.log()[-3000:]}")
        wait_caught_up(pg_dsn, topic_prefix, timeout=90)
        records = read_topic(kafka_broker.bootstrap, topic, min_count=8, timeout=60)
        assert bridge.terminate() == 0, bridge.log()
    assert SALT not in bridge.log()
    # then: every record carries exactly the published form, keyed by the hashed id
    store = load_schemas(kafka_broker.bootstrap, topic_prefix)
    decoded = [(store.decode(r.key), store.decode(r.value)) for r in records]
    ann = published(1, "ann@example.org", "Ånnä", "123", "1990-01-02", "first")
    bob = published(2, "bob@example.org", "Bob", None, None, "second")
    ced = published(3, "cé@example.org", "Çédric", "999", None, "third")
    assert [(key, value and value["op"], value and value["before"], value and value["after"])
            for key, value in decoded] == [
        ({"id": sha("1")}, "r", None, ann),
        ({"id": sha("2")}, "r", None, bob),
        ({"id": sha("3")}, "c", None, ced),
        ({"id": sha("1")}, "u", ann, {**ann, "email": sha("ann@new.org")}),
        ({"id": sha("2")}, "d", bob, None),
        ({"id": sha("2")}, None, None, None),  # the delete's tombstone, under the same hashed key
        ({"id": sha("1")}, "r", None, {**ann, "email": sha("ann@new.org")}),  # the incremental snapshot
        ({"id": sha("3")}, "r", None, ced),
    ]
    assert all(value is None or value["unrepresentable"] is None for _, value in decoded)
    # and the writer schemas: secret absent, masked and hashed fields nullable strings, the key a string
    value_schema = store.schema(store.fingerprint_of(records[0].value or b""))
    row = next(f for f in value_schema["fields"] if f["name"] == "before")["type"][1]
    fields = {f["name"]: f for f in row["fields"]}
    assert list(fields) == ["id", "email", "Name", "ssn", "born", "note"]
    assert {name: (f["type"], f["pg_type"]) for name, f in fields.items()} == {
        "id": (["null", "string"], "text"), "email": (["null", "string"], "text"),
        "Name": (["null", "string"], "varchar"), "ssn": (["null", "string"], "text"),
        "born": (["null", "string"], "text"), "note": (["null", "string"], "text")}
    key_schema = store.schema(store.fingerprint_of(records[0].key or b""))
    assert [(f["name"], f["type"]) for f in key_schema["fields"]] == [("id", "string")]



def test_an_excluded_key_column_or_a_truncated_non_text_column_is_refused_at_start_and_by_check(
        pg_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE accounts (id int PRIMARY KEY, opened date, note text)")
    bad = {"PGBRIDGE_POSTGRES__TABLES": "public.accounts",
           "PGBRIDGE_COLUMNS__EXCLUDE": json.dumps([r"public\.accounts\.id"]),
           "PGBRIDGE_COLUMNS__TRUNCATE": json.dumps({r"public\.accounts\.opened": 2})}
    env = bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix, extra=bad)
    report = check(env)
    assert report.returncode == 1, report.stdout + report.stderr
    lines = report.stdout.splitlines()
    assert any("columns.exclude matches public.accounts.id, a Kafka key column" in line and "fix:" in line
               for line in lines), report.stdout
    for variant in ({"PGBRIDGE_COLUMNS__TRUNCATE": "{}"},
                    {"PGBRIDGE_COLUMNS__EXCLUDE": "[]"}):
        bridge = BridgeProcess({**env, **variant}).start()
        with bridge:
            assert bridge.process is not None
            code = bridge.process.wait(timeout=120)
        assert code == 2, bridge.log()
        expected = ("a Kafka key column" if "PGBRIDGE_COLUMNS__TRUNCATE" in variant
                    else "public.accounts.opened of type date, which is not text")
        assert expected in bridge.log(), bridge.log()[-2000:]
    report = check({**env, "PGBRIDGE_COLUMNS__EXCLUDE": "[]"})
    assert any("columns.truncate matches public.accounts.opened of type date" in line
               for line in report.stdout.splitlines()), report.stdout


def test_message_key_columns_key_every_record_of_the_table_by_the_configured_columns(
        pg_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    # given: a table keyed in Kafka by tenant instead of its primary key (REPLICA IDENTITY FULL)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY, tenant int NOT NULL, note text)")
        conn.execute("ALTER TABLE orders REPLICA IDENTITY FULL")
        conn.execute("INSERT INTO orders VALUES (1, 10, 'a')")
    env = bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix, extra={
        "PGBRIDGE_POSTGRES__TABLES": "public.orders",
        "PGBRIDGE_KAFKA__MESSAGE_KEY_COLUMNS": json.dumps({"public.orders": ["tenant"]})})
    topic = f"{topic_prefix}.public.orders"
    with BridgeProcess(env).start() as bridge:
        wait_until(lambda: len(read_topic(kafka_broker.bootstrap, topic, timeout=2, idle=0.5)) >= 1, timeout=120,
                   interval=0.5, message=f"no snapshot row: {bridge.log()[-2000:]}")
        # when: an insert, an update moving a row to another tenant, a delete
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO orders VALUES (2, 20, 'b')")
            conn.execute("UPDATE orders SET tenant = 30 WHERE id = 2")
            conn.execute("DELETE FROM orders WHERE id = 1")
        wait_caught_up(pg_dsn, topic_prefix, timeout=90)
        records = read_topic(kafka_broker.bootstrap, topic, min_count=6, timeout=60)
        assert bridge.terminate() == 0, bridge.log()
    # then: keys are {"tenant": ...}; the update tombstones the old tenant key first
    store = load_schemas(kafka_broker.bootstrap, topic_prefix)
    decoded = [(store.decode(r.key), (store.decode(r.value) or {}).get("op")) for r in records]
    assert decoded == [({"tenant": 10}, "r"), ({"tenant": 20}, "c"), ({"tenant": 20}, None),
                       ({"tenant": 30}, "u"), ({"tenant": 10}, "d"), ({"tenant": 10}, None)]
    key_schema = store.schema(store.fingerprint_of(records[0].key or b""))
    assert [(f["name"], f["type"]) for f in key_schema["fields"]] == [("tenant", "int")]


def test_message_key_columns_the_replica_identity_cannot_supply_are_refused_at_start_and_by_check(
        pg_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY, tenant int NOT NULL, region text)")
    cases = [
        ({"public.orders": ["tenant"]}, "public.orders's replica identity does not include tenant"),
        ({"public.orders": ["nope"]}, "public.orders has no published column nope"),
        ({"public.orders": ["id", "region"]}, "public.orders's replica identity does not include region"),
    ]
    for keys, message in cases:
        env = bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix, extra={
            "PGBRIDGE_POSTGRES__TABLES": "public.orders", "PGBRIDGE_KAFKA__MESSAGE_KEY_COLUMNS": json.dumps(keys)})
        report = check(env)
        assert report.returncode == 1 and any(message in line and "fix:" in line
                                              for line in report.stdout.splitlines()), report.stdout
        bridge = BridgeProcess(env).start()
        with bridge:
            assert bridge.process is not None
            code = bridge.process.wait(timeout=120)
        assert code == 2 and message in bridge.log(), bridge.log()[-2000:]
    # REPLICA IDENTITY FULL supplies any column, but a nullable one cannot be a key field
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE orders REPLICA IDENTITY FULL")
    env = bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix, extra={
        "PGBRIDGE_POSTGRES__TABLES": "public.orders",
        "PGBRIDGE_KAFKA__MESSAGE_KEY_COLUMNS": json.dumps({"public.orders": ["region"]})})
    report = check(env)
    assert any("public.orders.region may be null" in line for line in report.stdout.splitlines()), report.stdout


def test_pgbridge_schemas_prints_the_schemas_run_writes_under_the_policies_and_key_columns(
        pg_dsn: str, kafka_broker: Broker, topic_prefix: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY, tenant int NOT NULL, secret text, card text)")
        conn.execute("ALTER TABLE orders REPLICA IDENTITY FULL")
    env = bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix, extra={
        "PGBRIDGE_POSTGRES__TABLES": "public.orders",
        "PGBRIDGE_COLUMNS__EXCLUDE": json.dumps([r".*\.secret"]),
        "PGBRIDGE_COLUMNS__MASK": json.dumps({r".*\.card": 4}),
        "PGBRIDGE_KAFKA__MESSAGE_KEY_COLUMNS": json.dumps({"public.orders": ["tenant"]})})
    result = subprocess.run([sys.executable, "-m", "pgbridge", "schemas"], env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    [entry] = json.loads(result.stdout)
    assert [f["name"] for f in entry["key"]["fields"]] == ["tenant"]
    row = next(f for f in entry["value"]["fields"] if f["name"] == "before")["type"][1]
    assert [(f["name"], f["pg_type"]) for f in row["fields"]] == [("id", "int4"), ("tenant", "int4"), ("card", "text")]
