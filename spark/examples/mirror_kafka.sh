#!/usr/bin/env bash
# Mirror pgbridge's tables into Delta Lake tables with spark-submit, Spark's own Kafka source,
# spark-avro and delta-spark (the versions pgbridge_spark.packages pins; Ivy resolves them).
#
#   BOOTSTRAP=kafka:9092 PREFIX=pgbridge OUTPUT=hdfs://namenode:8020/mirror \
#   CHECKPOINT=hdfs://namenode:8020/checkpoints/mirror MASTER=spark://master:7077 \
#     spark/examples/mirror_kafka.sh [--consistent] [--mode changelog] [--schema-registry-url URL]
#
# Needs Spark 4.1 (spark-submit on PATH) and pgbridge[spark] importable by the driver and executors
# (pip install 'pgbridge[spark]' on every node, or ship a wheel with --py-files). Extra arguments
# go to the job (python -m pgbridge_spark.mirror --help).
set -euo pipefail
cd "$(dirname "$0")/../.."
exec spark-submit \
  --master "${MASTER:-local[2]}" \
  --driver-memory "${DRIVER_MEMORY:-4g}" \
  --packages "$(python -c 'from pgbridge_spark.packages import coordinates; print(coordinates())')" \
  --conf spark.jars.excludes="$(python -c "from pgbridge_spark.packages import IVY_EXCLUDES; print(','.join(IVY_EXCLUDES))")" \
  --conf spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension \
  --conf spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog \
  spark/pgbridge_spark/mirror.py \
  --bootstrap-servers "${BOOTSTRAP:?set BOOTSTRAP to the Kafka bootstrap servers}" \
  --prefix "${PREFIX:-pgbridge}" \
  --output "${OUTPUT:?set OUTPUT to the mirror root (a URI or a path)}" \
  --checkpoint "${CHECKPOINT:?set CHECKPOINT to the checkpoint location (a URI or a path)}" \
  "$@"
