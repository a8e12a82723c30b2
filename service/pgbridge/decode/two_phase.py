"""The two-phase messages of pgoutput protocol 3+, field by field (``reader.Reader``): Begin
Prepare, Prepare, Stream Prepare, Commit Prepared, Rollback Prepared. One of each per prepared
transaction, so they are decoded for readable, precise errors rather than speed; they live apart
from ``pgoutput.py``, whose dispatch tables name them, to keep that module about the row path.
"""

from __future__ import annotations

from pgbridge.decode.messages import BeginPrepare, CommitPrepared, Prepare, RollbackPrepared, StreamPrepare
from pgbridge.decode.reader import Reader
from pgbridge.lsn import Lsn


def decode_begin_prepare(buf: bytes, in_stream: bool) -> BeginPrepare:
    r = Reader(buf, "b")
    prepare_lsn = r.lsn("prepare lsn")
    end_lsn = r.lsn("end lsn")
    prepare_ts = r.i64("prepare timestamp")
    xid = r.u32("xid")
    gid = r.cstring("gid")
    r.finish()
    return BeginPrepare(prepare_lsn=prepare_lsn, end_lsn=end_lsn, prepare_ts=prepare_ts, xid=xid,
                        gid=gid)


def _read_prepare(r: Reader) -> tuple[int, Lsn, Lsn, int, int, str]:
    """Prepare and Stream Prepare share one layout."""
    flags = r.u8("flags")
    prepare_lsn = r.lsn("prepare lsn")
    end_lsn = r.lsn("end lsn")
    prepare_ts = r.i64("prepare timestamp")
    xid = r.u32("xid")
    gid = r.cstring("gid")
    r.finish()
    return flags, prepare_lsn, end_lsn, prepare_ts, xid, gid


def decode_prepare(buf: bytes, in_stream: bool) -> Prepare:
    return Prepare(*_read_prepare(Reader(buf, "P")))


def decode_stream_prepare(buf: bytes, in_stream: bool) -> StreamPrepare:
    return StreamPrepare(*_read_prepare(Reader(buf, "p")))


def decode_commit_prepared(buf: bytes, in_stream: bool) -> CommitPrepared:
    r = Reader(buf, "K")
    flags = r.u8("flags")
    commit_lsn = r.lsn("commit lsn")
    end_lsn = r.lsn("end lsn")
    commit_ts = r.i64("commit timestamp")
    xid = r.u32("xid")
    gid = r.cstring("gid")
    r.finish()
    return CommitPrepared(flags=flags, commit_lsn=commit_lsn, end_lsn=end_lsn, commit_ts=commit_ts,
                          xid=xid, gid=gid)


def decode_rollback_prepared(buf: bytes, in_stream: bool) -> RollbackPrepared:
    r = Reader(buf, "r")
    flags = r.u8("flags")
    prepare_end_lsn = r.lsn("prepare end lsn")
    rollback_end_lsn = r.lsn("rollback end lsn")
    prepare_ts = r.i64("prepare timestamp")
    rollback_ts = r.i64("rollback timestamp")
    xid = r.u32("xid")
    gid = r.cstring("gid")
    r.finish()
    return RollbackPrepared(flags=flags, prepare_end_lsn=prepare_end_lsn,
                            rollback_end_lsn=rollback_end_lsn, prepare_ts=prepare_ts,
                            rollback_ts=rollback_ts, xid=xid, gid=gid)
