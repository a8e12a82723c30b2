"""The per-key reduction and the MERGE it feeds, on real Delta Lake and Iceberg tables (local[2]),
without Kafka.

Changes are rows of ``schemas.change_type`` as the decoders give them. Each case writes a table,
merges a batch the way ``MirrorJob`` does (``reduce_keyed`` / ``keyless_source`` → one ``MERGE``,
through the table format's own ``merge``) and reads the table back; the cases that hold for every
format run on both.
"""

from __future__ import annotations

import itertools
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from pgbridge_spark import delta_tables
from pgbridge_spark.evolution import table_schema
from pgbridge_spark.formats import Commit, TableFormat, table_format
from pgbridge_spark.merge import (
    CURRENT,
    DELETED,
    HISTORY_FIELDS,
    LSN,
    TOAST,
    VALID_FROM_LSN,
    VALID_TO_LSN,
    batch_keys,
    bounded_to_batch,
    history_plan,
    history_source,
    key_bounds,
    key_set_worth,
    keyed_plan,
    keyless_plan,
    keyless_source,
    mirror_rows,
    range_key,
    reduce_keyed,
    stored_entries,
    with_key_range,
    with_key_set,
)
from pgbridge_spark.mirror import POSITION_FIELDS
from pgbridge_spark.schemas import change_type
from pgbridge_spark.session import sibling_session

pytestmark = [pytest.mark.spark]

ROW = StructType([StructField("id", IntegerType()), StructField("v", StringType()), StructField("doc", StringType())])
KEY = StructType([StructField("id", IntegerType())])
_versions = itertools.count(1)


def commit() -> Commit:
    """A commit of a new micro-batch (Delta skips a version it has recorded for the application)."""
    return Commit("test", next(_versions), "{}")


@pytest.fixture(params=["delta", "iceberg"])
def tables(request: pytest.FixtureRequest) -> TableFormat:
    return table_format(request.param)


def change(op: str, lsn: int, order: int, before: tuple[Any, ...] | None, after: tuple[Any, ...] | None,
           toast: tuple[str, ...] = (), texts: dict[str, str] | None = None, keyed: bool = True) -> dict[str, Any]:
    def row(values: tuple[Any, ...] | None) -> dict[str, Any] | None:
        return None if values is None else dict(zip(("id", "v", "doc"), values, strict=True))
    image = after or before
    out: dict[str, Any] = {
        "topic": "p.public.t", "partition": 0, "offset": lsn * 10 + order, "schema_id": "s", "op": op,
        "before": row(before), "after": row(after),
        "source": {"db": "d", "schema": "public", "table": "t", "lsn": lsn, "commit_lsn": lsn, "xid": 1,
                   "ts_us": 0, "snapshot": False, "origin": None},
        "transaction": {"id": "1", "total_order": order, "data_collection_order": order},
        "unchanged_toast_columns": list(toast), "unrepresentable": texts, "commit_lsn": lsn, "total_order": order}
    if keyed:
        out["key"] = None if image is None else {"id": image[0]}
    return out


def apply(spark: SparkSession, tables: TableFormat, path: str, changes: list[dict[str, Any]], *, keyed: bool = True,
          truncate: tuple[int, int] | None = None) -> list[tuple[Any, ...]]:
    """The table after merging ``changes``: (id, v, doc, unrepresentable texts as sorted pairs)."""
    frame = spark.createDataFrame(changes, change_type(ROW, KEY if keyed else None))
    if not tables.is_table(spark, path):
        tables.create_table(spark, path, table_schema(ROW, POSITION_FIELDS))
    with_toast = any(c["unchanged_toast_columns"] for c in changes)
    if keyed:
        source = reduce_keyed(frame, ROW, ["id"], truncate, with_toast)
        plan = keyed_plan(ROW, ["id"], truncate)
    else:
        stored = stored_entries(tables.read(spark, path), ROW)
        source = keyless_source(stored, frame, ROW, truncate)
        plan = keyless_plan(ROW, truncate)
    if not tables.has_rows(spark, path):
        tables.append(mirror_rows(source, ROW, keyed), path, commit())
    else:
        tables.merge(spark, path, source, plan, commit())
    rows = tables.read(spark, path).collect()
    return sorted((r["id"], r["v"], r["doc"], tuple(sorted((r["_pgbridge_unrepresentable"] or {}).items())))
                  for r in rows)


