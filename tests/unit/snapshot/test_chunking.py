from __future__ import annotations

from pgbridge.decode.messages import Column, Relation
from pgbridge.snapshot.chunking import (
    CHUNK_BY_CTID,
    CHUNK_BY_KEY,
    TablePlan,
    blocks_per_chunk,
    chunk_condition,
    chunk_copy_query,
    ctid_chunks,
    key_chunks,
    next_rows_copy_query,
    positioned_copy_query,
)


def _plan(kind: str = CHUNK_BY_KEY, keys: tuple[str, ...] = ("a", "b"),
          types: tuple[str, ...] = ("bigint", "text")) -> TablePlan:
    chunks = key_chunks("s.t", [("1", "x"), ("5", "y")]) if kind == CHUNK_BY_KEY else ctid_chunks("s.t", 10, 4)
    return TablePlan("s", "t", kind, keys if kind == CHUNK_BY_KEY else (),  # type: ignore[arg-type]
                     types if kind == CHUNK_BY_KEY else (), 100, chunks)


def test_key_boundaries_give_one_more_chunk_open_at_both_ends() -> None:
    chunks = key_chunks("s.t", [("10",), ("20",)])
    assert [(c.lower, c.upper) for c in chunks] == [(None, ("10",)), (("10",), ("20",)), (("20",), None)]
    assert [c.index for c in chunks] == [0, 1, 2]
    assert key_chunks("s.t", [])[0].lower is None and key_chunks("s.t", [])[0].upper is None


def test_ctid_chunks_cover_every_block_and_the_last_is_open_above() -> None:
    chunks = ctid_chunks("s.t", 10, 4)
    assert [(c.lower, c.upper) for c in chunks] == [(("0",), ("4",)), (("4",), ("8",)), (("8",), None)]
    assert [(c.lower, c.upper) for c in ctid_chunks("s.t", 0, 4)] == [(("0",), None)]


def test_blocks_per_chunk_follows_the_table_density() -> None:
    assert blocks_per_chunk(10_000, 1_000_000, 10_000) == 100
    assert blocks_per_chunk(10, 1_000_000, 10_000) == 1
    assert blocks_per_chunk(10_000, 0, 7) == 7


def test_key_chunk_condition_compares_rows_with_casts_to_the_key_types() -> None:
    plan = _plan()
    middle = chunk_condition(plan, plan.chunks[1]).as_string(None)
    assert middle == ("ROW(\"a\", \"b\") > ROW('1'::bigint, 'x'::text) AND "
                      "ROW(\"a\", \"b\") <= ROW('5'::bigint, 'y'::text)")
    assert chunk_condition(plan, plan.chunks[0]).as_string(None).startswith("ROW(\"a\", \"b\") <=")
    assert chunk_condition(plan, plan.chunks[2]).as_string(None).startswith("ROW(\"a\", \"b\") >")


def test_ctid_chunk_condition_uses_block_ranges() -> None:
    plan = _plan(CHUNK_BY_CTID)
    assert chunk_condition(plan, plan.chunks[0]).as_string(None) == "ctid < '(4,0)'::tid"
    assert chunk_condition(plan, plan.chunks[1]).as_string(None) == "ctid >= '(4,0)'::tid AND ctid < '(8,0)'::tid"
    assert chunk_condition(plan, plan.chunks[2]).as_string(None) == "ctid >= '(8,0)'::tid"


def test_copy_queries_select_the_published_columns() -> None:
    relation = Relation(xid=None, rel_id=1, namespace="s", name="t", replica_identity="d",
                        columns=(Column(True, "a", 20, -1), Column(True, "b", 25, -1), Column(False, "c", 25, -1)))
    plan = _plan()
    assert chunk_copy_query(plan, relation, plan.chunks[0]).as_string(None).startswith(
        'COPY (SELECT "a", "b", "c" FROM "s"."t" WHERE ')
    paged = next_rows_copy_query(plan, relation, ("5", "y"), 100).as_string(None)
    assert paged == ('COPY (SELECT "a", "b", "c", "a"::text AS "pgbridge_key_0", "b"::text AS "pgbridge_key_1" '
                     'FROM "s"."t" WHERE ROW("a", "b") > '
                     "ROW('5'::bigint, 'y'::text) ORDER BY \"a\", \"b\" LIMIT 100) TO STDOUT")


