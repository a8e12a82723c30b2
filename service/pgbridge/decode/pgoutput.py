"""Decode one pgoutput message (the XLogData payload, protocol versions 1 to 4) into ``messages``.

Pure: ``decode_message`` keeps no state; ``PgoutputDecoder`` only tracks the Stream Start/Stop
bracket, because inside it Relation, Type, Insert, Update, Delete, Truncate and Message carry an
extra Int32 xid that nothing in the bytes announces.

Dispatch is one 256-slot tuple per protocol version indexed by the tag byte, so a tag the version
does not know costs a single index. Insert/Update/Delete and their TupleData are the hot path (the
goal is millions of rows/s): one big-endian ``unpack_from`` per fixed run of fields, one ``bytes``
slice per column value and no other copies, bounds checked once per tuple rather than per field,
and the frozen dataclasses filled through their slot descriptors, which skips the generic
``object.__setattr__`` of a frozen ``__init__`` (a fifth of the per-row cost, measured).
Everything else is decoded field by field with ``reader.Reader`` for readable, precise errors.

The streaming loop's row entry is ``PgoutputDecoder.read_row``: outside a stream block the
compiled reader (``decode/_native.pyx``), which reads an Insert, Update or Delete in place from
the XLogData frame at the message's offset and builds the message directly; whatever it does not
read (another message, malformed bytes, anything inside a stream block) goes to ``decode``.

Every malformed input raises ``DecodeError`` with the message tag and the byte offset of the
field at fault (offsets count from the tag byte, which is offset 0).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Final, TypeAlias, cast

from pgbridge import native as _native_switch
from pgbridge.decode.messages import (
    Begin,
    Column,
    Commit,
    Delete,
    Insert,
    LogicalMessage,
    Message,
    OldKind,
    Origin,
    Relation,
    StreamAbort,
    StreamCommit,
    StreamStart,
    StreamStop,
    Truncate,
    TupleData,
    TypeInfo,
    Update,
)
from pgbridge.decode.reader import Layout, Reader, trailing, truncated, unpack_u32
from pgbridge.decode.two_phase import (
    decode_begin_prepare,
    decode_commit_prepared,
    decode_prepare,
    decode_rollback_prepared,
    decode_stream_prepare,
)
from pgbridge.errors import DecodeError, InvariantError
from pgbridge.lsn import Lsn
from pgbridge.slotted import new_instance, slot_setters

# The compiled row decoder: the twin of the Insert/Update/Delete decoders and of ``_tuple``'s loop.
_native: Any = _native_switch.load("pgbridge.decode._native")

__all__ = ["MAX_PROTO_VERSION", "MIN_PROTO_VERSION", "PgoutputDecoder", "RowMessage", "decode_message"]

MIN_PROTO_VERSION: Final = 1
MAX_PROTO_VERSION: Final = 4

Buffer: TypeAlias = bytes | bytearray | memoryview
_Decode = Callable[[bytes, bool], Message]

_NEW: Final = 0x4E  # 'N' new tuple follows
_KEY: Final = 0x4B  # 'K' old key follows
_OLD: Final = 0x4F  # 'O' old full row follows


# --- hot path: TupleData, Insert, Update, Delete ------------------------------------------------

_new = new_instance
_set_kinds, _set_values = slot_setters(TupleData, "kinds", "values")
_set_ins_xid, _set_ins_rel, _set_ins_new = slot_setters(Insert, "xid", "rel_id", "new")
_set_upd_xid, _set_upd_rel, _set_upd_old_kind, _set_upd_old, _set_upd_new = slot_setters(
    Update, "xid", "rel_id", "old_kind", "old", "new")
_set_del_xid, _set_del_rel, _set_del_old_kind, _set_del_old = slot_setters(
    Delete, "xid", "rel_id", "old_kind", "old")

# Relation oid, the part marker ('N', 'K' or 'O') and the following TupleData's column count,
# read together; the streamed form has the xid in front.
_ROW: Final = Layout("!IBH", "relation oid", "tuple part marker", "column count")
_ROW_STREAMED: Final = Layout("!IIBH", "xid", "relation oid", "tuple part marker", "column count")
_NEW_PART: Final = Layout("!BH", "'N' marker", "column count")
_unpack_row = cast(Callable[[bytes, int], tuple[int, int, int]], _ROW.struct.unpack_from)
_unpack_row_streamed = cast(Callable[[bytes, int], tuple[int, int, int, int]],
                            _ROW_STREAMED.struct.unpack_from)
_unpack_new_part = cast(Callable[[bytes, int], tuple[int, int]], _NEW_PART.struct.unpack_from)


def _tuple(buf: bytes, pos: int, count: int, tag: str) -> tuple[TupleData, int]:
    """Decode ``count`` columns starting at ``pos``; return the tuple and the offset after it.

    No per-column bounds checks: ``pos`` only grows, a value that overruns pushes it past the end
    and the next read raises, and a final comparison catches an overrun by the last column.
    ``kinds`` stays ``None`` while every column is text, the common case, saving a store a column.
    The compiled twin (``decode/_native.pyx``) does the same loop; on malformed data it returns
    ``None`` and this loop names the fault. ``buf`` is ``bytes`` except for a row message of
    ``IN_PLACE_BYTES`` or more (``_owned``), which this loop reads as the memoryview it arrived in.
    """
    if _native is not None and type(buf) is bytes:  # an in-place huge message (a memoryview): the loop below
        parsed = _native.read_tuple(buf, pos, count)
        if parsed is not None:
            data = _new(TupleData)
            _set_kinds(data, parsed[0])
            _set_values(data, parsed[1])
            return data, parsed[2]
        # Malformed: the loop below finds the same fault and names it.
    values: list[Any] = [None] * count  # bytes, or memoryview slices of an in-place message
    kinds: bytearray | None = None
    unpack = unpack_u32
    start = pos
    try:
        for i in range(count):
            kind = buf[pos]
            if kind == 0x74:  # 't'; a literal, since a global costs a lookup per column
                start = pos + 5
                pos = start + unpack(buf, pos + 1)[0]
                values[i] = buf[start:pos]
                continue
            if kinds is None:
                kinds = bytearray(b"t" * count)
            kinds[i] = kind
            if kind == 0x62:  # 'b'
                start = pos + 5
                pos = start + unpack(buf, pos + 1)[0]
                values[i] = buf[start:pos]
            elif kind in (0x6E, 0x75):  # 'n', 'u'
                pos += 1
            else:
                raise DecodeError(f"unknown column kind byte 0x{kind:02x} in column {i} of {count}",
                                  tag=tag, offset=pos)
    except (IndexError, struct.error):
        raise _tuple_cut(buf, pos, start, tag) from None
    if pos > len(buf):
        raise truncated(tag, start, f"column value ({pos - start} bytes)")
    data = _new(TupleData)
    _set_kinds(data, b"t" * count if kinds is None else bytes(kinds))
    if type(buf) is not bytes:  # a huge message, read in place: each value is copied out once here
        values = [None if value is None else bytes(value) for value in values]
    _set_values(data, tuple(values))
    return data, pos


def _tuple_cut(buf: bytes, pos: int, start: int, tag: str) -> DecodeError:
    """Name the field where a TupleData ran out, from where the fast loop stopped."""
    if pos > len(buf):  # the previous value overran; it started at ``start``
        return truncated(tag, start, f"column value ({pos - start} bytes)")
    if pos == len(buf):
        return truncated(tag, pos, "column kind byte")
    return truncated(tag, pos + 1, "column value length")


def _bad_part(tag: str, marker: int, offset: int, expected: str) -> DecodeError:
    return DecodeError(f"tuple part marker is 0x{marker:02x}, expected {expected}", tag=tag,
                       offset=offset)


def _row_header(buf: bytes, in_stream: bool, tag: str) -> tuple[int | None, int, int, int, int]:
    """Insert/Update/Delete open alike: [xid,] relation oid, part marker, column count.

    Returns those and the offset of the first column.
    """
    try:
        if in_stream:
            xid, rel_id, marker, count = _unpack_row_streamed(buf, 1)
            return xid, rel_id, marker, count, 12
        rel_id, marker, count = _unpack_row(buf, 1)
        return None, rel_id, marker, count, 8
    except struct.error:
        raise (_ROW_STREAMED if in_stream else _ROW).error(buf, tag, 1) from None


def _decode_insert(buf: bytes, in_stream: bool) -> Insert:
    xid, rel_id, marker, count, pos = _row_header(buf, in_stream, "I")
    if marker != _NEW:
        raise _bad_part("I", marker, pos - 3, "'N'")
    new, pos = _tuple(buf, pos, count, "I")
    if pos != len(buf):
        raise trailing("I", pos, len(buf))
    msg = _new(Insert)
    _set_ins_xid(msg, xid)
    _set_ins_rel(msg, rel_id)
    _set_ins_new(msg, new)
    return msg


def _decode_update(buf: bytes, in_stream: bool) -> Update:
    xid, rel_id, marker, count, pos = _row_header(buf, in_stream, "U")
    old_kind: OldKind | None = None
    old: TupleData | None = None
    if marker != _NEW:
        if marker == _KEY:
            old_kind = "K"
        elif marker == _OLD:
            old_kind = "O"
        else:
            raise _bad_part("U", marker, pos - 3, "'K', 'O' or 'N'")
        old, pos = _tuple(buf, pos, count, "U")
        try:
            marker, count = _unpack_new_part(buf, pos)
        except struct.error:
            raise _NEW_PART.error(buf, "U", pos) from None
        if marker != _NEW:
            raise _bad_part("U", marker, pos, "'N'")
        pos += 3
    new, pos = _tuple(buf, pos, count, "U")
    if pos != len(buf):
        raise trailing("U", pos, len(buf))
    msg = _new(Update)
    _set_upd_xid(msg, xid)
    _set_upd_rel(msg, rel_id)
    _set_upd_old_kind(msg, old_kind)
    _set_upd_old(msg, old)
    _set_upd_new(msg, new)
    return msg


def _decode_delete(buf: bytes, in_stream: bool) -> Delete:
    xid, rel_id, marker, count, pos = _row_header(buf, in_stream, "D")
    old_kind: OldKind
    if marker == _KEY:
        old_kind = "K"
    elif marker == _OLD:
        old_kind = "O"
    else:
        raise _bad_part("D", marker, pos - 3, "'K' or 'O'")
    old, pos = _tuple(buf, pos, count, "D")
    if pos != len(buf):
        raise trailing("D", pos, len(buf))
    msg = _new(Delete)
    _set_del_xid(msg, xid)
    _set_del_rel(msg, rel_id)
    _set_del_old_kind(msg, old_kind)
    _set_del_old(msg, old)
    return msg


# --- transaction boundaries: one struct call each, since small transactions make them warm ----

_BEGIN: Final = Layout("!QqI", "final lsn", "commit timestamp", "xid")
_COMMIT: Final = Layout("!BQQq", "flags", "commit lsn", "end lsn", "commit timestamp")
_STREAM_START: Final = Layout("!IB", "xid", "first segment flag")
_STREAM_COMMIT: Final = Layout("!IBQQq", "xid", "flags", "commit lsn", "end lsn", "commit timestamp")
_STREAM_ABORT: Final = Layout("!II", "xid", "subtransaction xid")
_STREAM_ABORT_INFO: Final = Layout("!IIQq", "xid", "subtransaction xid", "abort lsn", "abort timestamp")
_unpack_begin = cast(Callable[[bytes, int], tuple[Lsn, int, int]], _BEGIN.struct.unpack_from)
_unpack_commit = cast(Callable[[bytes, int], tuple[int, Lsn, Lsn, int]], _COMMIT.struct.unpack_from)
_unpack_stream_start = cast(Callable[[bytes, int], tuple[int, int]], _STREAM_START.struct.unpack_from)
_unpack_stream_commit = cast(Callable[[bytes, int], tuple[int, int, Lsn, Lsn, int]],
                             _STREAM_COMMIT.struct.unpack_from)
_unpack_stream_abort = cast(Callable[[bytes, int], tuple[int, int]], _STREAM_ABORT.struct.unpack_from)
_unpack_stream_abort_info = cast(Callable[[bytes, int], tuple[int, int, Lsn, int]],
                                 _STREAM_ABORT_INFO.struct.unpack_from)
_BEGIN_SIZE: Final = 1 + _BEGIN.size
_COMMIT_SIZE: Final = 1 + _COMMIT.size
_STREAM_START_SIZE: Final = 1 + _STREAM_START.size
_STREAM_COMMIT_SIZE: Final = 1 + _STREAM_COMMIT.size
_STREAM_ABORT_SIZE: Final = 1 + _STREAM_ABORT.size
_STREAM_ABORT_INFO_SIZE: Final = 1 + _STREAM_ABORT_INFO.size


def _decode_begin(buf: bytes, in_stream: bool) -> Begin:
    if len(buf) != _BEGIN_SIZE:
        raise _BEGIN.error(buf, "B", 1, exact=True)
    final_lsn, commit_ts, xid = _unpack_begin(buf, 1)
    return Begin(final_lsn, commit_ts, xid)


def _decode_commit(buf: bytes, in_stream: bool) -> Commit:
    if len(buf) != _COMMIT_SIZE:
        raise _COMMIT.error(buf, "C", 1, exact=True)
    flags, commit_lsn, end_lsn, commit_ts = _unpack_commit(buf, 1)
    return Commit(flags, commit_lsn, end_lsn, commit_ts)


def _decode_stream_start(buf: bytes, in_stream: bool) -> StreamStart:
    if len(buf) != _STREAM_START_SIZE:
        raise _STREAM_START.error(buf, "S", 1, exact=True)
    xid, first_segment = _unpack_stream_start(buf, 1)
    return StreamStart(xid, first_segment == 1)


def _decode_stream_stop(buf: bytes, in_stream: bool) -> StreamStop:
    if len(buf) != 1:
        raise trailing("E", 1, len(buf))
    return StreamStop()


def _decode_stream_commit(buf: bytes, in_stream: bool) -> StreamCommit:
    if len(buf) != _STREAM_COMMIT_SIZE:
        raise _STREAM_COMMIT.error(buf, "c", 1, exact=True)
    xid, flags, commit_lsn, end_lsn, commit_ts = _unpack_stream_commit(buf, 1)
    return StreamCommit(xid, flags, commit_lsn, end_lsn, commit_ts)


def _decode_stream_abort(buf: bytes, in_stream: bool) -> StreamAbort:
    """Protocol 2 and 3: the two xids only."""
    if len(buf) != _STREAM_ABORT_SIZE:
        raise _STREAM_ABORT.error(buf, "A", 1, exact=True)
    xid, subxid = _unpack_stream_abort(buf, 1)
    return StreamAbort(xid, subxid, None, None)


def _decode_stream_abort_v4(buf: bytes, in_stream: bool) -> StreamAbort:
    """Protocol 4 documents abort LSN and timestamp, but Postgres 16+ only writes them when the
    slot streams with ``streaming = parallel`` (pgoutput's ``write_abort_info``); with
    ``streaming = on`` the message keeps the short form. The abort is the whole message, so its
    length tells the two apart without knowing the streaming mode.
    """
    if len(buf) == _STREAM_ABORT_SIZE:
        return _decode_stream_abort(buf, in_stream)
    if len(buf) != _STREAM_ABORT_INFO_SIZE:
        raise _STREAM_ABORT_INFO.error(buf, "A", 1, exact=True)
    xid, subxid, abort_lsn, abort_ts = _unpack_stream_abort_info(buf, 1)
    return StreamAbort(xid, subxid, abort_lsn, abort_ts)


# --- low-volume messages: field by field ------------------------------------------------------


def _decode_logical_message(buf: bytes, in_stream: bool) -> LogicalMessage:
    r = Reader(buf, "M")
    xid = r.u32("xid") if in_stream else None
    flags = r.u8("flags")
    lsn = r.lsn("message lsn")
    prefix = r.cstring("prefix")
    length = r.u32("content length")
    content = r.raw(length, "content")
    r.finish()
    return LogicalMessage(xid=xid, transactional=bool(flags & 1), lsn=lsn, prefix=prefix,
                          content=content)


def _decode_origin(buf: bytes, in_stream: bool) -> Origin:
    r = Reader(buf, "O")
    origin_lsn = r.lsn("origin lsn")
    name = r.cstring("origin name")
    r.finish()
    return Origin(origin_lsn=origin_lsn, name=name)


def _decode_relation(buf: bytes, in_stream: bool) -> Relation:
    r = Reader(buf, "R")
    xid = r.u32("xid") if in_stream else None
    rel_id = r.u32("relation oid")
    namespace = r.cstring("namespace")
    name = r.cstring("relation name")
    replica_identity = chr(r.u8("replica identity"))
    count = r.u16("column count")
    columns = []
    for _ in range(count):
        flags = r.u8("column flags")
        column_name = r.cstring("column name")
        type_oid = r.u32("column type oid")
        type_modifier = r.i32("column type modifier")
        columns.append(Column(is_key=bool(flags & 1), name=column_name, type_oid=type_oid,
                              type_modifier=type_modifier))
    r.finish()
    return Relation(xid=xid, rel_id=rel_id, namespace=namespace, name=name,
                    replica_identity=replica_identity, columns=tuple(columns))


def _decode_type(buf: bytes, in_stream: bool) -> TypeInfo:
    r = Reader(buf, "Y")
    xid = r.u32("xid") if in_stream else None
    type_oid = r.u32("type oid")
    namespace = r.cstring("namespace")
    name = r.cstring("type name")
    r.finish()
    return TypeInfo(xid=xid, type_oid=type_oid, namespace=namespace, name=name)


def _decode_truncate(buf: bytes, in_stream: bool) -> Truncate:
    r = Reader(buf, "T")
    xid = r.u32("xid") if in_stream else None
    count = r.u32("relation count")
    options = r.u8("options")
    rel_ids = tuple(r.u32(f"relation oid {i + 1} of {count}") for i in range(count))
    r.finish()
    return Truncate(xid=xid, options=options, rel_ids=rel_ids)


# --- dispatch -----------------------------------------------------------------------------------

_V1_DECODERS: Final[dict[str, _Decode]] = {
    "B": _decode_begin, "M": _decode_logical_message, "C": _decode_commit, "O": _decode_origin,
    "R": _decode_relation, "Y": _decode_type, "I": _decode_insert, "U": _decode_update,
    "D": _decode_delete, "T": _decode_truncate,
}
_V2_DECODERS: Final[dict[str, _Decode]] = {
    "S": _decode_stream_start, "E": _decode_stream_stop, "c": _decode_stream_commit,
    "A": _decode_stream_abort,
}
_V3_DECODERS: Final[dict[str, _Decode]] = {
    "b": decode_begin_prepare, "P": decode_prepare, "K": decode_commit_prepared,
    "r": decode_rollback_prepared, "p": decode_stream_prepare,
}
_V4_DECODERS: Final[dict[str, _Decode]] = {"A": _decode_stream_abort_v4}

# The first protocol version each tag exists in, to tell "too new for this stream" from "garbage".
_SINCE: Final = {
    tag: version
    for version, decoders in ((3, _V3_DECODERS), (2, _V2_DECODERS), (1, _V1_DECODERS))
    for tag in decoders
}


def _table(decoders: dict[str, _Decode]) -> tuple[_Decode | None, ...]:
    slots: list[_Decode | None] = [None] * 256
    for tag, decode in decoders.items():
        slots[ord(tag)] = decode
    return tuple(slots)


_TABLES: Final = {
    1: _table(_V1_DECODERS),
    2: _table(_V1_DECODERS | _V2_DECODERS),
    3: _table(_V1_DECODERS | _V2_DECODERS | _V3_DECODERS),
    4: _table(_V1_DECODERS | _V2_DECODERS | _V3_DECODERS | _V4_DECODERS),
}


# Insert, Update and Delete exist in every protocol version and never open or close a stream block,
# so the decoder sends them straight to their functions (two calls fewer per row than ``_dispatch``).
_ROW_DECODERS: Final = _table({"I": _decode_insert, "U": _decode_update, "D": _decode_delete})


def _table_for(proto_version: int) -> tuple[_Decode | None, ...]:
    try:
        return _TABLES[proto_version]
    except KeyError:
        raise ValueError(f"pgoutput protocol version {proto_version!r} is not supported "
                         f"(pgbridge speaks {MIN_PROTO_VERSION} to {MAX_PROTO_VERSION})") from None


def _unknown_tag(buf: bytes, proto_version: int) -> DecodeError:
    if not buf:
        return DecodeError("empty pgoutput message", offset=0)
    tag = chr(buf[0])
    since = _SINCE.get(tag)
    if since is not None:
        return DecodeError(f"message needs pgoutput protocol version {since}+, stream uses "
                           f"{proto_version}", tag=tag, offset=0)
    return DecodeError(f"unknown pgoutput message tag 0x{buf[0]:02x}", tag=tag, offset=0)


def decode_message(buf: Buffer, *, proto_version: int, in_stream: bool) -> Message:
    """Decode one pgoutput message.

    ``in_stream`` says whether we are between Stream Start and Stream Stop (protocol 2+), where
    Relation, Type, Insert, Update, Delete, Truncate and Message carry the streamed xid.
    """
    if in_stream and proto_version < 2:
        raise ValueError(f"protocol version {proto_version} has no streamed transactions")
    return _dispatch(buf, _table_for(proto_version), in_stream, proto_version)


IN_PLACE_BYTES: Final = 1 << 20
"""A row message (Insert, Update, Delete) this large is decoded in the memoryview it arrived in:
copying it to ``bytes`` first would hold a huge value (issue 16: a 500 MB text) twice more, the
message's copy and the value's, while each value is copied out once anyway."""
_ROW_TAGS: Final = frozenset(b"IUD")
RowMessage: TypeAlias = Insert | Update | Delete


def _owned(buf: Buffer) -> bytes:
    """What to decode a message of ``IN_PLACE_BYTES`` or more from (smaller ones are copied to
    ``bytes`` by the callers, since slicing ``bytes`` is what makes column values cheapest): a row
    message stays a view, typed as ``bytes`` for the decoders (``_tuple`` reads it with indexing,
    ``unpack_from`` and slices, which memoryview has too); any other message is copied."""
    if buf[0] in _ROW_TAGS:
        return cast(bytes, buf if isinstance(buf, memoryview) else memoryview(buf))
    return bytes(buf)


def _dispatch(buf: Buffer, table: tuple[_Decode | None, ...], in_stream: bool,
              proto_version: int) -> Message:
    """A non-``bytes`` buffer is copied once (``_owned``): slicing ``bytes`` is what makes the column values."""
    if type(buf) is not bytes:
        buf = bytes(buf) if len(buf) < IN_PLACE_BYTES else _owned(buf)
    try:
        decode = table[buf[0]]
    except IndexError:
        decode = None
    if decode is None:
        raise _unknown_tag(buf, proto_version)
    return decode(buf, in_stream)


class PgoutputDecoder:
    """Decodes one replication connection's messages in order.

    It owns the one piece of context the bytes do not carry, whether we are inside a streamed
    block, and refuses a Stream Start inside a block or a Stream Stop outside one: after either,
    every later xid-bearing message would be misread.
    """

    __slots__ = ("_in_stream", "_proto_version", "_stream_xid", "_table", "read_row")

    def __init__(self, proto_version: int) -> None:
        self._table = _table_for(proto_version)
        self._proto_version = proto_version
        self._in_stream = False
        self._stream_xid: int | None = None
        self.read_row: Callable[[Buffer, int], RowMessage | None] = self._row_reader()

    def _row_reader(self) -> Callable[[Buffer, int], RowMessage | None]:
        """``read_row``, the streaming loop's row entry, taken again after every message it
        ``decode``s (only those change it): outside a stream block the compiled reader itself (no
        Python frame a row; ``None`` for any other message, and for bytes it cannot read, which
        ``decode`` then names), else ``decode_row``."""
        return _native.read_row if _native is not None and not self._in_stream else self.decode_row

    @property
    def proto_version(self) -> int:
        return self._proto_version

    @property
    def in_stream(self) -> bool:
        """True between a Stream Start and its Stream Stop."""
        return self._in_stream

    def decode_row(self, frame: Buffer, at: int) -> RowMessage | None:
        """The streaming loop's hot path: the Insert, Update or Delete at offset ``at`` of ``frame``
        (the XLogData frame as it arrived), or ``None`` for any other message and inside a stream
        block, where ``decode`` must take it (streamed rows carry an xid; Stream Start/Stop change
        state). The compiled reader takes the row in place; without it, or on bytes it cannot read,
        the Python decoder does, and names what is malformed (``DecodeError``) as ``decode`` would."""
        if self._in_stream:
            return None
        if _native is not None:
            row: RowMessage | None = _native.read_row(frame, at)
            if row is not None:
                return row
        hot = _ROW_DECODERS[frame[at]] if len(frame) > at else None
        if hot is None:
            return None
        body = frame[at:]
        return hot(bytes(body) if len(body) < IN_PLACE_BYTES else _owned(body), False)  # type: ignore[return-value]

    def decode(self, buf: Buffer) -> Message:
        """Any message; a row outside a stream block as ``decode_row`` reads it."""
        row = self.decode_row(buf, 0)
        if row is not None:
            return row
        msg = _dispatch(buf, self._table, self._in_stream, self._proto_version)
        if type(msg) is StreamStart:
            if self._in_stream:
                raise InvariantError(f"Stream Start for xid {msg.xid} inside the stream block of xid "
                                     f"{self._stream_xid} (no Stream Stop in between)")
            self._in_stream = True
            self._stream_xid = msg.xid
            self.read_row = self._row_reader()
        elif type(msg) is StreamStop:
            if not self._in_stream:
                raise InvariantError("Stream Stop outside a stream block (no Stream Start before it)")
            self._in_stream = False
            self._stream_xid = None
            self.read_row = self._row_reader()
        return msg
