"""Two-phase transactions (protocol 3+): held from PREPARE until COMMIT or ROLLBACK PREPARED.

With ``two_phase`` on, Postgres decodes a transaction at PREPARE TRANSACTION (Begin Prepare ...
Prepare, or Stream Prepare for a streamed one) and later sends only Commit Prepared or Rollback
Prepared, naming it by GID. Its changes may be published only after COMMIT PREPARED, and other
transactions commit in between, so the prepared transaction stays buffered, keyed by GID, until
it is resolved. If the service restarts before that, the walsender decodes the PREPARE again
(the slot was not confirmed past it) and the re-sent copy replaces the held one.
"""

from __future__ import annotations

from collections.abc import Iterator

from pgbridge.assemble.spill import SpillStore
from pgbridge.assemble.streamed import MISSING_CHANGES_HINT, BufferedTransaction, TxnPhase
from pgbridge.decode.messages import BeginPrepare, CommitPrepared, Prepare, RollbackPrepared, StreamPrepare
from pgbridge.errors import FatalError, InvariantError
from pgbridge.lsn import Lsn


class PreparedTransactions:
    """Prepared transactions by GID, waiting for their outcome."""

    def __init__(self, *, store: SpillStore) -> None:
        self._store = store
        self._by_gid: dict[str, BufferedTransaction] = {}

    def __len__(self) -> int:
        return len(self._by_gid)

    def __contains__(self, gid: object) -> bool:
        return gid in self._by_gid

    def first_lsns(self) -> Iterator[Lsn]:
        return (txn.first_lsn for txn in self._by_gid.values())

    def begin(self, msg: BeginPrepare, wal_start: Lsn) -> BufferedTransaction:
        """A fresh buffer for the changes between Begin Prepare and Prepare (not yet held)."""
        return BufferedTransaction(
            xid=msg.xid,
            first_lsn=wal_start,
            buffer=self._store.new_buffer(msg.xid),
            overlay=None,  # not streamed: its Relation messages already went to the shared cache
            phase=TxnPhase.PREPARING,
            gid=msg.gid,
            prepare_lsn=msg.prepare_lsn,
        )

    def finish(self, txn: BufferedTransaction, msg: Prepare) -> None:
        """Prepare closes what Begin Prepare opened; it must name the same transaction."""
        if (msg.xid, msg.gid, msg.prepare_lsn) != (txn.xid, txn.gid, txn.prepare_lsn):
            raise InvariantError(
                f"PREPARE of xid {msg.xid} gid {msg.gid!r} at {msg.prepare_lsn} does not match "
                f"BEGIN PREPARE of xid {txn.xid} gid {txn.gid!r} at {txn.prepare_lsn}"
            )
        self.hold(txn, msg.gid, msg.prepare_lsn)

    def hold_streamed(self, txn: BufferedTransaction, msg: StreamPrepare) -> None:
        """A streamed transaction reached PREPARE: keep it under its GID instead of its xid."""
        self.hold(txn, msg.gid, msg.prepare_lsn)

    def hold(self, txn: BufferedTransaction, gid: str, prepare_lsn: Lsn) -> None:
        """Hold ``txn`` under ``gid``, replacing a copy of the same GID sent before a restart."""
        previous = self._by_gid.pop(gid, None)
        if previous is not None:
            previous.discard()
        txn.gid = gid
        txn.prepare_lsn = prepare_lsn
        txn.phase = TxnPhase.PREPARED
        self._by_gid[gid] = txn

    def take_committed(self, msg: CommitPrepared) -> BufferedTransaction:
        txn = self._by_gid.pop(msg.gid, None)
        if txn is None:
            raise FatalError(
                f"COMMIT PREPARED for gid {msg.gid!r} (xid {msg.xid}), but the prepared "
                "transaction's changes were not received",
                hint=MISSING_CHANGES_HINT,
            )
        if txn.xid != msg.xid:
            self._by_gid[msg.gid] = txn
            raise InvariantError(
                f"COMMIT PREPARED for gid {msg.gid!r} names xid {msg.xid}, but it was prepared as xid {txn.xid}"
            )
        return txn

    def rollback(self, msg: RollbackPrepared) -> bool:
        """Drop a rolled-back prepared transaction; False if it was not held (nothing to drop)."""
        txn = self._by_gid.pop(msg.gid, None)
        if txn is None:
            return False
        txn.discard()
        return True

    def discard_all(self) -> None:
        for txn in self._by_gid.values():
            txn.discard()
        self._by_gid.clear()