def test_the_batch_reduces_to_the_last_change_per_key_with_toast_filled_from_earlier_changes(spark: Any) -> None:
    frame = spark.createDataFrame([
        change("c", 10, 1, None, (1, "a", "big")),
        change("u", 11, 1, None, (1, "b", None), toast=("doc",)),  # doc from the insert before it
        change("u", 12, 1, None, (2, "x", None), toast=("doc",)),  # doc: nothing in the batch, keep stored
        change("u", 12, 2, (3, None, None), (4, "moved", "d4")),  # key change: 3 goes, 4 comes
    ], change_type(ROW, KEY))
    reduced = {r["id"]: r for r in reduce_keyed(frame, ROW, ["id"], None, True).collect()}
    assert (reduced[1]["v"], reduced[1]["doc"], reduced[1][TOAST]) == ("b", "big", [])
    assert (reduced[2]["doc"], reduced[2][TOAST]) == (None, ["doc"])
    assert reduced[3][DELETED] and not reduced[4][DELETED] and reduced[4][LSN] == 12


def test_merge_applies_updates_deletes_key_changes_toast_and_ignores_older_changes(
        spark: Any, tables: TableFormat, tmp_path: Path) -> None:
    path = str(tmp_path / "keyed")
    assert apply(spark, tables, path, [change("c", 10, i, None, (i, f"v{i}", f"doc{i}")) for i in range(1, 6)]) == [
        (i, f"v{i}", f"doc{i}", ()) for i in range(1, 6)]
    rows = apply(spark, tables, path, [
        change("u", 20, 1, None, (1, "one", None), toast=("doc",)),  # doc kept from the table
        change("d", 20, 2, (2, None, None), None),
        change("u", 20, 3, (3, None, None), (30, "moved", "doc30")),
        change("u", 5, 1, None, (4, "older than stored", "x")),  # arrives late: must not win
        change("c", 20, 4, None, (6, None, None), texts={"after.v": "infinity"}),
    ])
    assert rows == [(1, "one", "doc1", ()), (4, "v4", "doc4", ()), (5, "v5", "doc5", ()),
                    (6, None, None, (("v", "infinity"),)), (30, "moved", "doc30", ())]
    # a truncate drops every row positioned before it, rows after it stay
    rows = apply(spark, tables, path, [change("t", 30, 1, None, None), change("c", 30, 2, None, (7, "after", None))],
                 truncate=(30, 1))
    assert rows == [(7, "after", None, ())]


def test_keyless_tables_stay_multisets(spark: Any, tables: TableFormat, tmp_path: Path) -> None:
    path = str(tmp_path / "keyless")
    same = (1, "x", None)
    rows = apply(spark, tables, path, [change("c", 10, 1, None, same, keyed=False), change("c", 10, 2, None, same, keyed=False),
                               change("c", 10, 3, None, (2, "y", None), keyed=False)], keyed=False)
    assert rows == [(1, "x", None, ()), (1, "x", None, ()), (2, "y", None, ())]
    rows = apply(spark, tables, path, [change("d", 20, 1, same, None, keyed=False),
                               change("u", 20, 2, (2, "y", None), (2, "z", None), keyed=False),
                               change("c", 20, 3, None, (1, "x", None), texts={"after.doc": "NaN"}, keyed=False)],
                 keyed=False)
    assert rows == [(1, "x", None, ()), (1, "x", None, (("doc", "NaN"),)), (2, "z", None, ())]


def test_history_keeps_every_version_with_its_validity_and_a_delete_or_truncate_closes_the_row(
        spark: Any, tables: TableFormat, tmp_path: Path) -> None:
    path = str(tmp_path / "public.history")  # a mirror path: "history" alone names an Iceberg metadata table
    tables.create_table(spark, path, table_schema(ROW, POSITION_FIELDS + HISTORY_FIELDS))

    def merge(changes: list[dict[str, Any]], truncate: tuple[int, int] | None = None) -> list[tuple[Any, ...]]:
        frame = spark.createDataFrame(changes, change_type(ROW, KEY))
        tables.merge(spark, path, history_source(frame, ROW, ["id"], truncate),
                     history_plan(ROW, ["id"], truncate, 5_000_000 if truncate else None), commit())
        rows = tables.read(spark, path).collect()
        return sorted((r["id"], r["v"], r[VALID_FROM_LSN], r[VALID_TO_LSN], r[CURRENT]) for r in rows)

    assert merge([change("c", 10, 1, None, (1, "a", None)), change("c", 10, 2, None, (2, "x", None))]) == [
        (1, "a", 10, None, True), (2, "x", 10, None, True)]
    assert merge([change("u", 20, 1, None, (1, "b", None)), change("u", 21, 1, None, (1, "c", None)),
                  change("d", 22, 1, (2, None, None), None)]) == [
        (1, "a", 10, 20, False), (1, "b", 20, 21, False), (1, "c", 21, None, True), (2, "x", 10, 22, False)]
    # a truncate closes the current versions positioned before it; what follows it is current
    assert merge([change("t", 30, 1, None, None), change("c", 30, 2, None, (5, "after", None))], truncate=(30, 1)) == [
        (1, "a", 10, 20, False), (1, "b", 20, 21, False), (1, "c", 21, 30, False), (2, "x", 10, 22, False),
        (5, "after", 30, None, True)]


