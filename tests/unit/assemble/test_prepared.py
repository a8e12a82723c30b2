"""Two-phase transactions: held from PREPARE until COMMIT PREPARED or ROLLBACK PREPARED."""

from __future__ import annotations

from pathlib import Path

import pytest

from pgbridge.assemble.units import RowChange, TxBegin, TxEnd
from pgbridge.errors import FatalError, InvariantError
from pgbridge.lsn import Lsn
from tests.unit.assemble.scenario import (
    ITEMS,
    Wal,
    begin,
    begin_prepare,
    commit,
    commit_prepared,
    insert,
    prepare,
    relation,
    rollback_prepared,
    stream_abort,
    stream_prepare,
    stream_start,
    stream_stop,
    transactions,
)


def test_prepared_transaction_is_published_only_at_commit_prepared(any_wal: Wal) -> None:
    wal = any_wal
    out = wal.feed_at(begin_prepare(50, "tx-a"), 0x2000)
    out += wal.feed(*[insert(str(n)) for n in range(40)], prepare(50, "tx-a"))
    assert out == []

    events = wal.feed(commit_prepared(50, "tx-a", 0xA000, ts=99))

    assert events[0] == TxBegin(xid=50, first_lsn=Lsn(0x2000), commit_lsn=Lsn(0xA000), commit_ts=99, gid="tx-a")
    assert events[-1] == TxEnd(xid=50, commit_lsn=Lsn(0xA000), end_lsn=Lsn(0xA008), commit_ts=99)
    assert transactions(events) == [(50, [str(n) for n in range(40)])]
    assert wal.assembler.is_idle()


def test_rollback_prepared_drops_the_transaction_and_its_spill_file(any_wal: Wal, spill_dir: Path) -> None:
    wal = any_wal
    wal.feed(begin_prepare(50, "tx-a"), *[insert(str(n)) for n in range(40)], prepare(50, "tx-a"))

    assert wal.feed(rollback_prepared(50, "tx-a")) == []

    assert wal.assembler.is_idle()
    assert list(spill_dir.iterdir()) == []
    with pytest.raises(FatalError):
        wal.feed(commit_prepared(50, "tx-a", 0xA000))


def test_prepared_transaction_committed_after_later_plain_transactions_comes_out_in_commit_order(
        any_wal: Wal) -> None:
    wal = any_wal
    out = wal.feed(begin_prepare(50, "tx-a"), insert("prepared"), prepare(50, "tx-a"))
    out += wal.feed(begin(60, 0xA000), insert("plain-1"), commit(0xA000))
    out += wal.feed(begin(61, 0xA100), insert("plain-2"), commit(0xA100))
    out += wal.feed(commit_prepared(50, "tx-a", 0xA200))
    out += wal.feed(begin(62, 0xA300), insert("plain-3"), commit(0xA300))

    assert transactions(out) == [(60, ["plain-1"]), (61, ["plain-2"]), (50, ["prepared"]), (62, ["plain-3"])]


def test_resent_prepare_replaces_the_held_copy_instead_of_duplicating_it(any_wal: Wal, spill_dir: Path) -> None:
    wal = any_wal
    wal.feed(begin_prepare(50, "tx-a"), *[insert(f"v1-{n}") for n in range(30)], prepare(50, "tx-a"))

    # the connection dropped; Postgres re-sends the PREPARE it was never confirmed past
    wal.assembler.reset_connection()
    wal.feed_at(begin_prepare(50, "tx-a"), 0x8000)
    wal.feed(*[insert(f"v2-{n}") for n in range(30)], prepare(50, "tx-a"))
    events = wal.feed(commit_prepared(50, "tx-a", 0xA000))

    assert transactions(events) == [(50, [f"v2-{n}" for n in range(30)])]
    assert isinstance(events[0], TxBegin) and events[0].first_lsn == Lsn(0x8000)
    assert wal.assembler.is_idle()
    assert list(spill_dir.iterdir()) == []


