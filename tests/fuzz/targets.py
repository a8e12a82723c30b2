"""Fuzz targets for the pgoutput decoder and the transaction assembler, shared by the short unit
runs (``tests/unit/*/test_fuzz_*.py``) and the long run (``python -m tests.fuzz.run``).

The property under test is the one a hostile or corrupt replication stream must not break: every
input ends either in correct output or in a typed ``FatalError`` (``DecodeError``,
``InvariantError``: the pipeline stops there without confirming past it, and does not retry), never another exception, never a crash of the compiled
kernel, and both decoders (the compiled kernel and the Python reference) say the same thing.
Inputs are arbitrary bytes, valid messages and whole valid sessions mutated at the byte level
(flips, cuts, insertions, a length field overwritten with a huge value) or at the message level
(drops, duplicates, swaps), so the fuzzer spends its time near the protocol's edges.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from pgbridge.assemble.transaction import TransactionAssembler
from pgbridge.decode import _native as compiled_kernel  # type: ignore[attr-defined]
from pgbridge.decode import pgoutput
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
    StreamAbort,
    StreamCommit,
    StreamStart,
    StreamStop,
    Update,
)
from pgbridge.decode.pgoutput import PgoutputDecoder, decode_message
from pgbridge.errors import FatalError, PgbridgeError
from pgbridge.lsn import Lsn
from tests.support.pgoutput_builder import encode_message
from tests.support.relations import relation
from tests.unit.decode.strategies import messages, tuple_data

CONTEXTS = ((1, False), (2, False), (2, True), (3, False), (3, True), (4, False), (4, True))
TAGS = b"BMCORYIUDTSEcAbPKrp"
MEMORY_BUDGET = 4096  # bytes: the assembler spills after a few changes, so spill files are fuzzed too


class FuzzFailure(AssertionError):
    """An input broke the property; the message says which and how."""


@contextmanager
def kernel(use_compiled: bool) -> Iterator[None]:
    """Run the decoder with its compiled TupleData kernel or with the Python reference loop."""
    saved = pgoutput._native
    pgoutput._native = compiled_kernel if use_compiled else None
    try:
        yield
    finally:
        pgoutput._native = saved


def _outcome(buf: bytes, version: int, in_stream: bool) -> Message | str:
    """The decoded message, or the typed error's class and text; anything else propagates."""
    try:
        return decode_message(buf, proto_version=version, in_stream=in_stream)
    except PgbridgeError as exc:
        return f"{type(exc).__name__}: {exc}"


def check_message(buf: bytes, version: int, in_stream: bool) -> Message | str:
    """Decode ``buf`` with both decoders: they must agree, and fail only with typed errors."""
    try:
        with kernel(True):
            native = _outcome(buf, version, in_stream)
        with kernel(False):
            python = _outcome(buf, version, in_stream)
    except PgbridgeError:
        raise
    except Exception as exc:
        raise FuzzFailure(f"untyped {type(exc).__name__} decoding {buf.hex()} (v{version}, "
                          f"in_stream={in_stream}): {exc}") from exc
    if native != python:
        raise FuzzFailure(f"decoders disagree on {buf.hex()} (v{version}, in_stream={in_stream}): "
                          f"kernel {native!r}, python {python!r}")
    return python


def check_session(frames: list[bytes], version: int, spill_dir: Path) -> int:
    """Feed ``frames`` through a decoder and an assembler, as the pipeline does, up to the first
    typed error; return how many frames were consumed. Replays are drained, so spill files are
    written and read back. Any untyped exception is a ``FuzzFailure``."""
    decoder = PgoutputDecoder(version)
    assembler = TransactionAssembler(memory_bytes=MEMORY_BUDGET, spill_dir=spill_dir)
    consumed = 0
    try:
        for i, frame in enumerate(frames):
            wal_start = Lsn(0x1000 + 0x100 * i)
            for _event in assembler.feed(decoder.decode(frame), wal_start):
                pass
            consumed += 1
    except FatalError:
        pass  # the pipeline stops here and confirms nothing past the bad frame
    except PgbridgeError as exc:
        raise FuzzFailure(f"{type(exc).__name__} is not fatal: a corrupt frame would be retried, at frame "
                          f"{consumed} of {[f.hex() for f in frames]} (v{version}): {exc}") from exc
    except Exception as exc:
        raise FuzzFailure(f"untyped {type(exc).__name__} at frame {consumed} of "
                          f"{[f.hex() for f in frames]} (v{version}): {exc}") from exc
    finally:
        assembler.close()
    leftovers = list(spill_dir.glob("*")) if spill_dir.exists() else []
    if leftovers:
        raise FuzzFailure(f"spill files left after close(): {leftovers}")
    return consumed


def check_messages_fed(msgs: list[Message], spill_dir: Path) -> None:
    """Feed already-decoded messages in any order straight into an assembler: only typed errors."""
    assembler = TransactionAssembler(memory_bytes=MEMORY_BUDGET, spill_dir=spill_dir)
    try:
        for i, msg in enumerate(msgs):
            for _event in assembler.feed(msg, Lsn(0x1000 + 0x100 * i)):
                pass
            assembler.oldest_unfinished_lsn()
    except FatalError:
        pass
    except PgbridgeError as exc:
        raise FuzzFailure(f"{type(exc).__name__} is not fatal, feeding {msgs!r}: {exc}") from exc
    except Exception as exc:
        raise FuzzFailure(f"untyped {type(exc).__name__} feeding {msgs!r}: {exc}") from exc
    finally:
        assembler.close()


def fresh_spill_dir() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="pgbridge-fuzz-")


# --- strategies -----------------------------------------------------------------------------

_REL = 16384


