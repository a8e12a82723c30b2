"""pgbridge against a Schema Registry that serves HTTPS only and requires HTTP basic auth.

The registry is the suite's real one (Apicurio Registry) started with Quarkus' own TLS (a
certificate from a throwaway CA, plain HTTP disabled) and its embedded user realm guarding every
path: no proxy in between. pgbridge gets ``schema_registry.url=https://...``,
``schema_registry.ssl_ca_location`` (the test CA) and ``schema_registry.basic_auth_user_info``:
it registers its schemas and frames records with their ids. With a wrong password it stops at start
with the error naming the setting to fix, and the password appears nowhere in what it printed.
"""

from __future__ import annotations

import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from pgbridge.consumer import RegistrySchemaStore
from tests.support.bridge import BridgeProcess, bridge_env
from tests.support.broker import Broker
from tests.support.kafka import read_topic
from tests.support.registry import SchemaRegistry
from tests.support.tls import CertificateAuthority

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

USER = "pgbridge"


@pytest.fixture(scope="module")
def secure_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SchemaRegistry]:
    directory: Path = tmp_path_factory.mktemp("registry-tls")
    ca = CertificateAuthority(directory)
    server = ca.issue("registry", "localhost", hosts=("localhost", "127.0.0.1"))
    registry = SchemaRegistry(tls=(server.cert, server.key, ca.ca_cert), users={USER: secrets.token_hex(12)})
    with registry.start() as started:
        yield started


def _env(dsn: str, broker: Broker, prefix: str, registry: SchemaRegistry, password: str) -> dict[str, str]:
    assert registry.tls is not None
    return bridge_env(dsn, broker.bootstrap, prefix, extra={
        "PGBRIDGE_POSTGRES__TABLES": "public.items",
        "PGBRIDGE_SCHEMA_REGISTRY__URL": registry.url,
        "PGBRIDGE_SCHEMA_REGISTRY__SSL_CA_LOCATION": str(registry.tls[2]),
        "PGBRIDGE_SCHEMA_REGISTRY__BASIC_AUTH_USER_INFO": f"{USER}:{password}"})


def test_registers_over_https_with_basic_auth(pg_dsn: str, kafka_broker: Broker, secure_registry: SchemaRegistry,
                                              topic_prefix: str) -> None:
    assert secure_registry.url.startswith("https://")
    password = secure_registry.users[USER]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, note text)")
        conn.execute("INSERT INTO items VALUES (1, 'one'), (2, 'two')")
    topic = f"{topic_prefix}.public.items"
    with BridgeProcess(_env(pg_dsn, kafka_broker, topic_prefix, secure_registry, password)).start() as bridge:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO items VALUES (3, 'three')")
        records = read_topic(kafka_broker.bootstrap, topic, min_count=3, timeout=90)
        assert bridge.terminate() == 0, bridge.log()
    assert password not in bridge.log()
    subjects = secure_registry.subjects()
    assert {f"{topic}-key", f"{topic}-value"} <= set(subjects)
    assert secure_registry.tls is not None
    store = RegistrySchemaStore({"url": secure_registry.url, "ssl.ca.location": str(secure_registry.tls[2]),
                                 "basic.auth.user.info": f"{USER}:{password}"})
    try:
        assert {store.schema_id_of(r.value) for r in records if r.value is not None} == set(subjects[f"{topic}-value"])
        assert sorted(store.decode(r.value)["after"]["id"] for r in records if r.value is not None) == [1, 2, 3]
    finally:
        store.close()


def test_a_wrong_password_stops_naming_the_setting_and_never_printing_it(
        pg_dsn: str, kafka_broker: Broker, secure_registry: SchemaRegistry, topic_prefix: str) -> None:
    wrong = "wrong-" + secrets.token_hex(10)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, note text)")
    env = _env(pg_dsn, kafka_broker, topic_prefix, secure_registry, wrong)
    with BridgeProcess(env).start() as bridge:
        assert bridge.process is not None
        code = bridge.process.wait(90)
    log = bridge.log()
    assert code != 0, log
    assert "rejected the credentials" in log and "schema_registry.basic_auth_user_info" in log, log
    assert wrong not in log
    check = subprocess.run([sys.executable, "-m", "pgbridge", "check"], env=env, capture_output=True, text=True,
                           timeout=120)
    assert check.returncode == 1, check.stdout + check.stderr
    assert "rejected the credentials" in check.stdout, check.stdout
    assert wrong not in check.stdout + check.stderr
