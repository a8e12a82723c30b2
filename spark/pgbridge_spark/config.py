"""The mirror job's settings (``MirrorConfig``) and the command line that makes them.

One owner for what a user can set: ``python -m pgbridge_spark.mirror`` / ``spark-submit mirror.py``
parse their arguments here, and tests and benchmarks build the same ``MirrorConfig`` directly.
"""

from __future__ import annotations

import argparse
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from pgbridge.config.kafka import bootstrap_brokers
from pgbridge_spark.kafka import StoreReader, schema_reader_options, topic_name

MODES: Final = ("mirror", "changelog")
TABLE_FORMATS: Final = ("delta", "iceberg")  # formats.table_format
DECODERS: Final = ("jvm", "python")
DEFAULT_DECODER: Final = "jvm"


@dataclass
class MirrorConfig:
    bootstrap_servers: str
    prefix: str
    output: str
    checkpoint: str
    mode: str = "mirror"  # mirror | changelog
    consistent: bool = False
    decoder: str = DEFAULT_DECODER  # jvm (spark-avro's from_avro) | python (fastavro in mapInArrow)
    tables: Sequence[str] = ()  # "schema.table"; empty: every table topic of the prefix
    schema_registry_url: str | None = None
    max_offsets_per_trigger: int | None = None
    trigger_seconds: float = 1.0
    kafka_options: Mapping[str, str] = field(default_factory=dict)  # the Java consumer's (Spark's source)
    # librdkafka properties of the schema reader; empty: derived from kafka_options
    # (kafka.schema_reader_options)
    schema_reader_options: Mapping[str, str] = field(default_factory=dict)
    # The topics come from pgbridge's kafka.exactly_once: read_committed sees no duplicate, so the
    # per-batch duplicate filter (a shuffle) is skipped.
    exactly_once: bool = False
    history: bool = False  # mirror mode: keep every version of a keyed table's rows (SCD type 2)
    compact_every: int = 0  # OPTIMIZE the tables a batch touched every N batches (0: never)
    retention_hours: float | None = None  # VACUUM after compaction, keeping this many hours of files
    # tables whose commits of one micro-batch run at once (each in a Spark session of its own);
    # None: as many as the driver has CPUs (session.table_workers)
    parallel_tables: int | None = None
    table_format: str = "delta"  # delta | iceberg (formats.table_format)

    def __post_init__(self) -> None:
        try:  # else Spark's Kafka source retries a client it cannot create, each time with a stack trace
            bootstrap_brokers(self.bootstrap_servers)
        except ValueError:
            raise ValueError("--bootstrap-servers must name a broker as host:port, several separated by commas, "
                             f"not {self.bootstrap_servers!r}") from None
        if self.mode not in MODES:
            raise ValueError(f"mode must be {' or '.join(MODES)}, not {self.mode!r}")
        if self.decoder not in DECODERS:
            raise ValueError(f"decoder must be {' or '.join(DECODERS)}, not {self.decoder!r}")
        if self.table_format not in TABLE_FORMATS:
            raise ValueError(f"table format must be {' or '.join(TABLE_FORMATS)}, not {self.table_format!r}")
        if self.history and self.mode != "mirror":
            raise ValueError("--history keeps versions of the mirror's rows: it needs --mode mirror")
        if self.parallel_tables is not None and self.parallel_tables < 1:
            raise ValueError(f"--parallel-tables must be at least 1, not {self.parallel_tables}")
        if self.schema_registry_url is None:  # records name their schemas by fingerprint: _schemas is read
            self.reader_options()  # refuse at start what the schema reader cannot be given

    def reader_options(self, read_store: StoreReader | None = None) -> dict[str, str]:
        """The schema reader's librdkafka properties (raises ``UnsupportedKafkaOption``); Java
        stores are read by ``read_store`` (``java_stores.jvm_store_reader``), left out without one."""
        return schema_reader_options(self.kafka_options, self.schema_reader_options, read_store)

    @property
    def transactions_topic(self) -> str:
        return topic_name(self.prefix, "transactions")

    def table_topics(self) -> list[str]:
        return [topic_name(self.prefix, *t.split(".", 1)) for t in self.tables]

    @property
    def app_id(self) -> str:
        """Delta's ``txnAppId`` of this job: one per checkpoint (a new checkpoint numbers batches anew)."""
        return "pgbridge-mirror-" + hashlib.sha256(self.checkpoint.rstrip("/").encode()).hexdigest()[:16]


