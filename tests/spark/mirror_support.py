"""Helpers of the Spark end-to-end tests: run the bridge, compare a mirror with its source table."""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
from pyspark.sql import SparkSession

from pgbridge_spark.formats import detect
from pgbridge_spark.mirror import MirrorJob


def run_available_now(job: MirrorJob) -> None:
    """One ``availableNow`` run of the mirror job over everything on its topics, which must succeed."""
    query = job.start(available_now=True)
    assert query.awaitTermination(900), "the availableNow run did not finish within 900 s"
    assert query.exception() is None, query.exception()


def _normal(value: Any) -> Any:
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    if isinstance(value, list):
        return tuple(_normal(v) for v in value)
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.timestamp()
    if isinstance(value, Decimal):
        return value.normalize()
    return value


def _json_text(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in "{[":
        try:
            return json.dumps(json.loads(value), sort_keys=True)
        except ValueError:
            return value
    return value


COMPANION_SUFFIX = "__text"


def read_table(path: Path | str) -> tuple[list[str], list[dict[str, Any]]]:
    """Columns and rows of the mirror table at ``path`` (Delta Lake or Iceberg, whichever is
    there), read by the session's Spark through the format's own reader (deletion vectors, position
    deletes and column mapping applied), through Arrow as a Parquet reader gives them (timestamps
    with their time zone, maps as lists of pairs)."""
    spark = SparkSession.builder.getOrCreate()
    tables = detect(spark, str(path))
    assert tables is not None, f"no mirror table at {path}"
    table = tables.read(spark, str(path)).toArrow()
    rows: list[dict[str, Any]] = table.to_pylist()
    return table.column_names, rows


def mirror_rows(directory: Path | str) -> tuple[list[str], Counter[tuple[Any, ...]]]:
    """Columns and the multiset of rows of a mirrored table, without the ``_pgbridge_`` positions
    and the ``{column}__text`` companions (asserted null: every test value has its typed form)."""
    column_names, rows = read_table(directory)
    names = set(column_names)
    companions = [c for c in column_names
                  if c.endswith(COMPANION_SUFFIX) and c[:-len(COMPANION_SUFFIX)] in names]
    columns = [c for c in column_names if not c.startswith("_pgbridge_") and c not in companions]
    for companion in companions:
        assert all(row[companion] is None for row in rows), f"{directory}.{companion} is not all null"
    return columns, Counter(tuple(_json_text(_normal(row[c])) for c in columns) for row in rows)


def source_rows(dsn: str, table: str) -> tuple[list[str], Counter[tuple[Any, ...]]]:
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT * FROM {table}")
        columns = [d.name for d in cur.description or []]
        rows = Counter(tuple(_normal(v) for v in row) for row in cur.fetchall())
    return columns, rows


def assert_mirrored(dsn: str, output: Path | str, table: str) -> None:
    """The mirror of ``schema.table`` has the source's columns and exactly its rows; ``output`` is a
    local folder or a Hadoop URI (``hdfs://...``, ``s3a://...``)."""
    expected_columns, expected = source_rows(dsn, table)
    columns, rows = mirror_rows(output / table if isinstance(output, Path) else f"{output}/{table}")
    assert columns == expected_columns, f"{table}: columns {columns} != {expected_columns}"
    missing, extra = expected - rows, rows - expected
    assert not missing and not extra, f"{table}: missing {list(missing)[:5]}, unexpected {list(extra)[:5]}"