def _four_files_some_unreadable(spark: Any, path: str, keep: set[int]) -> None:
    """400 rows (ids 0-399) in four files of disjoint key ranges (the mirror's first write); every
    file holding none of the ids in ``keep`` made unreadable, so a ``MERGE`` that reads one fails."""
    delta_tables.create_table(spark, path, table_schema(ROW, POSITION_FIELDS))
    first = spark.createDataFrame([change("c", 10, i, None, (i, "v", None)) for i in range(400)], change_type(ROW, KEY))
    (mirror_rows(reduce_keyed(first, ROW, ["id"], None, False), ROW, True).repartitionByRange(4, "id")
     .write.format("delta").mode("append").save(path))
    files = {r["file"]: (r["low"], r["high"]) for r in spark.read.format("delta").load(path).groupBy(
        F.col("_metadata.file_path").alias("file")).agg(F.min("id").alias("low"), F.max("id").alias("high")).collect()}
    assert len(files) == 4
    for file, (low, high) in files.items():
        if not any(low <= k <= high for k in keep):
            Path(file.removeprefix("file:")).write_bytes(b"not parquet")


def test_a_batch_bounded_to_its_key_range_reads_only_the_files_holding_that_range(spark: Any, tmp_path: Path) -> None:
    # given: every file but the one holding key 7 unreadable
    path = str(tmp_path / "ranges")
    _four_files_some_unreadable(spark, path, {7})
    batch = spark.createDataFrame([change("u", 20, 1, None, (7, "new", None))], change_type(ROW, KEY))
    source = reduce_keyed(batch, ROW, ["id"], None, False)
    key = range_key(KEY)
    assert key == "id"
    low, high = batch.agg(*key_bounds(key)).first()
    assert (low, high) == (7, 7)
    # then: without the bound the MERGE reads every file and fails on a broken one ...
    with pytest.raises(Exception, match=r"(?i)parquet|corrupt|magic"):
        delta_tables.merge(spark, path, source, keyed_plan(ROW, ["id"], None), commit())
    # ... with it, Delta skips the files whose key range misses 7, and the row is updated
    delta_tables.merge(spark, path, source, with_key_range(keyed_plan(ROW, ["id"], None), key, low, high), commit())
    updated = spark.read.format("delta").load(path).where("id = 7").collect()
    assert [(r["id"], r["v"]) for r in updated] == [(7, "new")]


def test_a_merge_limited_to_the_batch_keys_applies_updates_deletes_and_key_changes(
        spark: Any, tables: TableFormat, tmp_path: Path) -> None:
    # given: 400 rows; a batch spread over them: an update, a delete and a key change (whose old
    # key is only in its before image)
    path = str(tmp_path / "spread")
    tables.create_table(spark, path, table_schema(ROW, POSITION_FIELDS))
    first = spark.createDataFrame([change("c", 10, i, None, (i, "v", None)) for i in range(400)], change_type(ROW, KEY))
    tables.append(mirror_rows(reduce_keyed(first, ROW, ["id"], None, False), ROW, True), path, commit())
    batch = spark.createDataFrame([change("u", 20, 1, None, (7, "new", None)),
                                   change("d", 20, 2, (307, None, None), None),
                                   change("u", 20, 3, (100, None, None), (1000, "moved", None))], change_type(ROW, KEY))
    low, high = batch.agg(*key_bounds("id")).first()
    assert (low, high) == (7, 1000) and key_set_worth(3, low, high)
    keys = sorted(r["k"] for r in batch_keys(batch, "id").collect())
    assert keys == [7, 100, 307, 1000]
    # when: one MERGE bounded by the range and limited to those keys
    plan = with_key_set(with_key_range(keyed_plan(ROW, ["id"], None), "id", low, high), "id", keys)
    tables.merge(spark, path, reduce_keyed(batch, ROW, ["id"], None, False), plan, commit())
    # then: every change applied, every other row as it was
    rows = {r["id"]: r["v"] for r in tables.read(spark, path).collect()}
    assert (rows[7], rows[1000]) == ("new", "moved") and 307 not in rows and 100 not in rows
    assert len(rows) == 399 and all(v == "v" for k, v in rows.items() if k not in (7, 1000))


