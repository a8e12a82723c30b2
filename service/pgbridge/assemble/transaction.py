"""The assemble stage: decoded pgoutput messages in, commit-ordered transaction events out.

A plain transaction is only sent by Postgres once it has committed, so its events flow straight
through. Streamed transactions (sent while still running) and two-phase transactions (sent at
PREPARE) are buffered, spilled to disk past the memory budget, and replayed as one uninterrupted
``TxBegin ... TxEnd`` run when their commit arrives; aborted work never leaves this stage.

Why ``oldest_unfinished_lsn`` exists
------------------------------------
The slot's confirmed flush LSN is a promise to Postgres that everything before it has been
consumed: after a restart the walsender resumes there and treats older work as delivered. The
ack tracker advances that LSN from Kafka acknowledgements and from keepalives when nothing is in
flight, but neither can see what this stage holds and has not published yet: a plain
transaction whose COMMIT has not arrived, streamed transactions buffered until STREAM COMMIT,
prepared transactions waiting for COMMIT PREPARED, and committed ones still being replayed.
Their data exists only in this process (memory and spill files, which are deleted at start-up),
so if the confirmed LSN moved past the start of any of them a crash would lose it unless
Postgres decoded it again. For ordinary transactions Postgres usually would, since their commit
lies after the confirmed LSN. For two-phase ones it would not: a PREPARE before the confirmed LSN
counts as delivered, and after a restart Postgres sends only COMMIT PREPARED, whose changes we no
longer have. So the pipeline caps every confirmation below ``oldest_unfinished_lsn()`` (the WAL
start of the oldest such transaction) and confirms a keepalive position only when
``is_idle()``. A restart then always begins early enough for Postgres to re-send every
unpublished transaction in full, and the re-sent copy replaces anything still held.

Session state machine (one replication connection)::

    IDLE --Begin--------> IN_TRANSACTION --Commit--> IDLE       (events pass through)
    IDLE --BeginPrepare-> IN_PREPARE ------Prepare-> IDLE       (held by GID)
    IDLE --StreamStart--> IN_STREAM_BLOCK --StreamStop-> IDLE   (buffered by xid)
    IDLE: StreamCommit / CommitPrepared replay a buffered transaction; StreamAbort,
          RollbackPrepared drop one; StreamPrepare moves one from streamed to prepared.
    any --close()--> CLOSED

Relation/Type messages and non-transactional logical messages are accepted in every open state.
Anything else out of place raises ``InvariantError``: the stream broke an ordering rule, and
retrying would read the same bytes.
"""

from __future__ import annotations

import enum
import pathlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Final

from pgbridge.assemble.capture import CaptureFilter
from pgbridge.assemble.prepared import PreparedTransactions
from pgbridge.assemble.relations import RelationCache
from pgbridge.assemble.spill import BufferedEvent, SpillStore
from pgbridge.assemble.streamed import BufferedTransaction, StreamedTransactions
from pgbridge.assemble.units import (
    AssembledEvent,
    MessageChange,
    RowChange,
    StandaloneMessage,
    TruncateChange,
    TxBegin,
    TxEnd,
    TxOrigin,
)
from pgbridge.decode.messages import (
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    Delete,
    Insert,
    LogicalMessage,
    Message,
    Origin,
    Prepare,
    Relation,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    StreamStop,
    Truncate,
    TypeInfo,
    Update,
)
from pgbridge.errors import InvariantError
from pgbridge.lsn import Lsn, format_lsn
from pgbridge.metrics import OUTCOME_ABORTED, OUTCOME_PREPARED, OUTCOME_ROLLED_BACK

ChangeMessage = Insert | Update | Delete | Truncate | LogicalMessage | Origin
OUTCOMES = (OUTCOME_ABORTED, OUTCOME_PREPARED, OUTCOME_ROLLED_BACK)
"""Outcomes the assembler counts; a committed transaction is counted where its ``TxEnd`` is handled."""

_CHANGE_TYPES = (Insert, Update, Delete, Truncate, LogicalMessage, Origin)

