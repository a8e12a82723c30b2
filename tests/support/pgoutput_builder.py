"""A test-side pgoutput encoder: builds the bytes Postgres would send for each ``messages`` dataclass.

It is the mirror image of ``pgbridge.decode.pgoutput`` and written independently of it (its own
struct formats, taken from the protocol manual; nothing from ``decode/reader.py``), so a round trip
checks two readings of the spec against each other rather than one against itself. It refuses what
the given protocol version or stream position could not carry (an xid outside a stream block, a
two-phase message on protocol 2), so a test that asks for impossible bytes fails here, loudly.
For deliberately broken frames, build a valid one and cut or patch it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

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
    TupleData,
    TypeInfo,
    Update,
)

__all__ = ["encode_message", "encode_tuple", "unhex"]


def unhex(dump: str) -> bytes:
    """Bytes from a readable hex dump: whitespace is ignored and ``#`` starts a comment."""
    return bytes.fromhex(" ".join(line.split("#", 1)[0] for line in dump.splitlines()))


def _cstring(text: str) -> bytes:
    raw = text.encode("utf-8")
    if b"\0" in raw:
        raise ValueError(f"{text!r} contains NUL; pgoutput strings are NUL-terminated")
    return raw + b"\0"


def encode_tuple(data: TupleData) -> bytes:
    """TupleData: Int16 column count, then per column 'n', 'u', or 't'/'b' + Int32 length + bytes."""
    if len(data.kinds) != len(data.values):
        raise ValueError(f"{len(data.kinds)} kinds for {len(data.values)} values")
    out = bytearray(struct.pack(">H", len(data.kinds)))
    for kind, value in zip(data.kinds, data.values, strict=True):
        if kind in b"nu":
            if value is not None:
                raise ValueError(f"column kind {chr(kind)!r} carries no value, got {value!r}")
            out.append(kind)
        elif kind in b"tb":
            if value is None:
                raise ValueError(f"column kind {chr(kind)!r} needs a value")
            out.append(kind)
            out += struct.pack(">I", len(value))
            out += value
        else:
            raise ValueError(f"unknown column kind {kind:#x}")
    return bytes(out)


def _streamed_xid(xid: int | None, in_stream: bool, what: str) -> bytes:
    """The Int32 xid that R/Y/I/U/D/T/M carry inside a stream block, and only there."""
    if in_stream:
        if xid is None:
            raise ValueError(f"{what} inside a stream block needs its xid")
        return struct.pack(">I", xid)
    if xid is not None:
        raise ValueError(f"{what} outside a stream block carries no xid, got {xid}")
    return b""


def _begin(msg: Begin, proto_version: int, in_stream: bool) -> bytes:
    return b"B" + struct.pack(">QqI", msg.final_lsn, msg.commit_ts, msg.xid)


def _logical_message(msg: LogicalMessage, proto_version: int, in_stream: bool) -> bytes:
    return (
        b"M"
        + _streamed_xid(msg.xid, in_stream, "Message")
        + struct.pack(">BQ", 1 if msg.transactional else 0, msg.lsn)
        + _cstring(msg.prefix)
        + struct.pack(">I", len(msg.content))
        + msg.content
    )


def _commit(msg: Commit, proto_version: int, in_stream: bool) -> bytes:
    return b"C" + struct.pack(">BQQq", msg.flags, msg.commit_lsn, msg.end_lsn, msg.commit_ts)


def _origin(msg: Origin, proto_version: int, in_stream: bool) -> bytes:
    return b"O" + struct.pack(">Q", msg.origin_lsn) + _cstring(msg.name)


def _relation(msg: Relation, proto_version: int, in_stream: bool) -> bytes:
    if len(msg.replica_identity) != 1:
        raise ValueError(f"replica identity is one byte, got {msg.replica_identity!r}")
    out = bytearray(b"R" + _streamed_xid(msg.xid, in_stream, "Relation"))
    out += struct.pack(">I", msg.rel_id) + _cstring(msg.namespace) + _cstring(msg.name)
    out += struct.pack(">BH", ord(msg.replica_identity), len(msg.columns))
    for column in msg.columns:
        out += struct.pack(">B", 1 if column.is_key else 0) + _cstring(column.name)
        out += struct.pack(">Ii", column.type_oid, column.type_modifier)
    return bytes(out)


def _type(msg: TypeInfo, proto_version: int, in_stream: bool) -> bytes:
    return (
        b"Y"
        + _streamed_xid(msg.xid, in_stream, "Type")
        + struct.pack(">I", msg.type_oid)
        + _cstring(msg.namespace)
        + _cstring(msg.name)
    )


def _insert(msg: Insert, proto_version: int, in_stream: bool) -> bytes:
    return (
        b"I"
        + _streamed_xid(msg.xid, in_stream, "Insert")
        + struct.pack(">I", msg.rel_id)
        + b"N"
        + encode_tuple(msg.new)
    )


def _update(msg: Update, proto_version: int, in_stream: bool) -> bytes:
    out = b"U" + _streamed_xid(msg.xid, in_stream, "Update") + struct.pack(">I", msg.rel_id)
    if (msg.old_kind is None) != (msg.old is None):
        raise ValueError("Update needs both old_kind and old, or neither")
    if msg.old_kind is not None and msg.old is not None:
        out += msg.old_kind.encode("ascii") + encode_tuple(msg.old)
    return out + b"N" + encode_tuple(msg.new)


