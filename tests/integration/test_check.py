"""`pgbridge check` names each missing prerequisite with its fix; bad configuration exits 2."""

from __future__ import annotations

import json
import os
import secrets
import time

import psycopg
import pytest

from tests.support.bridge import BridgeProcess
from tests.support.broker import Broker, broker_kind
from tests.support.cli import check
from tests.support.kafka import create_topic
from tests.support.ports import free_port
from tests.support.postgres import PgClusterFactory
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration



def _env(dsn: str, bootstrap: str, **extra: str) -> dict[str, str]:
    return {"PGBRIDGE_POSTGRES__DSN": dsn, "PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS": bootstrap,
            "PGBRIDGE_POSTGRES__PUBLICATION": "pub", **extra}


def test_check_passes_when_everything_is_in_place(pg_dsn: str, kafka_broker: Broker) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE good (id int PRIMARY KEY, v int); CREATE PUBLICATION pub FOR TABLE good")
    result = check(_env(pg_dsn, kafka_broker.bootstrap))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok:" in result.stdout
    assert "warning: max_slot_wal_keep_size is -1 (unlimited): a stuck or abandoned slot keeps WAL until the disk " \
        "fills" in result.stdout


def test_check_reports_topic_copies_acls_and_the_wal_kept_for_slots(pg_cluster_factory: PgClusterFactory,
                                                                     kafka_broker: Broker) -> None:
    if broker_kind() != "kafka":
        pytest.skip("topic configs and the authorizer answer of Apache Kafka")
    # given: a server that caps the WAL a slot keeps, and a topic under the prefix with one copy
    cluster = pg_cluster_factory(15, {"max_slot_wal_keep_size": "1GB"})
    prefix = f"chk{secrets.token_hex(4)}"
    create_topic(kafka_broker.bootstrap, f"{prefix}.public.good")
    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute("CREATE TABLE good (id int PRIMARY KEY); CREATE PUBLICATION pub FOR TABLE good")
    # when
    result = check(_env(cluster.dsn(), kafka_broker.bootstrap, PGBRIDGE_KAFKA__TOPIC_PREFIX=prefix))
    # then: warnings and facts, no error
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert "info: no authorizer: ACLs not checked" in result.stdout
    assert any(line.startswith("info: max_slot_wal_keep_size is 1GB: a slot more than that behind is invalidated")
               for line in lines), result.stdout
    assert any(line.startswith("warning: the Kafka cluster has 1 broker(s): topics run creates get replication "
                               "factor 1 (min.insync.replicas 1)") for line in lines), result.stdout
    assert any(line.startswith("warning: topics with a single copy (replication factor 1): "
                               f"{prefix}.public.good;") for line in lines), result.stdout


def test_check_names_missing_publication_and_bad_replica_identity(pg_dsn: str, kafka_broker: Broker) -> None:
    result = check(_env(pg_dsn, kafka_broker.bootstrap))
    assert result.returncode == 1
    assert "publication pub does not exist" in result.stdout
    assert "CREATE PUBLICATION pub" in result.stdout

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE nokey (v int); CREATE TABLE nothing (id int PRIMARY KEY, doc text);"
                     " ALTER TABLE nothing REPLICA IDENTITY NOTHING;"
                     " CREATE PUBLICATION pub FOR TABLE nokey, nothing")
    result = check(_env(pg_dsn, kafka_broker.bootstrap))
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert any("public.nokey has no primary key" in line and "REPLICA IDENTITY FULL" in line for line in lines)
    assert any("public.nothing has REPLICA IDENTITY NOTHING" in line and "fix:" in line for line in lines)
    assert any("TOASTable columns (doc)" in line for line in lines)


def test_check_names_wal_level_and_unreachable_kafka(pg_cluster_factory: PgClusterFactory) -> None:
    cluster = pg_cluster_factory(15, {"wal_level": "replica"})
    result = check(_env(cluster.dsn(), f"127.0.0.1:{free_port()}",
                         PGBRIDGE_POSTGRES__TABLES="public.missing"))
    assert result.returncode == 1
    assert "wal_level is replica" in result.stdout and "ALTER SYSTEM SET wal_level = logical" in result.stdout
    assert "table public.missing in postgres.tables does not exist" in result.stdout
    assert "Kafka at 127.0.0.1" in result.stdout and "unreachable" in result.stdout


def test_check_reports_unreachable_postgres_without_the_password(kafka_broker: Broker) -> None:
    dsn = f"postgresql://someone:topsecret@127.0.0.1:{free_port()}/db"
    result = check(_env(dsn, kafka_broker.bootstrap))
    assert result.returncode == 1
    assert "cannot connect to Postgres at 127.0.0.1" in result.stdout
    assert "topsecret" not in result.stdout + result.stderr


