"""Shared fixtures: throwaway Postgres clusters and Kafka-protocol brokers on free loopback ports.

Servers are session-scoped (starting them is the slow part); each test gets its own database and
topic prefix. Tests needing special server settings, or a broker of their own to break, use
``pg_cluster_factory`` and ``fresh_broker``.

Postgres versions: a test runs on Postgres 18 (``DEFAULT_PG_VERSION``), where every guarantee is
tested. A test of behaviour that differs by version (protocol versions, streaming, two-phase,
origins, decoding on a standby, the documented grants, slot invalidation) is marked
``@pytest.mark.each_pg_version`` and runs on every supported version (15 and 18): its
``pg_cluster`` and its ``pg_version`` argument (for ``pg_cluster_factory``) take each in turn.
Test ids keep the ``[pg18]`` / ``[pg15]`` suffix either way.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Final

import pytest
from hypothesis import HealthCheck, settings

from tests.support.bridge import kill_leftovers
from tests.support.broker import (
    Broker,
    TansuBroker,
    broker_kind,
    start_apache_kafka,
    start_broker,
    start_tansu,
)
from tests.support.postgres import (
    SUPPORTED_VERSIONS,
    PgCluster,
    PgClusterFactory,
    create_database,
    drop_database,
    start_cluster,
)
from tests.support.registry import SchemaRegistry, start_registry
from tests.support.secure_kafka import SecureKafka, start_secure_kafka

# Property tests check correctness, not speed: on a loaded 2-core CI machine input generation and
# single examples can be slow, which Hypothesis would otherwise report as a failure.
settings.register_profile("pgbridge", deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile("pgbridge")
# The minimum-versions run (tests/packaging/test_minimum_versions.py, ``--hypothesis-profile
# floor``) asks whether the code works on the oldest releases of its dependencies, not whether the
# properties hold (the suite's own run explores them): a tenth of the examples
# (tests/support/properties.examples scales the tests that set their own number).
settings.register_profile("floor", parent=settings.get_profile("pgbridge"), max_examples=10)


@pytest.fixture(autouse=True)
def _no_bridge_outlives_its_test() -> Iterator[None]:
    """Kill every ``BridgeProcess`` a test left running (it failed before its ``with`` ended or its
    ``kill``): the child stops holding its slot and ports, and the open ``Popen`` never turns into a
    ResourceWarning that ``filterwarnings = error`` would pin on a later, unrelated test."""
    yield
    kill_leftovers()


DEFAULT_PG_VERSION: Final = max(SUPPORTED_VERSIONS)
VERSIONED: Final = ("pg_cluster", "pg_version")


def _parametrized_by_the_test(metafunc: pytest.Metafunc) -> set[str]:
    """Argument names a test parametrizes itself (``@pytest.mark.parametrize``): left alone."""
    names: set[str] = set()
    for marker in metafunc.definition.iter_markers("parametrize"):
        argnames = marker.args[0] if marker.args else marker.kwargs.get("argnames", ())
        if isinstance(argnames, str):
            argnames = argnames.split(",")
        names.update(str(name).strip() for name in argnames)
    return names


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Give ``pg_cluster`` and a ``pg_version`` argument Postgres 18, or every supported version for
    a test marked ``each_pg_version``. Session-scoped, so pytest groups the tests by version and each
    version's shared cluster starts once."""
    names = [n for n in VERSIONED if n in metafunc.fixturenames and n not in _parametrized_by_the_test(metafunc)]
    if not names:
        return
    each = metafunc.definition.get_closest_marker("each_pg_version") is not None
    versions = SUPPORTED_VERSIONS if each else (DEFAULT_PG_VERSION,)
    metafunc.parametrize(names, [tuple(version for _ in names) for version in versions],
                         indirect=[n for n in names if n == "pg_cluster"], ids=[f"pg{v}" for v in versions],
                         scope="session")


# Long tests first, so that with several workers (make test: pytest-xdist) the last minutes are not
# one worker alone on a long test: the cluster mirror tests, then the other Spark jobs, then tests
# marked slow; the rest (most of them short) after, in their order.
FIRST: Final = ("cluster", "spark", "slow")
# Tests sharing a costly session fixture run on one worker: the Spark standalone cluster with HDFS
# and S3, the sdist/wheel built once for the packaging tests, and the local Spark session. By test
# id, because the scheduler in pytest-xdist's controller sees ids only (and xdist 3.8's own
# ``xdist_group`` marks do not reach it under pytest 9.2, which no longer reads the node id xdist
# rewrites). The Spark tests are two units of about equal time, so two workers start a local Spark
# session, not all three: each session's JVM loads Spark's and Delta's classes and compiles their
# code again (its C2 compiler alone used 4.4 CPU minutes in a full run), and the two sessions do it
# once for all the tests they run. The cluster's unit holds, besides the cluster tests, the three
# longest single jobs (times from a full run on a slow machine: 2,360 against 2,486 s). Every other
# test is a unit of its own.
SPARK_WITH_THE_CLUSTER: Final = ("test_cluster_mirror", "test_consistent_mirror", "test_changelog",
                                 "test_registry_mirror")
WORKER_GROUPS: Final = (*((f"tests/spark/{module}.py::", "spark-cluster") for module in SPARK_WITH_THE_CLUSTER),
                        ("tests/spark/", "spark-local"), ("tests/packaging/", "packaging"))


def worker_group(nodeid: str) -> str:
    """The scheduling unit of a test: its group, or the test alone."""
    return next((group for prefix, group in WORKER_GROUPS if nodeid.startswith(prefix)), nodeid)


def _rank(item: pytest.Item) -> int:
    return next((i for i, name in enumerate(FIRST) if item.get_closest_marker(name)), len(FIRST))


@pytest.hookimpl(trylast=True)  # after pytest's own grouping by session-scoped parameters
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_rank)  # stable: the order within a rank stays


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """``--dist loadgroup`` (make test): xdist's load scheduling, a group at a time (``worker_group``)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Grouped(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return worker_group(nodeid)

    return Grouped(config, log)


@pytest.fixture(scope="session")
def pg_cluster(request: pytest.FixtureRequest) -> Iterator[PgCluster]:
    """A running cluster of the test's Postgres version (``pytest_generate_tests``: 18, or each
    supported version for ``each_pg_version``), shared by the session (wal_level=logical)."""
    cluster = start_cluster(getattr(request, "param", DEFAULT_PG_VERSION))
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


@pytest.fixture(scope="module")
def secure_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureKafka]:
    """Apache Kafka with TLS, mutual-TLS and SASL/SCRAM-over-TLS listeners beside PLAINTEXT, its CA
    and client credentials (``tests.support.secure_kafka``), for the module's security tests."""
    started = start_secure_kafka(tmp_path_factory.mktemp("kafka-tls"))
    try:
        yield started
    finally:
        started.close()


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
