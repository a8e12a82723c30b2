"""The Kafka producer: idempotent, ``acks=all``, bounded in flight, deliveries reported to ack/.

``produce()`` only means *accepted*; a record is *durable* when its delivery report says so, and
only then does the ack tracker count it. A failed delivery poisons the session: the pipeline tears
it down, rebuilds the producer (an idempotent producer's sequence state cannot survive a broker
that lost its log) and resumes from the confirmed LSN, so nothing after the failure is confirmed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient

from pgbridge.ack.tracker import AckTracker, Unit
from pgbridge.config import KafkaConfig
from pgbridge.errors import BrokerUnavailable, PgbridgeError, PublishError
from pgbridge.logs import LibrdkafkaLog
from pgbridge.metrics import Metrics
from pgbridge.publish.oversize import (
    BROKER,
    PRODUCER,
    WATCH_BYTES,
    Describe,
    RecordOrigin,
    dead_letter_topic,
    dead_letter_value,
    key_bytes_text,
    oversize_error,
    producer_limit,
)
from pgbridge.publish.topics import TopicManager, offsets_topic
from pgbridge.publish.transactions import (
    BatchPolicy,
    Fenced,
    KafkaTransactions,
    Position,
    classify,
    read_position,
    serve_callbacks,
    transactional_id,
)

# A unit's row producer (``KafkaPublisher.row_producer``): (records, describe) → key + value bytes.
RowProducer = Callable[[Sequence[tuple[str, bytes | None, bytes | None]], Describe | None], int]
log = logging.getLogger(__name__)

# Delivery errors that no retry or reconnect can fix.
_FENCED: Final = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
_FATAL_CODES: Final = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError.MSG_SIZE_TOO_LARGE,
    KafkaError.SASL_AUTHENTICATION_FAILED,
}

# produce()'s partition argument meaning "let the partitioner choose" (RD_KAFKA_PARTITION_UA). The
# row path passes partition and callback positionally: keyword parsing made each produce() call
# ~0.8 µs slower (2.0 vs 1.2 µs measured), a twentieth of a row's whole cost.
PARTITION_UNASSIGNED: Final = -1

CompletedHook = Callable[[list[Unit]], None]
DeliveryCallback = Callable[[KafkaError | None, Message], None]


def unproven(message: Message) -> str:
    """Why a delivery report with no error but no offset does not count as delivered.

    librdkafka reports a record "delivered" without an offset when it infers rather than sees the
    write: a later batch to the same partition succeeded while this one waited for a retry
    ("implicitly acked"), or the broker answered a retry with DUPLICATE_SEQUENCE_NUMBER. Seen with
    Apache Kafka 4.3 and librdkafka 2.16, about once in 30 runs of the schema-change test: the first
    batch to a partition created moments before was refused (NOT_LEADER_OR_FOLLOWER, the broker not
    its leader yet) while the second, already in flight, was accepted as the partition's first;
    librdkafka took the first for written, it never was, and commit_transaction committed the
    transaction without it. Every record Kafka wrote has an offset, so a report without one fails
    the session: it restarts from the last confirmed position (an exactly-once transaction is
    aborted first) and the record is produced again.
    """
    return (f"Kafka reported a record to {message.topic()} [{message.partition()}] delivered without an "
            f"offset (inferred from a later batch, not seen written): not proof it was written; "
            f"read again from the last confirmed position")


def delivery_problem(error: KafkaError | None, message: Message) -> str | None:
    """What is wrong with one delivery report, ``None`` when it proves the record written."""
    if error is not None:
        return error.str()
    return unproven(message) if message.offset() is None else None


def producer_config(config: KafkaConfig) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "bootstrap.servers": config.bootstrap_servers,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": config.linger_ms,
        "delivery.timeout.ms": config.delivery_timeout_ms,
        "queue.buffering.max.messages": config.max_in_flight,
        "queue.buffering.max.kbytes": max(1024, config.max_in_flight_bytes // 1024),
        "batch.num.messages": 10_000,
        # murmur2 keeps key → partition identical to Java clients (Debezium, Kafka Streams).
        "partitioner": "murmur2_random",
        "client.id": "pgbridge",
        # librdkafka doubles the wait between reconnects to a down broker up to 10 s by default, so
        # a broker back after a long outage could sit unused that long; 1 s bounds the recovery at
        # one connection attempt a second per broker.
        "reconnect.backoff.max.ms": 1000,
    }
    for key, value in config.properties.items():
        settings[key] = value.get_secret_value()
    return settings


def transactional_config(config: KafkaConfig, slot: str) -> dict[str, Any]:
    """What ``kafka.exactly_once`` adds to the producer (see publish/transactions.py)."""
    if not config.exactly_once:
        return {}
    return {"transactional.id": transactional_id(config.topic_prefix, slot),
            "transaction.timeout.ms": config.transaction_timeout_ms,
            # librdkafka refuses a record timeout longer than the transaction's
            "delivery.timeout.ms": min(config.delivery_timeout_ms, config.transaction_timeout_ms)}


def connection_config(config: KafkaConfig, client_id: str) -> dict[str, Any]:
    """What every non-producing client (admin, readers of internal topics) needs to reach the
    brokers: the bootstrap servers and the security properties, nothing of the producer's tuning."""
    settings: dict[str, Any] = {"bootstrap.servers": config.bootstrap_servers, "client.id": client_id}
    for key, value in config.properties.items():
        if key.startswith(("security.", "ssl.", "sasl.")):
            settings[key] = value.get_secret_value()
    return settings


