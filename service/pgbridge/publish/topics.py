"""Topic names per the contract, creation on first use (before any produce touches them), and
reading an internal compacted topic (``{prefix}._*``: snapshot progress, exactly-once positions)
back to its end.

This module is the one owner of topic naming: the encoder, the readers and the routes of
``kafka.topic_routes`` (publish/routing.py) all name topics through ``topic_name``."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Final

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ClusterMetadata, NewTopic  # type: ignore[attr-defined]

from pgbridge.errors import BrokerUnavailable, PublishError, StopRequested
from pgbridge.logs import LibrdkafkaLog

if TYPE_CHECKING:
    from pgbridge.config import KafkaConfig

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


def schema_changes_topic(prefix: str) -> str:
    """DDL events (``postgres.ddl_events``, encode/schema_change.py)."""
    return topic_name(prefix, "schema_changes")


def schemas_topic(prefix: str) -> str:
    return sanitize(f"{prefix}._schemas")


def internal_prefix(prefix: str) -> str:
    """What every internal topic's name starts with (``{prefix}._``; not Avro, not for consumers)."""
    return sanitize(f"{prefix}._")


def offsets_topic(prefix: str) -> str:
    """Exactly-once positions (publish/transactions.py), compacted, keyed by slot."""
    return sanitize(f"{prefix}._offsets")


# A wait on Kafka is asked in attempts of at most this long, so that a stop (SIGTERM/SIGINT) is acted
# on within it: the signal handler only sets the stop event, and runs between two attempts, never
# inside librdkafka's blocking call (a 30 s metadata request to an unreachable broker held the stop
# for 30 s). A broker that took the request and answers late gets twice as long the next time.
ATTEMPT_S: Final = 1.0


def raise_if_stopped(stop: threading.Event | None, doing: str) -> None:
    """``StopRequested`` (naming what was being waited for) when ``stop`` is set."""
    if stop is not None and stop.is_set():
        raise StopRequested(f"stopped while {doing}")


# Replication factor of the topics pgbridge creates unless kafka.topic_replication_factor says
# otherwise: three copies, so acks=all with min.insync.replicas=2 survives one broker down.
SAFE_REPLICATION_FACTOR: Final = 3


def default_min_insync(replication_factor: int) -> int:
    """min.insync.replicas for a topic of ``replication_factor`` copies: one less, at least 1."""
    return max(1, replication_factor - 1)


