from __future__ import annotations

from pgbridge.snapshot.chunking import TablePlan, key_chunks
from pgbridge.snapshot.initial import SnapshotTable, chunks_to_read
from pgbridge.snapshot.progress import done_key, header_key, initial_progress, plan_key

SLOT = "s1"


def _records(consistent: int) -> dict[str, dict[str, object]]:
    plan = TablePlan("public", "t", "key", ("id",), ("bigint",), 10, key_chunks("public.t", [("5",)]))
    return {header_key(SLOT): {"consistent_lsn": consistent, "tables": ["public.t"]},
            plan_key(SLOT, "public.t"): {"consistent_lsn": consistent, "plan": plan.to_json()}}


def test_a_complete_plan_and_its_done_chunks_are_resumable() -> None:
    records = _records(100)
    records[done_key(SLOT, "public.t", 1)] = {"consistent_lsn": 100}
    records[done_key(SLOT, "public.t", 0)] = {"consistent_lsn": 99}  # an older attempt: ignored
    progress = initial_progress(records, SLOT)
    assert progress is not None
    assert progress.consistent_lsn == 100
    assert progress.done == {("public.t", 1)}
    assert TablePlan.from_json(progress.plans["public.t"]).chunks[1].lower == ("5",)


def test_a_missing_header_or_table_plan_means_start_over() -> None:
    records = _records(100)
    del records[header_key(SLOT)]
    assert initial_progress(records, SLOT) is None
    records = _records(100)
    records[plan_key(SLOT, "public.t")]["consistent_lsn"] = 7
    assert initial_progress(records, SLOT) is None


def test_keyless_tables_with_an_unfinished_chunk_are_read_again_whole() -> None:
    from pgbridge.decode.messages import Relation
    from pgbridge.snapshot.chunking import ctid_chunks
    relation = Relation(xid=None, rel_id=1, namespace="public", name="k", replica_identity="d", columns=())
    keyed = TablePlan("public", "t", "key", ("id",), ("bigint",), 10, key_chunks("public.t", [("5",)]))
    keyless = TablePlan("public", "k", "ctid", (), (), 10, ctid_chunks("public.k", 8, 4))
    tables = [SnapshotTable(keyed, relation), SnapshotTable(keyless, relation)]
    todo = chunks_to_read(tables, {("public.t", 0), ("public.k", 0)})
    assert [(c.table, c.index) for c in todo] == [("public.t", 1), ("public.k", 0), ("public.k", 1)]
    assert chunks_to_read(tables, {("public.t", 0), ("public.t", 1), ("public.k", 0), ("public.k", 1)}) == []
