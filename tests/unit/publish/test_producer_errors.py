"""How Kafka's errors become pgbridge's: transient (the session restarts from the confirmed LSN),
fatal (the process stops), fenced (another replica took over). No broker: the publisher's producer
points at a closed port and is never polled, and delivery reports are handed to its callbacks."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException

from pgbridge.ack.tracker import AckTracker, Unit
from pgbridge.config import KafkaConfig
from pgbridge.errors import BrokerUnavailable, FatalError, PgbridgeError, PublishError, TransientError
from pgbridge.lsn import Lsn
from pgbridge.metrics import KAFKA_DELIVERY_ERRORS_TOTAL, Metrics
from pgbridge.publish.producer import KafkaPublisher, delivery_problem
from pgbridge.publish.transactions import FENCED_CODES, Fenced, classify, serve_callbacks
from tests.support.kafka import delivered_message
from tests.support.ports import free_port

# Codes a retry or a new session may fix: the broker is away, slow, or electing a leader.
TRANSIENT_DELIVERY_CODES = [KafkaError._MSG_TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN,
                            KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.NOT_LEADER_FOR_PARTITION,
                            KafkaError.REQUEST_TIMED_OUT, KafkaError.UNKNOWN_TOPIC_OR_PART]
# Codes no retry fixes: the operator must change an ACL. (MSG_SIZE_TOO_LARGE has its own error
# naming the record and the limits, and a policy: tests/unit/publish/test_oversize.py.)
FATAL_DELIVERY_CODES = [KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED,
                        KafkaError.SASL_AUTHENTICATION_FAILED]
FENCED_DELIVERY_CODES = [KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH]


class Completed:
    """The publisher's completion hook: records the units it is told are durable."""

    def __init__(self) -> None:
        self.units: list[Unit] = []

    def __call__(self, units: list[Unit]) -> None:
        self.units.extend(units)


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
def publisher(metrics: Metrics, tracker: AckTracker, completed: Completed) -> Iterator[KafkaPublisher]:
    config = KafkaConfig(bootstrap_servers=f"127.0.0.1:{free_port()}", topic_prefix="app")
    publisher = KafkaPublisher(config, tracker, metrics, completed)
    yield publisher
    publisher.close()


def _deliver(publisher: KafkaPublisher, tracker: AckTracker, error: KafkaError | None) -> Unit:
    """One unit of one record, sealed, whose delivery report carries ``error``."""
    unit = tracker.open_unit()
    tracker.add_record(unit)
    tracker.seal(unit, Lsn(100))
    publisher.callback_for(unit)(error, delivered_message("app.public.t", b"k", b"v"))
    return unit


def _raised(publisher: KafkaPublisher) -> PgbridgeError:
    with pytest.raises(PgbridgeError) as raised:
        publisher.raise_if_failed()
    return raised.value


def _delivery_errors(metrics: Metrics) -> float:
    value = metrics.registry.get_sample_value(KAFKA_DELIVERY_ERRORS_TOTAL)
    assert value is not None
    return value


# --- delivery reports --------------------------------------------------------------------------------


def test_a_delivered_record_completes_its_unit_and_marks_kafka_reachable(
        publisher: KafkaPublisher, tracker: AckTracker, completed: Completed, metrics: Metrics) -> None:
    publisher.kafka_ok = False
    unit = _deliver(publisher, tracker, None)
    assert completed.units == [unit]
    assert publisher.kafka_ok
    publisher.raise_if_failed()
    assert _delivery_errors(metrics) == 0


def test_a_delivery_report_without_an_offset_fails_its_unit_and_the_session(
        publisher: KafkaPublisher, tracker: AckTracker, completed: Completed, metrics: Metrics) -> None:
    """librdkafka's "implicitly acked" record: no error, no offset, maybe never written. The unit
    must not complete (its LSN is never confirmed) and the session restarts from the confirmed LSN."""
    unit = tracker.open_unit()
    tracker.add_record(unit)
    tracker.seal(unit, Lsn(100))
    publisher.callback_for(unit)(None, delivered_message("app.schema_changes", b"k", b"v", offset=None))
    assert completed.units == []
    raised = _raised(publisher)
    assert isinstance(raised, BrokerUnavailable) and isinstance(raised, TransientError)
    assert "app.schema_changes [0] delivered without an offset" in str(raised)
    assert _delivery_errors(metrics) == 1