def test_incremental_pages_stop_at_the_largest_key_seen_when_the_snapshot_started() -> None:
    relation = Relation(xid=None, rel_id=1, namespace="s", name="t", replica_identity="d",
                        columns=(Column(True, "a", 20, -1), Column(True, "b", 25, -1)))
    paged = next_rows_copy_query(_plan(), relation, None, 10, ("9", "z")).as_string(None)
    assert "WHERE ROW(\"a\", \"b\") <= ROW('9'::bigint, 'z'::text) ORDER BY" in paged
    both = next_rows_copy_query(_plan(), relation, ("5", "y"), 10, ("9", "z")).as_string(None)
    assert "ROW('5'::bigint, 'y'::text) AND ROW(\"a\", \"b\") <= ROW('9'::bigint, 'z'::text)" in both


def test_plans_survive_json() -> None:
    for plan in (_plan(), _plan(CHUNK_BY_CTID)):
        assert TablePlan.from_json(plan.to_json()) == plan


def test_exactly_once_reads_a_chunk_in_key_order_with_each_rows_position_after_a_resume_point() -> None:
    relation = Relation(xid=None, rel_id=1, namespace="s", name="t", replica_identity="d",
                        columns=(Column(True, "a", 20, -1), Column(True, "b", 25, -1)))
    plan = _plan()
    query = positioned_copy_query(plan, relation, plan.chunks[1], ("3", "q")).as_string(None)
    assert query == ('COPY (SELECT "a", "b", "a"::text AS "pgbridge_position_0", "b"::text AS "pgbridge_position_1" '
                     "FROM \"s\".\"t\" WHERE ROW(\"a\", \"b\") > ROW('1'::bigint, 'x'::text) AND "
                     "ROW(\"a\", \"b\") <= ROW('5'::bigint, 'y'::text) AND "
                     "ROW(\"a\", \"b\") > ROW('3'::bigint, 'q'::text) ORDER BY \"a\", \"b\") TO STDOUT")
    assert "> ROW('3'" not in positioned_copy_query(plan, relation, plan.chunks[1], None).as_string(None)


def test_a_keyless_chunk_is_positioned_by_partition_and_ctid() -> None:
    relation = Relation(xid=None, rel_id=1, namespace="s", name="t", replica_identity="d",
                        columns=(Column(False, "a", 20, -1),))
    plan = _plan(CHUNK_BY_CTID)
    query = positioned_copy_query(plan, relation, plan.chunks[1], ("16390", "(5,3)"), "a > 1").as_string(None)
    assert query == ('COPY (SELECT "a", tableoid::text AS "pgbridge_position_0", ctid::text AS "pgbridge_position_1" '
                     "FROM \"s\".\"t\" WHERE (ctid >= '(4,0)'::tid AND ctid < '(8,0)'::tid AND "
                     "ROW(tableoid, ctid) > ROW('16390'::oid, '(5,3)'::tid)) AND (a > 1) "
                     "ORDER BY tableoid, ctid) TO STDOUT")


def test_a_keyless_plan_keeps_its_storage_through_json_and_older_plans_have_none() -> None:
    plan = TablePlan("s", "t", CHUNK_BY_CTID, (), (), 100, ctid_chunks("s.t", 10, 4), storage=(16384, 16390))
    assert TablePlan.from_json(plan.to_json()) == plan
    older = plan.to_json()
    del older["storage"]
    assert TablePlan.from_json(older).storage == ()
