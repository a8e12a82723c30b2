"""pgbridge against Apache Kafka over TLS (server verification), mutual TLS and SASL/SCRAM-SHA-512.

One broker serves all three on listeners of their own (``tests.support.secure_kafka``). For each
mode pgbridge gets only that listener's address and the librdkafka settings a user would give (``PGBRIDGE_KAFKA__PROPERTIES__...``) and runs with exactly-once on and an
initial snapshot, so every client it makes goes through the secured listener: the admin client
(topic creation), the transactional producer, and the readers of its internal topics (snapshot
progress, exactly-once positions). The test reads what it wrote through the broker's PLAINTEXT
listener. Each mode is also shown to refuse a client without the credential, so the listener really
enforces what the mode is named after.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import psycopg
import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from tests.support.bridge import BridgeProcess, bridge_env, read_events
from tests.support.broker import require_transactions
from tests.support.postgres import PgCluster, create_database, drop_database, start_cluster
from tests.support.replay import wait_caught_up
from tests.support.secure_kafka import SecureKafka

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

SNAPSHOT_ROWS = 40
STREAMED_ROWS = 40


@pytest.fixture(scope="module")
def postgres() -> Iterator[PgCluster]:
    cluster = start_cluster(18)
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def dsn(postgres: PgCluster) -> Iterator[str]:
    dbname = f"t_{secrets.token_hex(6)}"
    create_database(postgres, dbname)
    try:
        yield postgres.dsn(dbname)
    finally:
        drop_database(postgres, dbname)


def _answers(bootstrap: str, properties: dict[str, str]) -> bool:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0,
                         "socket.connection.setup.timeout.ms": 3000, **properties})
    try:
        admin.list_topics(timeout=5.0)
    except KafkaException:
        return False
    return True


@pytest.mark.parametrize("mode", ["tls", "mtls", "scram"])
def test_streams_end_to_end_over_each_secured_listener(secure_kafka: SecureKafka, dsn: str, mode: str,
                                                       topic_prefix: str) -> None:
    require_transactions()
    bootstrap = secure_kafka.bootstrap(mode)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, note text)")
        conn.execute("INSERT INTO items SELECT g, 'snap ' || g FROM generate_series(1, %s::int) g", (SNAPSHOT_ROWS,))
    env = bridge_env(dsn, bootstrap, topic_prefix, extra={"PGBRIDGE_KAFKA__EXACTLY_ONCE": "true",
                                                                  "PGBRIDGE_POSTGRES__TABLES": "public.items"})
    env.update({f"PGBRIDGE_KAFKA__PROPERTIES__{key.upper()}": value
                for key, value in secure_kafka.properties(mode).items()})
    with BridgeProcess(env).start() as bridge:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO items SELECT g, 'live ' || g FROM generate_series(%s::int, %s::int) g",
                         (SNAPSHOT_ROWS + 1, SNAPSHOT_ROWS + STREAMED_ROWS))
        try:
            wait_caught_up(dsn, topic_prefix, timeout=60)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\npgbridge's log:\n{bridge.log()[-4000:]}") from None
        assert bridge.alive(), bridge.log()
    plain = secure_kafka.cluster.bootstrap  # the test's own reader: the PLAINTEXT listener
    events = read_events(plain, f"{topic_prefix}.public.items", topic_prefix,
                         min_count=SNAPSHOT_ROWS + STREAMED_ROWS, timeout=60)
    ids = sorted(event.value["after"]["id"] for event in events if event.value is not None)
    assert ids == list(range(1, SNAPSHOT_ROWS + STREAMED_ROWS + 1)), bridge.log()[-3000:]
    # the listener refuses a client that lacks the mode's credential
    lacking = dict(secure_kafka.properties(mode))
    if mode == "tls":  # the system's CAs do not know the test CA: the server is not verified
        del lacking["ssl.ca.location"]
    elif mode == "mtls":
        for key in ("ssl.certificate.location", "ssl.key.location", "ssl.key.password"):
            del lacking[key]
    else:
        lacking["sasl.password"] = "wrong-" + secure_kafka.scram_password
    assert not _answers(bootstrap, lacking), f"{mode}: a client without the credential was let in"