def test_delivery_problem_names_an_error_or_a_missing_offset_and_nothing_else() -> None:
    assert delivery_problem(None, delivered_message("t", offset=7)) is None
    assert delivery_problem(KafkaError(KafkaError._MSG_TIMED_OUT), delivered_message("t")) == "Local: Message timed out"
    problem = delivery_problem(None, delivered_message("t", offset=None))
    assert problem is not None and "without an offset" in problem


@pytest.mark.parametrize("code", TRANSIENT_DELIVERY_CODES)
def test_a_delivery_the_broker_may_take_later_is_transient(
        publisher: KafkaPublisher, tracker: AckTracker, completed: Completed, code: int) -> None:
    _deliver(publisher, tracker, KafkaError(code))
    error = _raised(publisher)
    assert isinstance(error, BrokerUnavailable) and isinstance(error, TransientError)
    assert str(error).startswith("Kafka delivery failed:")
    assert completed.units == []  # nothing after a failed record is ever confirmed
    assert not tracker.is_drained()


@pytest.mark.parametrize("code", FATAL_DELIVERY_CODES)
def test_a_record_kafka_refuses_for_good_is_fatal_with_a_hint(
        publisher: KafkaPublisher, tracker: AckTracker, code: int) -> None:
    _deliver(publisher, tracker, KafkaError(code))
    error = _raised(publisher)
    assert isinstance(error, PublishError) and isinstance(error, FatalError)
    assert str(error).startswith("Kafka rejected a record:")
    assert error.hint is not None and "ACLs" in error.hint and "message.max.bytes" in error.hint


@pytest.mark.parametrize("code", FENCED_DELIVERY_CODES)
def test_a_fenced_delivery_stops_this_replica(publisher: KafkaPublisher, tracker: AckTracker, code: int) -> None:
    _deliver(publisher, tracker, KafkaError(code))
    error = _raised(publisher)
    assert isinstance(error, Fenced)
    assert "another pgbridge with the same transactional.id took over" in str(error)