def test_stream_prepare_then_commit_prepared_publishes_the_surviving_changes(any_wal: Wal) -> None:
    wal = any_wal
    wal.feed_at(stream_start(100, first=True), 0x2000)
    wal.feed(insert("top", xid=100), insert("sub", xid=101), stream_stop(), stream_abort(100, 101),
             stream_start(100), insert("top-2", xid=100), stream_stop())

    assert wal.feed(stream_prepare(100, "big")) == []
    assert wal.feed(begin(7, 0x9500), insert("plain"), commit(0x9500)) != []
    events = wal.feed(commit_prepared(100, "big", 0xA000))

    assert events[0] == TxBegin(xid=100, first_lsn=Lsn(0x2000), commit_lsn=Lsn(0xA000), commit_ts=3_000,
                                gid="big")
    assert transactions(events) == [(100, ["top", "top-2"])]


def test_stream_prepare_then_rollback_prepared_publishes_nothing(any_wal: Wal, spill_dir: Path) -> None:
    wal = any_wal
    wal.feed(stream_start(100, first=True), *[insert(str(n), xid=100) for n in range(40)], stream_stop(),
             stream_prepare(100, "big"))

    assert wal.feed(rollback_prepared(100, "big")) == []
    assert wal.assembler.is_idle()
    assert list(spill_dir.iterdir()) == []


def test_relation_of_a_stream_prepared_transaction_reaches_the_cache_at_prepare(wal: Wal) -> None:
    v2 = relation(xid=100, columns=("id", "name", "added"))
    wal.feed(stream_start(100, first=True), v2, insert("a", "b", "c", xid=100), stream_stop(),
             stream_prepare(100, "big"))

    assert wal.assembler.relations.get(ITEMS) == v2
    events = wal.feed(commit_prepared(100, "big", 0xA000))
    assert [e.relation for e in events if isinstance(e, RowChange)] == [v2]


def test_commit_prepared_for_an_unknown_gid_is_fatal_and_says_why(wal: Wal) -> None:
    with pytest.raises(FatalError, match="changes were not received") as raised:
        wal.feed(commit_prepared(50, "never-seen", 0xA000))
    assert raised.value.hint is not None and "recreate the slot" in raised.value.hint


def test_stream_prepare_of_an_unknown_transaction_is_fatal(wal: Wal) -> None:
    with pytest.raises(FatalError, match="STREAM PREPARE"):
        wal.feed(stream_prepare(100, "big"))


def test_rollback_prepared_for_an_unknown_gid_drops_nothing(wal: Wal) -> None:
    wal.feed(begin_prepare(50, "tx-a"), insert("a"), prepare(50, "tx-a"))

    assert wal.feed(rollback_prepared(51, "other")) == []

    assert transactions(wal.feed(commit_prepared(50, "tx-a", 0xA000))) == [(50, ["a"])]


def test_prepare_must_name_the_transaction_begin_prepare_opened(wal: Wal) -> None:
    wal.feed(begin_prepare(50, "tx-a"), insert("a"))
    with pytest.raises(InvariantError, match="does not match BEGIN PREPARE"):
        wal.feed(prepare(50, "tx-b"))


def test_commit_prepared_naming_another_xid_is_an_invariant_error(wal: Wal) -> None:
    wal.feed(begin_prepare(50, "tx-a"), insert("a"), prepare(50, "tx-a"))
    with pytest.raises(InvariantError, match="prepared as xid 50"):
        wal.feed(commit_prepared(51, "tx-a", 0xA000))


def test_begin_inside_a_prepared_transaction_is_an_invariant_error(wal: Wal) -> None:
    wal.feed(begin_prepare(50, "tx-a"))
    with pytest.raises(InvariantError, match="Begin while in a prepared transaction"):
        wal.feed(begin(7, 0x9000))


def test_prepare_outside_begin_prepare_is_an_invariant_error(wal: Wal) -> None:
    with pytest.raises(InvariantError, match="Prepare while idle"):
        wal.feed(prepare(50, "tx-a"))


def test_gid_can_be_reused_after_commit_prepared(wal: Wal) -> None:
    out = wal.feed(begin_prepare(50, "tx"), insert("first"), prepare(50, "tx"),
                   commit_prepared(50, "tx", 0xA000))
    out += wal.feed(begin_prepare(51, "tx", 0xB000), insert("second"), prepare(51, "tx", 0xB000),
                    commit_prepared(51, "tx", 0xC000))

    assert transactions(out) == [(50, ["first"]), (51, ["second"])]
