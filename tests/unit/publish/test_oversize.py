"""Records Kafka refuses as too large: the error names the record and the settings to raise, and
``kafka.oversize_policy=dead_letter`` puts a small record in ``{prefix}._dead_letter`` in its place,
under the same delivery unit. The producer is a stand-in that refuses what is over its limit, as
librdkafka's produce() does, and lets the test hand out delivery reports."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from pgbridge.ack.tracker import AckTracker, Unit
from pgbridge.assemble.units import RowChange
from pgbridge.config import KafkaConfig
from pgbridge.decode.messages import Column, Relation, TupleData
from pgbridge.errors import PublishError
from pgbridge.lsn import Lsn
from pgbridge.metrics import OVERSIZE_RECORDS_TOTAL, Metrics
from pgbridge.publish.oversize import (
    RecordOrigin,
    dead_letter_topic,
    dead_letter_value,
    oversize_error,
    producer_limit,
    row_key_text,
)
from pgbridge.publish.producer import KafkaPublisher
from tests.support.kafka import delivered_message
from tests.support.ports import free_port

LIMIT = 10_000
ORIGIN = RecordOrigin(table="public.docs", key="{id=7}", commit_lsn=Lsn(0x16B3748), total_order=3)


class FakeProducer:
    """Refuses a value over ``LIMIT`` in produce() like librdkafka; queues the rest."""

    def __init__(self) -> None:
        self.queued: list[tuple[str, bytes | None, bytes | None, Any]] = []

    def produce(self, topic: str, value: bytes | None, key: bytes | None, partition: int, callback: Any) -> None:
        if value is not None and len(value) > LIMIT:
            raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "Message size too large"))
        self.queued.append((topic, key, value, callback))

    def poll(self, timeout: float = 0.0) -> int:
        return 0

    def flush(self, timeout: float = 0.0) -> int:
        return 0

    def purge(self, **kwargs: object) -> None:
        pass

    def __len__(self) -> int:
        return 0


class Completed:
    def __init__(self) -> None:
        self.units: list[Unit] = []

    def __call__(self, units: list[Unit]) -> None:
        self.units.extend(units)


def _publisher(policy: str, metrics: Metrics, tracker: AckTracker, completed: Completed,
               monkeypatch: pytest.MonkeyPatch) -> tuple[KafkaPublisher, FakeProducer]:
    config = KafkaConfig(bootstrap_servers=f"127.0.0.1:{free_port()}", topic_prefix="app",
                         oversize_policy=policy)  # type: ignore[arg-type]
    publisher = KafkaPublisher(config, tracker, metrics, completed)
    fake = FakeProducer()
    monkeypatch.setattr(publisher, "_producer", fake)
    monkeypatch.setattr(publisher.topics, "ensure", lambda topic, **kwargs: None)
    monkeypatch.setattr(publisher, "_producer_limit", LIMIT)
    monkeypatch.setattr(publisher, "_watch_bytes", 4096)  # records from 4 KiB remember their origin
    monkeypatch.setattr(publisher, "_topic_limit", lambda topic: 1_048_588)  # what describe_configs says
    return publisher, fake


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


@pytest.fixture
def tracker() -> AckTracker:
    return AckTracker()


@pytest.fixture
def completed() -> Completed:
    return Completed()


@pytest.fixture
def stop(metrics: Metrics, tracker: AckTracker, completed: Completed,
         monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[KafkaPublisher, FakeProducer]]:
    yield _publisher("stop", metrics, tracker, completed, monkeypatch)


@pytest.fixture
def dead_letter(metrics: Metrics, tracker: AckTracker, completed: Completed,
                monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[KafkaPublisher, FakeProducer]]:
    yield _publisher("dead_letter", metrics, tracker, completed, monkeypatch)


def _counted(metrics: Metrics, table: str) -> float:
    return metrics.registry.get_sample_value(OVERSIZE_RECORDS_TOTAL, {"table": table}) or 0.0


def _idle() -> None:
    pass


def test_the_error_names_table_key_size_limit_and_both_settings() -> None:
    error = oversize_error(ORIGIN, "app.public.docs", 3_000_123, "producer", 1_000_000, "app")
    line = error.one_line()
    for part in ("table public.docs", "key {id=7}", "3,000,123 bytes", "message.max.bytes of 1,000,000",
                 "commit 0/16B3748, event 3", "PGBRIDGE_KAFKA__PROPERTIES__MESSAGE.MAX.BYTES",
                 "--entity-name app.public.docs --add-config max.message.bytes",
                 "PGBRIDGE_KAFKA__OVERSIZE_POLICY=dead_letter", "app._dead_letter"):
        assert part in line, part
    assert "\n" not in line


def test_the_dead_letter_says_where_and_why_but_not_the_value() -> None:
    letter = json.loads(dead_letter_value(ORIGIN, "app.public.docs", 3_000_123, "broker", 1_048_588, "too big"))
    assert letter == {"reason": "record_too_large", "refused_by": "broker", "topic": "app.public.docs",
                      "table": "public.docs", "key": "{id=7}", "commit_lsn": "0/16B3748", "total_order": 3,
                      "size_bytes": 3_000_123, "limit_bytes": 1_048_588, "error": "too big"}
    assert dead_letter_topic("my-app") == "my-app._dead_letter"


def test_producer_limit_reads_the_property_or_librdkafkas_default() -> None:
    assert producer_limit({"message.max.bytes": "5000000"}) == 5_000_000
    assert producer_limit({}) == 1_000_000


def test_row_key_text_takes_key_columns_from_the_right_tuple() -> None:
    relation = Relation(xid=None, rel_id=1, namespace="public", name="docs", replica_identity="d",
                        columns=(Column(True, "id", 23, -1), Column(False, "body", 25, -1)))
    insert = RowChange("c", relation, Lsn(1), None, None, TupleData(b"tt", (b"7", b"x" * 10)))
    delete = RowChange("d", relation, Lsn(1), "K", TupleData(b"tn", (b"8", None)), None)
    assert row_key_text(insert) == "{id=7}"
    assert row_key_text(delete) == "{id=8}"
    keyless = Relation(xid=None, rel_id=2, namespace="public", name="log", replica_identity="f",
                       columns=(Column(False, "line", 25, -1),))
    assert row_key_text(RowChange("c", keyless, Lsn(1), None, None, TupleData(b"t", (b"a",)))) == "(no key columns)"


def _produce(publisher: KafkaPublisher, unit: Unit, records: Sequence[tuple[str, bytes | None, bytes | None]]) -> int:
    """One change's records through the unit's row producer, as the dispatcher sends them."""
    return publisher.row_producer(publisher.callback_for(unit), unit, _idle)(records, lambda topic: ORIGIN)


def test_stop_refused_at_produce_raises_the_clear_error_and_confirms_nothing(
        stop: tuple[KafkaPublisher, FakeProducer], tracker: AckTracker, metrics: Metrics) -> None:
    publisher, fake = stop
    unit = tracker.open_unit()
    with pytest.raises(PublishError, match=r"table public.docs key \{id=7\}.* is 20,004 bytes") as raised:
        _produce(publisher, unit, [("app.public.docs", b"kkkk", b"v" * 20_000)])
    assert raised.value.hint is not None and "max.message.bytes" in raised.value.hint
    assert unit.pending == 1 and not fake.queued  # never delivered: the unit can never complete
    assert _counted(metrics, "public.docs") == 1
    with pytest.raises(PublishError):
        publisher.raise_if_failed()


def test_dead_letter_refused_at_produce_goes_on_and_completes_on_the_letters_ack(
        dead_letter: tuple[KafkaPublisher, FakeProducer], tracker: AckTracker, metrics: Metrics,
        completed: Completed) -> None:
    publisher, fake = dead_letter
    unit = tracker.open_unit()
    records = [("app.public.docs", b"k1", b"v" * 20_000), ("app.public.docs", b"k2", b"small")]
    _produce(publisher, unit, records)
    assert [(topic, key) for topic, key, _value, _cb in fake.queued] == [
        ("app._dead_letter", b"k1"), ("app.public.docs", b"k2")]
    letter = json.loads(fake.queued[0][2] or b"")
    assert (letter["table"], letter["commit_lsn"], letter["total_order"], letter["refused_by"]) == (
        "public.docs", "0/16B3748", 3, "producer")
    tracker.seal(unit, Lsn(0x100))
    for _topic, _key, _value, callback in fake.queued:
        assert not completed.units
        callback(None, delivered_message())
    assert completed.units == [unit] and unit.durable
    assert _counted(metrics, "public.docs") == 1
    publisher.raise_if_failed()


def test_stop_refused_by_the_broker_fails_the_unit_with_the_clear_error(
        stop: tuple[KafkaPublisher, FakeProducer], tracker: AckTracker, metrics: Metrics) -> None:
    publisher, fake = stop
    unit = tracker.open_unit()
    _produce(publisher, unit, [("app.public.docs", b"k", b"v" * 9_000)])
    tracker.seal(unit, Lsn(0x100))
    fake.queued[0][3](KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "Broker: Message size too large"), delivered_message())
    assert unit.failed
    with pytest.raises(PublishError, match=r"table public.docs key \{id=7\} \(commit 0/16B3748, event 3\)"
                                           r" is 9,001 bytes .*max.message.bytes of 1,048,588 \(refused by the broker\)"):
        publisher.raise_if_failed()
    assert _counted(metrics, "public.docs") == 1


def test_dead_letter_refused_by_the_broker_is_produced_at_the_next_poll(
        dead_letter: tuple[KafkaPublisher, FakeProducer], tracker: AckTracker, metrics: Metrics,
        completed: Completed) -> None:
    publisher, fake = dead_letter
    unit = tracker.open_unit()
    _produce(publisher, unit, [("app.public.docs", b"k", b"v" * 9_000)])
    tracker.seal(unit, Lsn(0x100))
    fake.queued.pop()[3](KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "Broker: Message size too large"), delivered_message())
    assert not unit.failed and unit.pending == 1 and not fake.queued  # not from inside the callback
    publisher.poll(0)
    (topic, key, value, callback), = fake.queued
    assert (topic, key, json.loads(value or b"")["refused_by"]) == ("app._dead_letter", b"k", "broker")
    callback(None, delivered_message())
    assert completed.units == [unit]
    assert _counted(metrics, "public.docs") == 1
    publisher.raise_if_failed()


def test_a_small_record_refused_by_the_broker_is_named_by_topic_and_key_bytes(
        stop: tuple[KafkaPublisher, FakeProducer], tracker: AckTracker) -> None:
    publisher, _fake = stop
    unit = tracker.open_unit()
    tracker.add_record(unit)
    publisher.callback_for(unit)(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), delivered_message())
    with pytest.raises(PublishError, match="record too large for Kafka"):
        publisher.raise_if_failed()