def _delete(msg: Delete, proto_version: int, in_stream: bool) -> bytes:
    return (
        b"D"
        + _streamed_xid(msg.xid, in_stream, "Delete")
        + struct.pack(">I", msg.rel_id)
        + msg.old_kind.encode("ascii")
        + encode_tuple(msg.old)
    )


def _truncate(msg: Truncate, proto_version: int, in_stream: bool) -> bytes:
    return (
        b"T"
        + _streamed_xid(msg.xid, in_stream, "Truncate")
        + struct.pack(f">IB{len(msg.rel_ids)}I", len(msg.rel_ids), msg.options, *msg.rel_ids)
    )


def _stream_start(msg: StreamStart, proto_version: int, in_stream: bool) -> bytes:
    return b"S" + struct.pack(">IB", msg.xid, 1 if msg.first_segment else 0)


def _stream_stop(msg: StreamStop, proto_version: int, in_stream: bool) -> bytes:
    return b"E"


def _stream_commit(msg: StreamCommit, proto_version: int, in_stream: bool) -> bytes:
    return b"c" + struct.pack(">IBQQq", msg.xid, msg.flags, msg.commit_lsn, msg.end_lsn, msg.commit_ts)


def _stream_abort(msg: StreamAbort, proto_version: int, in_stream: bool) -> bytes:
    """Abort LSN and timestamp ride along on protocol 4 when streaming = parallel; never before."""
    out = b"A" + struct.pack(">II", msg.xid, msg.subxid)
    if msg.abort_lsn is None and msg.abort_ts is None:
        return out
    if msg.abort_lsn is None or msg.abort_ts is None:
        raise ValueError("Stream Abort needs both abort_lsn and abort_ts, or neither")
    if proto_version < 4:
        raise ValueError(f"Stream Abort carries abort_lsn/abort_ts from protocol 4, not {proto_version}")
    return out + struct.pack(">Qq", msg.abort_lsn, msg.abort_ts)


def _begin_prepare(msg: BeginPrepare, proto_version: int, in_stream: bool) -> bytes:
    return (
        b"b" + struct.pack(">QQqI", msg.prepare_lsn, msg.end_lsn, msg.prepare_ts, msg.xid) + _cstring(msg.gid)
    )


def _prepare(msg: Prepare, proto_version: int, in_stream: bool) -> bytes:
    return (
        b"P"
        + struct.pack(">BQQqI", msg.flags, msg.prepare_lsn, msg.end_lsn, msg.prepare_ts, msg.xid)
        + _cstring(msg.gid)
    )


def _commit_prepared(msg: CommitPrepared, proto_version: int, in_stream: bool) -> bytes:
    return (
        b"K"
        + struct.pack(">BQQqI", msg.flags, msg.commit_lsn, msg.end_lsn, msg.commit_ts, msg.xid)
        + _cstring(msg.gid)
    )


def _rollback_prepared(msg: RollbackPrepared, proto_version: int, in_stream: bool) -> bytes:
    return (
        b"r"
        + struct.pack(
            ">BQQqqI",
            msg.flags,
            msg.prepare_end_lsn,
            msg.rollback_end_lsn,
            msg.prepare_ts,
            msg.rollback_ts,
            msg.xid,
        )
        + _cstring(msg.gid)
    )


def _stream_prepare(msg: StreamPrepare, proto_version: int, in_stream: bool) -> bytes:
    return (
        b"p"
        + struct.pack(">BQQqI", msg.flags, msg.prepare_lsn, msg.end_lsn, msg.prepare_ts, msg.xid)
        + _cstring(msg.gid)
    )


# message class -> (first protocol version that has it, encoder)
_ENCODERS: dict[type[Any], tuple[int, Callable[[Any, int, bool], bytes]]] = {
    Begin: (1, _begin),
    LogicalMessage: (1, _logical_message),
    Commit: (1, _commit),
    Origin: (1, _origin),
    Relation: (1, _relation),
    TypeInfo: (1, _type),
    Insert: (1, _insert),
    Update: (1, _update),
    Delete: (1, _delete),
    Truncate: (1, _truncate),
    StreamStart: (2, _stream_start),
    StreamStop: (2, _stream_stop),
    StreamCommit: (2, _stream_commit),
    StreamAbort: (2, _stream_abort),
    BeginPrepare: (3, _begin_prepare),
    Prepare: (3, _prepare),
    CommitPrepared: (3, _commit_prepared),
    RollbackPrepared: (3, _rollback_prepared),
    StreamPrepare: (3, _stream_prepare),
}


def encode_message(msg: Message, *, proto_version: int, in_stream: bool = False) -> bytes:
    """The pgoutput bytes (an XLogData payload) for ``msg`` on ``proto_version``.

    ``in_stream`` means between Stream Start and Stream Stop, where xid-bearing messages carry it.
    """
    if not 1 <= proto_version <= 4:
        raise ValueError(f"pgoutput protocol versions are 1 to 4, not {proto_version}")
    if in_stream and proto_version < 2:
        raise ValueError("stream blocks exist from protocol 2")
    since, encode = _ENCODERS[type(msg)]
    if proto_version < since:
        raise ValueError(f"{type(msg).__name__} exists from protocol {since}, not {proto_version}")
    return encode(msg, proto_version, in_stream)
