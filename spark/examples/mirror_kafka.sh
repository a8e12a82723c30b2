#!/usr/bin/env bash
# Mirror pgbridge's tables into Parquet with spark-submit, Spark's own Kafka source and spark-avro.
#
#   BOOTSTRAP=kafka:9092 PREFIX=pgbridge OUTPUT=/data/mirror CHECKPOINT=/data/checkpoints/mirror \
#     spark/examples/mirror_kafka.sh [--consistent] [--mode changelog] [--schema-registry-url URL]
#
# Needs Spark 4 (spark-submit on PATH) and pgbridge[spark] importable by the driver and executors
# (pip install 'pgbridge[spark]' on every node, or ship a wheel with --py-files). Extra arguments
# go to the job (python -m pgbridge_spark.mirror --help).
set -euo pipefail
cd "$(dirname "$0")/../.."
SPARK_VERSION="${SPARK_VERSION:-$(python -c 'import pyspark; print(pyspark.__version__)')}"
SCALA="${SCALA_VERSION:-2.13}"
exec spark-submit \
  --master "${MASTER:-local[2]}" \
  --packages "org.apache.spark:spark-sql-kafka-0-10_${SCALA}:${SPARK_VERSION},org.apache.spark:spark-avro_${SCALA}:${SPARK_VERSION}" \
  --conf spark.sql.shuffle.partitions="${SHUFFLE_PARTITIONS:-4}" \
  --conf spark.sql.parquet.outputTimestampType=TIMESTAMP_MICROS \
  spark/pgbridge_spark/mirror.py \
  --bootstrap-servers "${BOOTSTRAP:?set BOOTSTRAP to the Kafka bootstrap servers}" \
  --prefix "${PREFIX:-pgbridge}" \
  --output "${OUTPUT:?set OUTPUT to the mirror directory}" \
  --checkpoint "${CHECKPOINT:?set CHECKPOINT to the checkpoint directory}" \
  "$@"