def test_the_first_delivery_failure_is_the_one_reported_and_every_failure_is_counted(
        publisher: KafkaPublisher, tracker: AckTracker, metrics: Metrics) -> None:
    _deliver(publisher, tracker, KafkaError(KafkaError._MSG_TIMED_OUT))
    _deliver(publisher, tracker, KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    _deliver(publisher, tracker, KafkaError(KafkaError.PRODUCER_FENCED))
    assert isinstance(_raised(publisher), BrokerUnavailable)
    assert _delivery_errors(metrics) == 3


# --- client-level errors (librdkafka's error_cb) -------------------------------------------------------


@pytest.mark.parametrize("code", [KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT])
def test_unreachable_brokers_make_the_publisher_not_ready_without_failing_it(
        publisher: KafkaPublisher, code: int) -> None:
    publisher._on_client_error(KafkaError(code))
    assert not publisher.kafka_ok
    publisher.raise_if_failed()


def test_a_non_fatal_client_error_changes_nothing(publisher: KafkaPublisher) -> None:
    publisher._on_client_error(KafkaError(KafkaError._RESOLVE))
    assert publisher.kafka_ok
    publisher.raise_if_failed()


def test_a_fatal_client_error_fails_the_session_transiently(publisher: KafkaPublisher) -> None:
    publisher._on_client_error(KafkaError(KafkaError._GAPLESS_GUARANTEE, fatal=True))
    error = _raised(publisher)
    assert isinstance(error, BrokerUnavailable)
    assert str(error).startswith("Kafka producer fatal error:")


def test_fenced_outranks_an_earlier_fatal_client_error(publisher: KafkaPublisher) -> None:
    publisher._on_client_error(KafkaError(KafkaError._GAPLESS_GUARANTEE, fatal=True))
    publisher._on_client_error(KafkaError(KafkaError._FENCED, fatal=True))
    assert isinstance(_raised(publisher), Fenced)
    publisher._on_client_error(KafkaError(KafkaError._GAPLESS_GUARANTEE, fatal=True))
    assert isinstance(_raised(publisher), Fenced)  # and stays


# --- refused produce() calls and transaction calls: classify -------------------------------------------


def test_a_refused_produce_is_classified_and_a_fenced_one_wins(publisher: KafkaPublisher) -> None:
    first = publisher._refused(KafkaException(KafkaError(KafkaError._STATE)))
    assert isinstance(first, BrokerUnavailable)
    assert _raised(publisher) is first
    fenced = publisher._refused(KafkaException(KafkaError(KafkaError._FENCED, fatal=True)))
    assert isinstance(fenced, Fenced) and _raised(publisher) is fenced
    publisher._refused(KafkaException(KafkaError(KafkaError._STATE)))
    assert _raised(publisher) is fenced


class FatalOnServe:
    """A producer as confluent-kafka leaves it once librdkafka hit a fatal error: ``poll`` and
    ``flush`` raise that error (it never reaches the error callback), one record stays queued."""

    def __init__(self, error: KafkaError) -> None:
        self.error = error

    def poll(self, timeout: float = 0.0) -> int:
        raise KafkaException(self.error)

    def flush(self, timeout: float = 0.0) -> int:
        raise KafkaException(self.error)

    def __len__(self) -> int:
        return 1


def test_a_fatal_error_poll_and_flush_raise_is_the_publishers_failure(
        publisher: KafkaPublisher, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fenced while frozen, a resumed leader's poll raised librdkafka's fatal error itself
    (``KafkaException: KafkaError{FATAL,code=_FENCED,...}``) and the process ended naming it; it
    is the publisher's ``Fenced`` failure, whichever call serves the callbacks."""
    fenced = KafkaError(KafkaError._FENCED, "ProduceRequest failed: Broker: Producer attempted an operation "
                        "with an old epoch", fatal=True)
    monkeypatch.setattr(publisher, "_producer", FatalOnServe(fenced))
    with pytest.raises(Fenced, match=r"same transactional\.id took over") as polled:
        publisher.poll(0.1)
    assert _raised(publisher) is polled.value
    with pytest.raises(Fenced):
        publisher.flush(0.1)


def test_serve_callbacks_raises_what_the_caller_makes_of_a_raised_fatal_error() -> None:
    def fatal_poll(_timeout: float) -> int:
        raise KafkaException(KafkaError(KafkaError._FENCED, fatal=True))

    with pytest.raises(Fenced, match="polling failed"):
        serve_callbacks(fatal_poll, 0.1, lambda: None, lambda exc: classify(exc, "polling"))


@pytest.mark.parametrize("code", sorted(FENCED_CODES))
def test_classify_fenced_codes_as_fenced_with_the_cause_and_a_hint(code: int) -> None:
    error = classify(KafkaException(KafkaError(code, fatal=True)), "committing")
    assert isinstance(error, Fenced)
    assert str(error).startswith("committing failed: another pgbridge")
    assert error.hint is not None and "same slot and topic prefix" in error.hint


def test_classify_other_fatal_errors_as_fatal_pointing_at_the_broker_settings() -> None:
    error = classify(KafkaException(KafkaError(KafkaError._GAPLESS_GUARANTEE, fatal=True)), "committing")
    assert type(error) is FatalError
    assert error.hint is not None and "transaction.state.log" in error.hint


@pytest.mark.parametrize("error", [KafkaError(KafkaError._TIMED_OUT, retriable=True),
                                   KafkaError(KafkaError._STATE, txn_requires_abort=True),
                                   KafkaError(KafkaError.NOT_COORDINATOR)])
def test_classify_retriable_and_abortable_errors_as_transient(error: KafkaError) -> None:
    classified = classify(KafkaException(error), "beginning a transaction")
    assert isinstance(classified, BrokerUnavailable)
    assert str(classified).startswith("beginning a transaction failed:")


def test_classify_an_exception_without_a_kafka_error_as_transient() -> None:
    classified = classify(KafkaException("no KafkaError here"), "flushing")
    assert isinstance(classified, BrokerUnavailable)
    assert "no KafkaError here" in str(classified)
