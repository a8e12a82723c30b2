"""The ``kafka``, ``outbox`` and ``schema_registry`` sections: where and how records are published."""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import (
    Field,
    SecretStr,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    NoDecode,
)

from pgbridge.config.base import _Section
from pgbridge.config.librdkafka import closest_property, property_name
from pgbridge.identifiers import normalize_table, parse_table, split_table_list
from pgbridge.topic_routes import template_problem

# Schema Registry request timeout (see SchemaRegistryConfig.timeout_s).
DEFAULT_REGISTRY_TIMEOUT_S: Final = 10.0
# Records handed to the producer but not yet acknowledged: the backpressure bound. At ~300 bytes a
# record this caps the producer queue near 30 MiB while keeping enough in flight for throughput.
DEFAULT_MAX_IN_FLIGHT: Final = 100_000
# The same bound in bytes, so wide rows cannot grow the producer queue past it: with the 64 MiB
# transaction buffer this keeps peak RSS of any transaction size near 200 MB.
DEFAULT_MAX_IN_FLIGHT_BYTES: Final = 32 * 1024 * 1024
# A record not acknowledged within this time fails the session, which then resumes from the
# confirmed LSN with a new producer. Short enough that a broker that came back empty (its
# idempotent-producer state lost) is recovered from in seconds, long enough for leader elections.
DEFAULT_DELIVERY_TIMEOUT_MS: Final = 30_000


def bootstrap_brokers(value: str) -> list[str]:
    """The brokers of a bootstrap list (``host:port,host:port``), without the spaces around them;
    ``ValueError`` for a list naming no broker or with an empty entry. An empty value (a shell
    variable that was not set) would otherwise start a client that waits for no broker at all
    without saying so. The bridge's ``kafka.bootstrap_servers`` and the Spark job's
    ``--bootstrap-servers`` both go through it."""
    entries = [entry.strip() for entry in value.split(",")]
    if not any(entries):
        raise ValueError("names no broker: give host:port, or several separated by commas")
    if not all(entries):
        raise ValueError(f"has an empty entry ({value!r}): give host:port, or several separated by commas")
    return entries


class TopicRoute(_Section):
    """One ``kafka.topic_routes`` entry (docs/routing.md): a table whose whole ``schema.table``
    matches ``match`` publishes to ``{prefix}.{topic}``, ``\\1``, ``\\2``... being the match's groups."""

    match: str = Field(min_length=1)
    topic: str = Field(min_length=1)

    @model_validator(mode="after")
    def _valid(self) -> TopicRoute:
        problem = template_problem(self.match, self.topic)
        if problem is not None:
            raise ValueError(problem)
        return self


