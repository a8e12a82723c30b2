"""Streamed (in-progress) transactions: buffered per top-level xid until Stream Commit."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pgbridge.assemble.transaction import TransactionAssembler
from pgbridge.assemble.units import RowChange, StandaloneMessage, TxBegin, TxEnd, TxOrigin
from pgbridge.decode.messages import LogicalMessage, Origin
from pgbridge.errors import FatalError, InvariantError
from pgbridge.lsn import Lsn
from tests.unit.assemble.scenario import (
    ITEMS,
    TINY_BUDGET,
    Wal,
    begin,
    commit,
    first_value,
    insert,
    relation,
    stream_abort,
    stream_commit,
    stream_start,
    stream_stop,
    transactions,
)


def test_streamed_transaction_is_published_only_at_stream_commit(any_wal: Wal) -> None:
    wal = any_wal
    out = wal.feed_at(stream_start(100, first=True), 0x2000)
    out += wal.feed(insert("a", xid=100), insert("b", xid=100), stream_stop())
    out += wal.feed(stream_start(100), insert("c", xid=100), stream_stop())
    assert out == []

    events = wal.feed(stream_commit(100, 0x9000, ts=77))

    assert events[0] == TxBegin(xid=100, first_lsn=Lsn(0x2000), commit_lsn=Lsn(0x9000), commit_ts=77)
    assert events[-1] == TxEnd(xid=100, commit_lsn=Lsn(0x9000), end_lsn=Lsn(0x9008), commit_ts=77)
    assert transactions(events) == [(100, ["a", "b", "c"])]


def test_interleaved_streamed_transactions_come_out_whole_in_commit_order(any_wal: Wal) -> None:
    wal = any_wal
    # given: blocks of 100 and 200 interleave, with a plain transaction committing in between
    out = wal.feed(stream_start(100, first=True), insert("100-1", xid=100), stream_stop(),
                   stream_start(200, first=True), insert("200-1", xid=200), stream_stop())
    out += wal.feed(begin(300, 0x5000), insert("300-1"), commit(0x5000))
    out += wal.feed(stream_start(100), insert("100-2", xid=100), stream_stop(),
                    stream_start(200), insert("200-2", xid=200), insert("200-3", xid=200), stream_stop())

    # when: 200 commits before 100
    out += wal.feed(stream_commit(200, 0x6000))
    out += wal.feed(stream_start(100), insert("100-3", xid=100), stream_stop())
    out += wal.feed(stream_commit(100, 0x7000))

    # then
    assert transactions(out) == [
        (300, ["300-1"]),
        (200, ["200-1", "200-2", "200-3"]),
        (100, ["100-1", "100-2", "100-3"]),
    ]


def test_changes_keep_the_wal_position_they_were_received_at(any_wal: Wal) -> None:
    wal = any_wal
    wal.feed_at(stream_start(100, first=True), 0x2000)
    wal.feed_at(insert("a", xid=100), 0x2010)
    wal.feed_at(insert("b", xid=101), 0x2020)
    wal.feed_at(stream_stop(), 0x2030)

    events = wal.feed(stream_commit(100, 0x9000))

    assert [e.lsn for e in events if isinstance(e, RowChange)] == [Lsn(0x2010), Lsn(0x2020)]


def test_streamed_abort_drops_only_the_aborted_nested_subtransactions(any_wal: Wal) -> None:
    wal = any_wal
    # BEGIN (100); insert; SAVEPOINT a (101); insert; SAVEPOINT b (102); insert; RELEASE b;
    # insert in a; ROLLBACK TO a; SAVEPOINT c (103); insert; RELEASE c; insert; COMMIT
    wal.feed(stream_start(100, first=True),
             insert("top-1", xid=100),
             insert("a-1", xid=101),
             *[insert(f"b-{n}", xid=102) for n in range(20)],
             insert("a-2", xid=101),
             stream_stop())
    # ROLLBACK TO a aborts a and its released child b: one Stream Abort per subxid
    wal.feed(stream_abort(100, 102), stream_abort(100, 101))
    wal.feed(stream_start(100), insert("c-1", xid=103), insert("top-2", xid=100), stream_stop())

    events = wal.feed(stream_commit(100, 0x9000))

    assert transactions(events) == [(100, ["top-1", "c-1", "top-2"])]


def test_aborting_a_subtransaction_between_blocks_keeps_later_changes_of_other_subtransactions(
        any_wal: Wal) -> None:
    wal = any_wal
    wal.feed(stream_start(100, first=True), *[insert(f"s{n % 3}-{n}", xid=101 + n % 3) for n in range(30)],
             stream_stop())
    wal.feed(stream_abort(100, 102))

    events = wal.feed(stream_commit(100, 0x9000))

    expected = [f"s{n % 3}-{n}" for n in range(30) if n % 3 != 1]
    assert transactions(events) == [(100, expected)]


def test_whole_streamed_transaction_abort_drops_everything_and_its_spill_file(
        any_wal: Wal, spill_dir: Path) -> None:
    wal = any_wal
    wal.feed(stream_start(100, first=True), *[insert(str(n), xid=100) for n in range(50)], stream_stop())

    assert wal.feed(stream_abort(100)) == []

    assert wal.assembler.is_idle()
    assert wal.assembler.buffered_bytes == 0
    assert list(spill_dir.iterdir()) == []
    with pytest.raises(FatalError, match="none of its stream blocks"):
        wal.feed(stream_commit(100, 0x9000))


def test_abort_of_an_unknown_transaction_or_subtransaction_is_harmless(wal: Wal) -> None:
    wal.feed(stream_start(100, first=True), insert("a", xid=100), stream_stop())

    wal.feed(stream_abort(555), stream_abort(100, 556))

    assert transactions(wal.feed(stream_commit(100, 0x9000))) == [(100, ["a"])]


def test_relation_inside_a_stream_block_applies_only_to_its_transaction_until_it_commits(wal: Wal) -> None:
    v1 = wal.assembler.relations.get(ITEMS)
    v2 = relation(xid=101, columns=("id", "name", "added"))
    wal.feed(stream_start(100, first=True), insert("before", xid=100), v2, insert("after", xid=101),
             stream_stop())

    plain = wal.feed(begin(300, 0x5000), insert("plain"), commit(0x5000))
    assert [e.relation for e in plain if isinstance(e, RowChange)] == [v1]
    assert wal.assembler.relations.get(ITEMS) == v1

    events = wal.feed(stream_commit(100, 0x9000))

    assert [e.relation for e in events if isinstance(e, RowChange)] == [v1, v2]
    assert wal.assembler.relations.get(ITEMS) == v2


def test_relation_of_an_aborted_streamed_transaction_is_forgotten(wal: Wal) -> None:
    v1 = wal.assembler.relations.get(ITEMS)
    wal.feed(stream_start(100, first=True), relation(xid=100, columns=("id",)), insert("x", xid=100),
             stream_stop(), stream_abort(100))

    assert wal.assembler.relations.get(ITEMS) == v1


def test_origin_inside_a_stream_is_replayed_with_the_transaction(wal: Wal) -> None:
    wal.feed(stream_start(100, first=True), Origin(origin_lsn=Lsn(0x55), name="up"),
             insert("a", xid=100), stream_stop())

    events = wal.feed(stream_commit(100, 0x9000))

    assert events[1] == TxOrigin(name="up", origin_lsn=Lsn(0x55))


def test_non_transactional_message_inside_a_stream_block_is_emitted_at_once(wal: Wal) -> None:
    wal.feed(stream_start(100, first=True))
    msg = LogicalMessage(xid=100, transactional=False, lsn=Lsn(0x31), prefix="p", content=b"c")

    assert wal.feed(msg) == [StandaloneMessage(prefix="p", content=b"c", lsn=Lsn(0x31))]


def test_transactional_message_of_an_aborted_subtransaction_is_dropped(wal: Wal) -> None:
    wal.feed(stream_start(100, first=True),
             LogicalMessage(xid=101, transactional=True, lsn=Lsn(0x31), prefix="p", content=b"gone"),
             LogicalMessage(xid=100, transactional=True, lsn=Lsn(0x32), prefix="p", content=b"kept"),
             stream_stop(), stream_abort(100, 101))

    events = wal.feed(stream_commit(100, 0x9000))

    assert [getattr(e, "content", None) for e in events[1:-1]] == [b"kept"]


def test_first_segment_again_replaces_the_held_copy(wal: Wal) -> None:
    wal.feed(stream_start(100, first=True), insert("old-1", xid=100), insert("old-2", xid=100), stream_stop())

    # the walsender restarted decoding and streams 100 from its beginning again
    wal.feed_at(stream_start(100, first=True), 0x7000)
    wal.feed(insert("new-1", xid=100), stream_stop())
    events = wal.feed(stream_commit(100, 0x9000))

    assert transactions(events) == [(100, ["new-1"])]
    assert isinstance(events[0], TxBegin) and events[0].first_lsn == Lsn(0x7000)


def test_continuation_segment_of_an_unknown_transaction_is_fatal(wal: Wal) -> None:
    with pytest.raises(FatalError, match="first segment was not received") as raised:
        wal.feed(stream_start(100, first=False))
    assert raised.value.hint is not None and "slot" in raised.value.hint


def test_change_without_xid_inside_a_stream_block_is_an_invariant_error(wal: Wal) -> None:
    wal.feed(stream_start(100, first=True))
    with pytest.raises(InvariantError, match="carries no xid"):
        wal.feed(insert("a"))


@pytest.mark.parametrize("msg", [
    begin(7, 0x9000), stream_start(200, first=True), stream_commit(100, 0x9000), stream_abort(100), commit(0x9000),
], ids=lambda m: type(m).__name__)
def test_transaction_control_inside_a_stream_block_is_an_invariant_error(wal: Wal, msg: object) -> None:
    wal.feed(stream_start(100, first=True))
    with pytest.raises(InvariantError, match="in a stream block"):
        wal.feed(msg)  # type: ignore[arg-type]


def test_stream_stop_outside_a_block_is_an_invariant_error(wal: Wal) -> None:
    with pytest.raises(InvariantError, match="StreamStop while idle"):
        wal.feed(stream_stop())


def test_replay_is_lazy_and_reads_spilled_changes_as_it_goes(spill_dir: Path) -> None:
    assembler = TransactionAssembler(memory_bytes=TINY_BUDGET, spill_dir=spill_dir)
    wal = Wal(assembler)
    wal.feed(relation(), stream_start(100, first=True), *[insert(str(n), xid=100) for n in range(1000)],
             stream_stop())

    replay = assembler.feed(stream_commit(100, 0x9000), Lsn(0x9000))
    assert isinstance(replay, Iterator)
    assert not assembler.is_idle()  # handed over, but not fully consumed yet
    assert [type(next(replay)) for _ in range(3)] == [TxBegin, RowChange, RowChange]
    assert len(list(spill_dir.iterdir())) == 1

    rest = list(replay)
    assert [first_value(e) for e in rest if isinstance(e, RowChange)] == [str(n) for n in range(2, 1000)]
    assert isinstance(rest[-1], TxEnd)
    assert list(spill_dir.iterdir()) == []
    assert assembler.is_idle()
    assembler.close()


def test_plain_transactions_pass_through_between_stream_blocks_unbuffered(wal: Wal) -> None:
    wal.feed(stream_start(100, first=True), insert("s", xid=100), stream_stop())

    events = wal.feed(begin(7, 0x5000), insert("p"), commit(0x5000))

    assert transactions(events) == [(7, ["p"])]