RelationLookup = Callable[[int], Relation]


class SessionState(enum.Enum):
    IDLE = "idle"  # between transactions and stream blocks
    IN_TRANSACTION = "in a transaction"  # plain Begin ... Commit
    IN_PREPARE = "in a prepared transaction"  # Begin Prepare ... Prepare
    IN_STREAM_BLOCK = "in a stream block"  # Stream Start ... Stream Stop
    CLOSED = "closed"


_IN_TRANSACTION: Final = SessionState.IN_TRANSACTION  # a module global: ``plain_row`` reads it every row


@dataclass(frozen=True, slots=True)
class _PlainTransaction:
    xid: int
    first_lsn: Lsn
    final_lsn: Lsn


_new_tuple = tuple.__new__


def row_event(msg: Insert | Update | Delete, wal_start: Lsn, relation: Relation) -> RowChange:
    """The ``RowChange`` of an Insert, Update or Delete of ``relation`` (the Relation in force); one
    per row, so the tuple is built directly, without the named tuple's ``__new__``."""
    if isinstance(msg, Insert):
        return _new_tuple(RowChange, ("c", relation, wal_start, None, None, msg.new))
    if isinstance(msg, Update):
        return _new_tuple(RowChange, ("u", relation, wal_start, msg.old_kind, msg.old, msg.new))
    return _new_tuple(RowChange, ("d", relation, wal_start, msg.old_kind, msg.old, None))


def change_event(msg: ChangeMessage, wal_start: Lsn, relation_of: RelationLookup) -> BufferedEvent:
    """The event for one change message; ``relation_of`` resolves the Relation in force now."""
    if isinstance(msg, (Insert, Update, Delete)):
        return row_event(msg, wal_start, relation_of(msg.rel_id))
    if isinstance(msg, Truncate):
        return TruncateChange(relations=tuple(relation_of(rel_id) for rel_id in msg.rel_ids),
                              options=msg.options, lsn=wal_start)
    if isinstance(msg, LogicalMessage):
        return MessageChange(prefix=msg.prefix, content=msg.content, lsn=msg.lsn)
    assert isinstance(msg, Origin)
    return TxOrigin(name=msg.name, origin_lsn=msg.origin_lsn)


def _unexpected(msg: Message, state: SessionState, wal_start: Lsn) -> InvariantError:
    what = type(msg).__name__
    if state is SessionState.IDLE and isinstance(msg, _CHANGE_TYPES):
        detail = f"{what} outside a transaction"
    elif state is SessionState.IDLE and isinstance(msg, Commit):
        detail = "Commit without a Begin"
    else:
        detail = f"{what} while {state.value}"
    return InvariantError(f"replication stream out of order: {detail} at {format_lsn(wal_start)}")


