"""oldest_unfinished_lsn and is_idle: what the ack tracker must never confirm past."""

from __future__ import annotations

from pgbridge.decode.messages import LogicalMessage
from pgbridge.lsn import Lsn
from tests.unit.assemble.scenario import (
    Wal,
    begin,
    begin_prepare,
    commit,
    commit_prepared,
    insert,
    prepare,
    rollback_prepared,
    stream_abort,
    stream_commit,
    stream_prepare,
    stream_start,
    stream_stop,
)


def test_fresh_assembler_is_idle_with_nothing_unfinished(wal: Wal) -> None:
    assert wal.assembler.is_idle()
    assert wal.assembler.oldest_unfinished_lsn() is None


def test_open_plain_transaction_is_unfinished_from_its_begin_until_commit(wal: Wal) -> None:
    wal.feed_at(begin(7, 0x9000), 0x2000)
    wal.feed(insert("a"))
    assert wal.assembler.oldest_unfinished_lsn() == Lsn(0x2000)
    assert not wal.assembler.is_idle()

    wal.feed(commit(0x9000))

    assert wal.assembler.oldest_unfinished_lsn() is None
    assert wal.assembler.is_idle()


def test_standalone_message_leaves_the_assembler_idle(wal: Wal) -> None:
    wal.feed(LogicalMessage(xid=None, transactional=False, lsn=Lsn(1), prefix="p", content=b""))
    assert wal.assembler.is_idle()


def test_streamed_transactions_are_unfinished_from_their_first_stream_start(wal: Wal) -> None:
    wal.feed_at(stream_start(100, first=True), 0x2000)
    wal.feed(insert("a", xid=100), stream_stop())
    wal.feed_at(stream_start(200, first=True), 0x3000)
    wal.feed(insert("b", xid=200), stream_stop())
    wal.feed_at(stream_start(100), 0x4000)
    wal.feed(insert("c", xid=100), stream_stop())
    assert wal.assembler.oldest_unfinished_lsn() == Lsn(0x2000)
    assert not wal.assembler.is_idle()

    # plain transactions in between do not move it
    wal.feed(begin(7, 0x5000), insert("p"), commit(0x5000))
    assert wal.assembler.oldest_unfinished_lsn() == Lsn(0x2000)

    list(wal.feed(stream_commit(100, 0x6000)))
    assert wal.assembler.oldest_unfinished_lsn() == Lsn(0x3000)

    wal.feed(stream_abort(200))
    assert wal.assembler.oldest_unfinished_lsn() is None
    assert wal.assembler.is_idle()


def test_committed_streamed_transaction_stays_unfinished_until_its_replay_is_consumed(wal: Wal) -> None:
    wal.feed_at(stream_start(100, first=True), 0x2000)
    wal.feed(insert("a", xid=100), stream_stop())

    replay = iter(wal.assembler.feed(stream_commit(100, 0x9000), Lsn(0x9000)))
    next(replay)
    assert wal.assembler.oldest_unfinished_lsn() == Lsn(0x2000)
    assert not wal.assembler.is_idle()

    list(replay)
    assert wal.assembler.oldest_unfinished_lsn() is None
    assert wal.assembler.is_idle()


def test_prepared_transaction_is_unfinished_from_begin_prepare_until_commit_prepared(wal: Wal) -> None:
    wal.feed_at(begin_prepare(50, "g"), 0x2000)
    assert wal.assembler.oldest_unfinished_lsn() == Lsn(0x2000)
    wal.feed(insert("a"), prepare(50, "g"))
    assert wal.assembler.oldest_unfinished_lsn() == Lsn(0x2000)
    assert not wal.assembler.is_idle()

    # later transactions commit and publish; the prepared one still holds the line
    wal.feed(begin(7, 0x9500), insert("p"), commit(0x9500))
    assert wal.assembler.oldest_unfinished_lsn() == Lsn(0x2000)

    list(wal.feed(commit_prepared(50, "g", 0xA000)))
    assert wal.assembler.oldest_unfinished_lsn() is None
    assert wal.assembler.is_idle()


def test_rolled_back_prepared_transaction_is_finished(wal: Wal) -> None:
    wal.feed(begin_prepare(50, "g"), insert("a"), prepare(50, "g"), rollback_prepared(50, "g"))
    assert wal.assembler.oldest_unfinished_lsn() is None
    assert wal.assembler.is_idle()


def test_stream_prepared_transaction_keeps_its_first_stream_start_position(wal: Wal) -> None:
    wal.feed_at(stream_start(100, first=True), 0x2000)
    wal.feed(insert("a", xid=100), stream_stop(), stream_prepare(100, "g"))

    assert wal.assembler.oldest_unfinished_lsn() == Lsn(0x2000)
    assert not wal.assembler.is_idle()


def test_reset_connection_drops_streamed_and_open_work_but_keeps_prepared(wal: Wal) -> None:
    wal.feed_at(begin_prepare(50, "g"), 0x3000)
    wal.feed(insert("a"), prepare(50, "g"))
    wal.feed_at(stream_start(100, first=True), 0x2000)
    wal.feed(insert("b", xid=100))

    wal.assembler.reset_connection()

    assert wal.assembler.oldest_unfinished_lsn() == Lsn(0x3000)
    # the commit LSN order restarts too: Postgres re-sends from the confirmed position
    wal.feed(begin(7, 0x1000), insert("p"), commit(0x1000))
    assert wal.assembler.oldest_unfinished_lsn() == Lsn(0x3000)


def test_oldest_is_the_minimum_across_every_kind_of_unfinished_transaction(wal: Wal) -> None:
    wal.feed_at(stream_start(100, first=True), 0x5000)
    wal.feed(stream_stop())
    wal.feed_at(begin_prepare(50, "g"), 0x4000)
    wal.feed(prepare(50, "g"))
    wal.feed_at(begin(7, 0x9000), 0x6000)
    assert wal.assembler.oldest_unfinished_lsn() == Lsn(0x4000)

    wal.feed(commit(0x9000))
    list(wal.feed(commit_prepared(50, "g", 0x9100)))
    assert wal.assembler.oldest_unfinished_lsn() == Lsn(0x5000)
