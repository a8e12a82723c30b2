"""The brokers the integration suite runs against.

Apache Kafka (KRaft, ``pgbridge.embedded.apache_kafka``; jars fetched by Maven through
``jvm/fetch.py``) is the default, because it is what users run: real transactions, isolation,
replication and on-disk logs. Tansu (``pgbridge.embedded.broker``, the embedded default of
``pgbridge demo``) runs when ``PGBRIDGE_TEST_BROKER=tansu``, and always in the demo smoke tests.

Both kinds answer the small interface the tests use (``Broker``). Their outages differ, and the
tests that break brokers say which they rely on: Apache Kafka's ``restart()`` keeps every record
(the realistic outage), Tansu's gives an empty broker on the same port.
"""

from __future__ import annotations

import os
from typing import Final, Protocol

from jvm.fetch import classpath

from pgbridge.embedded.apache_kafka import KafkaCluster, start_kafka
from pgbridge.embedded.broker import HOST, START_TIMEOUT, answers_metadata, tansu_binary
from pgbridge.embedded.broker import Broker as TansuBroker
from pgbridge.embedded.broker import start_broker as start_tansu

KIND_ENV: Final = "PGBRIDGE_TEST_BROKER"
KINDS: Final = ("kafka", "tansu")


class Broker(Protocol):
    """What a test may do with its broker."""

    @property
    def bootstrap(self) -> str: ...

    @property
    def running(self) -> bool: ...

    @property
    def pid(self) -> int | None: ...

    def stop(self) -> None: ...

    def restart(self) -> None: ...

    def close(self) -> None: ...


def broker_kind() -> str:
    kind = os.environ.get(KIND_ENV, "kafka")
    if kind not in KINDS:
        raise ValueError(f"{KIND_ENV}={kind!r}: expected one of {', '.join(KINDS)}")
    return kind


def require_transactions() -> None:
    """Skip on Tansu, whose transactions do not isolate (a limitation outside pgbridge): exactly-once
    tests need Apache Kafka, the suite's default broker."""
    import pytest

    if broker_kind() != "kafka":
        pytest.skip("Tansu does not isolate transactions: exactly-once needs Apache Kafka (the default)")


def start_apache_kafka(nodes: int = 1, overrides: dict[str, str] | None = None) -> KafkaCluster:
    """An Apache Kafka cluster of ``nodes`` combined broker+controller nodes (RF 3, min ISR 2 at 3)."""
    return start_kafka(classpath("kafka"), nodes, overrides=overrides)


def start_broker() -> Broker:
    """The suite's broker: Apache Kafka unless ``PGBRIDGE_TEST_BROKER=tansu``."""
    if broker_kind() == "tansu":
        return start_tansu()
    return start_apache_kafka()


__all__ = ["HOST", "KIND_ENV", "START_TIMEOUT", "Broker", "KafkaCluster", "TansuBroker", "answers_metadata",
           "broker_kind", "require_transactions", "start_apache_kafka", "start_broker", "start_tansu", "tansu_binary"]
