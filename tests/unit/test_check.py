"""``pgbridge check``'s verdicts from catalogue answers, without a server: a scripted connection
answers each query in turn with the rows Postgres would return (tests/integration/test_check.py
runs the whole command against real servers)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, cast

import psycopg
import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AclOperation, AdminClient, ResourceType  # type: ignore[attr-defined]

from pgbridge.check import Problem
from pgbridge.check.kafka import acl_problems, check_kafka, check_schema_registry, replication_problems
from pgbridge.check.postgres import _partition_problems, _table_problems, wal_keep_problem, wal_level_problem
from pgbridge.config import Settings, load_settings
from pgbridge.source.slots import PUBVIAROOT_VERSION
from tests.support.ports import free_port

Rows = Sequence[tuple[Any, ...]]


@dataclass
class _Cursor:
    rows: Rows

    def fetchone(self) -> tuple[Any, ...] | None:
        return self.rows[0] if self.rows else None

    def fetchall(self) -> list[tuple[Any, ...]]:
        return list(self.rows)


@dataclass
class _Info:
    server_version: int


@dataclass
class ScriptedConnection:
    """Answers the n-th ``execute`` with ``answers[n]``; records each query and its parameters."""

    answers: list[Rows]
    info: _Info = field(default_factory=lambda: _Info(170000))
    queries: list[tuple[str, object]] = field(default_factory=list)

    def execute(self, query: str, params: object = None) -> _Cursor:
        self.queries.append((query, params))
        assert self.answers, f"unexpected query: {query}"
        return _Cursor(self.answers.pop(0))

    def as_connection(self) -> psycopg.Connection[tuple[object, ...]]:
        # the check functions are typed against psycopg; this answers the two calls they make
        return cast("psycopg.Connection[tuple[object, ...]]", self)


def _settings(**extra: str) -> Settings:
    return load_settings(environ={"PGBRIDGE_POSTGRES__DSN": "host=127.0.0.1 dbname=app",
                                  "PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS": f"127.0.0.1:{free_port()}", **extra})


def test_a_problem_line_names_severity_message_and_fix() -> None:
    problem = Problem("error", "wal_level is replica, not logical", "ALTER SYSTEM SET wal_level = logical")
    assert problem.line() == "error: wal_level is replica, not logical — fix: ALTER SYSTEM SET wal_level = logical"


# --- replica identity (one row: oid, relreplident, has primary key, has replica identity index) -------


def _table(identity: str, *, primary_key: bool = True, identity_index: bool = False,
           toastable: str | None = None) -> list[Problem]:
    answers: list[Rows] = [[(16384, identity, primary_key, identity_index)]]
    if identity != "f":
        answers.append([(toastable,)])
    conn = ScriptedConnection(answers)
    problems = _table_problems(conn.as_connection(), "public", "t")
    assert not conn.answers, "a scripted answer was never asked for"
    return problems


def test_a_table_with_a_primary_key_and_no_large_columns_is_fine() -> None:
    assert _table("d") == []


def test_full_identity_needs_no_toast_warning_and_no_toast_query() -> None:
    assert _table("f", primary_key=False) == []


def test_identity_nothing_is_an_error() -> None:
    [problem] = _table("n")
    assert problem.severity == "error" and "REPLICA IDENTITY NOTHING" in problem.message
    assert "REPLICA IDENTITY FULL" in problem.fix


def test_default_identity_without_a_primary_key_is_an_error() -> None:
    [problem] = _table("d", primary_key=False)
    assert problem.severity == "error" and "no primary key" in problem.message
    assert "ADD PRIMARY KEY" in problem.fix


def test_identity_using_a_dropped_index_is_an_error() -> None:
    [problem] = _table("i", identity_index=False)
    assert problem.severity == "error" and "the index is gone" in problem.message
    assert _table("i", identity_index=True) == []


def test_toastable_columns_without_full_identity_are_a_warning_naming_them() -> None:
    [problem] = _table("d", toastable="body, payload")
    assert problem.severity == "warning" and "(body, payload)" in problem.message
    assert problem.fix.startswith("ALTER TABLE public.t REPLICA IDENTITY FULL")


def test_errors_and_the_toast_warning_are_both_reported() -> None:
    problems = _table("n", toastable="body")
    assert [p.severity for p in problems] == ["error", "warning"]


def test_a_table_that_does_not_exist_has_no_table_problems() -> None:
    conn = ScriptedConnection([[]])
    assert _table_problems(conn.as_connection(), "public", "gone") == []


# --- partitioned tables ------------------------------------------------------------------------------


def test_partitions_published_separately_are_a_warning_with_the_option_to_set() -> None:
    conn = ScriptedConnection([[("public", "events"), ("sales", "Orders")]])
    [problem] = _partition_problems(conn.as_connection(), "pub")
    assert problem.severity == "warning"
    assert 'public.events, sales."Orders"' in problem.message
    assert problem.fix == "ALTER PUBLICATION pub SET (publish_via_partition_root = true);"
    assert conn.queries[0][1] == ("pub",)


def test_partitions_published_through_the_root_are_fine() -> None:
    assert _partition_problems(ScriptedConnection([[]]).as_connection(), "pub") == []


def test_a_server_without_publish_via_partition_root_is_not_asked() -> None:
    conn = ScriptedConnection([], info=_Info(PUBVIAROOT_VERSION - 1))
    assert _partition_problems(conn.as_connection(), "pub") == []
    assert conn.queries == []


# --- Kafka and the Schema Registry ---------------------------------------------------------------------


def test_without_a_registry_url_the_registry_is_not_checked() -> None:
    assert check_schema_registry(_settings()) == []


@pytest.mark.timeout(60)
def test_an_unreachable_registry_is_one_error_with_a_fix() -> None:
    settings = _settings(PGBRIDGE_SCHEMA_REGISTRY__URL=f"http://127.0.0.1:{free_port()}",
                         PGBRIDGE_SCHEMA_REGISTRY__TIMEOUT_S="2")
    [problem] = check_schema_registry(settings)
    assert problem.severity == "error" and problem.fix


@pytest.mark.timeout(60)
def test_an_unreachable_broker_is_one_error_naming_the_address_and_the_fix() -> None:
    settings = _settings()
    [problem] = check_kafka(settings, timeout_s=0.5)
    assert problem.severity == "error"
    assert f"Kafka at {settings.kafka.bootstrap_servers} is unreachable" in problem.message
    assert "kafka.bootstrap_servers" in problem.fix


@pytest.mark.timeout(60)
def test_a_broker_refusing_connections_is_reported_without_waiting_out_the_timeout() -> None:
    # nothing listens on the port: librdkafka reports every broker down, and the check stops there
    settings = _settings()
    started = time.monotonic()
    [problem] = check_kafka(settings, timeout_s=30.0)
    assert "is unreachable" in problem.message
    assert time.monotonic() - started < 15.0  # half the timeout; about one second when idle


# --- max_slot_wal_keep_size ------------------------------------------------------------------------------


def test_unlimited_wal_keep_size_is_a_warning_that_a_stuck_slot_can_fill_the_disk() -> None:
    problem = wal_keep_problem("-1", "initial")
    assert problem.severity == "warning" and "unlimited" in problem.message and "disk" in problem.message
    assert "ALTER SYSTEM SET max_slot_wal_keep_size" in problem.fix


def test_a_set_wal_keep_size_is_reported_with_what_an_invalidation_does() -> None:
    problem = wal_keep_problem("10GB", "initial")
    assert problem.severity == "info" and "max_slot_wal_keep_size is 10GB" in problem.message
    assert "run stops" in problem.message
    assert "new snapshot" in wal_keep_problem("10GB", "when_needed").message


# --- topic replication and Kafka ACLs, from scripted AdminClient answers ------------------------------------


def _done(value: Any = None, error: BaseException | None = None) -> Future[Any]:
    future: Future[Any] = Future()
    if error is None:
        future.set_result(value)
    else:
        future.set_exception(error)
    return future


@dataclass
class _Entry:
    value: str | None


@dataclass
class _Described:
    authorized_operations: list[AclOperation] | None


@dataclass
class ScriptedAdmin:
    """Answers the admin calls the Kafka checks make: topic configs, the ACL listing, and the
    operations the brokers authorize on the cluster and on each topic."""

    min_insync: dict[str, str] = field(default_factory=dict)
    authorizer: str | None = ""  # the broker's authorizer.class.name; None: may not read it
    acl_error: int | None = KafkaError.SECURITY_DISABLED  # the ACL listing's answer
    cluster_ops: list[AclOperation] | None = None
    topic_ops: dict[str, list[AclOperation]] = field(default_factory=dict)

    def describe_configs(self, resources: list[Any], **_: Any) -> dict[Any, Future[Any]]:
        if resources and resources[0].restype == ResourceType.BROKER:
            if self.authorizer is None:
                return {resources[0]: _done(error=KafkaException(KafkaError(KafkaError.CLUSTER_AUTHORIZATION_FAILED)))}
            return {resources[0]: _done({"authorizer.class.name": _Entry(self.authorizer)})}
        return {r: _done({"min.insync.replicas": _Entry(self.min_insync.get(r.name, "1"))}) for r in resources}

    def describe_acls(self, _filter: Any, **_: Any) -> Future[Any]:
        return _done([]) if self.acl_error is None else _done(error=KafkaException(KafkaError(self.acl_error)))

    def describe_cluster(self, **_: Any) -> Future[Any]:
        return _done(_Described(self.cluster_ops))

    def describe_topics(self, topics: Any, **_: Any) -> dict[str, Future[Any]]:
        return {name: _done(_Described(self.topic_ops.get(name, []))) for name in topics.topic_names}

    def as_admin(self) -> AdminClient:
        return cast(AdminClient, self)


def _replication(admin: ScriptedAdmin, brokers: int, replicas: dict[str, int], **extra: str) -> list[Problem]:
    settings = _settings(PGBRIDGE_KAFKA__TOPIC_PREFIX="app", **extra)
    return replication_problems(admin.as_admin(), settings.kafka, brokers, replicas, 1.0)


def test_three_copies_two_in_sync_on_three_brokers_is_fine() -> None:
    admin = ScriptedAdmin(min_insync={"app.public.t": "2", "app._schemas": "2"})
    assert _replication(admin, 3, {"app.public.t": 3, "app._schemas": 3}) == []


def test_one_copy_is_a_warning_even_on_one_broker_where_run_also_creates_one_copy() -> None:
    problems = _replication(ScriptedAdmin(), 1, {"app.public.t": 1})
    assert [p.severity for p in problems] == ["warning", "warning"]
    assert "has 1 broker(s)" in problems[0].message and "replication factor 1" in problems[0].message
    assert "kafka.topic_replication_factor" in problems[0].fix
    assert "single copy" in problems[1].message and "app.public.t" in problems[1].message
    # the cluster's size chosen explicitly: only the existing single-copy topic is reported
    assert len(_replication(ScriptedAdmin(), 1, {"app.public.t": 1}, PGBRIDGE_KAFKA__TOPIC_REPLICATION_FACTOR="1")) == 1


def test_on_three_brokers_fewer_copies_and_fewer_in_sync_are_warnings_naming_the_topics() -> None:
    admin = ScriptedAdmin(min_insync={"app.public.a": "2", "app.public.b": "1", "app.public.c": "1"})
    problems = _replication(admin, 3, {"app.public.a": 2, "app.public.b": 3, "app.public.c": 3})
    assert [p.severity for p in problems] == ["warning", "warning"]
    assert "fewer than 3 copies" in problems[0].message and "app.public.a" in problems[0].message
    assert "min.insync.replicas below 2" in problems[1].message
    assert "app.public.b, app.public.c" in problems[1].message
    assert "--entity-type topics --entity-name <topic> --add-config min.insync.replicas=2" in problems[1].fix


def test_two_copies_on_two_brokers_are_what_the_cluster_allows() -> None:
    assert _replication(ScriptedAdmin(), 2, {"app.public.t": 2}, PGBRIDGE_KAFKA__TOPIC_REPLICATION_FACTOR="2") == []


STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def _acls(admin: ScriptedAdmin, topics: list[str], **extra: str) -> list[Problem]:
    return acl_problems(admin.as_admin(), _settings(PGBRIDGE_KAFKA__TOPIC_PREFIX="app", **extra), topics, 1.0,
                        broker_id=1)


ALL_TOPIC_OPS = [AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE]


def test_without_an_authorizer_acls_are_not_checked_and_it_says_so() -> None:
    [problem] = _acls(ScriptedAdmin(), ["app.public.t"])
    assert problem.severity == "info" and problem.message == "no authorizer: ACLs not checked"
    # without a broker to ask, the ACL listing's SECURITY_DISABLED says the same
    [problem] = acl_problems(ScriptedAdmin(authorizer=STANDARD).as_admin(), _settings(), [], 1.0)
    assert problem.message == "no authorizer: ACLs not checked"


def test_with_an_authorizer_and_every_grant_nothing_is_reported() -> None:
    admin = ScriptedAdmin(authorizer=None, acl_error=KafkaError.CLUSTER_AUTHORIZATION_FAILED,
                          cluster_ops=[AclOperation.IDEMPOTENT_WRITE, AclOperation.CREATE],
                          topic_ops={"app.public.t": ALL_TOPIC_OPS, "app._snapshot": ALL_TOPIC_OPS})
    assert _acls(admin, ["app._snapshot", "app.public.t"]) == []


def test_missing_grants_are_named_with_the_kafka_acls_command() -> None:
    admin = ScriptedAdmin(authorizer=STANDARD, acl_error=None, cluster_ops=[AclOperation.DESCRIBE],
                          topic_ops={"app.public.t": [AclOperation.DESCRIBE],
                                     "app._snapshot": [AclOperation.WRITE, AclOperation.DESCRIBE]})
    problems = _acls(admin, ["app._snapshot", "app.public.t"])
    assert [p.severity for p in problems] == ["warning", "warning", "error", "error"]
    assert "may not create topics" in problems[0].message
    assert "--operation Create --topic app. --resource-pattern-type prefixed" in problems[0].fix
    assert "IDEMPOTENT_WRITE" in problems[1].message and "--operation IdempotentWrite --cluster" in problems[1].fix
    assert "may not WRITE or DESCRIBE topics app.public.t" in problems[2].message
    assert "--operation Write --operation Describe --topic app." in problems[2].fix
    assert "may not READ app._snapshot" in problems[3].message


def test_exactly_once_names_the_transactional_id_and_group_it_cannot_verify() -> None:
    admin = ScriptedAdmin(authorizer=STANDARD, cluster_ops=[AclOperation.IDEMPOTENT_WRITE, AclOperation.CREATE])
    [problem] = _acls(admin, [], PGBRIDGE_KAFKA__EXACTLY_ONCE="true", PGBRIDGE_POSTGRES__SLOT="s1")
    assert problem.severity == "info" and "transactional id pgbridge-app-s1" in problem.message
    assert "--transactional-id pgbridge-app-s1" in problem.fix and "--group pgbridge-offsets" in problem.fix


def test_without_describe_on_the_cluster_its_grants_are_not_checked_but_the_topics_are() -> None:
    admin = ScriptedAdmin(authorizer=None, cluster_ops=None, topic_ops={"app.public.t": [AclOperation.DESCRIBE]})
    problems = _acls(admin, ["app.public.t"])
    assert [p.severity for p in problems] == ["info", "error"]
    assert "no DESCRIBE on it" in problems[0].message and "--operation Describe --cluster" in problems[0].fix
    assert "may not WRITE or DESCRIBE topics app.public.t" in problems[1].message


def test_wal_level_is_judged_once_for_check_and_run() -> None:
    assert wal_level_problem("logical") is None
    problem = wal_level_problem("replica")
    assert problem is not None and problem.severity == "error"
    assert problem.line() == ("error: wal_level is replica, not logical — fix: ALTER SYSTEM SET wal_level = logical; "
                              "then restart Postgres")
