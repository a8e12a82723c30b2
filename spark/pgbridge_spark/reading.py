"""Reading the mirror: one table, or every table at one transaction-consistent cut.

With ``--consistent`` each table's commit records the cut it reached (``TableProgress.cut``: every
transaction with a commit LSN at or below it is applied) and the job's ``_pgbridge/pending`` table
records the cut of the last micro-batch it completed. ``read_consistent`` reads every table at its
newest version whose cut is at or below that one (Delta time travel), so the tables together show
a state Postgres had, even while a micro-batch is half way through committing its tables. The
tables may be Delta Lake or Iceberg tables (``--table-format``): each table's format is read from
what is at its path::

    from pgbridge_spark.reading import read_consistent
    frames, cut = read_consistent(spark, "hdfs://nn:8020/mirror", ["public.checking", "public.savings"])
    total = sum(f.agg({"amount": "sum"}).first()[0] for f in frames.values())

``python -m pgbridge_spark.reading OUTPUT schema.table [...]`` prints tables (consistently when the
mirror was written with ``--consistent``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession

from pgbridge_spark import delta_tables
from pgbridge_spark.config import TABLE_FORMATS
from pgbridge_spark.consistent import PENDING
from pgbridge_spark.formats import detect, table_uri, version_at_cut


class NoConsistentCut(RuntimeError):
    """The mirror has no completed consistent micro-batch yet (not written with ``--consistent``?)."""


def completed_cut(spark: SparkSession, output: str) -> int:
    """The cut of the last micro-batch the consistent job completed."""
    pending = table_uri(output, PENDING)
    found = delta_tables.last_progress(spark, pending) if delta_tables.is_table(spark, pending) else None
    if found is None or found[0].cut is None:
        raise NoConsistentCut(f"{output} has no completed consistent micro-batch: run the mirror job with "
                              "--consistent (its _pgbridge/pending table records the cut)")
    return found[0].cut


def read_consistent(spark: SparkSession, output: str, tables: Sequence[str]) -> tuple[dict[str, DataFrame], int]:
    """Every table of ``tables`` ("schema.table") at the last completed cut, and that cut. A table
    with no commit at or below the cut has no rows yet (an empty frame of its current schema)."""
    cut = completed_cut(spark, output)
    frames: dict[str, DataFrame] = {}
    for name in tables:
        frames[name] = _at_cut(spark, table_uri(output, name), cut)
    return frames, cut


def _at_cut(spark: SparkSession, path: str, cut: int) -> DataFrame:
    tables = detect(spark, path)
    if tables is None:
        raise FileNotFoundError(f"no mirror table at {path}")
    version = version_at_cut(tables.versions_with_cut(spark, path), cut)
    if version is None:
        return tables.read(spark, path).limit(0)
    return tables.read(spark, path, version)


def read_table(spark: SparkSession, output: str, name: str) -> DataFrame:
    """The current state of one mirror table ("schema.table"), whatever its format."""
    path = table_uri(output, name)
    tables = detect(spark, path)
    if tables is None:
        raise FileNotFoundError(f"no mirror table at {path}")
    return tables.read(spark, path)


def main(argv: Sequence[str] | None = None) -> int:
    from pgbridge_spark.session import build_session, quiet_loggers

    parser = argparse.ArgumentParser(prog="python -m pgbridge_spark.reading", description=__doc__.splitlines()[0])
    parser.add_argument("output", help="the mirror job's --output")
    parser.add_argument("tables", nargs="+", help="schema.table")
    parser.add_argument("--rows", type=int, default=20)
    parser.add_argument("--table-format", choices=TABLE_FORMATS, default="delta",
                        help="iceberg: also put Iceberg's runtime on the class path (the job's --table-format)")
    args = parser.parse_args(argv)
    spark = build_session("local[1]", app_name="pgbridge-read", table_format=args.table_format)
    spark.sparkContext.setLogLevel("ERROR")
    quiet_loggers(spark)
    try:
        frames, cut = read_consistent(spark, args.output, args.tables)
        print(f"consistent cut: commit LSN {cut}")
    except NoConsistentCut:
        frames = {name: read_table(spark, args.output, name) for name in args.tables}
    for name, frame in frames.items():
        print(name)
        frame.show(args.rows, truncate=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