def consumer_config(config: KafkaConfig) -> dict[str, Any]:
    return connection_config(config, "pgbridge-reader")


def admin_config(config: KafkaConfig) -> dict[str, Any]:
    return connection_config(config, "pgbridge-admin")



Headers = list[tuple[str, str | bytes | None]]


def produce_when_room(producer: Producer, topic: str, key: bytes | None, value: bytes | None,
                      callback: Callable[[KafkaError | None, Message], None] | None,
                      wait: Callable[[], object], headers: Headers | None = None) -> None:
    """librdkafka's queue was full (``BufferError``): ``wait`` (which must serve delivery reports,
    the only thing that frees room) and try again until the record fits.

    The one blocking-produce loop of pgbridge: callers try ``produce`` once inline (the hot path
    never pays for a function call) and come here only on ``BufferError``.
    """
    while True:
        wait()
        try:
            if headers:
                producer.produce(topic, value, key, PARTITION_UNASSIGNED, callback, headers=headers)
            else:
                producer.produce(topic, value, key, PARTITION_UNASSIGNED, callback)
            return
        except BufferError:
            continue

class KafkaPublisher:
    def __init__(self, config: KafkaConfig, tracker: AckTracker, metrics: Metrics,
                 on_completed: CompletedHook, *, slot: str = "pgbridge",
                 stop: threading.Event | None = None) -> None:
        self._config = config
        self._tracker = tracker
        self._metrics = metrics
        self._on_completed = on_completed
        self._error: PgbridgeError | None = None
        self.kafka_ok = True
        settings = producer_config(config) | transactional_config(config, slot)
        settings["error_cb"] = self._on_client_error
        settings["on_delivery"] = self._outside_units  # records produced without a callback
        self._producer = Producer(settings, logger=LibrdkafkaLog())
        # Oversized records (publish/oversize.py): the producer's limit, the policy, and the dead
        # letters refused in a delivery report, produced at the next poll (not from the callback).
        self._producer_limit = producer_limit(settings)
        self._watch_bytes = min(WATCH_BYTES, self._producer_limit)
        self._dead_letter = config.oversize_policy == "dead_letter"
        self._dead_letter_topic = dead_letter_topic(config.topic_prefix)
        self._dead_letters: list[tuple[bytes | None, bytes, DeliveryCallback]] = []
        self._slot = slot
        self.transactions: KafkaTransactions | None = None
        if config.exactly_once:
            self.transactions = KafkaTransactions(
                self._producer, tracker, offsets_topic=offsets_topic(config.topic_prefix), slot=slot,
                policy=BatchPolicy(max_age_s=config.transaction_max_ms / 1000, max_bytes=config.transaction_max_bytes,
                                   split_after_s=config.transaction_timeout_ms / 2000),
                on_commit=self._committed, raise_if_failed=self.raise_if_failed)
        self._admin = AdminClient(admin_config(config), logger=LibrdkafkaLog())
        self.topics = TopicManager.of(self._admin, config, stop=stop)  # its waits end on a stop
        self._max_in_flight = config.max_in_flight
        self._last_topic: str | None = None  # row_producer: the last topic known to exist

    @property
    def config(self) -> KafkaConfig:
        """The Kafka section: the dispatcher reads its routing and filtering options from it."""
        return self._config

    # -- delivery reports ------------------------------------------------------------------------
    def callback_for(self, unit: Unit) -> Callable[[KafkaError | None, Message], None]:
        """One callback per unit (not per record), so the hot path allocates nothing per record."""
        tracker = self._tracker
        on_completed = self._on_completed

        def on_delivery(error: KafkaError | None, _message: Message) -> None:
            if error is None:
                if _message.offset() is None:  # "delivered" without proof: see unproven()
                    self._unproven(unit, _message)
                    return
                self.kafka_ok = True
                done = tracker.delivered(unit)
                if done:
                    on_completed(done)
            elif error.code() == KafkaError.MSG_SIZE_TOO_LARGE:  # refused by the broker
                self._broker_refused(error, _message.topic() or "?", _message.key(),
                                     len(_message.key() or b"") + len(_message.value() or b""), None,
                                     on_delivery, unit)
            else:
                tracker.failed(unit)
                self._record_failure(error)

        return on_delivery

    def _outside_units(self, error: KafkaError | None, message: Message) -> None:
        """The delivery report of a record that belongs to no unit (inside a Kafka transaction: its
        position record and what the before-commit hooks add; a schema announcement): a failure
        fails the session, before the transaction commits (publish/transactions.py)."""
        if error is not None:
            self._record_failure(error)
        elif message.offset() is None:
            self._unproven(None, message)

    def _unproven(self, unit: Unit | None, message: Message) -> None:
        """A delivery report without error or offset: failed, see ``unproven``."""
        if unit is not None:
            self._tracker.failed(unit)
        self._metrics.delivery_errors.inc()
        text = unproven(message)
        if self._error is None:
            self._error = BrokerUnavailable(text)
        log.error("delivery not proven", extra={"error": text})

    def _committed(self, seconds: float, records: int) -> None:
        self._metrics.kafka_transactions.labels("committed").inc()
        self._metrics.kafka_transaction_commit.observe(seconds)
        self._metrics.kafka_transaction_records.observe(records)

    def start_transactions(self) -> Position | None:
        """Exactly-once: fence older producers (init_transactions), then read the committed position.

        Must run only once this process owns the slot (or is about to create it), so it never fences
        the rightful owner.
        """
        if self.transactions is None:
            return None
        self.topics.ensure(offsets_topic(self._config.topic_prefix), compacted=True)
        self.transactions.init()
        position = read_position(consumer_config(self._config), offsets_topic(self._config.topic_prefix),
                                 self._slot, stop=self.topics.stop)
        log.info("exactly-once position", extra={"position": None if position is None else position.to_json().decode()})
        return position

    def check_fenced(self) -> None:
        """After a failure: raise ``Fenced`` if another producer took our transactional.id over."""
        if isinstance(self._error, Fenced):
            raise self._error
        if self.transactions is not None and self.transactions.is_open:
            try:
                self.transactions.abort_checked()
            except Fenced as exc:
                self._error = exc
                raise

    def _on_client_error(self, error: KafkaError) -> None:
        """librdkafka's client-level errors: all brokers down means not ready; fatal means rebuild."""
        if error.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT):
            if self.kafka_ok:
                log.warning("Kafka unreachable", extra={"error": error.str()})
            self.kafka_ok = False
        if error.fatal() and error.code() in _FENCED and not isinstance(self._error, Fenced):
            self._error = Fenced(f"Kafka fenced this producer: another pgbridge with the same transactional.id "
                                 f"took over ({error.str()})")
            log.error("fenced by another pgbridge", extra={"error": error.str()})
        elif error.fatal() and self._error is None:
            self._error = BrokerUnavailable(f"Kafka producer fatal error: {error.str()}")
            log.error("Kafka producer fatal error", extra={"error": error.str()})

    def _record_failure(self, error: KafkaError) -> None:
        self._metrics.delivery_errors.inc()
        if self._error is not None:
            return
        if error.code() in _FENCED:
            self._error = Fenced(f"Kafka fenced this producer: another pgbridge with the same transactional.id "
                                 f"took over ({error.str()})")
        elif error.code() in _FATAL_CODES:
            self._error = PublishError(f"Kafka rejected a record: {error.str()}",
                                       hint="check topic ACLs and message.max.bytes on the broker")
        else:
            self._error = BrokerUnavailable(f"Kafka delivery failed: {error.str()}")
        log.error("delivery failed", extra={"error": error.str(), "code": error.code()})

    def _refused(self, exc: KafkaException) -> PgbridgeError:
        """A produce() the client refused outright, or a fatal error poll() or flush() raised
        (serve_callbacks): fenced, or another fatal state; recorded as the publisher's failure."""
        error = classify(exc, "producing to Kafka")
        if self._error is None or isinstance(error, Fenced):
            self._error = error
        return error

    def _serve(self, call: Callable[[float], int], timeout_s: float) -> int:
        """The producer's ``poll`` or ``flush``: a fatal error it raises, or loses, is this
        publisher's failure (``serve_callbacks``)."""
        return serve_callbacks(call, timeout_s, self.raise_if_failed, self._refused)

    def raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

    # -- producing -------------------------------------------------------------------------------
    def produce(self, topic: str, key: bytes | None, value: bytes | None,
                callback: Callable[[KafkaError | None, Message], None], unit: Unit,
                idle: Callable[[], None], describe: Describe | None = None, headers: Headers | None = None) -> None:
        """Hand one record to librdkafka; when the queue is full, serve callbacks and wait.
        ``describe`` names the record's origin should Kafka refuse it as too large; ``headers``
        (the outbox's ``id`` and ``type``) go with the record as Kafka headers."""
        if self._dead_letters:
            self._produce_dead_letters()
        if self.transactions is not None:
            self.transactions.ensure_open()
            self.transactions.wrote(1, len(value or b"") + len(key or b""))
        self._tracker.add_record(unit)
        if value is not None and len(value) >= self._watch_bytes:
            callback = self._watched(topic, key, len(value), callback, unit, describe)
        try:
            if headers:
                self._producer.produce(topic, value, key, PARTITION_UNASSIGNED, callback, headers=headers)
            else:
                self._producer.produce(topic, value, key, PARTITION_UNASSIGNED, callback)
        except BufferError:
            self._wait_and_produce(topic, key, value, callback, idle, describe, headers)
        except KafkaException as exc:
            self._refused_record(exc, topic, key, value, callback, idle, describe)

    def row_producer(self, callback: Callable[[KafkaError | None, Message], None], unit: Unit,
                     idle: Callable[[], None]) -> RowProducer:
        """The row path's ``produce`` for one unit (made when the unit opens, publish/delivery.py):
        ``(records, describe)`` → a change's records, in order, with one tracker update, the topic
        checked once per change of topic; returns key + value bytes. A closure over the unit and
        its callback, so a row costs one Python call here, not a forwarding call more.

        Topic creation is asked of ``topics`` only when the topic differs (by identity, then by
        value) from the previous call's: a table's plan hands out the same string every row.
        A record of ``WATCH_BYTES`` or more gets a callback of its own remembering ``describe``'s
        answer, in case the broker refuses it as too large.
        """
        add_records = self._tracker.add_records
        produce = self._producer.produce
        watch = self._watch_bytes

        def produce_records(records: Sequence[tuple[str, bytes | None, bytes | None]],
                            describe: Describe | None = None) -> int:
            if self._dead_letters:
                self._produce_dead_letters()
            transactions = self.transactions
            if transactions is not None:
                transactions.ensure_open()
            add_records(unit, len(records))
            nbytes = 0
            for topic, key, value in records:
                if topic is not self._last_topic:
                    self.topics.ensure(topic)
                    self._last_topic = topic
                record_callback = callback
                if value is not None:
                    size = len(value)
                    nbytes += size
                    if size >= watch:
                        record_callback = self._watched(topic, key, size, callback, unit, describe)
                try:
                    produce(topic, value, key, PARTITION_UNASSIGNED, record_callback)
                except BufferError:
                    self._wait_and_produce(topic, key, value, record_callback, idle, describe)
                except KafkaException as exc:  # too large, or a fatal producer state (fenced)
                    self._refused_record(exc, topic, key, value, record_callback, idle, describe)
                if key is not None:
                    nbytes += len(key)
            if transactions is not None:
                transactions.wrote(len(records), nbytes)
            return nbytes

        return produce_records

    def _wait_and_produce(self, topic: str, key: bytes | None, value: bytes | None,
                          callback: Callable[[KafkaError | None, Message], None], idle: Callable[[], None],
                          describe: Describe | None = None, headers: Headers | None = None) -> None:
        """The queue is full (``max_in_flight``): serve delivery reports until the record fits."""
        def wait() -> None:
            self._serve(self._producer.poll, 0.05)
            self.raise_if_failed()
            idle()

        try:
            produce_when_room(self._producer, topic, key, value, callback, wait, headers)
        except KafkaException as exc:
            self._refused_record(exc, topic, key, value, callback, idle, describe)

    # -- records too large (publish/oversize.py) -------------------------------------------------
    def _origin(self, topic: str, key: bytes | None, describe: Describe | None) -> RecordOrigin:
        return describe(topic) if describe is not None else RecordOrigin(topic, key_bytes_text(key))

    def _refused_record(self, exc: KafkaException, topic: str, key: bytes | None, value: bytes | None,
                        callback: DeliveryCallback, idle: Callable[[], None], describe: Describe | None) -> None:
        """produce() raised: too large for the producer's message.max.bytes (stop, or dead-letter
        in the record's place under the same callback), or a fatal producer state (raise)."""
        error = exc.args[0] if exc.args else None
        if not isinstance(error, KafkaError) or error.code() != KafkaError.MSG_SIZE_TOO_LARGE:
            raise self._refused(exc) from None
        origin = self._origin(topic, key, describe)
        size = len(key or b"") + len(value or b"")
        self._metrics.oversize_records.labels(origin.table).inc()
        if not self._dead_letter:
            failure = oversize_error(origin, topic, size, PRODUCER, self._producer_limit, self._config.topic_prefix)
            if self._error is None:
                self._error = failure
            raise failure
        log.warning("record too large for Kafka: dead-lettered",
                    extra={"table": origin.table, "key": origin.key, "bytes": size, "topic": self._dead_letter_topic})
        letter = dead_letter_value(origin, topic, size, PRODUCER, self._producer_limit, error.str())
        self.topics.ensure(self._dead_letter_topic)
        try:
            self._producer.produce(self._dead_letter_topic, letter, key, PARTITION_UNASSIGNED, callback)
        except BufferError:
            self._wait_and_produce(self._dead_letter_topic, key, letter, callback, idle)
        except KafkaException as dead_letter_exc:
            raise self._refused(dead_letter_exc) from None

    def _watched(self, topic: str, key: bytes | None, value_size: int, callback: DeliveryCallback, unit: Unit,
                 describe: Describe | None) -> DeliveryCallback:
        """A large record's own callback: it remembers where the record came from (not the value)."""
        origin = self._origin(topic, key, describe)
        size = value_size + len(key or b"")

        def on_delivery(error: KafkaError | None, message: Message) -> None:
            if error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE:
                self._broker_refused(error, topic, key, size, origin, callback, unit)
            else:
                callback(error, message)

        return on_delivery

    def _broker_refused(self, error: KafkaError, topic: str, key: bytes | None, size: int,
                        origin: RecordOrigin | None, callback: DeliveryCallback, unit: Unit) -> None:
        """A delivery report said too large (the topic's max.message.bytes). With ``dead_letter``
        the dead letter goes out at the next poll under ``callback``, and the unit stays pending
        until it is acknowledged; otherwise (or inside a Kafka transaction, which the refusal has
        already doomed) the unit fails and the session stops with the error naming the record."""
        origin = origin or RecordOrigin(topic, key_bytes_text(key))
        self._metrics.oversize_records.labels(origin.table).inc()
        limit = self._topic_limit(topic)
        if self._dead_letter and self.transactions is None:
            log.warning("record too large for Kafka: dead-lettered",
                        extra={"table": origin.table, "key": origin.key, "bytes": size,
                               "topic": self._dead_letter_topic})
            self._dead_letters.append(
                (key, dead_letter_value(origin, topic, size, BROKER, limit, error.str()), callback))
            return
        self._tracker.failed(unit)
        self._metrics.delivery_errors.inc()
        if self._error is None:
            self._error = oversize_error(origin, topic, size, BROKER, limit, self._config.topic_prefix)
        log.error("delivery failed: record too large",
                  extra={"table": origin.table, "key": origin.key, "bytes": size, "code": error.code()})

    def _topic_limit(self, topic: str) -> int | None:
        """The topic's max.message.bytes as the cluster reports it; ``None`` when it cannot say."""
        if not self.kafka_ok or topic == "?":
            return None
        try:
            from confluent_kafka.admin import ConfigResource  # type: ignore[attr-defined]

            futures = self._admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)],
                                                   request_timeout=5)
            for future in futures.values():
                entry = future.result(timeout=5).get("max.message.bytes")
                if entry is not None and entry.value is not None:
                    return int(entry.value)
        except Exception:
            log.debug("could not read max.message.bytes of %s", topic, exc_info=True)
        return None

    def _produce_dead_letters(self) -> None:
        """Produce the dead letters refused deliveries left behind; a full queue keeps the rest for
        the next call. Runs outside delivery callbacks (poll, flush, the next produce)."""
        pending = self._dead_letters
        if pending:
            self.topics.ensure(self._dead_letter_topic)
        while pending:
            key, letter, callback = pending[0]
            try:
                self._producer.produce(self._dead_letter_topic, letter, key, PARTITION_UNASSIGNED, callback)
            except BufferError:
                return
            except KafkaException as exc:
                self._refused(exc)
                return
            pending.pop(0)

    def produce_sync(self, topic: str, key: bytes | None, value: bytes | None, timeout_s: float = 30.0) -> None:
        """Produce one record and wait for its acknowledgement (schema announcements)."""
        outcome: list[tuple[KafkaError | None, Message]] = []
        if self.transactions is not None:  # committed with (or before) the first record that needs it
            self.transactions.ensure_open()
        try:
            self._producer.produce(topic, value, key, on_delivery=lambda err, msg: outcome.append((err, msg)))
        except KafkaException as exc:
            raise self._refused(exc) from None
        deadline = time.monotonic() + timeout_s
        while not outcome and time.monotonic() < deadline:
            self._serve(self._producer.poll, 0.05)
        if not outcome:
            raise BrokerUnavailable(f"no acknowledgement from Kafka for {topic} within {timeout_s:.0f}s")
        self._outside_units(*outcome[0])
        self.raise_if_failed()

    def probe(self, timeout_s: float) -> bool:
        """Whether a broker answers a metadata request: readiness comes back without traffic."""
        self.topics.poll()
        try:
            self._producer.list_topics(timeout=timeout_s)
        except KafkaException:
            return False
        self.kafka_ok = True
        return True

    def poll(self, timeout: float = 0.0) -> int:
        served = self._serve(self._producer.poll, timeout)
        if self._dead_letters:
            self._produce_dead_letters()
        return served

    def flush(self, timeout_s: float) -> int:
        """Wait for outstanding deliveries (and dead letters still to produce); returns how many
        are still outstanding."""
        deadline = time.monotonic() + timeout_s
        while (len(self._producer) or self._dead_letters) and time.monotonic() < deadline:
            self._produce_dead_letters()
            self._serve(self._producer.flush, min(0.5, max(0.0, deadline - time.monotonic())))
        return len(self._producer) + len(self._dead_letters)

    def close(self) -> None:
        """Drop whatever is still queued: the pipeline resumes from the confirmed LSN anyway."""
        if self.transactions is not None and self.transactions.is_open:
            self._metrics.kafka_transactions.labels("aborted").inc()
            self.transactions.abort()  # consumers never see it; it is read again from the slot
        try:
            self._producer.purge(in_queue=True, in_flight=False)
            self._producer.poll(0)
        except Exception:
            log.debug("purge failed while closing the producer", exc_info=True)
