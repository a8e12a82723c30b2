"""Topic names per the contract, creation on first use (before any produce touches them), and
reading an internal compacted topic (``{prefix}._*``: snapshot progress, exactly-once positions)
back to its end.

This module is the one owner of topic naming: the encoder, the readers and the routes of
``kafka.topic_routes`` (publish/routing.py) all name topics through ``topic_name``."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Sequence
from typing import Any, Final

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from pgbridge.errors import BrokerUnavailable, PublishError
from pgbridge.logs import LibrdkafkaLog

log = logging.getLogger(__name__)

_INVALID: Final = re.compile(r"[^A-Za-z0-9._-]")
MAX_TOPIC_LENGTH: Final = 249  # Kafka's limit


def sanitize(name: str) -> str:
    return _INVALID.sub("_", name)


def topic_name(*parts: str) -> str:
    """Join ``parts`` with dots; characters outside ``[A-Za-z0-9._-]`` become ``_``."""
    name = sanitize(".".join(parts))
    if len(name) > MAX_TOPIC_LENGTH:
        raise PublishError(f"topic name {name[:60]}... is longer than Kafka's {MAX_TOPIC_LENGTH} characters",
                          hint="use a shorter kafka.topic_prefix")
    return name


def table_topic(prefix: str, schema: str, table: str) -> str:
    return topic_name(prefix, schema, table)


def messages_topic(prefix: str) -> str:
    return topic_name(prefix, "messages")


def transactions_topic(prefix: str) -> str:
    return topic_name(prefix, "transactions")


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


# After a broker outage the first watermark answers are "not leader" or time-outs until the
# client's metadata names the partition's new leader: ask again, a short attempt at a time.
WATERMARK_ATTEMPT_S: Final = 2.0


def high_watermark(consumer: Consumer, partition: TopicPartition, deadline: float) -> int:
    """The partition's high watermark (last stable offset for read_committed), asked again until
    ``deadline`` while the answer is an error."""
    while True:
        attempt = max(0.1, min(WATERMARK_ATTEMPT_S, deadline - time.monotonic()))
        try:
            _low, high = consumer.get_watermark_offsets(partition, timeout=attempt, cached=False)
            return int(high)
        except KafkaException:
            if time.monotonic() + 0.2 >= deadline:
                raise
            time.sleep(0.2)


def assign_existing(consumer: Consumer, wanted: Sequence[str], assigned: set[str], *, timeout: float) -> bool:
    """Assign every partition, from its beginning, of each ``wanted`` topic that exists now and is not
    in ``assigned`` yet (which is updated); True if any was assigned.

    The one way pgbridge's readers (the demo, the test suite) follow topics without a consumer group:
    metadata is asked for *all* topics, because naming a missing topic makes some brokers (Tansu,
    auto-creating Kafkas) create it; a broker that does not answer in ``timeout`` assigns nothing now.
    """
    try:
        metadata = consumer.list_topics(timeout=timeout)
    except Exception:  # broker busy or not up yet: the caller asks again on its next round
        return False
    partitions: list[TopicPartition] = []
    for name in wanted:
        topic = metadata.topics.get(name)
        if name in assigned or topic is None or topic.error is not None or not topic.partitions:
            continue
        partitions.extend(TopicPartition(name, p, OFFSET_BEGINNING) for p in sorted(topic.partitions))
        assigned.add(name)
    if partitions:
        consumer.incremental_assign(partitions)
    return bool(partitions)


def read_compacted(settings: dict[str, Any], topic: str, *, timeout_s: float,
                   key_prefix: str = "", timestamps: dict[str, int] | None = None) -> dict[str, bytes]:
    """The latest value of every key of partition 0 of ``topic`` (a tombstone removes its key),
    read ``read_committed`` from the beginning to the end; keys not starting with ``key_prefix``
    are skipped. ``BrokerUnavailable`` if the end is not reached within ``timeout_s``. Given
    ``timestamps``, it receives each live key's record timestamp (ms since the epoch)."""
    consumer = Consumer({**settings, "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "enable.partition.eof": True, "isolation.level": "read_committed",
                         # as the producer's: a broker back from an outage is reconnected within a second
                         "reconnect.backoff.max.ms": 1000}, logger=LibrdkafkaLog())
    latest: dict[str, bytes] = {}
    deadline = time.monotonic() + timeout_s
    try:
        high = high_watermark(consumer, TopicPartition(topic, 0), deadline)
        if high <= 0:
            return latest
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        position = -1
        while position + 1 < high:
            if time.monotonic() > deadline:
                raise BrokerUnavailable(f"reading {topic} did not reach its end in {timeout_s:.0f}s")
            message = consumer.poll(0.2)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    break  # read_committed: the end is the last stable offset
                continue
            position = int(message.offset() or 0)
            raw_key = message.key()
            key = raw_key.decode() if isinstance(raw_key, bytes) else str(raw_key)
            if not key.startswith(key_prefix):
                continue
            value = message.value()
            if value is None:
                latest.pop(key, None)
            else:
                latest[key] = value if isinstance(value, bytes) else value.encode()
                if timestamps is not None:
                    timestamps[key] = int(message.timestamp()[1])
    except BrokerUnavailable:
        raise
    except Exception as exc:
        raise BrokerUnavailable(f"cannot read {topic}: {exc}") from None
    finally:
        consumer.close()
    return latest
