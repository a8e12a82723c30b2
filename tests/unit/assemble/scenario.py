"""Builders for decoded pgoutput messages and a feeder that hands them to an assembler at
increasing WAL positions, as a walsender would. Tests build messages directly: the assembler
only depends on the dataclasses, not on the decoder."""

from __future__ import annotations

from collections.abc import Iterable

from pgbridge.assemble.transaction import TransactionAssembler
from pgbridge.assemble.units import AssembledEvent, RowChange, TxBegin, TxEnd
from pgbridge.decode.messages import (
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    Delete,
    Insert,
    Message,
    Prepare,
    Relation,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    StreamStop,
    TupleData,
    Update,
)
from pgbridge.lsn import Lsn
from tests.support.relations import relation as build_relation

ITEMS = 16384
ORDERS = 16390

TINY_BUDGET = 1024  # bytes: a handful of changes, so spilling is exercised constantly
ROOMY_BUDGET = 1 << 20  # never reached by these tests


def relation(rel_id: int = ITEMS, name: str = "items", *, xid: int | None = None,
             columns: tuple[str, ...] = ("id", "name")) -> Relation:
    return build_relation(*columns, rel_id=rel_id, name=name, xid=xid, key=1)


def row(*values: str | None) -> TupleData:
    return TupleData(kinds=bytes(ord("n") if v is None else ord("t") for v in values),
                     values=tuple(None if v is None else v.encode() for v in values))


def insert(*values: str | None, rel_id: int = ITEMS, xid: int | None = None) -> Insert:
    return Insert(xid=xid, rel_id=rel_id, new=row(*values))


def update(key: str, *values: str | None, rel_id: int = ITEMS, xid: int | None = None) -> Update:
    return Update(xid=xid, rel_id=rel_id, old_kind="K", old=row(key, None), new=row(*values))


def delete(key: str, rel_id: int = ITEMS, xid: int | None = None) -> Delete:
    return Delete(xid=xid, rel_id=rel_id, old_kind="K", old=row(key, None))


def begin(xid: int, final_lsn: int, ts: int = 1_000) -> Begin:
    return Begin(final_lsn=Lsn(final_lsn), commit_ts=ts, xid=xid)


def commit(commit_lsn: int, end_lsn: int | None = None, ts: int = 1_000) -> Commit:
    return Commit(flags=0, commit_lsn=Lsn(commit_lsn), end_lsn=Lsn(end_lsn or commit_lsn + 8), commit_ts=ts)


def stream_start(xid: int, first: bool = False) -> StreamStart:
    return StreamStart(xid=xid, first_segment=first)


def stream_stop() -> StreamStop:
    return StreamStop()


def stream_commit(xid: int, commit_lsn: int, ts: int = 2_000) -> StreamCommit:
    return StreamCommit(xid=xid, flags=0, commit_lsn=Lsn(commit_lsn), end_lsn=Lsn(commit_lsn + 8), commit_ts=ts)


def stream_abort(xid: int, subxid: int | None = None) -> StreamAbort:
    return StreamAbort(xid=xid, subxid=xid if subxid is None else subxid, abort_lsn=Lsn(0), abort_ts=0)


def begin_prepare(xid: int, gid: str, prepare_lsn: int = 0x9000) -> BeginPrepare:
    return BeginPrepare(prepare_lsn=Lsn(prepare_lsn), end_lsn=Lsn(prepare_lsn + 8), prepare_ts=500,
                        xid=xid, gid=gid)


def prepare(xid: int, gid: str, prepare_lsn: int = 0x9000) -> Prepare:
    return Prepare(flags=0, prepare_lsn=Lsn(prepare_lsn), end_lsn=Lsn(prepare_lsn + 8), prepare_ts=500,
                   xid=xid, gid=gid)


def stream_prepare(xid: int, gid: str, prepare_lsn: int = 0x9000) -> StreamPrepare:
    return StreamPrepare(flags=0, prepare_lsn=Lsn(prepare_lsn), end_lsn=Lsn(prepare_lsn + 8), prepare_ts=500,
                         xid=xid, gid=gid)


def commit_prepared(xid: int, gid: str, commit_lsn: int, ts: int = 3_000) -> CommitPrepared:
    return CommitPrepared(flags=0, commit_lsn=Lsn(commit_lsn), end_lsn=Lsn(commit_lsn + 8), commit_ts=ts,
                          xid=xid, gid=gid)


def rollback_prepared(xid: int, gid: str) -> RollbackPrepared:
    return RollbackPrepared(flags=0, prepare_end_lsn=Lsn(0x9008), rollback_end_lsn=Lsn(0xA000),
                            prepare_ts=500, rollback_ts=600, xid=xid, gid=gid)


class Wal:
    """Feeds messages at increasing WAL positions (``step`` apart) and collects the events."""

    def __init__(self, assembler: TransactionAssembler, start: int = 0x1000, step: int = 0x10) -> None:
        self.assembler = assembler
        self.position = start
        self.step = step

    def next_lsn(self) -> Lsn:
        self.position += self.step
        return Lsn(self.position)

    def feed(self, *msgs: Message) -> list[AssembledEvent]:
        events: list[AssembledEvent] = []
        for msg in msgs:
            events.extend(self.assembler.feed(msg, self.next_lsn()))
        return events

    def feed_at(self, msg: Message, wal_start: int) -> list[AssembledEvent]:
        return list(self.assembler.feed(msg, Lsn(wal_start)))


def first_value(event: AssembledEvent) -> str:
    """The first column of a row change's new (or old) tuple, as text: tests tag rows with it."""
    assert isinstance(event, RowChange)
    data = event.new if event.new is not None else event.old
    assert data is not None
    value = data.values[0]
    assert value is not None
    return value.decode()


def transactions(events: Iterable[AssembledEvent]) -> list[tuple[int, list[str]]]:
    """Events grouped as (xid, first column of each row change); also checks they never interleave."""
    result: list[tuple[int, list[str]]] = []
    open_xid: int | None = None
    for event in events:
        if isinstance(event, TxBegin):
            assert open_xid is None, "transactions interleave"
            open_xid = event.xid
            result.append((event.xid, []))
        elif isinstance(event, TxEnd):
            assert open_xid == event.xid
            open_xid = None
        elif isinstance(event, RowChange):
            assert open_xid is not None, "row change outside a transaction"
            result[-1][1].append(first_value(event))
    assert open_xid is None, "transaction left open"
    return result