def parse_args(argv: Sequence[str] | None = None) -> tuple[MirrorConfig, argparse.Namespace]:
    parser = argparse.ArgumentParser(prog="python -m pgbridge_spark.mirror",
                                     description="Mirror pgbridge table topics into Delta Lake (or Apache Iceberg) "
                                                 "tables with Spark.")
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--prefix", default="pgbridge", help="pgbridge kafka.topic_prefix")
    parser.add_argument("--output", required=True,
                        help="root of the tables, one per table (hdfs://, s3a://, file:/ URI or a path)")
    parser.add_argument("--table-format", choices=TABLE_FORMATS, default="delta",
                        help="delta (default) or iceberg: path-based Iceberg tables under --output (needs "
                             "iceberg-spark-runtime on Spark's class path; added with python -m)")
    parser.add_argument("--checkpoint", required=True, help="Spark checkpoint location (URI or path)")
    parser.add_argument("--mode", choices=MODES, default="mirror")
    parser.add_argument("--consistent", action="store_true",
                        help="apply whole transactions only (uses {prefix}.transactions)")
    parser.add_argument("--source", choices=("auto", "kafka"), default="kafka",
                        help="kept for existing command lines: Spark's kafka source is the only source")
    parser.add_argument("--no-packages", action="store_true",
                        help="with python -m: do not add the pinned jars (spark-sql-kafka, spark-avro, delta-spark, "
                             "iceberg-spark-runtime with --table-format iceberg) "
                             "to Spark, they are on its class path already")
    parser.add_argument("--decoder", choices=DECODERS, default=DEFAULT_DECODER,
                        help="jvm: spark-avro's from_avro (needs spark-avro); python: fastavro on the executors")
    parser.add_argument("--tables", default="", help="comma list schema.table (default: every table topic)")
    parser.add_argument("--schema-registry-url", default=None)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None)
    parser.add_argument("--trigger-seconds", type=float, default=1.0)
    parser.add_argument("--available-now", action="store_true", help="process what is there, then stop")
    parser.add_argument("--master", default=None, help="Spark master when not run by spark-submit")
    parser.add_argument("--driver-memory", default=None,
                        help="with python -m: the driver's memory (default 4g, enough for a 10M-row snapshot)")
    parser.add_argument("--class-archive-dir", default=None, metavar="DIR",
                        help="with python -m: keep a Java class archive of the driver here, so runs after the "
                             "first start faster (scheduled --available-now runs; docs/spark.md)")
    parser.add_argument("--driver-java-options", default=None, metavar="OPTIONS",
                        help="with python -m: the driver JVM's options, as spark-submit's flag of that name "
                             "(write --driver-java-options=-XX:...); e.g. -XX:TieredStopAtLevel=1 for scheduled "
                             "runs of small batches (docs/spark.md, \"Scheduled runs\")")
    parser.add_argument("--exactly-once", action="store_true",
                        help="the topics come from pgbridge's kafka.exactly_once: skip the duplicate filter")
    parser.add_argument("--history", action="store_true",
                        help="keep every version of each row (SCD type 2: valid from/to, current flag) instead "
                             "of the current rows only")
    parser.add_argument("--compact-every", type=int, default=0, metavar="N",
                        help="compact (OPTIMIZE) the tables a micro-batch changed every N micro-batches (0: never)")
    parser.add_argument("--retention-hours", type=float, default=None,
                        help="after each compaction, VACUUM files older than this (Delta refuses < 168 unless "
                             "spark.databricks.delta.retentionDurationCheck.enabled=false)")
    parser.add_argument("--parallel-tables", type=int, default=None, metavar="N",
                        help="commit up to N tables of a micro-batch at once (default: the driver's CPUs; "
                             "1: one table after the other)")
    parser.add_argument("--kafka-option", action="append", default=[], metavar="KEY=VALUE",
                        help="Kafka (Java) consumer property, as Spark's kafka source takes it, e.g. "
                             "security.protocol, sasl.jaas.config, ssl.truststore.location (repeatable)")
    parser.add_argument("--schema-reader-option", action="append", default=[], metavar="KEY=VALUE",
                        help="librdkafka property of the reader of {prefix}._schemas; when given, these replace "
                             "what the job derives from --kafka-option (repeatable)")
    args = parser.parse_args(argv)
    try:
        config = _config(args)
    except ValueError as exc:  # a setting the job cannot run with: one line, no traceback
        parser.error(str(exc))
    return config, args


def _properties(items: Sequence[str], flag: str) -> dict[str, str]:
    """``KEY=VALUE`` items as a mapping; raises ``ValueError`` naming ``flag`` for an item without ``=``."""
    bad = [item for item in items if "=" not in item]
    if bad:
        raise ValueError(f"{flag} takes KEY=VALUE, not {bad[0]!r}")
    return dict(item.split("=", 1) for item in items)


def _config(args: argparse.Namespace) -> MirrorConfig:
    return MirrorConfig(
        bootstrap_servers=args.bootstrap_servers, prefix=args.prefix, output=args.output,
        checkpoint=args.checkpoint, mode=args.mode, consistent=args.consistent, decoder=args.decoder,
        tables=tuple(t for t in args.tables.split(",") if t), schema_registry_url=args.schema_registry_url,
        max_offsets_per_trigger=args.max_offsets_per_trigger, trigger_seconds=args.trigger_seconds,
        kafka_options=_properties(args.kafka_option, "--kafka-option"),
        schema_reader_options=_properties(args.schema_reader_option, "--schema-reader-option"),
        exactly_once=args.exactly_once, history=args.history, compact_every=args.compact_every,
        retention_hours=args.retention_hours, parallel_tables=args.parallel_tables, table_format=args.table_format)
