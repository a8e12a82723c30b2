"""The compiled path publishes what the pure-Python path publishes, byte for byte.

Each scenario is a stream of XLogData frames run through the real streaming loop
(``Session.run``) with the real decoder, assembler, encoder and dispatcher twice: once with the
compiled kernels (the row decoder, ``decode/_native.pyx``; the change writer,
``encode/_native.pyx`` through ``TablePlan.kernel_change``), once on the pure-Python path that
``PGBRIDGE_PURE_PYTHON=1`` gives, the reference. The records handed to the producer (topic, key,
value, unit, and what ``describe`` would name if Kafka refused the record), the per-table metrics
and the received LSN must be the same, and the kernel must have written the changes it is for,
so a kernel that quietly hands everything to Python fails here too. The harness and the scenario
are tests/support/session_runs.py, shared with tests/unit/test_lane.py (the insert lane).
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from pgbridge.decode import pgoutput as decode_module
from pgbridge.decode.messages import Delete, Message, Update
from pgbridge.encode import plan as plan_module
from pgbridge.encode.plan import TablePlan
from tests.support.kernels import compiled
from tests.support.relations import relation
from tests.support.session_runs import (
    INT8,
    ITEMS,
    TEXT,
    Frames,
    PublishesAlike,
    SessionRun,
    insert,
    row,
    session_run,
    tx,
)

_DECODE_KERNEL = compiled("pgbridge.decode._native")
_ENCODE_KERNEL = compiled("pgbridge.encode._native")


class _Written:
    """How many row changes the compiled kernel wrote alone (``TablePlan.kernel_change``)."""

    count = 0


def _counting(kernel_change: Any) -> Any:
    def counted(plan: TablePlan, *args: Any) -> Any:
        written = kernel_change(plan, *args)
        _Written.count += written is not None
        return written

    return counted


def _run(batches: list[list[bytes]], tmp: pathlib.Path, *, compiled: bool, **options: Any) -> SessionRun:
    """The stream through ``Session.run``, with the compiled kernels or on the pure-Python path
    (the insert lane is tests/unit/test_lane.py's: none here); ``options`` go to ``session_run``."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(decode_module, "_native", _DECODE_KERNEL if compiled else None)
        patch.setattr(plan_module, "_native", _ENCODE_KERNEL if compiled else None)
        patch.setattr(TablePlan, "kernel_change", _counting(TablePlan.kernel_change))
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
