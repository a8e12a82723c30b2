"""Plain (non-streamed) transactions: already committed when sent, so they pass straight through."""

from __future__ import annotations

from pathlib import Path

import pytest

from pgbridge.assemble.transaction import TransactionAssembler
from pgbridge.assemble.units import (
    MessageChange,
    RowChange,
    StandaloneMessage,
    TruncateChange,
    TxBegin,
    TxEnd,
    TxOrigin,
)
from pgbridge.decode.messages import LogicalMessage, Message, Origin, Truncate
from pgbridge.errors import InvariantError
from pgbridge.lsn import Lsn
from tests.unit.assemble.scenario import (
    ITEMS,
    ORDERS,
    Wal,
    begin,
    commit,
    delete,
    insert,
    relation,
    stream_start,
    update,
)


def test_plain_transaction_passes_through_in_arrival_order(wal: Wal) -> None:
    items = wal.assembler.relations.get(ITEMS)
    orders = relation(ORDERS, "orders")

    assert wal.feed_at(orders, 0x2000) == []
    assert wal.feed_at(begin(7, 0x3000, ts=42), 0x2010) == [
        TxBegin(xid=7, first_lsn=Lsn(0x2010), commit_lsn=Lsn(0x3000), commit_ts=42)]
    assert wal.feed_at(Origin(origin_lsn=Lsn(0x77), name="upstream"), 0x2020) == [
        TxOrigin(name="upstream", origin_lsn=Lsn(0x77))]
    assert wal.feed_at(insert("1", "a"), 0x2030) == [
        RowChange(op="c", relation=items, lsn=Lsn(0x2030), old_kind=None, old=None, new=insert("1", "a").new)]
    upd = update("1", "1", "b")
    assert wal.feed_at(upd, 0x2040) == [
        RowChange(op="u", relation=items, lsn=Lsn(0x2040), old_kind="K", old=upd.old, new=upd.new)]
    dele = delete("1")
    assert wal.feed_at(dele, 0x2050) == [
        RowChange(op="d", relation=items, lsn=Lsn(0x2050), old_kind="K", old=dele.old, new=None)]
    assert wal.feed_at(Truncate(xid=None, options=1, rel_ids=(ITEMS, ORDERS)), 0x2060) == [
        TruncateChange(relations=(items, orders), options=1, lsn=Lsn(0x2060))]
    msg = LogicalMessage(xid=None, transactional=True, lsn=Lsn(0x2070), prefix="audit", content=b"x")
    assert wal.feed_at(msg, 0x2070) == [MessageChange(prefix="audit", content=b"x", lsn=Lsn(0x2070))]
    assert wal.feed_at(commit(0x3000, 0x3008, ts=43), 0x3000) == [
        TxEnd(xid=7, commit_lsn=Lsn(0x3000), end_lsn=Lsn(0x3008), commit_ts=43)]


def test_plain_transaction_is_not_buffered(wal: Wal, spill_dir: Path) -> None:
    wal.feed(begin(7, 0x9000))
    for n in range(100):
        assert len(wal.feed(insert(str(n), "x" * 1000))) == 1
    assert wal.assembler.buffered_bytes == 0
    assert wal.assembler.spilled_bytes_total == 0
    assert list(spill_dir.iterdir()) == []


def test_relation_message_inside_a_transaction_applies_to_the_changes_after_it(wal: Wal) -> None:
    v1 = wal.assembler.relations.get(ITEMS)
    v2 = relation(columns=("id", "name", "price"))

    events = wal.feed(begin(7, 0x9000), insert("1", "a"), v2, insert("2", "b", "3"), commit(0x9000))

    changes = [e for e in events if isinstance(e, RowChange)]
    assert [c.relation for c in changes] == [v1, v2]
    assert wal.assembler.relations.get(ITEMS) == v2


def test_non_transactional_message_is_standalone_even_inside_a_transaction(wal: Wal) -> None:
    msg = LogicalMessage(xid=None, transactional=False, lsn=Lsn(0x4242), prefix="hb", content=b"")

    assert wal.feed(msg) == [StandaloneMessage(prefix="hb", content=b"", lsn=Lsn(0x4242))]
    wal.feed(begin(7, 0x9000))
    assert wal.feed(msg) == [StandaloneMessage(prefix="hb", content=b"", lsn=Lsn(0x4242))]
    assert isinstance(wal.feed(commit(0x9000))[0], TxEnd)


def test_consecutive_transactions_each_get_their_own_begin_and_end(wal: Wal) -> None:
    events = wal.feed(begin(7, 0x9000), insert("1"), commit(0x9000),
                      begin(8, 0x9100), insert("2"), insert("3"), commit(0x9100))

    assert [type(e) for e in events] == [TxBegin, RowChange, TxEnd, TxBegin, RowChange, RowChange, TxEnd]
    assert [e.xid for e in events if isinstance(e, TxBegin | TxEnd)] == [7, 7, 8, 8]


def test_nested_begin_is_an_invariant_error(wal: Wal) -> None:
    wal.feed(begin(7, 0x9000))
    with pytest.raises(InvariantError, match="Begin while in a transaction"):
        wal.feed(begin(8, 0x9100))


@pytest.mark.parametrize("change", [
    insert("1"),
    update("1", "1"),
    delete("1"),
    Truncate(xid=None, options=0, rel_ids=(ITEMS,)),
    Origin(origin_lsn=Lsn(1), name="o"),
    LogicalMessage(xid=None, transactional=True, lsn=Lsn(1), prefix="p", content=b""),
], ids=lambda m: type(m).__name__)
def test_change_outside_a_transaction_is_an_invariant_error(wal: Wal, change: Message) -> None:
    with pytest.raises(InvariantError, match="outside a transaction"):
        wal.feed(change)


def test_commit_without_begin_is_an_invariant_error(wal: Wal) -> None:
    with pytest.raises(InvariantError, match="Commit without a Begin"):
        wal.feed(commit(0x9000))


def test_commit_lsn_must_match_the_final_lsn_of_begin(wal: Wal) -> None:
    wal.feed(begin(7, 0x9000))
    with pytest.raises(InvariantError, match="does not match the final LSN"):
        wal.feed(commit(0x9001))


@pytest.mark.parametrize("final_lsn", [0x8000, 0x9000], ids=["backwards", "repeated"])
def test_begin_final_lsn_not_after_the_previous_commit_is_an_invariant_error(wal: Wal, final_lsn: int) -> None:
    wal.feed(begin(7, 0x9000), commit(0x9000))
    with pytest.raises(InvariantError, match="went backwards"):
        wal.feed(begin(8, final_lsn))


def test_stream_start_inside_a_plain_transaction_is_an_invariant_error(wal: Wal) -> None:
    wal.feed(begin(7, 0x9000))
    with pytest.raises(InvariantError, match="StreamStart while in a transaction"):
        wal.feed(stream_start(8, first=True))


def test_change_for_an_unknown_relation_names_the_oid(wal: Wal) -> None:
    wal.feed(begin(7, 0x9000))
    with pytest.raises(InvariantError, match="relation OID 999") as raised:
        wal.feed(insert("1", rel_id=999))
    assert raised.value.hint is not None


def test_feeding_a_closed_assembler_is_an_invariant_error(assembler: TransactionAssembler) -> None:
    assembler.close()
    with pytest.raises(InvariantError, match="closed"):
        assembler.feed(begin(7, 0x9000), Lsn(0x100))
