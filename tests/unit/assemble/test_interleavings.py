"""Property: random interleavings of stream blocks, subtransaction aborts, commits, stream
prepares and plain transactions produce exactly what a simple reference model predicts, whatever
the memory budget."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pgbridge.assemble.transaction import TransactionAssembler
from pgbridge.assemble.units import AssembledEvent
from pgbridge.lsn import Lsn
from tests.support.properties import examples
from tests.unit.assemble.scenario import (
    Wal,
    begin,
    commit,
    commit_prepared,
    insert,
    relation,
    rollback_prepared,
    stream_abort,
    stream_commit,
    stream_prepare,
    stream_start,
    stream_stop,
    transactions,
)

MAX_OPEN = 4


@dataclass
class StreamedModel:
    first_lsn: Lsn
    changes: list[tuple[int, str]] = field(default_factory=list)  # (subxid, value)
    live_subxids: list[int] = field(default_factory=list)
    aborted: set[int] = field(default_factory=set)

    def surviving(self) -> list[str]:
        return [value for subxid, value in self.changes if subxid not in self.aborted]


@dataclass
class Model:
    open: dict[int, StreamedModel] = field(default_factory=dict)
    prepared: dict[int, StreamedModel] = field(default_factory=dict)
    in_block: int | None = None
    expected: list[tuple[int, list[str]]] = field(default_factory=list)
    next_xid: int = 1_000
    next_value: int = 0
    next_commit_lsn: int = 0x10_0000_0000

    def xid(self) -> int:
        self.next_xid += 1
        return self.next_xid

    def value(self) -> str:
        self.next_value += 1
        return f"v{self.next_value}"

    def commit_lsn(self) -> int:
        self.next_commit_lsn += 0x100
        return self.next_commit_lsn

    def actions(self) -> list[str]:
        if self.in_block is not None:
            return ["change", "change", "change", "new_subxact", "stop"]
        choices = ["plain"]
        if len(self.open) < MAX_OPEN:
            choices.append("start_new")
        if self.open:
            choices += ["resume", "resume", "abort_txn", "commit", "prepare"]
        if self.prepared:
            choices += ["commit_prepared", "rollback_prepared"]
        if any(txn.live_subxids for txn in self.open.values()):
            choices.append("abort_subxact")
        return choices


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(budget=st.sampled_from([1, 300, 1024, 1 << 20]), data=st.data())
def test_random_interleavings_match_the_reference_model(budget: int, data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        spill_dir = Path(tmp)
        assembler = TransactionAssembler(memory_bytes=budget, spill_dir=spill_dir)
        try:
            wal = Wal(assembler)
            wal.feed(relation())
            model = Model()
            out: list[AssembledEvent] = []

            for _ in range(data.draw(st.integers(1, 80), label="steps")):
                step(wal, model, data.draw(st.sampled_from(model.actions()), label="action"), data, out)
                check_progress(assembler, model, budget)

            # finish: close the open block, then resolve every transaction still open
            if model.in_block is not None:
                step(wal, model, "stop", data, out)
            for xid in list(model.open):
                action = data.draw(st.sampled_from(["commit", "abort_txn", "prepare"]), label="outcome")
                resolve(wal, model, xid, action, out)
                check_progress(assembler, model, budget)
            for xid in list(model.prepared):
                action = data.draw(st.sampled_from(["commit_prepared", "rollback_prepared"]), label="outcome")
                resolve_prepared(wal, model, xid, action, out)
                check_progress(assembler, model, budget)

            assert transactions(out) == model.expected
            assert assembler.is_idle()
            assert assembler.buffered_bytes == 0
            assert list(spill_dir.iterdir()) == []
        finally:  # also when Hypothesis stops an example half-way: its spill files are open
            assembler.close()


def step(wal: Wal, model: Model, action: str, data: st.DataObject, out: list[AssembledEvent]) -> None:
    if action == "plain":
        xid, lsn = model.xid(), model.commit_lsn()
        values = [model.value() for _ in range(data.draw(st.integers(0, 3), label="plain size"))]
        out += wal.feed(begin(xid, lsn), *[insert(v) for v in values], commit(lsn))
        model.expected.append((xid, values))
    elif action == "start_new":
        xid = model.xid()
        lsn = wal.next_lsn()
        out += wal.feed_at(stream_start(xid, first=True), lsn)
        model.open[xid] = StreamedModel(first_lsn=lsn)
        model.in_block = xid
    elif action == "resume":
        xid = data.draw(st.sampled_from(sorted(model.open)), label="resume xid")
        out += wal.feed(stream_start(xid))
        model.in_block = xid
    elif action in ("change", "new_subxact"):
        assert model.in_block is not None
        txn = model.open[model.in_block]
        if action == "new_subxact":
            subxid = model.xid()
            txn.live_subxids.append(subxid)
        else:
            subxid = data.draw(st.sampled_from([model.in_block, *txn.live_subxids]), label="subxid")
        value = model.value()
        out += wal.feed(insert(value, "x" * data.draw(st.integers(0, 300), label="width"), xid=subxid))
        txn.changes.append((subxid, value))
    elif action == "stop":
        out += wal.feed(stream_stop())
        model.in_block = None
    elif action == "abort_subxact":
        candidates = sorted(xid for xid, txn in model.open.items() if txn.live_subxids)
        xid = data.draw(st.sampled_from(candidates), label="abort xid")
        txn = model.open[xid]
        subxid = data.draw(st.sampled_from(txn.live_subxids), label="abort subxid")
        out += wal.feed(stream_abort(xid, subxid))
        txn.live_subxids.remove(subxid)
        txn.aborted.add(subxid)
    elif action in ("commit_prepared", "rollback_prepared"):
        xid = data.draw(st.sampled_from(sorted(model.prepared)), label=f"{action} xid")
        resolve_prepared(wal, model, xid, action, out)
    else:
        xid = data.draw(st.sampled_from(sorted(model.open)), label=f"{action} xid")
        resolve(wal, model, xid, action, out)


def resolve(wal: Wal, model: Model, xid: int, action: str, out: list[AssembledEvent]) -> None:
    txn = model.open.pop(xid)
    if action == "commit":
        out += wal.feed(stream_commit(xid, model.commit_lsn()))
        model.expected.append((xid, txn.surviving()))
    elif action == "prepare":
        out += wal.feed(stream_prepare(xid, f"gid-{xid}"))
        model.prepared[xid] = txn
    else:
        out += wal.feed(stream_abort(xid))


def resolve_prepared(wal: Wal, model: Model, xid: int, action: str, out: list[AssembledEvent]) -> None:
    txn = model.prepared.pop(xid)
    if action == "commit_prepared":
        out += wal.feed(commit_prepared(xid, f"gid-{xid}", model.commit_lsn()))
        model.expected.append((xid, txn.surviving()))
    else:
        out += wal.feed(rollback_prepared(xid, f"gid-{xid}"))


def check_progress(assembler: TransactionAssembler, model: Model, budget: int) -> None:
    held = [*model.open.values(), *model.prepared.values()]
    firsts = [txn.first_lsn for txn in held]
    assert assembler.oldest_unfinished_lsn() == (min(firsts) if firsts else None)
    assert assembler.is_idle() == (not held and model.in_block is None)
    assert assembler.buffered_bytes <= budget * len(held)
