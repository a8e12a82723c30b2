"""Shared fixtures: throwaway Postgres clusters and Kafka-protocol brokers on free loopback ports.

Servers are session-scoped (starting them is the slow part); each test gets its own database and
topic prefix. Tests needing special server settings, or a broker of their own to break, use
``pg_cluster_factory`` and ``fresh_broker``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping

import pytest
from hypothesis import HealthCheck, settings

from tests.support.broker import (
    Broker,
    TansuBroker,
    broker_kind,
    start_apache_kafka,
    start_broker,
    start_tansu,
)
from tests.support.postgres import (
    PgCluster,
    PgClusterFactory,
    create_database,
    drop_database,
    start_cluster,
)
from tests.support.registry import SchemaRegistry, start_registry

# Property tests check correctness, not speed: on a loaded 2-core CI machine input generation and
# single examples can be slow, which Hypothesis would otherwise report as a failure.
settings.register_profile("pgbridge", deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile("pgbridge")


@pytest.fixture(scope="session", params=[15, 18], ids=["pg15", "pg18"])
def pg_cluster(request: pytest.FixtureRequest) -> Iterator[PgCluster]:
    """A running cluster per Postgres major version, shared by the session (wal_level=logical)."""
    cluster = start_cluster(request.param)
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def pg_dsn(pg_cluster: PgCluster) -> Iterator[str]:
    """DSN of a new, uniquely named database on ``pg_cluster``, dropped after the test together
    with its replication slots and prepared transactions."""
    dbname = f"t_{uuid.uuid4().hex[:12]}"
    create_database(pg_cluster, dbname)
    try:
        yield pg_cluster.dsn(dbname)
    finally:
        drop_database(pg_cluster, dbname)


@pytest.fixture
def pg_cluster_factory() -> Iterator[PgClusterFactory]:
    """``factory(version, settings=None) -> PgCluster``: clusters with their own settings, closed
    after the test."""
    started: list[PgCluster] = []

    def factory(version: int, settings: Mapping[str, str] | None = None) -> PgCluster:
        cluster = start_cluster(version, settings=settings)
        started.append(cluster)
        return cluster

    try:
        yield factory
    finally:
        for cluster in reversed(started):
            cluster.close()


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[Broker]:
    """A broker shared by the session; separate tests by ``topic_prefix``."""
    started = time.monotonic()
    broker = start_broker()
    print(f"\nbroker {broker!r} ready in {time.monotonic() - started:.1f}s")
    try:
        yield broker
    finally:
        broker.close()


@pytest.fixture(scope="session")
def apache_kafka(request: pytest.FixtureRequest) -> Iterator[Broker]:
    """Apache Kafka whatever the suite's broker: the suite's own when it is Apache Kafka, else one
    started for the tests whose point is a real broker's behaviour: its message size limits, and
    the Spark jobs (Spark's kafka source reads up to the high watermark, which Tansu reports below
    the real end after batched writes, so the last records would wait)."""
    if broker_kind() != "tansu":
        yield request.getfixturevalue("kafka_broker")
        return
    cluster = start_apache_kafka()
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="session")
def registry() -> Iterator[SchemaRegistry]:
    """A real Schema Registry shared by the session; tests use their own subjects (the topic
    prefix is unique)."""
    with start_registry() as started:
        yield started


@pytest.fixture
def fresh_broker() -> Iterator[Broker]:
    """A broker of this test's own, free to stop and restart (outage tests)."""
    broker = start_broker()
    try:
        yield broker
    finally:
        broker.close()


@pytest.fixture
def tansu_broker() -> Iterator[TansuBroker]:
    """The demo's Tansu broker (in memory), whatever the suite's broker is: its own tests and the demo's."""
    broker = start_tansu()
    try:
        yield broker
    finally:
        broker.close()


@pytest.fixture
def topic_prefix() -> str:
    """A unique topic name prefix for this test, like ``t_1a2b3c4d``."""
    return f"t_{uuid.uuid4().hex[:8]}"
