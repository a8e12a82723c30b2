"""Exactly-once rules that need no broker: positions, what a restart skips, when to commit."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pgbridge.ack.tracker import AckTracker
from pgbridge.errors import BrokerUnavailable
from pgbridge.lsn import Lsn
from pgbridge.publish.transactions import (
    BatchPolicy,
    Fenced,
    KafkaTransactions,
    Position,
    ProduceInto,
    transactional_id,
)
from tests.support.transactions_double import TransactionalProducer


def test_a_whole_position_skips_every_transaction_committed_at_or_before_it() -> None:
    position = Position(Lsn(1000))
    assert position.skips_transaction(Lsn(999)) and position.skips_transaction(Lsn(1000))
    assert not position.skips_transaction(Lsn(1001))
    assert position.skips_through(Lsn(1000)) == 0


def test_a_partial_position_skips_only_the_committed_prefix_of_its_transaction() -> None:
    position = Position(Lsn(1000), total_order=250, complete=False)
    assert position.skips_transaction(Lsn(999))
    assert not position.skips_transaction(Lsn(1000))
    assert position.skips_through(Lsn(1000)) == 250
    assert position.skips_through(Lsn(1001)) == 0


def test_positions_round_trip_through_their_offsets_record() -> None:
    for position in (Position(Lsn(0x1_0000_0010), 7), Position(Lsn(5), 3, complete=False)):
        assert Position.from_json(position.to_json()) == position
    assert b'"commit_lsn_text":"1/10"' in Position(Lsn(0x1_0000_0010)).to_json()


def test_batches_commit_at_a_boundary_once_old_or_big_and_split_only_near_the_timeout() -> None:
    policy = BatchPolicy(max_age_s=0.1, max_bytes=1000, split_after_s=300)
    assert not policy.at_boundary(age_s=0.05, nbytes=10)
    assert policy.at_boundary(age_s=0.1, nbytes=10)
    assert policy.at_boundary(age_s=0.0, nbytes=1000)
    assert not policy.mid_transaction(age_s=299)
    assert policy.mid_transaction(age_s=300)


def test_the_transactional_id_is_stable_for_a_slot_and_prefix() -> None:
    assert transactional_id("pgbridge", "orders") == "pgbridge-pgbridge-orders"
    assert transactional_id("a", "s") != transactional_id("b", "s")


def _transactions(producer: TransactionalProducer, *, max_bytes: int = 1000,
                  clock: list[float] | None = None,
                  raise_if_failed: Callable[[], None] = lambda: None) -> KafkaTransactions:
    now = clock if clock is not None else [0.0]
    return KafkaTransactions(producer, AckTracker(), offsets_topic="p._offsets",  # type: ignore[arg-type]
                             slot="s", policy=BatchPolicy(max_age_s=0.5, max_bytes=max_bytes, split_after_s=300),
                             raise_if_failed=raise_if_failed, clock=lambda: now[0])


def test_before_commit_hooks_produce_into_the_transaction_they_commit_with() -> None:
    producer = TransactionalProducer()
    transactions = _transactions(producer)
    calls: list[int] = []

    def hook(produce: ProduceInto) -> None:
        calls.append(len(calls))
        produce("p._snapshot", b"k", b"progress")

    unregister = transactions.before_commit(hook)
    transactions.commit()  # nothing open: no transaction, no hook
    assert calls == [] and producer.committed == []
    transactions.ensure_open()
    producer.produce("p.t", b"row", b"1")
    transactions.boundary(Position(Lsn(10)))
    transactions.commit()
    assert producer.committed == [[("p.t", b"1", b"row"), ("p._snapshot", b"k", b"progress"),
                                   ("p._offsets", b"s", Position(Lsn(10)).to_json())]]
    unregister()
    transactions.ensure_open()
    transactions.commit()
    assert calls == [0] and producer.committed[1] == []


def test_a_transaction_is_due_once_old_or_big_enough() -> None:
    clock = [0.0]
    transactions = _transactions(TransactionalProducer(), clock=clock)
    assert not transactions.due()  # none open
    transactions.ensure_open()
    assert not transactions.due()
    transactions.wrote(1, 999)
    assert not transactions.due()
    transactions.wrote(1, 1)
    assert transactions.due()
    transactions.commit()
    transactions.ensure_open()
    clock[0] = 0.5
    assert transactions.due()


def test_a_delivery_failed_before_the_commit_leaves_the_transaction_open_to_be_aborted() -> None:
    """commit_transaction commits whatever librdkafka counts as delivered; a report pgbridge fails
    (no offset: publish/producer.py ``unproven``) must stop the commit, so the transaction is
    aborted and read again from the slot instead of committed without the record."""
    failure: list[BrokerUnavailable] = []

    def raise_if_failed() -> None:
        if failure:
            raise failure[0]

    producer = TransactionalProducer()
    transactions = _transactions(producer, raise_if_failed=raise_if_failed)
    transactions.ensure_open()
    producer.produce("p.schema_changes", b"column_renamed", b"k")
    transactions.boundary(Position(Lsn(10)))
    failure.append(BrokerUnavailable("delivered without an offset"))
    with pytest.raises(BrokerUnavailable, match="without an offset"):
        transactions.commit()
    assert producer.committed == [] and transactions.is_open
    transactions.abort()
    assert producer.open is None and producer.committed == []


def test_records_still_unacknowledged_when_the_commit_is_due_stop_it() -> None:
    producer = TransactionalProducer()
    producer.outstanding = 2
    transactions = _transactions(producer)
    transactions.ensure_open()
    with pytest.raises(BrokerUnavailable, match="not acknowledged"):
        transactions.commit()
    assert producer.committed == [] and transactions.is_open


def test_a_flush_that_loses_the_callbacks_error_reports_the_failure_they_recorded() -> None:
    """Fenced mid-transaction, confluent-kafka's flush once ended in a SystemError naming nothing;
    the commit raises what the callbacks recorded (another pgbridge took over), and a SystemError
    with nothing recorded stays what it is."""
    recorded: list[Fenced] = []

    def raise_if_failed() -> None:
        if recorded:
            raise recorded[0]

    producer = TransactionalProducer()
    producer.flush_loses_the_error = True
    transactions = _transactions(producer, raise_if_failed=raise_if_failed)
    transactions.ensure_open()
    with pytest.raises(SystemError, match="without setting an exception"):
        transactions.commit()
    recorded.append(Fenced("Kafka fenced this producer: another pgbridge with the same transactional.id took over"))
    with pytest.raises(Fenced, match=r"same transactional\.id took over"):
        transactions.commit()
    assert producer.committed == [] and transactions.is_open