class KafkaConfig(_Section):
    bootstrap_servers: str
    topic_prefix: str = "pgbridge"
    max_in_flight: int = Field(default=DEFAULT_MAX_IN_FLIGHT, ge=1)
    max_in_flight_bytes: int = Field(default=DEFAULT_MAX_IN_FLIGHT_BYTES, ge=1024 * 1024)
    linger_ms: int = Field(default=5, ge=0)
    delivery_timeout_ms: int = Field(default=DEFAULT_DELIVERY_TIMEOUT_MS, ge=1000)
    topic_partitions: int = Field(default=1, ge=1)
    # Topics pgbridge creates (publish/topics.py): unset, 3 or the cluster's size when smaller (a
    # warning names the topic); -1 leaves it to the broker's default.replication.factor.
    topic_replication_factor: int | None = None
    # Their min.insync.replicas: unset, the replication factor - 1, at least 1 (2 for 3 copies).
    topic_min_insync_replicas: int | None = Field(default=None, ge=1)
    # Topic configs of the data topics pgbridge creates (not of the internal {prefix}._* ones).
    topic_config: dict[str, str] = Field(default_factory=dict)
    # Exactly-once (publish/transactions.py): Kafka transactions of whole Postgres transactions.
    exactly_once: bool = False
    transaction_max_ms: int = Field(default=500, ge=1)  # gather Postgres transactions this long ...
    transaction_max_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)  # ... or this many bytes
    transaction_timeout_ms: int = Field(default=600_000, ge=10_000)  # the producer's transaction.timeout.ms
    # Kafka key columns per table instead of the primary key / replica identity (docs/columns.md,
    # source/keys.py; Debezium's message.key.columns): "schema.table" (SQL-quoted) → column names.
    message_key_columns: dict[str, list[str]] = Field(default_factory=dict)
    # Passed to librdkafka (security.protocol, ssl.*, sasl.*): values are treated as secrets. Keys are
    # librdkafka's names; the environment may spell them with _ for . (config/librdkafka.py), and a
    # name librdkafka does not know is an error naming the closest one.
    properties: dict[str, SecretStr] = Field(default_factory=dict)
    # A record Kafka refuses as too large (producer message.max.bytes, topic max.message.bytes):
    # "stop" fails with an error naming it; "dead_letter" publishes its position and key to
    # {prefix}._dead_letter and goes on (publish/oversize.py).
    oversize_policy: Literal["stop", "dead_letter"] = "stop"
    # Routing and filtering (docs/routing.md, publish/routing.py): ops not published (c, u, d, t;
    # Debezium's default skips t, pgbridge's skips none) and the tombstone after a keyed delete.
    skipped_operations: Annotated[list[Literal["c", "u", "d", "t"]], NoDecode] = Field(default_factory=list)
    tombstones_on_delete: bool = True
    topic_routes: list[TopicRoute] = Field(default_factory=list)  # first match wins

    @field_validator("bootstrap_servers")
    @classmethod
    def _names_brokers(cls, value: str) -> str:
        return ",".join(bootstrap_brokers(value))

    @field_validator("skipped_operations", mode="before")
    @classmethod
    def _split_operations(cls, value: Any) -> Any:
        """``c,u`` from the environment; ``none`` (Debezium's spelling) for the empty list."""
        if isinstance(value, str):
            value = [] if value.strip().lower() in ("", "none") else [op.strip() for op in value.split(",")]
        return value

    @field_validator("topic_replication_factor")
    @classmethod
    def _replication_factor(cls, value: int | None) -> int | None:
        if value is not None and value != -1 and value < 1:
            raise ValueError("must be at least 1, or -1 for the broker's default.replication.factor")
        return value

    @field_validator("topic_config", mode="before")
    @classmethod
    def _topic_config(cls, value: Any) -> Any:
        """YAML numbers and booleans as the strings Kafka takes; min.insync.replicas has its own setting."""
        if isinstance(value, dict):
            value = {str(key): (str(item).lower() if isinstance(item, bool) else
                                str(item) if isinstance(item, int | float) else item)
                     for key, item in value.items()}
            if "min.insync.replicas" in value:
                raise ValueError("set min.insync.replicas with kafka.topic_min_insync_replicas "
                                 "(it applies to every topic pgbridge creates)")
        return value

    @model_validator(mode="after")
    def _min_insync_within_replicas(self) -> KafkaConfig:
        factor, minimum = self.topic_replication_factor, self.topic_min_insync_replicas
        if factor is not None and factor >= 1 and minimum is not None and minimum > factor:
            raise ValueError(f"kafka.topic_min_insync_replicas ({minimum}) is above "
                             f"kafka.topic_replication_factor ({factor}): no write could ever succeed")
        return self

    @field_validator("properties", mode="before")
    @classmethod
    def _librdkafka_names(cls, value: Any) -> Any:
        """Each key as librdkafka names it (``sasl_password`` → ``sasl.password``); unknown keys and
        two spellings of one property are errors."""
        if not isinstance(value, dict):
            return value
        out: dict[str, Any] = {}
        spelled: dict[str, str] = {}
        problems: list[str] = []
        for key, item in value.items():
            name = property_name(str(key))
            if name is None:
                closest = closest_property(str(key))
                hint = f"; did you mean {closest}?" if closest else ""
                problems.append(f"{key} (PGBRIDGE_KAFKA__PROPERTIES__{str(key).upper()}) is not a librdkafka "
                                f"property{hint}")
            elif name in out:
                problems.append(f"{name} is set twice, as {spelled[name]} and as {key}")
            else:
                out[name], spelled[name] = item, str(key)
        if problems:
            raise ValueError("; ".join(problems) + " (names as in librdkafka's CONFIGURATION.md; in the "
                             "environment _ may stand for .: PGBRIDGE_KAFKA__PROPERTIES__SASL_PASSWORD sets "
                             "sasl.password)")
        return out

    @field_validator("topic_prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        if not value:
            raise ValueError("must not be empty")
        return value

    @field_validator("message_key_columns")
    @classmethod
    def _message_keys(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        """Tables in canonical SQL form (as ``postgres.tables``); each with distinct, non-empty columns."""
        out: dict[str, list[str]] = {}
        for table, columns in value.items():
            if not columns or any(not c for c in columns) or len(set(columns)) != len(columns):
                raise ValueError(f"{table}: list its key columns, each once (names as the catalog has them)")
            out[normalize_table(table)] = columns  # IdentifierError is a ValueError
        return out


class OutboxConfig(_Section):
    """The outbox event router (docs/routing.md, publish/outbox.py; Debezium's EventRouter): an
    INSERT into one of ``tables`` becomes one record on ``topic`` ({aggregate_type} = the row's
    aggregate type), keyed by the aggregate id, the payload as value, headers id and type."""

    tables: Annotated[list[str], NoDecode] = Field(default_factory=list)
    id_column: str = Field(default="id", min_length=1)
    aggregate_type_column: str = Field(default="aggregatetype", min_length=1)
    aggregate_id_column: str = Field(default="aggregateid", min_length=1)
    type_column: str = Field(default="type", min_length=1)
    payload_column: str = Field(default="payload", min_length=1)
    topic: str = Field(default="outbox.event.{aggregate_type}", min_length=1)

    @field_validator("tables", mode="before")
    @classmethod
    def _split_tables(cls, value: Any) -> Any:
        """``schema.table`` each, in the canonical form of ``postgres.tables``."""
        if isinstance(value, str):
            value = split_table_list(value)
        if isinstance(value, list):
            return [normalize_table(item) if isinstance(item, str) else item for item in value]
        return value

    @property
    def table_names(self) -> list[str]:
        """``outbox.tables`` as the unquoted ``schema.table`` a Relation names."""
        return [".".join(parse_table(table)) for table in self.tables]


class SchemaRegistryConfig(_Section):
    """Confluent-compatible Schema Registry; ``url`` unset means registry-less encoding."""

    url: str | None = None
    basic_auth_user_info: SecretStr | None = None  # "user:password"
    ssl_ca_location: str | None = None  # CA file or directory for an https registry; default: certifi
    # Per HTTP request. A registry that does not answer in this time counts as unreachable, so the
    # session restarts with backoff instead of hanging between two transactions.
    timeout_s: float = Field(default=DEFAULT_REGISTRY_TIMEOUT_S, gt=0)
    # false: never register; look each writer schema up under its subject (for registries with
    # auto.register.schemas=false), and stop naming the subject when it is not there.
    auto_register: bool = True
    # How subjects are named (encode/subjects.py): topic {topic}-key/-value (Confluent's default
    # TopicNameStrategy), record {record full name}, topic_record {topic}-{record full name}.
    subject_name_strategy: Literal["topic", "record", "topic_record"] = "topic"

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value or None
