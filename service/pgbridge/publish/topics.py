"""Topic names per the contract, and creation on first use (before any produce touches them)."""

from __future__ import annotations

import logging
import re
from typing import Final

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from pgbridge.errors import BrokerUnavailable, PublishError

log = logging.getLogger(__name__)

_INVALID: Final = re.compile(r"[^A-Za-z0-9._-]")


def sanitize(name: str) -> str:
    return _INVALID.sub("_", name)


def table_topic(prefix: str, schema: str, table: str) -> str:
    return sanitize(f"{prefix}.{schema}.{table}")


def messages_topic(prefix: str) -> str:
    return sanitize(f"{prefix}.messages")


def transactions_topic(prefix: str) -> str:
    return sanitize(f"{prefix}.transactions")


def schemas_topic(prefix: str) -> str:
    return sanitize(f"{prefix}._schemas")


def offsets_topic(prefix: str) -> str:
    """Exactly-once positions (publish/transactions.py), compacted, keyed by slot."""
    return sanitize(f"{prefix}._offsets")


class TopicManager:
    """Creates each topic once, explicitly, so broker auto-creation defaults never decide its shape.

    Topics that already exist are taken from the cluster's metadata, which any broker serves from
    its own copy: a CreateTopics request needs the controller quorum, and a cluster that lost it
    (two of three combined nodes down) would hold a restarting pgbridge for the whole timeout,
    even after a broker is back and could take its records. The metadata is asked for *all*
    topics, once per session: naming a missing topic would make some brokers (Tansu) create it.
    """

    def __init__(self, admin: AdminClient, *, partitions: int, replication_factor: int,
                 timeout_s: float = 30.0) -> None:
        self._admin = admin
        self._partitions = partitions
        self._replication_factor = replication_factor
        self._timeout_s = timeout_s
        self._known: set[str] = set()
        self._listed: set[str] | None = None  # the topics that existed when first asked

    def poll(self) -> None:
        """Serve the admin client's queued log lines: an ``AdminClient`` hands them to its logger
        only when polled, and keeps them in memory until then (a long outage queues many)."""
        self._admin.poll(0)

    def ensure(self, topic: str, *, compacted: bool = False) -> None:
        if topic in self._known:
            return
        try:
            if topic in self._existing():
                self._known.add(topic)
                return
            self._create(topic, compacted=compacted)
        finally:
            self.poll()

    def _existing(self) -> set[str]:
        if self._listed is None:
            try:
                metadata = self._admin.list_topics(timeout=self._timeout_s)
            except KafkaException as exc:
                raise BrokerUnavailable(f"cannot list Kafka's topics: {exc}") from None
            self._listed = {name for name, meta in metadata.topics.items() if meta.error is None}
        return self._listed

    def _create(self, topic: str, *, compacted: bool) -> None:
        config = {"cleanup.policy": "compact"} if compacted else {}
        partitions = 1 if compacted else self._partitions
        new = NewTopic(topic, num_partitions=partitions, replication_factor=self._replication_factor,
                       config=config)
        futures = self._admin.create_topics([new], operation_timeout=self._timeout_s,
                                            request_timeout=self._timeout_s)
        try:
            futures[topic].result(timeout=self._timeout_s)
            log.info("topic created", extra={"topic": topic, "partitions": partitions})
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            code = error.code()
            if code == KafkaError.TOPIC_ALREADY_EXISTS:
                pass
            elif code in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED,
                          KafkaError.TOPIC_EXCEPTION, KafkaError.POLICY_VIOLATION):
                raise PublishError(f"cannot create topic {topic}: {error.str()}",
                                   hint="create the topic yourself or grant CREATE on the cluster") from None
            else:
                raise BrokerUnavailable(f"cannot create topic {topic}: {error.str()}") from None
        except Exception as exc:  # timeout of the admin future
            raise BrokerUnavailable(f"cannot create topic {topic}: {exc}") from None
        self._known.add(topic)
