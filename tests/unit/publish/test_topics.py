"""Topic names (the contract's ``{prefix}.{schema}.{table}`` and the internal ``{prefix}._*`` topics)
and ``TopicManager``'s create-once rules, against a fake admin client (no broker)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from pgbridge.errors import BrokerUnavailable, PublishError, StopRequested
from pgbridge.publish.topics import (
    ATTEMPT_S,
    MAX_TOPIC_LENGTH,
    TopicManager,
    messages_topic,
    offsets_topic,
    sanitize,
    schemas_topic,
    table_topic,
    topic_name,
    transactions_topic,
)
from pgbridge.snapshot.progress import progress_topic

# --- names ----------------------------------------------------------------------------------------


def test_characters_kafka_refuses_become_underscores_and_the_legal_ones_stay() -> None:
    assert sanitize("app.public.orders") == "app.public.orders"
    assert sanitize("A-z_0.9") == "A-z_0.9"
    assert sanitize("my app.Öffentlich.order items$2") == "my_app._ffentlich.order_items_2"
    assert sanitize("a/b\\c:d") == "a_b_c_d"


def test_a_table_topic_is_prefix_schema_table() -> None:
    assert table_topic("app", "public", "orders") == "app.public.orders"
    assert table_topic("app", "sales data", "q1/q2") == "app.sales_data.q1_q2"


def test_a_table_topic_joins_its_parts_as_topic_name_does() -> None:
    for schema, table in [("public", "t"), ("Sales", "Order Items"), ("ünï", "cödé"), ("a.b", "c-d_e")]:
        assert table_topic("pfx", schema, table) == topic_name("pfx", schema, table)


def test_internal_topics_are_prefix_underscore_and_never_a_table_topic() -> None:
    internal = {
        "messages": messages_topic("app"),
        "transactions": transactions_topic("app"),
        "schemas": schemas_topic("app"),
        "offsets": offsets_topic("app"),
        "snapshot": progress_topic("app"),
    }
    assert internal == {"messages": "app.messages", "transactions": "app.transactions",
                        "schemas": "app._schemas", "offsets": "app._offsets", "snapshot": "app._snapshot"}
    # a table topic always has three dot-separated parts after sanitising; these have two
    for name in internal.values():
        assert name.count(".") == 1
    assert table_topic("app", "_schemas", "x") != schemas_topic("app")


def test_internal_topic_names_sanitise_the_prefix() -> None:
    assert schemas_topic("my app") == "my_app._schemas"
    assert offsets_topic("a/b") == "a_b._offsets"


def test_a_topic_name_up_to_kafkas_limit_is_accepted_and_a_longer_one_refused() -> None:
    assert MAX_TOPIC_LENGTH == 249
    prefix = "p" * (MAX_TOPIC_LENGTH - len(".s.t"))
    assert len(topic_name(prefix, "s", "t")) == MAX_TOPIC_LENGTH
    with pytest.raises(PublishError, match="longer than Kafka's 249 characters") as refused:
        topic_name(prefix + "p", "s", "t")
    assert refused.value.hint is not None and "topic_prefix" in refused.value.hint


def test_the_length_limit_counts_the_sanitised_name() -> None:
    # sanitising maps one character to one: a multi-byte character counts once
    name = topic_name("ü" * (MAX_TOPIC_LENGTH - 4), "s", "t")
    assert len(name) == MAX_TOPIC_LENGTH and set(name[:-4]) == {"_"}


# --- TopicManager -----------------------------------------------------------------------------------


@dataclass
class _TopicMetadata:
    error: KafkaError | None = None


@dataclass
class _ClusterMetadata:
    topics: dict[str, _TopicMetadata]
    brokers: dict[int, object] = field(default_factory=dict)


@dataclass
class FakeAdmin:
    """The three AdminClient calls TopicManager makes; create outcomes by topic (default: created)."""

    existing: set[str] = field(default_factory=set)
    broken: set[str] = field(default_factory=set)  # listed with a per-topic error
    create_errors: dict[str, BaseException] = field(default_factory=dict)
    list_error: KafkaException | None = None
    list_errors_before: int = 0  # list_error only for the first this many listings (0: always)
    on_list: Any = None  # called with the listing's number and timeout before it answers
    pending: set[str] = field(default_factory=set)  # their creation never completes
    listings: int = 0
    brokers: int = 3
    created: list[tuple[str, int, int, dict[str, str]]] = field(default_factory=list)
    polls: int = 0

    def list_topics(self, timeout: float) -> _ClusterMetadata:
        self.listings += 1
        if self.on_list is not None:
            self.on_list(self.listings, timeout)
        if self.list_error is not None and (not self.list_errors_before or self.listings <= self.list_errors_before):
            raise self.list_error
        topics = {name: _TopicMetadata() for name in self.existing}
        topics.update({name: _TopicMetadata(KafkaError(KafkaError.LEADER_NOT_AVAILABLE)) for name in self.broken})
        return _ClusterMetadata(topics, {n: object() for n in range(self.brokers)})

    def create_topics(self, new_topics: list[Any], operation_timeout: float,
                      request_timeout: float) -> dict[str, Future[None]]:
        futures: dict[str, Future[None]] = {}
        for new in new_topics:
            self.created.append((new.topic, new.num_partitions, new.replication_factor, dict(new.config)))
            future: Future[None] = Future()
            error = self.create_errors.get(new.topic)
            if new.topic in self.pending:
                pass
            elif error is None:
                future.set_result(None)
            else:
                future.set_exception(error)
            futures[new.topic] = future
        return futures

    def poll(self, timeout: float) -> int:
        self.polls += 1
        return 0


def _manager(admin: FakeAdmin) -> TopicManager:
    # TopicManager is typed against confluent-kafka's AdminClient; the fake has the calls it makes
    return TopicManager(cast(AdminClient, admin), partitions=6, replication_factor=3, timeout_s=1.0)


def _kafka_failure(code: int) -> KafkaException:
    return KafkaException(KafkaError(code))


def test_an_existing_topic_is_used_as_it_is_and_the_metadata_asked_once_per_session() -> None:
    admin = FakeAdmin(existing={"app.public.a", "app.public.b"})
    manager = _manager(admin)
    manager.ensure("app.public.a")
    manager.ensure("app.public.b")
    manager.ensure("app.public.a")
    assert admin.created == []
    assert admin.listings == 1
    assert admin.polls >= 2  # queued log lines are served on every ensure that asks anything


def test_a_missing_topic_is_created_once_with_the_configured_shape() -> None:
    admin = FakeAdmin()
    manager = _manager(admin)
    manager.ensure("app.public.t")
    manager.ensure("app.public.t")
    assert admin.created == [("app.public.t", 6, 3, {"min.insync.replicas": "2"})]


def test_a_compacted_internal_topic_has_one_partition() -> None:
    admin = FakeAdmin()
    _manager(admin).ensure("app._offsets", compacted=True)
    assert admin.created == [("app._offsets", 1, 3, {"cleanup.policy": "compact", "min.insync.replicas": "2"})]


def _shaped(admin: FakeAdmin, replication_factor: int | None, min_insync: int | None = None) -> TopicManager:
    return TopicManager(cast(AdminClient, admin), partitions=2, replication_factor=replication_factor,
                        min_insync_replicas=min_insync, internal_prefix="app._",
                        topic_config={"retention.ms": "3600000", "cleanup.policy": "delete"}, timeout_s=1.0)


def test_by_default_a_single_broker_gets_one_copy_and_a_warning_naming_topic_size_and_setting(
        caplog: pytest.LogCaptureFixture) -> None:
    admin = FakeAdmin(brokers=1)
    with caplog.at_level("WARNING", logger="pgbridge.publish.topics"):
        _shaped(admin, None).ensure("app.public.t")
    assert admin.created == [("app.public.t", 2, 1, {"retention.ms": "3600000", "cleanup.policy": "delete",
                                                     "min.insync.replicas": "1"})]
    [warning] = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "app.public.t" in warning and "replication factor 1" in warning and "1 broker(s)" in warning
    assert "kafka.topic_replication_factor" in warning


def test_by_default_a_large_cluster_gets_three_copies_and_two_in_sync(caplog: pytest.LogCaptureFixture) -> None:
    admin = FakeAdmin(brokers=5)
    with caplog.at_level("WARNING", logger="pgbridge.publish.topics"):
        _shaped(admin, None).ensure("app.public.t")
    assert admin.created[0][2] == 3 and admin.created[0][3]["min.insync.replicas"] == "2"
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def test_two_brokers_give_two_copies_and_one_in_sync() -> None:
    admin = FakeAdmin(brokers=2)
    _shaped(admin, None).ensure("app.public.t")
    assert admin.created[0][2] == 2 and admin.created[0][3]["min.insync.replicas"] == "1"


def test_internal_topics_keep_their_own_configs_without_the_data_topic_configs() -> None:
    admin = FakeAdmin(brokers=3)
    manager = _shaped(admin, None)
    manager.ensure("app._snapshot", compacted=True)
    manager.ensure("app._dead_letter")
    assert admin.created == [("app._snapshot", 1, 3, {"cleanup.policy": "compact", "min.insync.replicas": "2"}),
                             ("app._dead_letter", 2, 3, {"min.insync.replicas": "2"})]


def test_explicit_settings_win_and_minus_one_leaves_both_to_the_broker() -> None:
    admin = FakeAdmin(brokers=1)
    _shaped(admin, 3, 3).ensure("app.public.a")  # the broker refuses what it cannot hold, not pgbridge
    _shaped(admin, -1).ensure("app.public.b")
    _shaped(admin, -1, 2).ensure("app.public.c")
    assert [(rf, config.get("min.insync.replicas")) for _, _, rf, config in admin.created] == [
        (3, "3"), (-1, None), (-1, "2")]


def test_a_topic_listed_with_an_error_is_created_not_trusted() -> None:
    admin = FakeAdmin(broken={"app.public.t"})
    _manager(admin).ensure("app.public.t")
    assert [name for name, *_ in admin.created] == ["app.public.t"]


def test_a_topic_created_meanwhile_by_someone_else_is_fine() -> None:
    admin = FakeAdmin(create_errors={"app.public.t": _kafka_failure(KafkaError.TOPIC_ALREADY_EXISTS)})
    manager = _manager(admin)
    manager.ensure("app.public.t")
    manager.ensure("app.public.t")
    assert len(admin.created) == 1


@pytest.mark.parametrize("code", [KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED,
                                  KafkaError.TOPIC_EXCEPTION, KafkaError.POLICY_VIOLATION])
def test_a_refused_creation_is_fatal_and_says_what_to_do(code: int) -> None:
    admin = FakeAdmin(create_errors={"app.public.t": _kafka_failure(code)})
    with pytest.raises(PublishError, match=r"cannot create topic app\.public\.t") as refused:
        _manager(admin).ensure("app.public.t")
    assert refused.value.hint is not None and "grant CREATE" in refused.value.hint


@pytest.mark.parametrize("failure", [_kafka_failure(KafkaError.REQUEST_TIMED_OUT),
                                     _kafka_failure(KafkaError._TRANSPORT), TimeoutError("admin future")])
def test_a_creation_that_may_succeed_later_is_transient_and_retried_next_time(failure: BaseException) -> None:
    admin = FakeAdmin(create_errors={"app.public.t": failure})
    manager = _manager(admin)
    with pytest.raises(BrokerUnavailable, match=r"cannot create topic app\.public\.t"):
        manager.ensure("app.public.t")
    del admin.create_errors["app.public.t"]
    manager.ensure("app.public.t")  # not remembered as known: asked again
    assert len(admin.created) == 2


def test_unlistable_metadata_is_transient() -> None:
    admin = FakeAdmin(list_error=_kafka_failure(KafkaError._ALL_BROKERS_DOWN))
    with pytest.raises(BrokerUnavailable, match="cannot list Kafka's topics"):
        _manager(admin).ensure("app.public.t")
    assert admin.created == []


def _stopping(stop: threading.Event, after: int) -> Any:
    """An ``on_list`` that sets ``stop`` during listing number ``after`` (a signal arriving then)."""
    def on_list(number: int, _timeout: float) -> None:
        if number == after:
            stop.set()
    return on_list


def test_a_stop_ends_the_wait_for_an_unreachable_broker_at_the_end_of_the_attempt() -> None:
    # given: no broker comes up (librdkafka's _TRANSPORT after each attempt); the stop arrives in the third
    stop = threading.Event()
    admin = FakeAdmin(list_error=_kafka_failure(KafkaError._TRANSPORT), on_list=_stopping(stop, 3))
    manager = TopicManager(cast(AdminClient, admin), partitions=1, replication_factor=1, timeout_s=30.0, stop=stop)
    # when / then: no fourth attempt, and no 30 s wait
    with pytest.raises(StopRequested, match="listing Kafka's topics"):
        manager.ensure("app.public.t")
    assert admin.listings == 3 and admin.created == []


def test_each_attempt_is_short_and_a_late_answer_gets_longer_ones() -> None:
    timeouts: list[float] = []
    admin = FakeAdmin(list_error=_kafka_failure(KafkaError._TIMED_OUT), list_errors_before=3,
                      on_list=lambda _n, timeout: timeouts.append(timeout))
    TopicManager(cast(AdminClient, admin), partitions=1, replication_factor=1, timeout_s=30.0).ensure("app.public.t")
    assert [round(t) for t in timeouts] == [ATTEMPT_S, 2 * ATTEMPT_S, 4 * ATTEMPT_S, 8 * ATTEMPT_S]
    assert admin.created and admin.created[0][0] == "app.public.t"


def test_a_broker_unreachable_until_the_timeout_is_still_the_same_transient_error() -> None:
    admin = FakeAdmin(list_error=_kafka_failure(KafkaError._TRANSPORT))
    began = time.monotonic()
    with pytest.raises(BrokerUnavailable, match=r"cannot list Kafka's topics: .*_TRANSPORT"):
        TopicManager(cast(AdminClient, admin), partitions=1, replication_factor=1, timeout_s=0.5,
                     stop=threading.Event()).ensure("app.public.t")
    assert 0.5 <= time.monotonic() - began < 5
    assert 2 <= admin.listings <= 6  # attempts at least 0.1 s apart, never a busy loop


def test_what_librdkafka_logged_during_an_attempt_is_served_before_the_next_one() -> None:
    # given: the admin client's lines are queued until polled; no broker answers the first three attempts
    polls_before: list[int] = []
    admin = FakeAdmin(list_error=_kafka_failure(KafkaError._TRANSPORT), list_errors_before=3)
    admin.on_list = lambda _n, _timeout: polls_before.append(admin.polls)
    # when
    TopicManager(cast(AdminClient, admin), partitions=1, replication_factor=1, timeout_s=30.0).ensure("app.public.t")
    # then: a poll after each failed attempt, so a refused connection is logged within an attempt
    assert polls_before == [0, 1, 2, 3]


def test_a_stop_ends_the_wait_for_a_topic_creation() -> None:
    stop = threading.Event()
    admin = FakeAdmin(pending={"app.public.t"})
    manager = TopicManager(cast(AdminClient, admin), partitions=1, replication_factor=1, timeout_s=30.0, stop=stop)
    timer = threading.Timer(0.3, stop.set)
    timer.start()
    began = time.monotonic()
    try:
        with pytest.raises(StopRequested, match=r"creating topic app\.public\.t"):
            manager.ensure("app.public.t")
    finally:
        timer.cancel()
    assert time.monotonic() - began < ATTEMPT_S + 1