def test_check_names_columns_binary_mode_cannot_read(pg_dsn: str, kafka_broker: Broker) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE DOMAIN cash AS money; CREATE TYPE priced AS (n int, m money);"
                     " CREATE TYPE plain AS (n int, ip inet);"
                     " CREATE TABLE wallet (id int PRIMARY KEY, amount money, saved cash, ip inet, box box,"
                     " owner regrole, acl aclitem, amounts money[], item priced, other plain);"
                     " CREATE PUBLICATION pub FOR TABLE wallet")
    result = check(_env(pg_dsn, kafka_broker.bootstrap, PGBRIDGE_POSTGRES__BINARY="true"))
    assert result.returncode == 1, result.stdout + result.stderr
    flagged = [line for line in result.stdout.splitlines() if "reads only as text" in line]
    assert [line.split(" has type ")[0].split()[-1] for line in flagged] == [
        "public.wallet.amount", "public.wallet.saved", "public.wallet.owner", "public.wallet.amounts",
        "public.wallet.item"]
    assert "type money," in flagged[0] and "type public.cash," in flagged[1] and "type regrole," in flagged[2]
    assert "type public.priced," in flagged[4]  # a composite with a money attribute; `plain` reads fine
    assert all(line.startswith("error:") and "fix: set postgres.binary to false" in line for line in flagged)

    # Columns left out of the publication's column list are never sent; without binary nothing is flagged.
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("ALTER PUBLICATION pub SET TABLE wallet (id, ip, box, acl, other)")
    result = check(_env(pg_dsn, kafka_broker.bootstrap, PGBRIDGE_POSTGRES__BINARY="true"))
    assert result.returncode == 0, result.stdout + result.stderr
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("ALTER PUBLICATION pub SET TABLE wallet")
    result = check(_env(pg_dsn, kafka_broker.bootstrap))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "reads only as text" not in result.stdout


def test_check_against_an_unreachable_broker_prints_its_verdict_and_no_librdkafka_lines(pg_dsn: str) -> None:
    # given: nothing listens on the broker's port
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE good (id int PRIMARY KEY); CREATE PUBLICATION pub FOR TABLE good")
    port = free_port()
    # when
    result = check(_env(pg_dsn, f"127.0.0.1:{port}"))
    # then: one verdict line for Kafka, none of librdkafka's own (%3|...|FAIL|... lines) on either stream
    assert result.returncode == 1
    output = result.stdout + result.stderr
    assert f"Kafka at 127.0.0.1:{port} is unreachable" in result.stdout
    assert "%3|" not in output and "%6|" not in output and "FAIL" not in output, output
    assert len(output.splitlines()) <= 3, output


def _librdkafka_refusals(log: str) -> list[dict[str, object]]:
    """The JSON records librdkafka's refused connections became (every line must be JSON)."""
    records = [json.loads(line) for line in log.splitlines() if line.strip()]
    return [r for r in records if r.get("logger") == "librdkafka" and "refused" in str(r.get("msg"))]


def test_json_logs_carry_librdkafka_lines_as_structured_records_once(pg_dsn: str) -> None:
    # given: pgbridge run against a refused broker port, logging in JSON
    port = free_port()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE good (id int PRIMARY KEY); CREATE PUBLICATION pub FOR TABLE good")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PGBRIDGE_")}
    env = {**clean, **_env(pg_dsn, f"127.0.0.1:{port}"), "PGBRIDGE_LOG__JSON": "true",
           "PGBRIDGE_HTTP__PORT": "0", "PGBRIDGE_SNAPSHOT__MODE": "never", "PGBRIDGE_HA__LEADER_ELECTION": "false"}
    with BridgeProcess(env).start() as bridge:
        # when: the refusal is logged while pgbridge still waits for metadata (within an attempt, not
        # at the end of the wait), and librdkafka goes on retrying
        try:
            wait_until(lambda: _librdkafka_refusals(bridge.log()), timeout=120,
                       message="a librdkafka refusal logged while waiting for Kafka")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{bridge.log()[-3000:]}") from exc
        # Not a wait for a condition: the retries to fold into that line. librdkafka reconnects after
        # 0.1 s, doubling, so within 3 s it tries at least four more times.
        time.sleep(3)
        assert bridge.terminate(timeout=30) == 0, bridge.log()[-3000:]
    # then: every line is JSON, and the repeated refusal was reported a bounded number of times
    refused = _librdkafka_refusals(bridge.log())
    assert 1 <= len(refused) <= 4, bridge.log()[-3000:]
    assert all(r.get("facility") for r in refused)
