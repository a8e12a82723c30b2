"""Write a small table to a Hadoop URI from the executors and read it back; print what happened as
one JSON line (rows and sum read back, each task's working directory, the driver's).

Submitted by tests/spark/test_cluster.py: a task's working directory is its executor's, inside a
worker's work directory, so the line shows where the tasks ran.
"""

from __future__ import annotations

import json
import os
import sys

from pyspark.sql import SparkSession


def main(output: str) -> None:
    spark = SparkSession.builder.appName("pgbridge-roundtrip").getOrCreate()
    try:
        rows = spark.sparkContext.parallelize(range(1000), 4).map(lambda i: (i, i * 2, os.getcwd()))
        spark.createDataFrame(rows, "id long, twice long, task_dir string").write.mode("overwrite").parquet(output)
        back = spark.read.parquet(output)
        total = back.selectExpr("count(*) AS n", "sum(twice) AS s").first()
        task_dirs = sorted(row.task_dir for row in back.select("task_dir").distinct().collect())
        print(json.dumps({"rows": total["n"] if total else 0, "sum": total["s"] if total else 0,
                          "task_dirs": task_dirs, "driver_dir": os.getcwd()}))
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
