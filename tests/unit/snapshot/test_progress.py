from __future__ import annotations

import json

from pgbridge.decode.messages import Relation
from pgbridge.snapshot.chunking import TablePlan, ctid_chunks, key_chunks
from pgbridge.snapshot.initial import ChunkRead, SnapshotTable, chunks_to_read
from pgbridge.snapshot.progress import (
    ChunkPositions,
    chunk_progress,
    done_key,
    encode_record,
    header_key,
    initial_progress,
    plan_key,
    resume_key,
)

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


RELATION = Relation(xid=None, rel_id=1, namespace="public", name="k", replica_identity="d", columns=())
KEYED = TablePlan("public", "t", "key", ("id",), ("bigint",), 10, key_chunks("public.t", [("5",)]))
KEYLESS = TablePlan("public", "k", "ctid", (), (), 10, ctid_chunks("public.k", 8, 4), storage=(16384,))
TABLES = [SnapshotTable(KEYED, RELATION), SnapshotTable(KEYLESS, RELATION)]


def _read(todo: list[ChunkRead]) -> list[tuple[str, int, tuple[str, ...] | None]]:
    return [(r.chunk.table, r.chunk.index, r.after) for r in todo]


def test_keyless_tables_with_an_unfinished_chunk_are_read_again_whole_at_least_once() -> None:
    todo = chunks_to_read(TABLES, {("public.t", 0), ("public.k", 0)}, {("public.t", 1): ("7",)})
    assert _read(todo) == [("public.t", 1, None), ("public.k", 0, None), ("public.k", 1, None)]
    assert chunks_to_read(TABLES, {("public.t", 0), ("public.t", 1), ("public.k", 0), ("public.k", 1)}) == []


def test_exactly_once_resumes_each_chunk_after_its_committed_position() -> None:
    # given: chunk t/0 done, t/1 committed up to key 7, k/0 done, k/1 up to a ctid of partition 16390
    done = {("public.t", 0), ("public.k", 0)}
    resume = {("public.t", 1): ("7",), ("public.k", 1): ("16390", "(5,3)")}
    # then: each unfinished chunk is read after its position, untouched ones whole
    todo = chunks_to_read(TABLES, done, resume, by_position=True)
    assert _read(todo) == [("public.t", 1, ("7",)), ("public.k", 1, ("16390", "(5,3)"))]
    assert _read(chunks_to_read(TABLES, {("public.t", 0)}, {}, by_position=True)) == [
        ("public.t", 1, None), ("public.k", 0, None), ("public.k", 1, None)]
    # ... but a keyless table rewritten since its plan is read whole: its ctids name other rows now
    todo = chunks_to_read(TABLES, done, resume, rewritten=frozenset({"public.k"}), by_position=True)
    assert _read(todo) == [("public.t", 1, ("7",)), ("public.k", 0, None), ("public.k", 1, None)]


def test_resume_records_of_this_attempt_are_read_back_and_a_done_record_wins() -> None:
    records = _records(100)
    records[resume_key(SLOT, "public.t", 0)] = chunk_progress(100, ("3",))
    records[resume_key(SLOT, "public.t", 1)] = chunk_progress(100, ("8",))
    records[done_key(SLOT, "public.t", 1)] = chunk_progress(100, None)
    records[resume_key(SLOT, "public.u", 0)] = chunk_progress(99, ("1",))  # an older attempt
    progress = initial_progress(records, SLOT)
    assert progress is not None
    assert progress.resume == {("public.t", 0): ("3",)} and progress.done == {("public.t", 1)}


def test_progress_records_encode_as_compact_json() -> None:
    assert encode_record(chunk_progress(100, None)) == b'{"consistent_lsn":100}'
    assert encode_record(chunk_progress(100, ("5", "a b"))) == b'{"consistent_lsn":100,"after":["5","a b"]}'
    assert encode_record(None) is None
    assert resume_key(SLOT, 'public."Odd/Name"', 3) == 's1/initial/resume/public."Odd/Name"/3'


def test_each_commit_carries_the_position_of_every_chunk_it_touched_and_the_ends() -> None:
    # given: two chunks read at once (units stand for chunks)
    positions = ChunkPositions("p._snapshot", SLOT, 100)
    a, b = object(), object()
    positions.begin(a, "public.t", 0)
    positions.begin(b, "public.t", 1)
    positions.reached(a, ("1",))
    positions.reached(a, ("2",))
    positions.reached(b, ("6",))
    written: list[tuple[str, bytes, bytes | None]] = []
    # when: a transaction commits, then chunk a ends without another row
    positions.write(lambda topic, key, value: written.append((topic, key, value)))
    positions.end(a)
    positions.reached(b, ("7",))
    second = positions.pending()
    # then: each commit says how far each chunk got; an ended chunk says done; nothing is repeated
    assert [(k.decode(), json.loads(v or b"")) for _, k, v in written] == [
        ("s1/initial/resume/public.t/0", {"consistent_lsn": 100, "after": ["2"]}),
        ("s1/initial/resume/public.t/1", {"consistent_lsn": 100, "after": ["6"]})]
    assert {t for t, _, _ in written} == {"p._snapshot"}
    assert second == [("s1/initial/resume/public.t/1", {"consistent_lsn": 100, "after": ["7"]}),
                      ("s1/initial/done/public.t/0", {"consistent_lsn": 100})]
    assert positions.pending() == []
