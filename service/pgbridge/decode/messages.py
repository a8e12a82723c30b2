"""One dataclass per pgoutput message (protocol versions 1 to 4).

Timestamps stay in the wire's unit (microseconds since 2000-01-01) and LSNs stay ints; converting
them is the encoder's job, so decoding allocates as little as possible. ``xid`` fields that only
exist inside a streamed block (protocol 2+) are ``None`` outside one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from pgbridge.lsn import Lsn

# Column kinds inside TupleData, as the wire spells them.
KIND_NULL: Final = ord("n")
KIND_UNCHANGED_TOAST: Final = ord("u")
KIND_TEXT: Final = ord("t")
KIND_BINARY: Final = ord("b")

# Relation.replica_identity values (pg_class.relreplident).
IDENTITY_DEFAULT: Final = "d"
IDENTITY_NOTHING: Final = "n"
IDENTITY_FULL: Final = "f"
IDENTITY_INDEX: Final = "i"

# Update/Delete old-tuple part markers.
OldKind = Literal["K", "O"]

# Postgres epoch (2000-01-01) in microseconds since the Unix epoch.
PG_EPOCH_UNIX_US: Final = 946_684_800_000_000


@dataclass(frozen=True, slots=True)
class TupleData:
    """Column values of one row. ``kinds[i]`` is one of ``b"ntub"``; ``values[i]`` holds the raw
    bytes for ``t``/``b`` columns and ``None`` for ``n``/``u``."""

    kinds: bytes
    values: tuple[bytes | None, ...]


@dataclass(frozen=True, slots=True)
class Column:
    is_key: bool
    name: str
    type_oid: int
    type_modifier: int


@dataclass(frozen=True, slots=True)
class Begin:
    final_lsn: Lsn
    commit_ts: int
    xid: int


@dataclass(frozen=True, slots=True)
class LogicalMessage:
    xid: int | None
    transactional: bool
    lsn: Lsn
    prefix: str
    content: bytes


@dataclass(frozen=True, slots=True)
class Commit:
    flags: int
    commit_lsn: Lsn
    end_lsn: Lsn
    commit_ts: int


@dataclass(frozen=True, slots=True)
class Origin:
    origin_lsn: Lsn
    name: str


@dataclass(frozen=True, slots=True)
class Relation:
    xid: int | None
    rel_id: int
    namespace: str
    name: str
    replica_identity: str
    columns: tuple[Column, ...]


@dataclass(frozen=True, slots=True)
class TypeInfo:
    """The 'Y' message: a non-builtin type's name, sent before a Relation that uses it."""

    xid: int | None
    type_oid: int
    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class Insert:
    xid: int | None
    rel_id: int
    new: TupleData


@dataclass(frozen=True, slots=True)
class Update:
    xid: int | None
    rel_id: int
    old_kind: OldKind | None
    old: TupleData | None
    new: TupleData


@dataclass(frozen=True, slots=True)
class Delete:
    xid: int | None
    rel_id: int
    old_kind: OldKind
    old: TupleData


@dataclass(frozen=True, slots=True)
class Truncate:
    xid: int | None
    options: int
    rel_ids: tuple[int, ...]

    @property
    def cascade(self) -> bool:
        return bool(self.options & 1)

    @property
    def restart_identity(self) -> bool:
        return bool(self.options & 2)


@dataclass(frozen=True, slots=True)
class StreamStart:
    xid: int
    first_segment: bool


@dataclass(frozen=True, slots=True)
class StreamStop:
    pass


@dataclass(frozen=True, slots=True)
class StreamCommit:
    xid: int
    flags: int
    commit_lsn: Lsn
    end_lsn: Lsn
    commit_ts: int


@dataclass(frozen=True, slots=True)
class StreamAbort:
    xid: int
    subxid: int
    abort_lsn: Lsn | None  # protocol 4+
    abort_ts: int | None  # protocol 4+


@dataclass(frozen=True, slots=True)
class BeginPrepare:
    prepare_lsn: Lsn
    end_lsn: Lsn
    prepare_ts: int
    xid: int
    gid: str


@dataclass(frozen=True, slots=True)
class Prepare:
    flags: int
    prepare_lsn: Lsn
    end_lsn: Lsn
    prepare_ts: int
    xid: int
    gid: str


@dataclass(frozen=True, slots=True)
class CommitPrepared:
    flags: int
    commit_lsn: Lsn
    end_lsn: Lsn
    commit_ts: int
    xid: int
    gid: str


@dataclass(frozen=True, slots=True)
class RollbackPrepared:
    flags: int
    prepare_end_lsn: Lsn
    rollback_end_lsn: Lsn
    prepare_ts: int
    rollback_ts: int
    xid: int
    gid: str


@dataclass(frozen=True, slots=True)
class StreamPrepare:
    flags: int
    prepare_lsn: Lsn
    end_lsn: Lsn
    prepare_ts: int
    xid: int
    gid: str


Message = (
    Begin | LogicalMessage | Commit | Origin | Relation | TypeInfo | Insert | Update | Delete | Truncate
    | StreamStart | StreamStop | StreamCommit | StreamAbort
    | BeginPrepare | Prepare | CommitPrepared | RollbackPrepared | StreamPrepare
)