def _relation(xid: int | None, count: int) -> Relation:
    return relation(*(f"c{i}" for i in range(count)), rel_id=_REL, name="fuzzed", xid=xid, key=1)


@st.composite
def _plain_transaction(draw: st.DrawFn, lsn: int, xid: int) -> list[tuple[Message, bool]]:
    rows = draw(st.lists(tuple_data(max_columns=4), max_size=4))
    msgs: list[tuple[Message, bool]] = [(Begin(Lsn(lsn), 1, xid), False)]
    for data in rows:
        choices: list[Message] = [Insert(None, _REL, data), Update(None, _REL, None, None, data),
                                  Delete(None, _REL, "K", data)]
        change = draw(st.sampled_from(choices))
        msgs.append((change, False))
    msgs.append((Commit(0, Lsn(lsn), Lsn(lsn + 8), 1), False))
    return msgs


@st.composite
def _streamed_transaction(draw: st.DrawFn, lsn: int, xid: int) -> list[tuple[Message, bool]]:
    msgs: list[tuple[Message, bool]] = []
    for block in range(draw(st.integers(1, 3))):
        msgs.append((StreamStart(xid, block == 0), False))
        msgs.append((_relation(xid, 2), True))
        for data in draw(st.lists(tuple_data(max_columns=4), max_size=4)):
            msgs.append((Insert(xid, _REL, data), True))
        msgs.append((StreamStop(), True))
    if draw(st.booleans()):
        msgs.append((StreamCommit(xid, 0, Lsn(lsn), Lsn(lsn + 8), 2), False))
    else:
        msgs.append((StreamAbort(xid, xid, None, None), False))
    return msgs


@st.composite
def _prepared_transaction(draw: st.DrawFn, lsn: int, xid: int) -> list[tuple[Message, bool]]:
    gid = f"g{xid}"
    msgs: list[tuple[Message, bool]] = [(BeginPrepare(Lsn(lsn), Lsn(lsn + 8), 3, xid, gid), False)]
    for data in draw(st.lists(tuple_data(max_columns=4), max_size=3)):
        msgs.append((Insert(None, _REL, data), False))
    msgs.append((Prepare(0, Lsn(lsn), Lsn(lsn + 8), 3, xid, gid), False))
    msgs.append((CommitPrepared(0, Lsn(lsn + 16), Lsn(lsn + 24), 4, xid, gid), False))
    return msgs


@st.composite
def sessions(draw: st.DrawFn, version: int) -> list[bytes]:
    """The frames of a valid replication session: a Relation, then plain transactions and, when
    ``version`` allows, streamed (committed or aborted) and two-phase ones."""
    kinds = ["plain"] + (["streamed"] if version >= 2 else []) + (["prepared"] if version >= 3 else [])
    msgs: list[tuple[Message, bool]] = [(_relation(None, 2), False)]
    for n in range(draw(st.integers(1, 5))):
        lsn, xid = 0x10_0000 + 0x1000 * n, 700 + n
        kind = draw(st.sampled_from(kinds))
        build = {"plain": _plain_transaction, "streamed": _streamed_transaction,
                 "prepared": _prepared_transaction}[kind]
        msgs.extend(draw(build(lsn, xid)))
    return [encode_message(m, proto_version=version, in_stream=s) for m, s in msgs]


@st.composite
def mutated(draw: st.DrawFn, buf: bytes) -> bytes:
    """``buf`` with one to three byte-level mutations."""
    out = bytearray(buf)
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["flip", "set", "cut", "insert", "delete", "huge_length", "tag"]))
        at = draw(st.integers(0, max(len(out) - 1, 0)))
        if op == "flip" and out:
            out[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and out:
            out[at] = draw(st.integers(0, 255))
        elif op == "cut":
            del out[at:]
        elif op == "insert":
            out[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete" and out:
            del out[at:at + draw(st.integers(1, 8))]
        elif op == "huge_length":  # a 32-bit length or count claiming far more than is there
            out[at:at + 4] = draw(st.sampled_from([b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff",
                                                   b"\x00\x01\x00\x00", b"\xff\xff"]))
        elif op == "tag" and out:
            out[0] = draw(st.sampled_from(TAGS))
    return bytes(out)


@st.composite
def mutated_session(draw: st.DrawFn, version: int) -> list[bytes]:
    """A valid session damaged at the byte level in a few frames and at the message level."""
    frames = draw(sessions(version))
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(frames) - 1))
        op = draw(st.sampled_from(["bytes", "drop", "duplicate", "swap", "garbage"]))
        if op == "bytes":
            frames[i] = draw(mutated(frames[i]))
        elif op == "drop" and len(frames) > 1:
            del frames[i]
        elif op == "duplicate":
            frames.insert(i, frames[i])
        elif op == "swap":
            j = draw(st.integers(0, len(frames) - 1))
            frames[i], frames[j] = frames[j], frames[i]
        elif op == "garbage":
            frames.insert(i, draw(st.binary(max_size=32)))
    return frames


def message_bytes(version: int, in_stream: bool) -> st.SearchStrategy[bytes]:
    """Arbitrary bytes, bytes behind a real tag, and valid messages, each possibly mutated."""
    valid = messages(version, in_stream).map(
        lambda m: encode_message(m, proto_version=version, in_stream=in_stream))
    return st.one_of(
        st.binary(max_size=96),
        st.builds(lambda tag, rest: bytes([tag]) + rest, st.sampled_from(TAGS), st.binary(max_size=96)),
        valid,
        valid.flatmap(mutated),
    )


def message_objects() -> st.SearchStrategy[list[Message]]:
    """Decoded messages of every kind in any order, with or without stream xids."""
    anything: st.SearchStrategy[Any] = st.one_of(messages(4, False), messages(4, True))
    return st.lists(anything, max_size=24)
