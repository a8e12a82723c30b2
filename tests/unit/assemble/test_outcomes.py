"""Outcome totals the pipeline exports as ``pgbridge_transactions_total{outcome}``, and the
watermark cap when a BEGIN arrives with an invalid WAL start (it is followed by an Origin)."""

from __future__ import annotations

from pgbridge.ack.tracker import AckTracker
from pgbridge.decode.messages import Origin
from pgbridge.lsn import INVALID_LSN, Lsn
from pgbridge.metrics import OUTCOME_ABORTED, OUTCOME_PREPARED, OUTCOME_ROLLED_BACK
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


def test_outcomes_count_aborted_streams_prepares_and_rollbacks_but_not_subtransaction_aborts(wal: Wal) -> None:
    wal.feed(stream_start(100, first=True), insert("a", xid=100), insert("b", xid=101), stream_stop())
    wal.feed(stream_abort(100, subxid=101))  # a savepoint rolled back: the transaction lives on
    wal.feed(stream_abort(100))
    wal.feed(stream_start(200, first=True), insert("c", xid=200), stream_stop(), stream_prepare(200, "s"))
    wal.feed(begin_prepare(50, "g"), insert("d"), prepare(50, "g"), rollback_prepared(50, "g"))
    wal.feed(stream_start(300, first=True), insert("e", xid=300), stream_stop())
    list(wal.feed(stream_commit(300, 0x9000)))
    list(wal.feed(commit_prepared(200, "s", 0x9100)))
    wal.feed(stream_abort(400))  # never streamed to us: nothing was dropped

    assert wal.assembler.outcome_totals == {OUTCOME_ABORTED: 1, OUTCOME_PREPARED: 2, OUTCOME_ROLLED_BACK: 1}


def test_begin_prepare_with_an_invalid_wal_start_pins_the_watermark_where_it_was(wal: Wal) -> None:
    """Postgres sends InvalidXLogRecPtr as the WAL start of every frame but the last of one
    callback, so a BEGIN PREPARE followed by an Origin message starts at 0. The cap then holds the
    watermark at what was already reported, which is below the prepared transaction's start."""
    tracker = AckTracker()
    done = tracker.open_unit()
    tracker.seal(done, Lsn(0x1800))
    assert tracker.confirmable(unfinished_lsn=wal.assembler.oldest_unfinished_lsn()) == Lsn(0x1800)

    wal.feed_at(begin_prepare(50, "g"), INVALID_LSN)
    wal.feed(Origin(origin_lsn=Lsn(0x77), name="upstream"), insert("a"), prepare(50, "g"))
    later = tracker.open_unit()
    wal.feed(begin(7, 0x9500), insert("p"), commit(0x9500))
    tracker.seal(later, Lsn(0x9600))  # a later transaction is fully acknowledged

    assert wal.assembler.oldest_unfinished_lsn() == INVALID_LSN
    assert tracker.confirmable(unfinished_lsn=wal.assembler.oldest_unfinished_lsn(),
                               server_lsn=Lsn(0xF000)) == Lsn(0x1800)

    list(wal.feed(commit_prepared(50, "g", 0xA000)))
    assert tracker.confirmable(unfinished_lsn=wal.assembler.oldest_unfinished_lsn()) == Lsn(0x9600)