class TopicManager:
    """Creates each topic once, explicitly, so broker auto-creation defaults never decide its shape.

    Topics that already exist are taken from the cluster's metadata, which any broker serves from
    its own copy: a CreateTopics request needs the controller quorum, and a cluster that lost it
    (two of three combined nodes down) would hold a restarting pgbridge for the whole timeout,
    even after a broker is back and could take its records. The metadata is asked for *all*
    topics, once per session: naming a missing topic would make some brokers (Tansu) create it.

    Shape of a created topic: ``replication_factor`` copies (``None``: 3, or the number of brokers
    in the metadata when smaller, with a warning; -1: the broker's default), ``min.insync.replicas``
    (``None``: the replication factor - 1, at least 1), and ``topic_config`` for data topics; an
    internal topic (name starting with ``internal_prefix``, ``{prefix}._``) gets only its own
    required configs (compaction) besides ``min.insync.replicas``.
    """

    def __init__(self, admin: AdminClient, *, partitions: int, replication_factor: int | None,
                 min_insync_replicas: int | None = None, topic_config: dict[str, str] | None = None,
                 internal_prefix: str | None = None, timeout_s: float = 30.0,
                 stop: threading.Event | None = None) -> None:
        self._admin = admin
        self.stop = stop  # set: every wait ends with StopRequested within ATTEMPT_S
        self._partitions = partitions
        self._replication_factor = replication_factor
        self._min_insync_replicas = min_insync_replicas
        self._topic_config = dict(topic_config or {})
        self._internal_prefix = internal_prefix
        self._timeout_s = timeout_s
        self._known: set[str] = set()
        self._listed: set[str] | None = None  # the topics that existed when first asked
        self._brokers = 0  # brokers in that metadata

    @classmethod
    def of(cls, admin: AdminClient, config: KafkaConfig, *, stop: threading.Event | None = None) -> TopicManager:
        """The topic manager of the ``kafka`` section's topic settings; its waits end on ``stop``."""
        return cls(admin, partitions=config.topic_partitions, replication_factor=config.topic_replication_factor,
                   min_insync_replicas=config.topic_min_insync_replicas, topic_config=config.topic_config,
                   internal_prefix=internal_prefix(config.topic_prefix), stop=stop)

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
            metadata = self._list_topics()
            self._listed = {name for name, meta in metadata.topics.items() if meta.error is None}
            self._brokers = len(metadata.brokers)
        return self._listed

    def _list_topics(self) -> ClusterMetadata:
        """The cluster's metadata, asked in attempts (``ATTEMPT_S``) until ``timeout_s``.

        Between attempts the admin client is polled: what librdkafka logged while trying (a refused
        connection, a name that does not resolve) is what a user waiting on a wrong address needs,
        and it reaches the log within an attempt instead of at the end of the whole wait.
        """
        deadline = time.monotonic() + self._timeout_s
        attempt = ATTEMPT_S
        while True:
            raise_if_stopped(self.stop, "listing Kafka's topics")
            began = time.monotonic()
            try:
                return self._admin.list_topics(timeout=max(0.1, min(attempt, deadline - began)))
            except KafkaException as exc:
                # _TRANSPORT: no broker came up within the attempt; _TIMED_OUT: one took the request
                # and did not answer in time. Anything else is an answer, and final.
                code = exc.args[0].code()
                if code not in (KafkaError._TRANSPORT, KafkaError._TIMED_OUT) or time.monotonic() >= deadline:
                    raise BrokerUnavailable(f"cannot list Kafka's topics: {exc}") from None
                if code == KafkaError._TIMED_OUT:
                    attempt *= 2
                self.poll()  # the attempt's log lines (a refused connection) now, not at the deadline
                time.sleep(max(0.0, began + 0.1 - time.monotonic()))  # never a busy loop

    def _result(self, future: Future[None], doing: str) -> None:
        """``future``'s outcome, waited for in attempts until ``timeout_s`` (then ``TimeoutError``)."""
        deadline = time.monotonic() + self._timeout_s
        while True:
            raise_if_stopped(self.stop, doing)
            try:
                return future.result(timeout=max(0.0, min(ATTEMPT_S, deadline - time.monotonic())))
            except TimeoutError:
                if time.monotonic() >= deadline:
                    raise

    def shape(self, topic: str, *, compacted: bool = False) -> tuple[int, int, dict[str, str]]:
        """Partitions, replication factor and configs ``topic`` is created with (after ``ensure``
        has listed the cluster, which tells its size)."""
        factor = self._replication_factor
        if factor is None:
            factor = min(SAFE_REPLICATION_FACTOR, max(1, self._brokers))
            if factor < SAFE_REPLICATION_FACTOR:
                log.warning(f"topic {topic} is created with replication factor {factor}: the cluster has "
                            f"{self._brokers} broker(s), fewer than {SAFE_REPLICATION_FACTOR}; a broker lost "
                            "loses its records. Set kafka.topic_replication_factor to choose "
                            "(PGBRIDGE_KAFKA__TOPIC_REPLICATION_FACTOR)",
                            extra={"topic": topic, "brokers": self._brokers, "replication_factor": factor,
                                   "setting": "kafka.topic_replication_factor"})
        internal = self._internal_prefix is not None and topic.startswith(self._internal_prefix)
        config = {} if internal else dict(self._topic_config)
        if compacted:
            config["cleanup.policy"] = "compact"
        minimum = self._min_insync_replicas
        if minimum is None and factor >= 1:
            minimum = default_min_insync(factor)
        if minimum is not None:
            config["min.insync.replicas"] = str(minimum)
        return (1 if compacted else self._partitions), factor, config

    def _create(self, topic: str, *, compacted: bool) -> None:
        partitions, factor, config = self.shape(topic, compacted=compacted)
        new = NewTopic(topic, num_partitions=partitions, replication_factor=factor, config=config)
        futures = self._admin.create_topics([new], operation_timeout=self._timeout_s,
                                            request_timeout=self._timeout_s)
        try:
            self._result(futures[topic], f"creating topic {topic}")
            log.info("topic created", extra={"topic": topic, "partitions": partitions, "replication_factor": factor,
                                             "min_insync_replicas": config.get("min.insync.replicas", "default")})
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            code = error.code()
            if code == KafkaError.TOPIC_ALREADY_EXISTS:
                pass
            elif code in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED,
                          KafkaError.TOPIC_EXCEPTION, KafkaError.POLICY_VIOLATION):
                raise PublishError(f"cannot create topic {topic}: {error.str()}",
                                   hint="create the topic yourself or grant CREATE on the cluster") from None
            elif code == KafkaError.INVALID_CONFIG:
                raise PublishError(f"cannot create topic {topic}: {error.str()}",
                                   hint="fix kafka.topic_config / kafka.topic_min_insync_replicas") from None
            else:
                raise BrokerUnavailable(f"cannot create topic {topic}: {error.str()}") from None
        except StopRequested:
            raise
        except Exception as exc:  # timeout of the admin future
            raise BrokerUnavailable(f"cannot create topic {topic}: {exc}") from None
        self._known.add(topic)


# After a broker outage the first watermark answers are "not leader" or time-outs until the
# client's metadata names the partition's new leader: ask again, a short attempt at a time.
WATERMARK_ATTEMPT_S: Final = 2.0


def high_watermark(consumer: Consumer, partition: TopicPartition, deadline: float,
                   stop: threading.Event | None = None) -> int:
    """The partition's high watermark (last stable offset for read_committed), asked again until
    ``deadline`` while the answer is an error, or until ``stop`` is set (``StopRequested``)."""
    while True:
        raise_if_stopped(stop, f"asking for the end of {partition.topic}")
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


def read_compacted(settings: dict[str, Any], topic: str, *, timeout_s: float, key_prefix: str = "",
                   timestamps: dict[str, int] | None = None, stop: threading.Event | None = None) -> dict[str, bytes]:
    """The latest value of every key of partition 0 of ``topic`` (a tombstone removes its key),
    read ``read_committed`` from the beginning to the end; keys not starting with ``key_prefix``
    are skipped. ``BrokerUnavailable`` if the end is not reached within ``timeout_s``,
    ``StopRequested`` once ``stop`` is set. Given ``timestamps``, it receives each live key's record
    timestamp (ms since the epoch)."""
    consumer = Consumer({**settings, "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "enable.partition.eof": True, "isolation.level": "read_committed",
                         # as the producer's: a broker back from an outage is reconnected within a second
                         "reconnect.backoff.max.ms": 1000}, logger=LibrdkafkaLog())
    latest: dict[str, bytes] = {}
    deadline = time.monotonic() + timeout_s
    try:
        high = high_watermark(consumer, TopicPartition(topic, 0), deadline, stop)
        if high <= 0:
            return latest
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        position = -1
        while position + 1 < high:
            raise_if_stopped(stop, f"reading {topic}")
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
    except (BrokerUnavailable, StopRequested):
        raise
    except Exception as exc:
        raise BrokerUnavailable(f"cannot read {topic}: {exc}") from None
    finally:
        consumer.close()
    return latest
