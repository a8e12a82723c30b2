from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pgbridge.ack.feedback import FeedbackPolicy
from pgbridge.ack.tracker import AckTracker
from pgbridge.errors import InvariantError
from pgbridge.lsn import Lsn


def test_watermark_waits_for_every_record_of_a_transaction() -> None:
    tracker = AckTracker(Lsn(100))
    unit = tracker.open_unit()
    tracker.add_record(unit)
    tracker.add_record(unit)
    tracker.seal(unit, Lsn(200))
    tracker.delivered(unit)
    assert tracker.acked_lsn == 100
    done = tracker.delivered(unit)
    assert done == [unit]
    assert tracker.acked_lsn == 200


def test_later_transaction_acked_first_does_not_move_the_watermark() -> None:
    tracker = AckTracker()
    first, second = tracker.open_unit(), tracker.open_unit()
    tracker.add_record(first)
    tracker.seal(first, Lsn(10))
    tracker.add_record(second)
    tracker.seal(second, Lsn(20))
    tracker.delivered(second)
    assert tracker.acked_lsn == 0
    assert [u.end_lsn for u in tracker.delivered(first)] == [10, 20]
    assert tracker.acked_lsn == 20


def test_unsealed_transaction_blocks_even_when_all_its_records_are_acked() -> None:
    tracker = AckTracker()
    unit = tracker.open_unit()
    tracker.add_record(unit)
    tracker.delivered(unit)
    assert tracker.acked_lsn == 0
    tracker.seal(unit, Lsn(50))
    assert tracker.acked_lsn == 50


def test_failed_delivery_blocks_the_watermark_for_good() -> None:
    tracker = AckTracker()
    unit = tracker.open_unit()
    tracker.add_record(unit)
    tracker.add_record(unit)
    tracker.seal(unit, Lsn(10))
    tracker.failed(unit)
    tracker.delivered(unit)
    later = tracker.open_unit()
    tracker.seal(later, Lsn(20))
    assert tracker.acked_lsn == 0
    assert tracker.confirmable(unfinished_lsn=None, server_lsn=Lsn(999)) == 0


def test_confirmable_is_capped_by_unfinished_work_and_never_goes_backwards() -> None:
    tracker = AckTracker()
    unit = tracker.open_unit()
    tracker.seal(unit, Lsn(300))
    assert tracker.confirmable(unfinished_lsn=Lsn(250)) == 250
    assert tracker.confirmable(unfinished_lsn=Lsn(100)) == 250
    assert tracker.confirmable(unfinished_lsn=None) == 300


def test_server_position_is_confirmed_only_when_nothing_is_outstanding() -> None:
    tracker = AckTracker(Lsn(10))
    assert tracker.confirmable(unfinished_lsn=None, server_lsn=Lsn(500)) == 500
    unit = tracker.open_unit()
    tracker.add_record(unit)
    assert tracker.confirmable(unfinished_lsn=None, server_lsn=Lsn(900)) == 500
    assert tracker.confirmable(unfinished_lsn=Lsn(5), server_lsn=Lsn(900)) == 500


def test_standalone_units_without_an_lsn_do_not_move_the_watermark() -> None:
    tracker = AckTracker(Lsn(40))
    unit = tracker.open_unit()
    tracker.add_record(unit)
    tracker.seal(unit, None)
    tracker.delivered(unit)
    assert tracker.acked_lsn == 40
    assert tracker.is_drained()


def test_delivery_report_without_pending_records_is_an_invariant_error() -> None:
    tracker = AckTracker()
    unit = tracker.open_unit()
    with pytest.raises(InvariantError):
        tracker.delivered(unit)


@given(st.lists(st.integers(min_value=0, max_value=5), min_size=1, max_size=30), st.randoms())
def test_acked_lsn_is_always_the_end_of_the_longest_fully_acked_prefix(sizes: list[int], rnd: random.Random) -> None:
    tracker = AckTracker()
    units = []
    records = []
    for index, size in enumerate(sizes):
        unit = tracker.open_unit()
        for _ in range(size):
            tracker.add_record(unit)
            records.append(index)
        tracker.seal(unit, Lsn((index + 1) * 10))
        units.append(unit)
    rnd.shuffle(records)
    remaining = [0] * len(sizes)
    for index in records:
        remaining[index] += 1
    delivered = [0] * len(sizes)
    for index in records:
        tracker.delivered(units[index])
        delivered[index] += 1
        prefix = 0
        while prefix < len(sizes) and delivered[prefix] == remaining[prefix]:
            prefix += 1
        assert tracker.acked_lsn == prefix * 10
    assert tracker.acked_lsn == len(sizes) * 10
    assert tracker.in_flight == 0


def test_feedback_is_due_on_interval_request_and_progress() -> None:
    policy = FeedbackPolicy(interval_s=10.0, min_gap_s=0.5)
    assert policy.due(0.0, confirm_lsn=1)
    policy.sent(0.0, 1)
    assert not policy.due(0.1, confirm_lsn=1)
    assert policy.due(0.1, confirm_lsn=1, reply_requested=True)
    assert not policy.due(0.2, confirm_lsn=2)
    assert policy.due(0.6, confirm_lsn=2)
    policy.sent(0.6, 2)
    assert not policy.due(5.0, confirm_lsn=2)
    assert policy.due(10.7, confirm_lsn=2)
