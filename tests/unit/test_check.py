"""``pgbridge check``'s verdicts from catalogue answers, without a server: a scripted connection
answers each query in turn with the rows Postgres would return (tests/integration/test_check.py
runs the whole command against real servers)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import psycopg
import pytest

from pgbridge.check import Problem, _partition_problems, _table_problems, check_kafka, check_schema_registry
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
