"""What the assemble stage hands to the encoder: commit-ordered transaction events.

A committed transaction reaches the encoder as ``TxBegin``, its changes in order, then ``TxEnd``;
transactions never interleave. A plain (non-streamed) transaction is already committed when
Postgres sends its BEGIN, so its changes flow through without buffering; streamed and prepared
transactions are buffered (and spilled) until their commit and then replayed in the same shape.
A non-transactional logical message arrives on its own as ``StandaloneMessage``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

from pgbridge.decode.messages import OldKind, Relation, TupleData
from pgbridge.lsn import Lsn

ChangeOp = Literal["c", "u", "d"]


@dataclass(frozen=True, slots=True)
class TxBegin:
    xid: int
    first_lsn: Lsn  # WAL position of the BEGIN frame: where a restart must re-read from
    commit_lsn: Lsn  # LSN of the commit record (Begin.final_lsn / StreamCommit / CommitPrepared)
    commit_ts: int  # microseconds since 2000-01-01, as on the wire
    gid: str | None = None  # prepared transactions: the user's GID


@dataclass(frozen=True, slots=True)
class TxOrigin:
    name: str
    origin_lsn: Lsn


class RowChange(NamedTuple):
    """One row's change; a named tuple because one is built per row (``tuple.__new__`` in
    assemble/transaction.py: a third of a slotted dataclass's cost)."""

    op: ChangeOp
    relation: Relation  # the Relation in force when the change was decoded
    lsn: Lsn  # WAL position of the change
    old_kind: OldKind | None
    old: TupleData | None
    new: TupleData | None


@dataclass(frozen=True, slots=True)
class TruncateChange:
    relations: tuple[Relation, ...]
    options: int
    lsn: Lsn


@dataclass(frozen=True, slots=True)
class MessageChange:
    """A transactional ``pg_logical_emit_message`` inside a transaction."""

    prefix: str
    content: bytes
    lsn: Lsn


@dataclass(frozen=True, slots=True)
class TxEnd:
    xid: int
    commit_lsn: Lsn
    end_lsn: Lsn  # end of the commit record: the LSN to confirm once everything before is acked
    commit_ts: int


@dataclass(frozen=True, slots=True)
class StandaloneMessage:
    """A non-transactional logical message: published immediately, outside any transaction."""

    prefix: str
    content: bytes
    lsn: Lsn


Change = RowChange | TruncateChange | MessageChange
AssembledEvent = TxBegin | TxOrigin | RowChange | TruncateChange | MessageChange | TxEnd | StandaloneMessage
