"""Hypothesis strategies for pgoutput messages that a given protocol version and stream position allow."""

from __future__ import annotations

from hypothesis import strategies as st

from pgbridge.decode.messages import (
    Begin,
    BeginPrepare,
    Column,
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
from pgbridge.lsn import Lsn

u8 = st.integers(0, 0xFF)
u32 = st.integers(0, 0xFFFF_FFFF)
i32 = st.integers(-(1 << 31), (1 << 31) - 1)
timestamps = st.integers(-(1 << 63), (1 << 63) - 1)
lsns = st.integers(0, (1 << 64) - 1).map(Lsn)
# pgoutput strings are NUL-terminated UTF-8: no NUL, no lone surrogates.
names = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=20)
values = st.binary(max_size=40)


@st.composite
def tuple_data(draw: st.DrawFn, max_columns: int = 12) -> TupleData:
    kinds = draw(st.lists(st.sampled_from(b"ntub"), max_size=max_columns))
    return TupleData(bytes(kinds), tuple(draw(values) if kind in b"tb" else None for kind in kinds))


def messages(proto_version: int, in_stream: bool) -> st.SearchStrategy[Message]:
    """Any message ``proto_version`` can carry; xid-bearing ones get an xid iff ``in_stream``."""
    xids: st.SearchStrategy[int | None] = u32 if in_stream else st.none()
    options: list[st.SearchStrategy[Message]] = [
        st.builds(Begin, lsns, timestamps, u32),
        st.builds(LogicalMessage, xids, st.booleans(), lsns, names, st.binary(max_size=64)),
        st.builds(Commit, u8, lsns, lsns, timestamps),
        st.builds(Origin, lsns, names),
        st.builds(Relation, xids, u32, names, names, st.sampled_from("dnfi"),
                  st.lists(st.builds(Column, st.booleans(), names, u32, i32), max_size=8).map(tuple)),
        st.builds(TypeInfo, xids, u32, names, names),
        st.builds(Insert, xids, u32, tuple_data()),
        st.one_of(
            st.builds(Update, xids, u32, st.none(), st.none(), tuple_data()),
            st.builds(Update, xids, u32, st.sampled_from(["K", "O"]), tuple_data(), tuple_data()),
        ),
        st.builds(Delete, xids, u32, st.sampled_from(["K", "O"]), tuple_data()),
        st.builds(Truncate, xids, u8, st.lists(u32, max_size=6).map(tuple)),
    ]
    if proto_version >= 2:
        options += [
            st.builds(StreamStart, u32, st.booleans()),
            st.just(StreamStop()),
            st.builds(StreamCommit, u32, u8, lsns, lsns, timestamps),
            st.builds(StreamAbort, u32, u32, st.none(), st.none()),
        ]
    if proto_version >= 3:
        options += [
            st.builds(BeginPrepare, lsns, lsns, timestamps, u32, names),
            st.builds(Prepare, u8, lsns, lsns, timestamps, u32, names),
            st.builds(CommitPrepared, u8, lsns, lsns, timestamps, u32, names),
            st.builds(RollbackPrepared, u8, lsns, lsns, timestamps, timestamps, u32, names),
            st.builds(StreamPrepare, u8, lsns, lsns, timestamps, u32, names),
        ]
    if proto_version >= 4:
        options.append(st.builds(StreamAbort, u32, u32, lsns, timestamps))
    return st.one_of(options)
