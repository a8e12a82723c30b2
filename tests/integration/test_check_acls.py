"""``pgbridge check`` against Apache Kafka with an authorizer (KRaft's StandardAuthorizer): pgbridge
connects over SASL/SCRAM as ``User:bridge``, whose grants are changed between two checks; the
PLAINTEXT listener (``User:ANONYMOUS``, a super user: the brokers' and controllers' own listener)
sets up topics and ACLs. Each missing grant is one line with its ``kafka-acls.sh`` command."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator

import psycopg
import pytest
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from jvm.fetch import classpath

from pgbridge.embedded.apache_kafka import KafkaCluster, start_kafka

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

USER = "bridge"
PASSWORD = secrets.token_hex(12)
SCRAM = "listener.name.scram."


@pytest.fixture(scope="module")
def guarded_kafka() -> Iterator[KafkaCluster]:
    cluster = start_kafka(classpath("kafka"), 1, listeners={"SCRAM": "SASL_PLAINTEXT"}, scram_users={USER: PASSWORD},
                          overrides={"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                                     "super.users": "User:ANONYMOUS",
                                     "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                                     SCRAM + "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                                     SCRAM + "scram-sha-512.sasl.jaas.config":
                                         "org.apache.kafka.common.security.scram.ScramLoginModule required;"})
    try:
        yield cluster
    finally:
        cluster.close()


def _grant(admin: AdminClient, resource: ResourceType, name: str, pattern: ResourcePatternType,
           *operations: AclOperation) -> None:
    bindings = [AclBinding(resource, name, pattern, f"User:{USER}", "*", op, AclPermissionType.ALLOW)
                for op in operations]
    for future in admin.create_acls(bindings, request_timeout=30).values():
        future.result(timeout=30)


def _check(pg_dsn: str, cluster: KafkaCluster, prefix: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGBRIDGE_")}
    env.update({"PGBRIDGE_POSTGRES__DSN": pg_dsn, "PGBRIDGE_POSTGRES__PUBLICATION": "pub",
                "PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS": cluster.bootstrap_for("SCRAM"),
                "PGBRIDGE_KAFKA__TOPIC_PREFIX": prefix, "PGBRIDGE_KAFKA__TOPIC_REPLICATION_FACTOR": "1",
                "PGBRIDGE_KAFKA__PROPERTIES": json.dumps({
                    "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
                    "sasl.username": USER, "sasl.password": PASSWORD})})
    return subprocess.run([sys.executable, "-m", "pgbridge", "check"], env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.fixture
def admin(guarded_kafka: KafkaCluster) -> Iterator[AdminClient]:
    """A super user's admin client; the cluster grants of User:bridge are taken back after each test."""
    admin = AdminClient({"bootstrap.servers": guarded_kafka.bootstrap})
    yield admin
    on_cluster = AclBindingFilter(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, f"User:{USER}",
                                  None, AclOperation.ANY, AclPermissionType.ANY)  # type: ignore[arg-type]
    for future in admin.delete_acls([on_cluster], request_timeout=30).values():
        future.result(timeout=30)


def test_check_names_each_missing_acl_and_passes_once_granted(pg_dsn: str, guarded_kafka: KafkaCluster,
                                                              admin: AdminClient) -> None:
    # given: the topics exist; User:bridge may only WRITE and DESCRIBE the prefix's topics
    prefix = f"acl{secrets.token_hex(4)}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE good (id int PRIMARY KEY); CREATE PUBLICATION pub FOR TABLE good")
    for future in admin.create_topics([NewTopic(f"{prefix}.public.good", 1, 1),
                                       NewTopic(f"{prefix}._snapshot", 1, 1)]).values():
        future.result(timeout=30)
    _grant(admin, ResourceType.TOPIC, f"{prefix}.", ResourcePatternType.PREFIXED,
           AclOperation.WRITE, AclOperation.DESCRIBE)
    # when
    result = _check(pg_dsn, guarded_kafka, prefix)
    # then: the topics are checked; what the principal may do on the cluster is not told without DESCRIBE on it
    assert result.returncode == 1, result.stdout + result.stderr
    assert any(line.startswith("info: Kafka does not tell pgbridge's principal what it may do on the cluster")
               for line in result.stdout.splitlines()), result.stdout
    assert f"error: pgbridge's principal may not READ {prefix}._snapshot" in result.stdout

    # when: DESCRIBE on the cluster too
    _grant(admin, ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, AclOperation.DESCRIBE)
    result = _check(pg_dsn, guarded_kafka, prefix)
    # then: what is missing, each with its command; nothing about what is granted
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert "no authorizer" not in result.stdout and "what it may do on the cluster" not in result.stdout
    assert any(line.startswith("warning: pgbridge's principal may not create topics") and
               f"--operation Create --topic {prefix}. --resource-pattern-type prefixed" in line
               for line in lines), result.stdout
    assert any(line.startswith("warning: pgbridge's principal has no IDEMPOTENT_WRITE") and
               "--operation IdempotentWrite --cluster" in line for line in lines), result.stdout
    assert any(line.startswith(f"error: pgbridge's principal may not READ {prefix}._snapshot") and
               "--operation Read" in line for line in lines), result.stdout
    assert "may not WRITE or DESCRIBE" not in result.stdout

    # when: the rest is granted
    _grant(admin, ResourceType.TOPIC, f"{prefix}.", ResourcePatternType.PREFIXED,
           AclOperation.CREATE, AclOperation.READ)
    _grant(admin, ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, AclOperation.IDEMPOTENT_WRITE)
    result = _check(pg_dsn, guarded_kafka, prefix)
    # then
    assert result.returncode == 0, result.stdout + result.stderr
    assert "principal may not" not in result.stdout and "principal has no" not in result.stdout, result.stdout
    # without DESCRIBE_CONFIGS the topics' min.insync.replicas is not read, and check says so
    assert "their min.insync.replicas is not checked — fix: grant DESCRIBE_CONFIGS" in result.stdout
