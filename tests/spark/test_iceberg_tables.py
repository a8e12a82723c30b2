"""The Iceberg table format (``iceberg_tables``) on real Iceberg tables (local[2]), without Kafka:
what the job relies on beyond the MERGE itself (``test_delta_reduction`` runs that on both formats).

- the job's progress rides in each snapshot's summary and is read back from the newest one, also
  after a compaction; a replayed micro-batch finds its own commit there;
- a consistent reader gets the snapshot whose recorded cut is the newest at or below its cut;
- a changelog append creates the table and takes new columns;
- a retype Iceberg cannot widen replaces the table in one commit that keeps the job's progress;
- upkeep: files counted from the snapshot summary, compaction applies the position deletes,
  retention forgets old snapshots.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from pgbridge_spark import iceberg_tables
from pgbridge_spark.evolution import SchemaPlan, table_schema
from pgbridge_spark.formats import Commit, detect, version_at_cut
from pgbridge_spark.merge import keyed_plan, reduce_keyed
from pgbridge_spark.mirror import POSITION_FIELDS
from pgbridge_spark.progress import TableProgress
from pgbridge_spark.reading import read_table
from pgbridge_spark.schemas import change_type
from tests.spark.test_delta_reduction import KEY, ROW, change

pytestmark = [pytest.mark.spark]


def progress(batch: int, cut: int | None = None) -> str:
    return TableProgress(app="job", batch=batch, cut=cut).to_metadata()


def merge(spark: Any, path: str, changes: list[dict[str, Any]], batch: int, cut: int | None = None) -> None:
    source = reduce_keyed(spark.createDataFrame(changes, change_type(ROW, KEY)), ROW, ["id"], None, False)
    iceberg_tables.merge(spark, path, source, keyed_plan(ROW, ["id"], None), Commit("job", batch, progress(batch, cut)))


def values(spark: Any, path: str, version: int | None = None) -> list[tuple[Any, ...]]:
    return sorted((r["id"], r["v"]) for r in iceberg_tables.read(spark, path, version).collect())


def test_progress_cuts_compaction_and_retention_of_an_iceberg_mirror(spark: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "mirror" / "public.t")
    iceberg_tables.require(spark)
    assert not iceberg_tables.is_table(spark, path) and detect(spark, path) is None
    iceberg_tables.create_table(spark, path, table_schema(ROW, POSITION_FIELDS))
    assert detect(spark, path) is iceberg_tables and iceberg_tables.last_progress(spark, path) is None
    # micro-batches 1-3, each one MERGE whose snapshot records the batch and the consistent cut
    merge(spark, path, [change("c", 10, i, None, (i, "a", None)) for i in range(1, 6)], batch=1, cut=10)
    merge(spark, path, [change("u", 20, 1, None, (1, "b", None)), change("d", 20, 2, (2, None, None), None)],
          batch=2, cut=20)
    merge(spark, path, [change("u", 30, 1, None, (3, "c", None))], batch=3, cut=30)
    found = iceberg_tables.last_progress(spark, path)
    assert found is not None and found[0].batch == 3 and found[0].applied("job", 3)
    assert values(spark, path) == [(1, "b"), (3, "c"), (4, "a"), (5, "a")]
    # then: a consistent reader at cut 25 reads the snapshot of batch 2 (time travel by snapshot id)
    commits = iceberg_tables.versions_with_cut(spark, path)
    assert [cut for _, cut in commits] == [10, 20, 30]
    at_25 = version_at_cut(commits, 25)
    assert at_25 == commits[1][0]
    assert values(spark, path, at_25) == [(1, "b"), (3, "a"), (4, "a"), (5, "a")]
    # upkeep: the MERGEs left position-delete files beside the data files; compaction applies them
    # and its snapshot keeps the job's progress
    before = iceberg_tables.file_count(spark, path)
    assert before is not None and before >= 4
    iceberg_tables.compact(spark, path, progress(3, 30))
    after = iceberg_tables.file_count(spark, path)
    assert after is not None and after < before
    assert values(spark, path) == [(1, "b"), (3, "c"), (4, "a"), (5, "a")]
    found = iceberg_tables.last_progress(spark, path)
    assert found is not None and found[0].batch == 3
    # retention 0: every snapshot but the current one is forgotten, the rows stay
    iceberg_tables.vacuum(spark, path, 0)
    assert len(spark.sql(f"SELECT * FROM {iceberg_tables.identifier(spark, path)}.snapshots").collect()) == 1
    assert values(spark, path) == [(1, "b"), (3, "c"), (4, "a"), (5, "a")]
    assert sorted(r["id"] for r in read_table(spark, str(tmp_path / "mirror"), "public.t").collect()) == [1, 3, 4, 5]


def test_a_changelog_append_creates_the_table_and_takes_new_columns(spark: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "changelog" / "public.t")
    first = spark.createDataFrame([(1, "a")], "id int, v string")
    iceberg_tables.append(first, path, Commit("job", 1, progress(1)), merge_schema=True)
    wider = spark.createDataFrame([(2, "b", 7)], "id int, v string, extra int")
    iceberg_tables.append(wider, path, Commit("job", 2, progress(2)), merge_schema=True)
    rows = sorted((r["id"], r["v"], r["extra"]) for r in iceberg_tables.read(spark, path).collect())
    assert rows == [(1, "a", None), (2, "b", 7)]
    found = iceberg_tables.last_progress(spark, path)
    assert found is not None and found[0].batch == 2


def test_schema_changes_in_place_and_a_retype_that_replaces_the_table_keeps_the_progress(spark: Any,
                                                                                         tmp_path: Path) -> None:
    path = str(tmp_path / "evolve" / "public.t")
    schema = StructType([StructField("id", IntegerType()), StructField("n", IntegerType()),
                         StructField("s", StringType())])
    iceberg_tables.create_table(spark, path, schema)
    iceberg_tables.append(spark.createDataFrame([(1, 5, "12"), (2, 6, "x")], schema), path,
                          Commit("job", 1, progress(1)))
    plan = SchemaPlan(renames=(("n", "m"),), adds=(StructField("extra", StringType()),),
                      retypes=(("m", LongType()), ("s", IntegerType())))  # int → long in place; string → int not
    iceberg_tables.evolve(spark, path, plan, iceberg_tables.stored_schema(spark, path))
    stored = iceberg_tables.stored_schema(spark, path)
    assert [(f.name, f.dataType) for f in stored.fields] == [
        ("id", IntegerType()), ("m", LongType()), ("s", IntegerType()), ("extra", StringType())]
    rows = sorted(tuple(r) for r in iceberg_tables.read(spark, path).collect())
    assert rows == [(1, 5, 12, None), (2, 6, None, None)]  # try_cast: null where not exact
    found = iceberg_tables.last_progress(spark, path)
    assert found is not None and found[0].batch == 1
