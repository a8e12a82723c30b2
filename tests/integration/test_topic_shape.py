"""The shape of the topics pgbridge creates on real Apache Kafka: replication factor 3 or the
cluster's size when smaller (with a warning naming the topic, the size and the setting),
``min.insync.replicas`` the replication factor - 1 (at least 1) set on the topic itself, and
``kafka.topic_config`` on the data topics only (internal ``{prefix}._*`` topics keep their own).

Read back with ``describe_configs``: a config the topic carries has the source
``DYNAMIC_TOPIC_CONFIG``, one it inherits from the broker does not (the three-node fixture's brokers
default to RF 3 and min ISR 2 themselves, so only the source proves pgbridge asked for it)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import psycopg
import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, ResourceType  # type: ignore[attr-defined]

from pgbridge.config import KafkaConfig
from pgbridge.publish.topics import TopicManager
from tests.support.bridge import BridgeProcess, bridge_env, wait_for_count
from tests.support.broker import Broker, KafkaCluster, broker_kind, start_apache_kafka
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def _shape(bootstrap: str, topic: str) -> tuple[int, dict[str, tuple[str, bool]]]:
    """The topic's replication factor and its configs as (value, set on the topic)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    metadata = admin.list_topics(topic, timeout=30)
    replicas = min(len(p.replicas) for p in metadata.topics[topic].partitions.values())
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(timeout=30)
    return replicas, {name: (str(entry.value), entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
                      for name, entry in entries.items()}


def test_on_one_broker_topics_get_one_copy_min_insync_1_and_a_warning(pg_dsn: str, kafka_broker: Broker) -> None:
    if broker_kind() != "kafka":
        pytest.skip("reads topic configs back from Apache Kafka")
    prefix = f"shape{secrets.token_hex(4)}"  # topics outlive a test on the shared broker
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE shaped (id int PRIMARY KEY)")
    env = bridge_env(pg_dsn, kafka_broker.bootstrap, prefix, extra={
        "PGBRIDGE_POSTGRES__TABLES": "public.shaped", "PGBRIDGE_SNAPSHOT__MODE": "never",
        "PGBRIDGE_HA__LEADER_ELECTION": "false",
        "PGBRIDGE_KAFKA__TOPIC_CONFIG": '{"retention.ms": 86400000, "cleanup.policy": "delete"}'})
    with BridgeProcess(env).start() as bridge:
        wait_until(lambda: "replicating" in bridge.log() or not bridge.alive(), timeout=60,
                   message="pgbridge never started replicating")
        assert bridge.alive(), bridge.log()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO shaped VALUES (1)")
        wait_for_count(kafka_broker.bootstrap, f"{prefix}.public.shaped", 1, timeout=60)
        assert bridge.terminate() == 0
    log = bridge.log()
    data_rf, data = _shape(kafka_broker.bootstrap, f"{prefix}.public.shaped")
    assert data_rf == 1 and data["min.insync.replicas"] == ("1", True)
    assert data["retention.ms"] == ("86400000", True) and data["cleanup.policy"] == ("delete", True)
    schemas_rf, schemas = _shape(kafka_broker.bootstrap, f"{prefix}._schemas")
    assert schemas_rf == 1 and schemas["min.insync.replicas"] == ("1", True)
    assert schemas["cleanup.policy"] == ("compact", True) and not schemas["retention.ms"][1]
    warnings = [line for line in log.splitlines() if f"topic {prefix}.public.shaped is created with replication "
                "factor 1" in line]
    assert len(warnings) == 1, log
    assert "1 broker(s)" in warnings[0] and "kafka.topic_replication_factor" in warnings[0]


@pytest.fixture(scope="module")
def three_nodes() -> Iterator[KafkaCluster]:
    cluster = start_apache_kafka(nodes=3)
    try:
        yield cluster
    finally:
        cluster.close()


def test_on_three_brokers_topics_get_three_copies_and_min_insync_2(three_nodes: KafkaCluster,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    prefix = f"shape{secrets.token_hex(4)}"
    config = KafkaConfig(bootstrap_servers=three_nodes.bootstrap, topic_prefix=prefix)
    manager = TopicManager.of(AdminClient({"bootstrap.servers": three_nodes.bootstrap}), config)
    with caplog.at_level("WARNING", logger="pgbridge.publish.topics"):
        manager.ensure(f"{prefix}.public.t")
        manager.ensure(f"{prefix}._snapshot", compacted=True)
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
    for topic in (f"{prefix}.public.t", f"{prefix}._snapshot"):
        # a broker other than the controller may not know a topic created a moment ago: ask again
        replicas, configs = wait_until(lambda: _shape(three_nodes.bootstrap, topic), timeout=30,  # noqa: B023
                                       message=f"{topic} described by the three brokers")
        assert replicas == 3 and configs["min.insync.replicas"] == ("2", True), topic
