"""The compiled path publishes what the pure-Python path publishes, byte for byte.

Each scenario is a stream of XLogData frames run through the real streaming loop
(``Session.run``) with the real decoder, assembler, encoder and dispatcher twice: once with the
compiled kernels (the row reader, ``decode/_native.pyx``, which ``PgoutputDecoder.read_row`` is
outside stream blocks; the change writer, ``encode/_native.pyx``'s ``RowWriter``, which
``TablePlan.kernel_change`` is), once on the pure-Python path that ``PGBRIDGE_PURE_PYTHON=1``
gives, the reference. Both are the stages' own row path (``read_row`` → ``plain_row`` → ``row``
→ ``encode_row``): there is no other. The records handed to the producer (topic, key, value, the
unit whose callback they carry, and what ``describe`` would name if Kafka refused the record, so
orders and tallies too), the per-table metrics and the received LSN must be the same, and the
kernel must have written the changes it is for, so a kernel that quietly hands everything to
Python fails here too. Inserts, updates and deletes, Relation changes mid-transaction, tables the
capture filter drops, values the kernel leaves to Python, corrupt frames (the same located error),
exactly-once's split transactions, streamed transactions among plain ones and either kernel
alone are covered. The
harness and the shared checks are tests/support/session_runs.py.
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from pgbridge.decode import pgoutput as decode_module
from pgbridge.decode.messages import (
    Delete,
    Insert,
    Message,
    Relation,
    StreamCommit,
    StreamStart,
    StreamStop,
    Update,
)
from pgbridge.encode import plan as plan_module
from pgbridge.encode.envelope import ChangeEncoder
from pgbridge.encode.plan import TablePlan
from pgbridge.lsn import Lsn
from tests.support.kernels import compiled
from tests.support.relations import relation
from tests.support.session_runs import (
    FRAME_LSNS,
    INT8,
    ITEMS,
    TEXT,
    Frames,
    PublishesAlike,
    SessionRun,
    insert,
    row,
    scenario,
    session_run,
    tx,
)

_DECODE_KERNEL = compiled("pgbridge.decode._native")
_ENCODE_KERNEL = compiled("pgbridge.encode._native")


class _Written:
    """How many row changes the compiled kernel wrote alone (``TablePlan.kernel_change``)."""

    count = 0


def _counting(compile_plan: Any) -> Any:
    """``ChangeEncoder._compile`` whose plans count the changes their kernel writes."""

    def compiled_plan(encoder: ChangeEncoder, relation: Any) -> TablePlan:
        plan: TablePlan = compile_plan(encoder, relation)
        kernel = plan.kernel_change
        if kernel is not None:
            def counted(*args: Any) -> Any:
                written = kernel(*args)
                _Written.count += written is not None
                return written

            plan.kernel_change = counted
        return plan

    return compiled_plan


def _run(batches: list[list[bytes]], tmp: pathlib.Path, *, compiled: bool, encode: bool | None = None,
         **options: Any) -> SessionRun:
    """The stream through ``Session.run``, with the compiled kernels or on the pure-Python path
    (``PGBRIDGE_PURE_PYTHON=1``); ``encode`` set says otherwise for the encode kernel alone
    (``compiled`` is then the decode kernel's); ``options`` go to ``session_run``."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(decode_module, "_native", _DECODE_KERNEL if compiled else None)
        patch.setattr(plan_module, "_native", _ENCODE_KERNEL if (compiled if encode is None else encode) else None)
        patch.setattr(ChangeEncoder, "_compile", _counting(ChangeEncoder._compile))
        _Written.count = 0
        return session_run(batches, tmp, taken=lambda: _Written.count, **options)


class TestTheCompiledPathPublishesWhatThePurePythonPathPublishes(PublishesAlike):
    """The shared checks (tests/support/session_runs.py), the compiled kernels under test and the
    pure-Python path the reference: the kernel writes the plain inserts, the log rows, the update
    and the delete; not the NaN/é row (unrepresentable values and non-ASCII text are Python's)."""

    scenario_taken = 46
    filtered_taken = 44

    def run(self, batches: list[list[bytes]], tmp: pathlib.Path, tested: bool, **options: Any) -> SessionRun:
        return _run(batches, tmp, compiled=tested, **options)


def test_updates_and_deletes_of_every_replica_identity_take_the_kernel(tmp_path: pathlib.Path) -> None:
    f = Frames()
    full = relation(("id", INT8, -1, True), ("name", TEXT), identity="f", name="full", rel_id=16400)
    changes: list[Message] = [ITEMS, full]
    for i in range(1, 4):
        values = row(b"%d" % i, b"n%d" % i, b"1.25", None, b"t")
        changes += [insert(ITEMS, *values.values),
                    Update(xid=None, rel_id=ITEMS.rel_id, old_kind=None, old=None, new=values),
                    # the key changes: the old key's tombstone goes first
                    Update(xid=None, rel_id=ITEMS.rel_id, old_kind="K", old=row(b"%d" % i, None, None, None, None),
                           new=row(b"%d" % (i + 10), b"moved", b"1.25", None, b"t")),
                    Delete(xid=None, rel_id=ITEMS.rel_id, old_kind="K",
                           old=row(b"%d" % (i + 10), None, None, None, None)),
                    insert(full, b"%d" % i, b"a"),
                    Update(xid=None, rel_id=full.rel_id, old_kind="O", old=row(b"%d" % i, b"a"),
                           new=row(b"%d" % i, b"b")),
                    Delete(xid=None, rel_id=full.rel_id, old_kind="O", old=row(b"%d" % i, b"b"))]
    batches = [tx(f, 1100, *changes)]
    compiled_run = _run(batches, tmp_path / "compiled", compiled=True)
    python = _run(batches, tmp_path / "python", compiled=False)
    assert compiled_run.records == python.records
    assert compiled_run.metrics == python.metrics
    assert compiled_run.taken == 21
    assert sum(1 for _, key, value, *_ in python.records if value is None) == 6  # 3 moved keys, 3 deletes


def test_a_streamed_transaction_among_plain_ones_is_published_alike(tmp_path: pathlib.Path) -> None:
    """Rows inside stream blocks carry an xid: the decoder's row entry leaves them to ``decode`` and
    the assembler buffers them (``feed``) until STREAM COMMIT replays them through ``handle``, while
    the plain transactions around and between the blocks take the row entries."""
    f = Frames(proto=2)
    streamed = Relation(xid=1201, rel_id=ITEMS.rel_id, namespace=ITEMS.namespace, name=ITEMS.name,
                        replica_identity=ITEMS.replica_identity, columns=ITEMS.columns)

    def items(xid: int | None, i: int) -> list[Message]:
        values = row(b"%d" % i, b"n%d" % i, b"1.25", None, b"t")
        return [Insert(xid=xid, rel_id=ITEMS.rel_id, new=values),
                Update(xid=xid, rel_id=ITEMS.rel_id, old_kind="K", old=row(b"%d" % i, None, None, None, None),
                       new=row(b"%d" % (i + 100), b"moved", b"2.50", None, b"f")),
                Delete(xid=xid, rel_id=ITEMS.rel_id, old_kind="K", old=row(b"%d" % (i + 100), None, None, None, None))]

    batches = [
        tx(f, 1200, ITEMS, *items(None, 1)),
        f(StreamStart(xid=1201, first_segment=True)) + f(streamed, *items(1201, 2), in_stream=True) + f(StreamStop()),
        tx(f, 1202, *items(None, 3)),
        f(StreamStart(xid=1201, first_segment=False)) + f(*items(1201, 4), in_stream=True) + f(StreamStop()),
    ]
    commit = Lsn(f.lsn + FRAME_LSNS)
    batches += [f(StreamCommit(xid=1201, flags=0, commit_lsn=commit, end_lsn=Lsn(commit + FRAME_LSNS),
                               commit_ts=800_000_000_001_201)),
                tx(f, 1203, *items(None, 5))]
    compiled_run = _run(batches, tmp_path / "compiled", compiled=True, proto=2)
    python = _run(batches, tmp_path / "python", compiled=False, proto=2)
    assert compiled_run.records == python.records
    assert compiled_run.metrics == python.metrics
    assert compiled_run.received == python.received
    assert compiled_run.taken == 15  # 5 times an insert, an update and a delete: plain and streamed alike
    # BEGIN and END of 4 transactions; 5 times the insert, the old key's tombstone and the update,
    # the delete and its tombstone
    assert len(python.records) == 8 + 5 * 5


@pytest.mark.parametrize(("decode", "encode"), [(True, False), (False, True)], ids=["decode-kernel", "encode-kernel"])
def test_either_kernel_alone_publishes_alike(tmp_path: pathlib.Path, decode: bool, encode: bool) -> None:
    """One kernel built and not the other (or switched off by a test): the row path mixes the
    compiled reader with the Python writer, or the reverse, and still publishes the same records;
    the writer takes only the rows it is for (none without it)."""
    batches = scenario()
    mixed = _run(batches, tmp_path / "mixed", compiled=decode, encode=encode)
    python = _run(batches, tmp_path / "python", compiled=False)
    assert mixed.records == python.records
    assert mixed.metrics == python.metrics
    assert mixed.taken == (46 if encode else 0)
