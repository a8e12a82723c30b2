"""The in-stream filter: changes of tables in the stream but not selected never leave the assembler,
in plain, streamed and prepared transactions alike; a TRUNCATE keeps only the selected tables."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pgbridge.assemble.capture import CaptureFilter
from pgbridge.assemble.transaction import TransactionAssembler
from pgbridge.assemble.units import RowChange, TruncateChange, TxBegin, TxEnd
from pgbridge.decode.messages import Truncate
from pgbridge.source.selection import TableSelection
from tests.unit.assemble.scenario import (
    ITEMS,
    ORDERS,
    ROOMY_BUDGET,
    TINY_BUDGET,
    Wal,
    begin,
    begin_prepare,
    commit,
    commit_prepared,
    insert,
    prepare,
    relation,
    stream_commit,
    stream_start,
    stream_stop,
    transactions,
)


@pytest.fixture(params=[TINY_BUDGET, ROOMY_BUDGET], ids=["spilling", "in-memory"])
def filtered(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Wal, CaptureFilter]]:
    """``public.items`` and ``public.orders`` announced; only ``orders`` selected."""
    capture = CaptureFilter(TableSelection.from_patterns([r"public\.orders"]))
    assembler = TransactionAssembler(memory_bytes=request.param, spill_dir=tmp_path / "spill", capture=capture)
    wal = Wal(assembler)
    wal.feed(relation(), relation(ORDERS, "orders"))
    yield wal, capture
    assembler.close()


def test_plain_transaction_keeps_only_selected_tables(filtered: tuple[Wal, CaptureFilter]) -> None:
    wal, capture = filtered
    events = wal.feed(begin(7, 0x9000), insert("1", "a"), insert("2", "b", rel_id=ORDERS), insert("3", "c"),
                      commit(0x9000))
    assert isinstance(events[0], TxBegin) and isinstance(events[-1], TxEnd)
    assert transactions(events) == [(7, ["2"])]
    assert all(e.relation.name == "orders" for e in events if isinstance(e, RowChange))
    assert capture.dropped == {"public.items": 2}


def test_streamed_and_prepared_transactions_buffer_only_selected_changes(
        filtered: tuple[Wal, CaptureFilter]) -> None:
    wal, capture = filtered
    streamed = wal.feed(stream_start(8, first=True), insert("1", "a", xid=8), insert("2", "b", rel_id=ORDERS, xid=8),
                        stream_stop(), stream_commit(8, 0x9000))
    prepared = wal.feed(begin_prepare(9, "g"), insert("3", "c"), insert("4", "d", rel_id=ORDERS), prepare(9, "g"),
                        commit_prepared(9, "g", 0x9100))
    assert transactions(streamed) == [(8, ["2"])]
    assert transactions(prepared) == [(9, ["4"])]
    assert capture.dropped == {"public.items": 2}


def test_truncate_keeps_the_selected_tables_or_is_dropped(filtered: tuple[Wal, CaptureFilter]) -> None:
    wal, _ = filtered
    wal.feed(begin(7, 0x9000))
    both = wal.feed(Truncate(xid=None, options=0, rel_ids=(ITEMS, ORDERS)))
    only_unselected = wal.feed(Truncate(xid=None, options=0, rel_ids=(ITEMS,)))
    wal.feed(commit(0x9000))
    assert len(both) == 1 and isinstance(both[0], TruncateChange)
    assert [r.name for r in both[0].relations] == ["orders"]
    assert only_unselected == []


def test_without_a_filter_nothing_is_dropped(tmp_path: Path) -> None:
    assembler = TransactionAssembler(memory_bytes=ROOMY_BUDGET, spill_dir=tmp_path / "spill")
    try:
        wal = Wal(assembler)
        wal.feed(relation(), relation(ORDERS, "orders"))
        events = wal.feed(begin(7, 0x9000), insert("1", "a"), insert("2", "b", rel_id=ORDERS), commit(0x9000))
        assert transactions(events) == [(7, ["1", "2"])]
    finally:
        assembler.close()
