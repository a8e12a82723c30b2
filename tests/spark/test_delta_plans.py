"""The Delta mirror's pure parts: schema evolution decisions, renames through Avro aliases, the
progress kept in commit metadata, the version a consistent read takes, the jars' whereabouts and
the per-batch shuffle size. No Spark session (the reduction per key is tested in
test_delta_reduction.py, with one)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql.types import DecimalType, IntegerType, LongType, StringType, StructField, StructType

from pgbridge_spark.config import parse_args
from pgbridge_spark.decode import record_conformer
from pgbridge_spark.evolution import plan_schema, table_schema
from pgbridge_spark.formats import version_at_cut
from pgbridge_spark.iceberg_tables import catalog_name, catalog_settings, split_path
from pgbridge_spark.kafka import FETCH_MAX_WAIT_MS
from pgbridge_spark.merge import (
    COMMIT_LSN_COLUMN,
    TOTAL_ORDER_COLUMN,
    history_plan,
    keyed_plan,
    merge_statement,
)
from pgbridge_spark.packages import ARTIFACTS, Artifact, find_local, missing_message
from pgbridge_spark.progress import TableProgress
from pgbridge_spark.schemas import EnvelopeSchema, record_to_struct
from pgbridge_spark.session import (
    class_archive_option,
    class_archive_path,
    class_path_folders,
    java_options,
    shuffle_partitions,
    table_workers,
)
from pgbridge_spark.source import source_options

POSITIONS = [StructField(COMMIT_LSN_COLUMN, LongType()), StructField(TOTAL_ORDER_COLUMN, LongType())]


def stored(*fields: StructField) -> StructType:
    return StructType([*fields, *POSITIONS])


def test_added_and_dropped_columns_are_planned_in_row_order_without_the_pgbridge_columns() -> None:
    table = stored(StructField("id", LongType()), StructField("tags", StringType()))
    row = StructType([StructField("id", LongType(), False), StructField("email", StringType())])
    plan = plan_schema(table, row)
    assert plan.drops == ("tags",) and [f.name for f in plan.adds] == ["email"]
    assert not plan.renames and not plan.retypes
    assert plan_schema(stored(StructField("id", LongType())), StructType([StructField("id", LongType(), False)])).empty


def test_a_column_dropped_and_added_again_within_the_batch_is_dropped_and_added() -> None:
    table = stored(StructField("id", LongType()), StructField("payload", StringType()))
    row = StructType([StructField("id", LongType()), StructField("payload", StringType())])
    plan = plan_schema(table, row, {"payload": (100, 2)})
    assert plan.drops == ("payload",) and [f.name for f in plan.adds] == ["payload"]


def test_a_field_whose_aliases_name_a_stored_column_renames_it_and_keeps_its_type() -> None:
    renamed = StructField("full_name", StringType(), True, metadata={"aliases": ["name"]})
    table = stored(StructField("id", LongType()), StructField("name", StringType()))
    plan = plan_schema(table, StructType([StructField("id", LongType()), renamed]))
    assert plan.renames == (("name", "full_name"),) and plan.empty is False
    assert not plan.drops and not plan.adds and not plan.retypes
    # an alias naming a column the row type still has is no rename (both stay)
    both = StructType([StructField("id", LongType()), StructField("name", StringType()), renamed])
    plan = plan_schema(table, both)
    assert not plan.renames and [f.name for f in plan.adds] == ["full_name"]


def test_retyped_columns_are_planned_and_nullability_alone_is_no_change() -> None:
    table = stored(StructField("id", IntegerType()), StructField("amount", DecimalType(12, 2)))
    row = StructType([StructField("id", LongType(), False), StructField("amount", DecimalType(12, 2), False)])
    assert plan_schema(table, row).retypes == (("id", LongType()),)
    assert [f.nullable for f in table_schema(row, POSITIONS).fields] == [True, True, True, True]


def test_old_records_fill_a_renamed_column_through_its_aliases() -> None:
    writer = {"type": "record", "name": "Value", "fields": [{"name": "id", "type": "long"},
                                                            {"name": "name", "type": ["null", "string"]}]}
    reader = {"type": "record", "name": "Value", "fields": [
        {"name": "id", "type": "long"}, {"name": "full_name", "type": ["null", "string"], "aliases": ["name"]}]}
    target = record_to_struct(reader)
    assert target["full_name"].metadata["aliases"] == ["name"]
    assert record_conformer(writer, target)({"id": 1, "name": "ann"}) == {"id": 1, "full_name": "ann"}


def test_envelope_row_types_keep_the_aliases() -> None:
    row = {"type": "record", "name": "Value", "fields": [
        {"name": "full_name", "type": ["null", "string"], "default": None, "aliases": ["name"]}]}
    envelope = {"type": "record", "name": "Envelope", "fields": [
        {"name": "before", "type": ["null", row], "default": None},
        {"name": "after", "type": ["null", "Value"], "default": None}, {"name": "op", "type": "string"}]}
    assert EnvelopeSchema.parse(json.dumps(envelope)).row_type["full_name"].metadata["aliases"] == ["name"]


def test_progress_travels_in_commit_metadata_and_says_which_batch_it_applied() -> None:
    progress = TableProgress(key_fields=["id"], schema_id="ab", app="job", batch=7, cut=900)
    progress.advance({0: (100, 3), 1: (90, 1)}, (80, 1))
    text = progress.to_metadata()
    assert json.loads(text)["pgbridge"]["partitions"] == {"0": [100, 3], "1": [90, 1]}
    assert TableProgress.from_metadata(text) == progress
    assert progress.applied("job", 7) and progress.applied("job", 6)
    assert not progress.applied("job", 8) and not progress.applied("other", 7)


def test_a_consistent_read_takes_the_newest_version_at_or_below_the_cut() -> None:
    commits = [(1, 100), (2, 250), (4, 300)]
    assert version_at_cut(commits, 299) == 2
    assert version_at_cut(commits, 300) == 4
    assert version_at_cut(commits, 99) is None
    # Iceberg's snapshot ids are not ordered by value: the list's (commit) order decides
    snapshots = [(8_000_000_000, 100), (-5, 250), (42, 300)]
    assert version_at_cut(snapshots, 299) == -5
    assert version_at_cut(snapshots, 1_000) == 42


def test_iceberg_tables_live_at_the_delta_path_through_one_hadoop_catalog_per_output() -> None:
    assert split_path("hdfs://nn:8020/mirror/public.orders") == ("hdfs://nn:8020/mirror", "public.orders")
    assert split_path("s3a://bucket/m/public.t/") == ("s3a://bucket/m", "public.t")
    with pytest.raises(ValueError, match="not a mirror table path"):
        split_path("orders")
    a, b = catalog_name("hdfs://nn/m1"), catalog_name("hdfs://nn/m2")
    assert a != b and a.startswith("pgbridge_") and a == catalog_name("hdfs://nn/m1")
    settings = catalog_settings("hdfs://nn/m1")
    assert settings[f"spark.sql.catalog.{a}.type"] == "hadoop"
    assert settings[f"spark.sql.catalog.{a}.warehouse"] == "hdfs://nn/m1"
    assert settings[f"spark.sql.catalog.{a}.cache-enabled"] == "false"  # sibling sessions see each other's commits


def test_a_merge_plan_is_one_merge_into_statement_with_delta_builders_clause_order() -> None:
    row = StructType([StructField("id", LongType()), StructField("it's", StringType())])
    sql = merge_statement("cat.`public.t`", "global_temp.`v`", keyed_plan(row, ["id"], (30, 2)))
    lines = sql.splitlines()
    assert lines[0] == "MERGE INTO cat.`public.t` t USING global_temp.`v` s ON t.`id` = s.`id`"
    assert [line.split(" THEN ")[1].split(" ")[0] for line in lines[1:]] == ["DELETE", "UPDATE", "INSERT", "DELETE"]
    assert lines[-1].startswith("WHEN NOT MATCHED BY SOURCE AND ((t.`_pgbridge_commit_lsn` < 30 OR")
    assert "array_contains(s._pgbridge_s_toast, 'it\\'s')" in sql  # a column name as a string literal
    assert "t.`it's` = CASE WHEN" in sql
    # history: a truncate closes current versions instead of deleting them
    closing = merge_statement("t1", "v", history_plan(row, ["id"], (30, 2), 123))
    assert closing.splitlines()[-1].startswith("WHEN NOT MATCHED BY SOURCE AND (t._pgbridge_current AND (")
    assert "THEN UPDATE SET t._pgbridge_valid_to_lsn = CAST(30 AS BIGINT)" in closing
    assert "WHEN MATCHED AND" in closing and "THEN DELETE" not in closing


def test_the_table_format_is_delta_unless_iceberg_is_asked_for() -> None:
    base = ["--bootstrap-servers", "k:9092", "--output", "/m", "--checkpoint", "/c"]
    assert parse_args(base)[0].table_format == "delta"
    assert parse_args([*base, "--table-format", "iceberg"])[0].table_format == "iceberg"
    with pytest.raises(SystemExit):
        parse_args([*base, "--table-format", "hudi"])


def test_jars_are_found_in_the_maven_repository_and_missing_ones_named_with_the_fix(tmp_path: Path) -> None:
    kafka = next(a for a in ARTIFACTS if a.name.startswith("spark-sql-kafka"))
    jar = kafka.in_maven(tmp_path / "m2")
    jar.parent.mkdir(parents=True)
    jar.write_bytes(b"jar")
    found = find_local(ARTIFACTS, [], tmp_path / "m2", tmp_path / "ivy")
    assert found == {kafka: jar}
    message = missing_message([Artifact("io.delta", "delta-spark_2.13", "4.2.0")], "offline")
    assert "\n" not in message
    assert "mvn dependency:get -Dartifact=io.delta:delta-spark_2.13:4.2.0 -Dtransitive=false" in message


def test_shuffle_partitions_follow_the_batch_not_sparks_200() -> None:
    assert shuffle_partitions(1000, 2) == 2
    assert shuffle_partitions(10_000_000, 2) == 20
    assert shuffle_partitions(10**12, 2) == 200


def test_tables_commit_as_many_at_once_as_asked_or_as_the_driver_has_cpus_never_more_than_there_are(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    assert table_workers(None, 3) == 3
    assert table_workers(None, 20) == 8
    assert table_workers(1, 20) == 1
    assert table_workers(4, 2) == 2
    assert table_workers(None, 0) == 1
    monkeypatch.setattr("os.cpu_count", lambda: None)
    assert table_workers(None, 5) == 1


def test_parallel_tables_below_one_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    config, _ = parse_args(["--bootstrap-servers", "k:9092", "--output", "o", "--checkpoint", "c",
                            "--parallel-tables", "3"])
    assert config.parallel_tables == 3
    with pytest.raises(SystemExit) as exited:  # a usage error: one line, exit status 2
        parse_args(["--bootstrap-servers", "k:9092", "--output", "o", "--checkpoint", "c", "--parallel-tables", "0"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "python -m pgbridge_spark.mirror: error: --parallel-tables must be at least 1, not 0")


@pytest.mark.parametrize("servers", ["", " ", "k:9092,,k2:9092"])
def test_bootstrap_servers_naming_no_broker_are_refused(servers: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args(["--bootstrap-servers", servers, "--output", "o", "--checkpoint", "c"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "python -m pgbridge_spark.mirror: error: --bootstrap-servers must name a broker as host:port, several "
        f"separated by commas, not {servers!r}")


def test_a_class_archive_is_mapped_when_there_and_written_at_exit_when_not(tmp_path: Path) -> None:
    archive = tmp_path / "a.jsa"
    assert class_archive_option(archive, []) == f"-XX:ArchiveClassesAtExit={archive}"
    archive.write_bytes(b"")  # a run killed while writing it: written again
    assert class_archive_option(archive, []) == f"-XX:ArchiveClassesAtExit={archive}"
    archive.write_bytes(b"x")
    assert class_archive_option(archive, []) == f"-XX:SharedArchiveFile={archive}"


def test_no_class_archive_is_written_with_a_folder_of_files_on_the_class_path(tmp_path: Path) -> None:
    # the JVM would refuse to start ("Cannot have non-empty directory in paths")
    archive, empty, conf = tmp_path / "a.jsa", tmp_path / "empty", tmp_path / "conf"
    empty.mkdir()
    conf.mkdir()
    assert class_archive_option(archive, [empty, tmp_path / "missing"]) == f"-XX:ArchiveClassesAtExit={archive}"
    (conf / "spark-defaults.conf").write_text("spark.ui.enabled false\n")
    assert class_archive_option(archive, [empty, conf]) is None
    archive.write_bytes(b"x")  # mapping one is fine: a JVM that cannot use it runs without it
    assert class_archive_option(archive, [conf]) == f"-XX:SharedArchiveFile={archive}"


def test_driver_java_options_are_read_as_spark_submit_reads_them() -> None:
    base = ["--bootstrap-servers", "k:9092", "--output", "o", "--checkpoint", "c"]
    assert parse_args(base)[1].driver_java_options is None
    chosen = parse_args([*base, "--driver-java-options=-XX:TieredStopAtLevel=1 -Xss4m"])[1]
    assert chosen.driver_java_options == "-XX:TieredStopAtLevel=1 -Xss4m"


def test_the_drivers_java_options_are_the_chosen_ones_then_the_archives() -> None:
    assert java_options(None, None) is None  # spark-defaults.conf's value stays
    assert java_options("  ", None) is None
    assert java_options("-XX:TieredStopAtLevel=1", None) == "-XX:TieredStopAtLevel=1"
    assert java_options(None, "-XX:SharedArchiveFile=/a.jsa") == "-XX:SharedArchiveFile=/a.jsa"
    assert (java_options(" -Xss4m -Dx=1 ", "-XX:SharedArchiveFile=/a.jsa")
            == "-Xss4m -Dx=1 -XX:SharedArchiveFile=/a.jsa")


def test_the_class_archive_is_named_after_what_it_is_made_from(tmp_path: Path) -> None:
    import pyspark

    name = class_archive_path(tmp_path)
    assert name.parent == tmp_path and name.suffix == ".jsa"
    assert class_archive_path(tmp_path) == name
    assert class_path_folders({"SPARK_CONF_DIR": "/c", "HADOOP_CONF_DIR": "/h"}) == [Path("/c"), Path("/h")]
    assert class_path_folders({}) == [Path(pyspark.__file__).resolve().parent / "conf"]


def test_the_kafka_source_reads_committed_records_without_waiting_out_the_brokers_fetch_wait() -> None:
    options = source_options("k:9092", topics=["p.public.a", "p.public.b"], max_offsets_per_trigger=37)
    assert options["kafka.isolation.level"] == "read_committed" and options["failOnDataLoss"] == "true"
    assert options["kafka.fetch.max.wait.ms"] == str(FETCH_MAX_WAIT_MS) and FETCH_MAX_WAIT_MS < 500
    assert options["subscribe"] == "p.public.a,p.public.b" and "subscribePattern" not in options
    assert options["maxOffsetsPerTrigger"] == "37" and options["startingOffsets"] == "earliest"


def test_the_users_kafka_options_win_over_the_jobs_defaults() -> None:
    options = source_options("k:9092", pattern=r"p\..*", kafka_options={"fetch.max.wait.ms": "200",
                                                                       "security.protocol": "SSL"})
    assert options["kafka.fetch.max.wait.ms"] == "200" and options["kafka.security.protocol"] == "SSL"
    assert options["subscribePattern"] == r"p\..*" and "subscribe" not in options