class TransactionAssembler:
    """Turns pgoutput messages into commit-ordered ``AssembledEvent`` runs, memory-bounded.

    ``feed`` changes state before it returns; the events it returns must be consumed in order
    before the next call's. A buffered transaction's replay is lazy (it reads its spill file as
    it goes) and counts as unfinished until it is exhausted or closed.
    """

    def __init__(self, *, memory_bytes: int, spill_dir: pathlib.Path, capture: CaptureFilter | None = None) -> None:
        self._relations = RelationCache()
        self._relation_of = self._relations.by_oid.get  # ``plain_row`` looks a row's relation up here
        self._capture = capture  # postgres.table_include/exclude: drops changes of unselected tables
        self._store = SpillStore(spill_dir=spill_dir, memory_bytes=memory_bytes)
        self._streams = StreamedTransactions(store=self._store, relations=self._relations)
        self._prepared = PreparedTransactions(store=self._store)
        self._state = SessionState.IDLE
        self._plain: _PlainTransaction | None = None
        self._current: BufferedTransaction | None = None  # IN_PREPARE or IN_STREAM_BLOCK
        self._replaying: set[BufferedTransaction] = set()
        self._last_commit_lsn: Lsn | None = None
        self._outcomes: dict[str, int] = dict.fromkeys(OUTCOMES, 0)

    @property
    def relations(self) -> RelationCache:
        return self._relations

    @property
    def state(self) -> SessionState:
        return self._state

    @property
    def buffered_bytes(self) -> int:
        """Bytes (estimated) held in memory by buffered transactions now."""
        return self._store.memory_bytes

    @property
    def spilled_bytes_total(self) -> int:
        """Bytes ever written to spill files by this assembler."""
        return self._store.spilled_bytes_total

    @property
    def outcome_totals(self) -> dict[str, int]:
        """Running totals by outcome (``OUTCOMES``): streamed transactions aborted as a whole,
        transactions held at PREPARE (again after a restart re-sends them), ROLLBACK PREPAREDs."""
        return dict(self._outcomes)

    def feed(self, msg: Message, wal_start: Lsn) -> Iterable[AssembledEvent]:
        """Advance on one message; ``wal_start`` is the XLogData start LSN that carried it."""
        if self._state is SessionState.CLOSED:
            raise InvariantError("message fed to a closed transaction assembler")
        if isinstance(msg, (Relation, TypeInfo)):
            self._apply_metadata(msg)
            return ()
        if isinstance(msg, LogicalMessage) and not msg.transactional:
            return (StandaloneMessage(prefix=msg.prefix, content=msg.content, lsn=msg.lsn),)
        if self._state is SessionState.IDLE:
            return self._feed_idle(msg, wal_start)
        if self._state is SessionState.IN_TRANSACTION:
            return self._feed_transaction(msg, wal_start)
        if self._state is SessionState.IN_PREPARE:
            return self._feed_prepare(msg, wal_start)
        return self._feed_stream_block(msg, wal_start)

    def plain_row(self, msg: Insert | Update | Delete, wal_start: Lsn) -> RowChange | None:
        """The streaming loop's hot path: the change of a row message that a plain transaction
        hands on as it comes (what ``feed`` would return for it alone); ``None`` when ``feed``
        must take the message (no plain transaction open, or a table the capture filter drops,
        which ``feed`` counts). One call a row: the relation comes from the cache's dict, the
        change is built as ``row_event`` builds it, inline."""
        if self._state is not _IN_TRANSACTION:
            return None
        rel_id = msg.rel_id
        relation = self._relation_of(rel_id)
        if relation is None:
            relation = self._relations.get(rel_id)  # raises: no Relation message for it
        capture = self._capture
        if capture is not None and not capture.selects(relation):
            return None
        kind = type(msg)
        if kind is Insert:
            return _new_tuple(RowChange, ("c", relation, wal_start, None, None, msg.new))  # type: ignore[union-attr]
        if kind is Update:
            return _new_tuple(RowChange, ("u", relation, wal_start, msg.old_kind, msg.old, msg.new))  # type: ignore[union-attr]
        return _new_tuple(RowChange, ("d", relation, wal_start, msg.old_kind, msg.old, None))  # type: ignore[union-attr]

    def oldest_unfinished_lsn(self) -> Lsn | None:
        """WAL start of the oldest transaction begun but not yet fully handed downstream."""
        starts = [*self._streams.first_lsns(), *self._prepared.first_lsns()]
        starts.extend(txn.first_lsn for txn in self._replaying)
        if self._plain is not None:
            starts.append(self._plain.first_lsn)
        if self._current is not None:
            starts.append(self._current.first_lsn)
        return min(starts, default=None)

    def is_idle(self) -> bool:
        """Nothing open, buffered, prepared or replaying: a keepalive position may be confirmed."""
        return (self._state is SessionState.IDLE and not self._streams and not self._prepared
                and not self._replaying)

    def reset_connection(self) -> None:
        """Forget what belonged to a lost replication connection, before reconnecting.

        Postgres will re-send, from the confirmed LSN, every transaction that was open or
        streamed, so those buffers are dropped (a streamed transaction that aborts meanwhile may
        never be mentioned again and would pin the slot forever). Prepared transactions are kept:
        a re-sent PREPARE replaces them, and if only COMMIT PREPARED comes they are still here.
        """
        if self._state is SessionState.CLOSED:
            raise InvariantError("reset_connection on a closed transaction assembler")
        if self._state is SessionState.IN_PREPARE and self._current is not None:
            self._current.discard()
        self._streams.discard_all()
        self._plain = None
        self._current = None
        self._last_commit_lsn = None
        self._state = SessionState.IDLE

    def close(self) -> None:
        """Release all buffers and delete every spill file; the assembler accepts nothing after."""
        if self._state is SessionState.CLOSED:
            return
        if self._state is SessionState.IN_PREPARE and self._current is not None:
            self._current.discard()
        self._streams.discard_all()
        self._prepared.discard_all()
        for txn in self._replaying:
            txn.discard()
        self._replaying.clear()
        self._plain = None
        self._current = None
        self._state = SessionState.CLOSED

    # -- per-state transitions -------------------------------------------------------------

    def _feed_idle(self, msg: Message, wal_start: Lsn) -> Iterable[AssembledEvent]:
        if isinstance(msg, Begin):
            self._check_commit_order(msg.final_lsn, "BEGIN")
            self._plain = _PlainTransaction(xid=msg.xid, first_lsn=wal_start, final_lsn=msg.final_lsn)
            self._state = SessionState.IN_TRANSACTION
            return (TxBegin(xid=msg.xid, first_lsn=wal_start, commit_lsn=msg.final_lsn,
                            commit_ts=msg.commit_ts),)
        if isinstance(msg, StreamStart):
            self._current = self._streams.start_block(msg, wal_start)
            self._state = SessionState.IN_STREAM_BLOCK
            return ()
        if isinstance(msg, StreamAbort):
            if self._streams.abort(msg):
                self._outcomes[OUTCOME_ABORTED] += 1
            return ()
        if isinstance(msg, StreamCommit):
            self._check_commit_order(msg.commit_lsn, "STREAM COMMIT")
            txn = self._streams.take(msg.xid, event="STREAM COMMIT")
            return self._replay(
                txn,
                TxBegin(xid=txn.xid, first_lsn=txn.first_lsn, commit_lsn=msg.commit_lsn,
                        commit_ts=msg.commit_ts),
                TxEnd(xid=txn.xid, commit_lsn=msg.commit_lsn, end_lsn=msg.end_lsn, commit_ts=msg.commit_ts),
            )
        if isinstance(msg, StreamPrepare):
            self._prepared.hold_streamed(self._streams.take(msg.xid, event="STREAM PREPARE"), msg)
            self._outcomes[OUTCOME_PREPARED] += 1
            return ()
        if isinstance(msg, BeginPrepare):
            self._current = self._prepared.begin(msg, wal_start)
            self._state = SessionState.IN_PREPARE
            return ()
        if isinstance(msg, CommitPrepared):
            self._check_commit_order(msg.commit_lsn, "COMMIT PREPARED")
            txn = self._prepared.take_committed(msg)
            return self._replay(
                txn,
                TxBegin(xid=txn.xid, first_lsn=txn.first_lsn, commit_lsn=msg.commit_lsn,
                        commit_ts=msg.commit_ts, gid=msg.gid),
                TxEnd(xid=txn.xid, commit_lsn=msg.commit_lsn, end_lsn=msg.end_lsn, commit_ts=msg.commit_ts),
            )
        if isinstance(msg, RollbackPrepared):
            self._prepared.rollback(msg)  # not held: nothing of it was buffered, nothing to drop
            self._outcomes[OUTCOME_ROLLED_BACK] += 1
            return ()
        raise _unexpected(msg, self._state, wal_start)

    def _feed_transaction(self, msg: Message, wal_start: Lsn) -> Iterable[AssembledEvent]:
        plain = self._plain
        assert plain is not None  # IN_TRANSACTION always has one
        if isinstance(msg, _CHANGE_TYPES):
            event = self._change(msg, wal_start, self._relations.get)
            return () if event is None else (event,)
        if isinstance(msg, Commit):
            if msg.commit_lsn != plain.final_lsn:
                raise InvariantError(
                    f"COMMIT of xid {plain.xid} at {format_lsn(msg.commit_lsn)} does not match the "
                    f"final LSN {format_lsn(plain.final_lsn)} announced by its BEGIN"
                )
            self._last_commit_lsn = msg.commit_lsn
            self._plain = None
            self._state = SessionState.IDLE
            return (TxEnd(xid=plain.xid, commit_lsn=msg.commit_lsn, end_lsn=msg.end_lsn,
                          commit_ts=msg.commit_ts),)
        raise _unexpected(msg, self._state, wal_start)

    def _feed_prepare(self, msg: Message, wal_start: Lsn) -> Iterable[AssembledEvent]:
        txn = self._current
        assert txn is not None  # IN_PREPARE always has one
        if isinstance(msg, _CHANGE_TYPES):
            event = self._change(msg, wal_start, self._relations.get)
            if event is not None:
                txn.add(txn.xid, event)
            return ()
        if isinstance(msg, Prepare):
            self._prepared.finish(txn, msg)
            self._outcomes[OUTCOME_PREPARED] += 1
            self._current = None
            self._state = SessionState.IDLE
            return ()
        raise _unexpected(msg, self._state, wal_start)

    def _feed_stream_block(self, msg: Message, wal_start: Lsn) -> Iterable[AssembledEvent]:
        txn = self._current
        assert txn is not None and txn.overlay is not None  # IN_STREAM_BLOCK always has one
        if isinstance(msg, StreamStop):
            self._current = None
            self._state = SessionState.IDLE
            return ()
        if isinstance(msg, Origin):
            txn.add(txn.xid, change_event(msg, wal_start, txn.overlay.get))
            return ()
        if isinstance(msg, _CHANGE_TYPES):
            if msg.xid is None:
                raise InvariantError(
                    f"{type(msg).__name__} inside the stream block of xid {txn.xid} carries no xid "
                    f"at {format_lsn(wal_start)}"
                )
            event = self._change(msg, wal_start, txn.overlay.get)
            if event is not None:
                txn.add(msg.xid, event)
            return ()
        raise _unexpected(msg, self._state, wal_start)

    # -- helpers ----------------------------------------------------------------------------

    def _change(self, msg: ChangeMessage, wal_start: Lsn, relation_of: RelationLookup) -> BufferedEvent | None:
        """The change's event, or ``None`` when the capture filter drops it (see assemble/capture.py)."""
        event = change_event(msg, wal_start, relation_of)
        return event if self._capture is None else self._capture.keep(event)

    def _apply_metadata(self, msg: Relation | TypeInfo) -> None:
        if self._state is SessionState.IN_STREAM_BLOCK and self._current is not None:
            assert self._current.overlay is not None
            self._current.overlay.apply(msg)
        else:
            self._relations.apply(msg)

    def _check_commit_order(self, commit_lsn: Lsn, what: str) -> None:
        last = self._last_commit_lsn
        if last is not None and commit_lsn <= last:
            raise InvariantError(
                f"{what} with commit LSN {format_lsn(commit_lsn)} is not after the previous commit "
                f"at {format_lsn(last)}: commit LSNs went backwards"
            )
        self._last_commit_lsn = commit_lsn

    def _replay(self, txn: BufferedTransaction, begin: TxBegin, end: TxEnd) -> Iterator[AssembledEvent]:
        changes = txn.replay()  # the buffer stops accepting changes now, not when iteration starts
        self._replaying.add(txn)
        return self._emit(txn, begin, changes, end)

    def _emit(self, txn: BufferedTransaction, begin: TxBegin, changes: Iterator[BufferedEvent],
              end: TxEnd) -> Iterator[AssembledEvent]:
        try:
            yield begin
            yield from changes
            yield end
        finally:
            self._replaying.discard(txn)
            txn.discard()
