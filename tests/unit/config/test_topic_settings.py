"""``kafka.topic_replication_factor``, ``kafka.topic_min_insync_replicas`` and ``kafka.topic_config``:
the shape of the topics pgbridge creates (publish/topics.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pgbridge.config import load_settings
from pgbridge.errors import ConfigError

BASE = {"PGBRIDGE_POSTGRES__DSN": "host=db", "PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS": "k:9092"}


def test_unset_means_the_safe_default_chosen_against_the_cluster() -> None:
    kafka = load_settings(environ=BASE).kafka
    assert kafka.topic_replication_factor is None and kafka.topic_min_insync_replicas is None
    assert kafka.topic_config == {}


def test_topic_config_from_yaml_takes_numbers_and_booleans_as_kafka_strings(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("postgres:\n  dsn: host=a\nkafka:\n  bootstrap_servers: b:1\n  topic_replication_factor: 3\n"
                      "  topic_min_insync_replicas: 2\n  topic_config:\n    cleanup.policy: compact\n"
                      "    retention.ms: 604800000\n    unclean.leader.election.enable: false\n")
    kafka = load_settings(config, environ={}).kafka
    assert (kafka.topic_replication_factor, kafka.topic_min_insync_replicas) == (3, 2)
    assert kafka.topic_config == {"cleanup.policy": "compact", "retention.ms": "604800000",
                                  "unclean.leader.election.enable": "false"}


def test_topic_config_from_the_environment_as_json() -> None:
    kafka = load_settings(environ={**BASE, "PGBRIDGE_KAFKA__TOPIC_CONFIG": '{"retention.ms": 1000}'}).kafka
    assert kafka.topic_config == {"retention.ms": "1000"}


@pytest.mark.parametrize(("extra", "fragment"), [
    ({"PGBRIDGE_KAFKA__TOPIC_REPLICATION_FACTOR": "0"}, "kafka.topic_replication_factor"),
    ({"PGBRIDGE_KAFKA__TOPIC_MIN_INSYNC_REPLICAS": "0"}, "kafka.topic_min_insync_replicas"),
    ({"PGBRIDGE_KAFKA__TOPIC_REPLICATION_FACTOR": "2", "PGBRIDGE_KAFKA__TOPIC_MIN_INSYNC_REPLICAS": "3"},
     "no write could ever succeed"),
    ({"PGBRIDGE_KAFKA__TOPIC_CONFIG": '{"min.insync.replicas": 2}'}, "kafka.topic_min_insync_replicas"),
])
def test_impossible_topic_shapes_are_configuration_errors(extra: dict[str, str], fragment: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(environ={**BASE, **extra})
    assert fragment in str(caught.value)
