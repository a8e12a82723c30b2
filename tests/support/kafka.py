"""Read what landed in Kafka topics, from the beginning of every partition to the end.

A reader assigns itself explicit partitions (no consumer group subscription, no offset commits), so
it sees every record regardless of other readers. "The end" is the partitions' high watermarks on
Apache Kafka: reading stops once at least ``min_count`` records arrived and the reader's position
reached the high watermark of every partition. Tansu's watermarks can be wrong after batched
writes, so on Tansu (``PGBRIDGE_TEST_BROKER=tansu``, or ``to_watermarks=False``) the end is decided
by silence instead: nothing new for ``idle`` seconds.

Tansu creates a topic when a metadata request names it, so readers only ever ask for the metadata of
*all* topics and assign the wanted ones once they exist: reading a topic never creates it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from confluent_kafka import (
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
)
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from pgbridge.publish.topics import assign_existing
from tests.support.broker import broker_kind

_METADATA_INTERVAL = 0.25
_END_CHECK_INTERVAL = 0.2


@dataclass(frozen=True)
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int | None  # milliseconds since the epoch, None if the broker gave none
    headers: tuple[tuple[str, bytes | None], ...] = ()

    @property
    def payload(self) -> bytes:
        """The value of a record that must not be a tombstone (a test reading an insert's bytes)."""
        if self.value is None:
            raise AssertionError(f"{self.topic}[{self.partition}]@{self.offset} is a tombstone, not a value")
        return self.value


class _DeliveredMessage:
    """What a delivery callback reads of the record it reports on."""

    def __init__(self, topic: str | None, key: bytes | None, value: bytes | None, offset: int | None) -> None:
        self._topic, self._key, self._value, self._offset = topic, key, value, offset

    def topic(self) -> str | None:
        return self._topic

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def partition(self) -> int:
        return 0

    def offset(self) -> int | None:
        return self._offset

    def error(self) -> None:
        return None


def delivered_message(topic: str | None = None, key: bytes | None = None, value: bytes | None = None, *,
                      offset: int | None = 0) -> Message:
    """A ``Message`` to hand a delivery callback in a unit test. confluent-kafka's own cannot be built
    on the floor release pyproject.toml allows (``cannot create 'cimpl.Message' instances``), so this
    is a stand-in with the accessors pgbridge's callbacks read. ``offset=None`` is a report librdkafka
    inferred without seeing the write (publish/producer.py ``unproven``)."""
    return cast(Message, _DeliveredMessage(topic, key, value, offset))


def list_topics(bootstrap: str, *, timeout: float = 10.0) -> set[str]:
    """Names of all topics on the broker (a metadata request for all topics: creates nothing)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    metadata = admin.list_topics(timeout=timeout)
    return {name for name, topic in metadata.topics.items() if topic.error is None}


def create_topic(bootstrap: str, topic: str, *, partitions: int = 1, timeout: float = 30.0) -> None:
    """Create ``topic`` with the broker's default replication factor, as pgbridge creates its own
    (Tansu would create it on first use; Apache Kafka's auto-creation gives one partition)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions)], operation_timeout=timeout,
                                  request_timeout=timeout)
    futures[topic].result(timeout=timeout)


def read_topic(
    bootstrap: str,
    topic: str,
    *,
    min_count: int = 0,
    timeout: float = 30.0,
    idle: float = 2.0,
    to_watermarks: bool | None = None,
    isolation: str = "read_committed",
) -> list[Record]:
    """All records of ``topic``, ordered by (partition, offset). See ``read_topics``."""
    return read_topics(bootstrap, [topic], min_count=min_count, timeout=timeout, idle=idle,
                       to_watermarks=to_watermarks, isolation=isolation)[topic]


def read_topics(
    bootstrap: str,
    topics: Iterable[str],
    *,
    min_count: int | Mapping[str, int] = 0,
    timeout: float = 30.0,
    idle: float = 2.0,
    to_watermarks: bool | None = None,
    isolation: str = "read_committed",
) -> dict[str, list[Record]]:
    """All records of each topic, ordered by (partition, offset) within each topic.

    ``min_count`` is the least number of records wanted from *each* topic, or a mapping per topic
    (topics not in it: 0). A topic that does not exist yet is waited for while fewer than its
    ``min_count`` records were read; one with ``min_count`` 0 that never appears reads as empty.
    Returns once every topic has its ``min_count`` and either (``to_watermarks``, the default on
    Apache Kafka) every topic exists and every partition was read up to its high watermark, or no
    record arrived for ``idle`` seconds; raises ``AssertionError`` after ``timeout`` seconds, saying
    how many records were read.
    ``isolation`` is the reader's ``isolation.level`` (librdkafka's default, ``read_committed``, or
    ``read_uncommitted`` to see records of aborted Kafka transactions too).
    """
    if to_watermarks is None:
        to_watermarks = broker_kind() == "kafka"
    wanted = list(dict.fromkeys(topics))
    if isinstance(min_count, Mapping):
        minimum = {topic: min_count.get(topic, 0) for topic in wanted}
    else:
        minimum = dict.fromkeys(wanted, min_count)
    records: dict[str, list[Record]] = {topic: [] for topic in wanted}
    assigned: set[str] = set()
    last_error: KafkaError | None = None

    consumer = Consumer({**_consumer_config(bootstrap), "isolation.level": isolation})
    try:
        start = time.monotonic()
        deadline = start + timeout
        last_progress = start
        next_metadata = start
        next_end_check = start
        while True:
            now = time.monotonic()
            if len(assigned) < len(wanted) and now >= next_metadata:
                if assign_existing(consumer, wanted, assigned, timeout=max(0.1, min(5.0, deadline - now))):
                    last_progress = time.monotonic()  # read newly assigned topics fully
                next_metadata = time.monotonic() + _METADATA_INTERVAL
            message = consumer.poll(0.1)
            if message is not None:
                error = message.error()
                if error is not None:
                    if error.fatal():
                        raise AssertionError(f"reading {wanted} from {bootstrap} failed: {error}")
                    last_error = error
                else:
                    record = _record(message)
                    records[record.topic].append(record)
                    last_progress = time.monotonic()
            now = time.monotonic()
            satisfied = all(len(records[topic]) >= minimum[topic] for topic in wanted)
            if satisfied and now - last_progress >= idle:
                break
            if satisfied and to_watermarks and len(assigned) == len(wanted) and now >= next_end_check:
                if _at_high_watermarks(consumer):
                    break
                next_end_check = time.monotonic() + _END_CHECK_INTERVAL
            if now >= deadline:
                counts = {topic: len(records[topic]) for topic in wanted}
                missing = [topic for topic in wanted if topic not in assigned]
                raise AssertionError(
                    f"timed out after {timeout:g}s reading from {bootstrap}: read {counts}, "
                    f"wanted at least {minimum}"
                    + (f"; topics that never appeared: {missing}" if missing else "")
                    + (f"; last consumer error: {last_error}" if last_error else "")
                )
    finally:
        consumer.close()
    return {topic: sorted(rows, key=lambda r: (r.partition, r.offset)) for topic, rows in records.items()}


def _at_high_watermarks(consumer: Consumer) -> bool:
    """Whether the reader's position is at the high watermark of every assigned partition (an
    empty partition counts as read). Watermarks asked of the leader, never the cached ones."""
    partitions = consumer.assignment()
    try:
        positions = consumer.position(partitions)
        for position in positions:
            low, high = consumer.get_watermark_offsets(position, timeout=5.0, cached=False)
            read_to = position.offset if position.offset >= 0 else low
            if read_to < high:
                return False
    except KafkaException:
        return False
    return True


def _consumer_config(bootstrap: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        # Required by the client; with assign() and no commits it never joins a group.
        "group.id": f"pgbridge-test-reader-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "allow.auto.create.topics": False,
        "enable.partition.eof": False,
        "fetch.wait.max.ms": 100,
        "topic.metadata.refresh.interval.ms": 1000,
    }


def _record(message: Message) -> Record:
    topic, partition, offset = message.topic(), message.partition(), message.offset()
    assert topic is not None and partition is not None and offset is not None, "not a fetched record"
    timestamp_type, timestamp = message.timestamp()
    raw_headers = message.headers() or []
    pairs = raw_headers.items() if isinstance(raw_headers, dict) else raw_headers
    return Record(
        topic=topic,
        partition=partition,
        offset=offset,
        key=_as_bytes(message.key()),
        value=_as_bytes(message.value()),
        timestamp=None if timestamp_type == TIMESTAMP_NOT_AVAILABLE else timestamp,
        headers=tuple((name, _as_bytes(value)) for name, value in pairs),
    )


def _as_bytes(data: str | bytes | None) -> bytes | None:
    return data.encode() if isinstance(data, str) else data