def test_the_batch_bound_asks_for_the_keys_only_when_it_names_them() -> None:
    asked: list[int] = []

    def keys() -> list[int]:
        asked.append(1)
        return [3, 900]

    plan = keyed_plan(ROW, ["id"], None)
    assert bounded_to_batch(plan, "id", 3, 900, 2, keys).condition == \
        "t.`id` = s.`id` AND t.`id` BETWEEN 3 AND 900 AND t.`id` IN (3, 900)"
    assert bounded_to_batch(plan, "id", 3, 4, 2, keys) == with_key_range(plan, "id", 3, 4)  # consecutive
    truncating = keyed_plan(ROW, ["id"], (30, 1))
    assert bounded_to_batch(truncating, "id", 3, 900, 2, keys) == truncating
    assert len(asked) == 1  # the Spark job behind ``keys`` ran for the first plan only


def test_the_key_set_is_named_for_few_spread_changes_only_and_never_with_a_truncate() -> None:
    assert key_set_worth(1000, 1, 10_000_000)
    assert not key_set_worth(1, 5, 5)  # one change: its range is its key
    assert not key_set_worth(1000, 1, 1000)  # consecutive keys: the range is as narrow
    assert not key_set_worth(20_000, 1, 10_000_000)  # too many to list
    plan = keyed_plan(ROW, ["id"], None)
    assert with_key_set(plan, "id", [9, -5, 9]).condition == "t.`id` = s.`id` AND t.`id` IN (-5, 9)"
    assert with_key_set(plan, "id", []) == plan
    truncating = keyed_plan(ROW, ["id"], (30, 1))
    assert with_key_set(truncating, "id", [1, 2]) == truncating


def test_the_key_range_bounds_only_single_integral_keys_and_plans_without_a_truncate() -> None:
    assert range_key(StructType([StructField("id", LongType())])) == "id"
    assert range_key(StructType([StructField("code", StringType())])) is None
    assert range_key(StructType([StructField("a", IntegerType()), StructField("b", IntegerType())])) is None
    assert range_key(None) is None
    plan = keyed_plan(ROW, ["id"], None)
    assert with_key_range(plan, "id", -5, 9).condition == "t.`id` = s.`id` AND t.`id` BETWEEN -5 AND 9"
    truncating = keyed_plan(ROW, ["id"], (30, 1))
    assert with_key_range(truncating, "id", 1, 2) == truncating


def test_tables_committing_at_once_each_carry_their_own_commit_options(spark: Any, tmp_path: Path) -> None:
    """``--parallel-tables``: a MERGE's commit options are session settings, so each table commits
    through a sibling session; at once, every table's commit still holds its own metadata."""
    paths = [str(tmp_path / f"t{i}") for i in range(3)]
    for path in paths:
        delta_tables.create_table(spark, path, table_schema(ROW, POSITION_FIELDS))
        apply(spark, delta_tables, path, [change("c", 1, 0, None, (1, "first", None))])
    siblings = [sibling_session(spark) for _ in paths]
    assert siblings[0].conf.get("spark.sql.shuffle.partitions") == spark.conf.get("spark.sql.shuffle.partitions")

    def commit(i: int) -> None:
        session, path = siblings[i], paths[i]
        source = reduce_keyed(session.createDataFrame([change("u", 2 + j, 0, (1, "first", None), (1, f"t{i}-{j}", None))
                                                       for j in range(3)], change_type(ROW, KEY)), ROW, ["id"], None, False)
        delta_tables.merge(session, path, source, keyed_plan(ROW, ["id"], None), Commit("app", 7, f"metadata of t{i}"))

    with ThreadPoolExecutor(len(paths)) as pool:
        list(pool.map(commit, range(len(paths))))
    for i, path in enumerate(paths):
        last = DeltaTable.forPath(spark, path).history(1).collect()[0]
        assert last["userMetadata"] == f"metadata of t{i}"
        assert spark.read.format("delta").load(path).select("v").collect()[0]["v"] == f"t{i}-2"
    assert spark.conf.get(delta_tables.USER_METADATA, None) is None  # the job's own session untouched


@pytest.mark.parametrize("left", [(), ("_commit.json.tmp",), ("00000000000000000000.crc",)],
                         ids=["empty", "temporary-file", "checksum-only"])
def test_a_table_whose_creation_was_killed_before_its_first_commit_is_created(
        spark: Any, tmp_path: Path, left: tuple[str, ...]) -> None:
    """A driver killed while it created a table can leave ``_delta_log`` without a commit (seen on
    HDFS in the cluster kill test): the next run creates the table there instead of failing on it."""
    path = tmp_path / "public.notes"
    (path / "_delta_log").mkdir(parents=True)
    for name in left:
        (path / "_delta_log" / name).write_text("{}")
    schema = table_schema(ROW, POSITION_FIELDS)
    delta_tables.create_table(spark, str(path), schema)
    assert DeltaTable.forPath(spark, str(path)).toDF().schema == schema
    delta_tables.create_table(spark, str(path), schema)  # and a table already there is kept
    assert DeltaTable.forPath(spark, str(path)).history().count() == 1
