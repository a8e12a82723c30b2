"""Transactions that Postgres streams before they commit (protocol 2+, parallel in protocol 4).

With ``streaming`` on, the walsender sends a large transaction in blocks (Stream Start ... Stream
Stop) while it is still running; blocks of several transactions interleave, and plain committed
transactions pass between them. Every change in a block carries the xid of the (sub)transaction
that made it, because a later Stream Abort may roll back only that subtransaction. Nothing may be
published until Stream Commit, so each transaction is buffered (and spilled) under its top-level
xid; Stream Prepare turns it into a prepared transaction that waits for COMMIT PREPARED instead.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass

from pgbridge.assemble.relations import RelationCache, RelationOverlay
from pgbridge.assemble.spill import BufferedEvent, SpillBuffer, SpillStore
from pgbridge.decode.messages import StreamAbort, StreamStart
from pgbridge.errors import FatalError
from pgbridge.lsn import Lsn

MISSING_CHANGES_HINT = (
    "the slot was advanced past changes pgbridge never published; drop and recreate the slot "
    "(pgbridge slot drop) and take a new snapshot"
)


class TxnPhase(enum.Enum):
    STREAMING = "streaming"  # stream blocks arriving, outcome unknown
    PREPARING = "preparing"  # between BEGIN PREPARE and PREPARE
    PREPARED = "prepared"  # waiting for COMMIT PREPARED or ROLLBACK PREPARED
    REPLAYING = "replaying"  # committed; its events are being handed downstream
    DISCARDED = "discarded"  # aborted, rolled back, replaced or replayed


@dataclass(eq=False, slots=True)
class BufferedTransaction:
    """A transaction whose changes are held until Postgres decides its outcome."""

    xid: int
    first_lsn: Lsn  # WAL start of its first frame (first Stream Start or Begin Prepare)
    buffer: SpillBuffer
    overlay: RelationOverlay | None  # streamed only: Relation messages seen inside its blocks
    phase: TxnPhase
    gid: str | None = None
    prepare_lsn: Lsn | None = None

    def add(self, subxid: int, event: BufferedEvent) -> None:
        self.buffer.append(subxid, event)

    def replay(self) -> Iterator[BufferedEvent]:
        self.phase = TxnPhase.REPLAYING
        return self.buffer.replay()

    def discard(self) -> None:
        self.phase = TxnPhase.DISCARDED
        self.buffer.discard()


class StreamedTransactions:
    """Buffered streamed transactions by top-level xid, in the order their first block arrived."""

    def __init__(self, *, store: SpillStore, relations: RelationCache) -> None:
        self._store = store
        self._relations = relations
        self._by_xid: dict[int, BufferedTransaction] = {}

    def __len__(self) -> int:
        return len(self._by_xid)

    def __contains__(self, xid: object) -> bool:
        return xid in self._by_xid

    def first_lsns(self) -> Iterator[Lsn]:
        return (txn.first_lsn for txn in self._by_xid.values())

    def start_block(self, msg: StreamStart, wal_start: Lsn) -> BufferedTransaction:
        """The transaction a Stream Start opens a block of.

        A first segment always starts a fresh buffer: if one is already held for that xid, the
        walsender is streaming it again from the beginning (it restarted decoding), so the old
        copy is dropped rather than duplicated.
        """
        held = self._by_xid.get(msg.xid)
        if msg.first_segment:
            if held is not None:
                held.discard()
            txn = BufferedTransaction(
                xid=msg.xid,
                first_lsn=wal_start,
                buffer=self._store.new_buffer(msg.xid),
                overlay=RelationOverlay(self._relations),
                phase=TxnPhase.STREAMING,
            )
            self._by_xid[msg.xid] = txn
            return txn
        if held is None:
            raise FatalError(
                f"stream block for transaction {msg.xid} continues a stream whose first segment "
                "was not received",
                hint=MISSING_CHANGES_HINT,
            )
        return held

    def abort(self, msg: StreamAbort) -> bool:
        """Drop the whole transaction (subxid == xid) or exactly one subtransaction's changes;
        True if a whole held transaction was dropped.

        An abort for an xid that is not held needs no action: nothing of it was buffered.
        """
        txn = self._by_xid.get(msg.xid)
        if txn is None:
            return False
        if msg.subxid == msg.xid:
            del self._by_xid[msg.xid]
            txn.discard()
            return True
        txn.buffer.drop_subtransaction(msg.subxid)
        return False

    def take(self, xid: int, *, event: str) -> BufferedTransaction:
        """Detach a transaction whose outcome arrived and publish its relation metadata."""
        txn = self._by_xid.pop(xid, None)
        if txn is None:
            raise FatalError(
                f"{event} for streamed transaction {xid}, but none of its stream blocks were received",
                hint=MISSING_CHANGES_HINT,
            )
        if txn.overlay is not None:
            txn.overlay.merge()
            txn.overlay = None
        return txn

    def discard_all(self) -> None:
        for txn in self._by_xid.values():
            txn.discard()
        self._by_xid.clear()
