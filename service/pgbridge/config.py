"""Configuration: one pydantic model per section, read from a YAML file and ``PGBRIDGE_`` variables.

Environment variables (prefix ``PGBRIDGE_``, nested with ``__``) override the YAML file given by
``--config`` or ``PGBRIDGE_CONFIG``. Unknown keys are errors, so a typo never silently falls back to
a default. Secrets are ``SecretStr`` and never appear in ``repr`` or logs.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, Final, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from pgbridge.encode.columns import ColumnRules
from pgbridge.encode.envelope import DEFAULT_TOAST_CACHE_ROWS
from pgbridge.errors import ConfigError
from pgbridge.source.identifiers import normalize_table, parse_table, split_table_list
from pgbridge.source.keys import MessageKeys
from pgbridge.source.selection import TableSelection, compile_patterns, split_patterns

# Standby status updates at least this often: well under the server's default wal_sender_timeout
# (60 s), and often enough that confirmed_flush_lsn trails delivery by seconds, not minutes.
DEFAULT_STATUS_INTERVAL_S: Final = 5.0
# Per buffered (streamed or prepared) transaction, bytes held in memory before spilling to disk.
# 64 MiB keeps peak RSS of a single huge transaction well below a typical 256 MiB container limit.
DEFAULT_BUFFER_MEMORY_BYTES: Final = 64 * 1024 * 1024
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
# Slot safety query (pg_replication_slots, current WAL position): cheap, and 10 s resolves a WAL
# rate forecast well within the minutes an operator has to react to a slot near invalidation.
DEFAULT_SLOT_CHECK_INTERVAL_S: Final = 10.0
# Heartbeat messages are off by default: the keepalive rule (ack/tracker.py) already confirms the
# server position when nothing is outstanding. Turn them on (e.g. 60 s) for a database with no WAL
# traffic of its own on a server whose other databases keep writing (RDS, shared clusters).
DEFAULT_HEARTBEAT_INTERVAL_S: Final = 0.0
# A standby polls the leader lock this often: the takeover time after the leader dies is about
# this plus a connect and START_REPLICATION.
DEFAULT_STANDBY_RETRY_S: Final = 1.0
# A leader whose host vanished without closing its socket loses the lock (idle_session_timeout on
# the lock's session) after this long; well above the leader's 1 s keep-alive query.
DEFAULT_LEASE_S: Final = 10.0
# A minute without any progress while work waits: longer than any healthy pause (a broker leader
# election, a registry retry, a Postgres checkpoint), shorter than a delivery timeout chain.
DEFAULT_STALL_S: Final = 60.0


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PostgresConfig(_Section):
    dsn: SecretStr
    slot: str = "pgbridge"
    publication: str = "pgbridge"
    tables: list[str] | None = None
    proto_version: int | None = Field(default=None, ge=1, le=4)
    streaming: bool = True
    two_phase: bool = False
    binary: bool = False
    origin: Literal["any", "none"] = "any"
    status_interval_s: float = Field(default=DEFAULT_STATUS_INTERVAL_S, gt=0)
    connect_timeout_s: float = Field(default=10.0, gt=0)
    slot_check_interval_s: float = Field(default=DEFAULT_SLOT_CHECK_INTERVAL_S, gt=0)
    heartbeat_interval_s: float = Field(default=DEFAULT_HEARTBEAT_INTERVAL_S, ge=0)

    # Create the slot as a failover slot (Postgres 17+) so a standby with sync_replication_slots
    # keeps it synchronized and pgbridge resumes on the promoted standby; ignored on older servers.
    failover_slot: bool = True

    # Which tables are captured (docs/capture.md, source/selection.py, source/publication.py):
    # regular expressions matched in full against schema.table (catalog names, unquoted), include
    # (unset: every table) then exclude; and how the publication is managed.
    table_include: Annotated[list[str] | None, NoDecode] = None
    table_exclude: Annotated[list[str], NoDecode] = Field(default_factory=list)
    publication_mode: Literal["filtered", "all_tables", "disabled"] = "filtered"
    # On a clean stop (SIGTERM/SIGINT, everything delivered and confirmed) drop the slot: Debezium's
    # slot.drop.on.stop. The next start takes a new snapshot; changes in between are never captured.
    drop_slot_on_stop: bool = False

    @field_validator("table_include", "table_exclude", mode="before")
    @classmethod
    def _split_patterns(cls, value: Any) -> Any:
        """A comma list from the environment (a JSON array when a pattern holds a comma)."""
        if isinstance(value, str):
            value = json.loads(value) if value.lstrip().startswith("[") else split_patterns(value)
        return value

    @field_validator("table_include", "table_exclude")
    @classmethod
    def _valid_patterns(cls, value: list[str] | None, info: ValidationInfo) -> list[str] | None:
        if value is not None:
            compile_patterns(value, key=f"postgres.{info.field_name}")  # re.error as ValueError
        return value

    @model_validator(mode="after")
    def _one_selection(self) -> PostgresConfig:
        if self.tables is not None and (self.table_include is not None or self.table_exclude):
            other = "table_include" if self.table_include is not None else "table_exclude"
            raise ValueError(f"postgres.tables and postgres.{other} cannot both be set: list exact tables in "
                             f"postgres.tables, or select by pattern with postgres.table_include/table_exclude")
        return self

    @property
    def pattern_selection(self) -> TableSelection | None:
        """``table_include`` / ``table_exclude`` compiled; ``None`` when neither is set."""
        if self.table_include is None and not self.table_exclude:
            return None
        return TableSelection.from_patterns(self.table_include, self.table_exclude)

    @property
    def stream_filter(self) -> TableSelection | None:
        """What the in-stream filter keeps (assemble/capture.py): the patterns; or ``postgres.tables``
        when the publication may hold more (``all_tables``, ``disabled``); else ``None`` (with
        ``filtered`` and ``postgres.tables`` the publication is used as it is, as before)."""
        patterns = self.pattern_selection
        if patterns is not None:
            return patterns
        if self.tables is not None and self.publication_mode != "filtered":
            return TableSelection.from_names(self.table_pairs or [])
        return None

    @field_validator("tables", mode="before")
    @classmethod
    def _split_tables(cls, value: Any) -> Any:
        """Each table in canonical SQL form (``public.orders``, ``public."Order Items"``): plain
        names fold to lower case as Postgres folds them; quoted ones keep case, spaces and dots."""
        if isinstance(value, str):
            value = split_table_list(value)
        if isinstance(value, list):
            normalized = []
            for item in value:
                if not isinstance(item, str):
                    raise ValueError(f"table {item!r} must be written schema.table")
                normalized.append(normalize_table(item))  # IdentifierError is a ValueError
            return normalized
        return value

    @property
    def table_pairs(self) -> list[tuple[str, str]] | None:
        """``postgres.tables`` as ``(schema, table)`` exactly as the catalog has them."""
        return None if self.tables is None else [parse_table(table) for table in self.tables]

    @field_validator("slot", "publication")
    @classmethod
    def _identifier(cls, value: str) -> str:
        if not value or len(value) > 63:
            raise ValueError("must be 1 to 63 characters")
        if not all(ch.isalnum() or ch == "_" for ch in value) or value != value.lower():
            raise ValueError("use lower-case letters, digits and _ only")
        return value


class TopicRoute(_Section):
    """One ``kafka.topic_routes`` entry (docs/routing.md): a table whose whole ``schema.table``
    matches ``match`` publishes to ``{prefix}.{topic}``, ``\\1``, ``\\2``... being the match's groups."""

    match: str = Field(min_length=1)
    topic: str = Field(min_length=1)

    @model_validator(mode="after")
    def _valid(self) -> TopicRoute:
        from pgbridge.publish.routing import template_problem

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
    topic_replication_factor: int = Field(default=-1)
    # Exactly-once (publish/transactions.py): Kafka transactions of whole Postgres transactions.
    exactly_once: bool = False
    transaction_max_ms: int = Field(default=500, ge=1)  # gather Postgres transactions this long ...
    transaction_max_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)  # ... or this many bytes
    transaction_timeout_ms: int = Field(default=600_000, ge=10_000)  # the producer's transaction.timeout.ms
    # Kafka key columns per table instead of the primary key / replica identity (docs/columns.md,
    # source/keys.py; Debezium's message.key.columns): "schema.table" (SQL-quoted) → column names.
    message_key_columns: dict[str, list[str]] = Field(default_factory=dict)
    # Passed to librdkafka as is (security.protocol, ssl.*, sasl.*): values are treated as secrets.
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

    @field_validator("skipped_operations", mode="before")
    @classmethod
    def _split_operations(cls, value: Any) -> Any:
        """``c,u`` from the environment; ``none`` (Debezium's spelling) for the empty list."""
        if isinstance(value, str):
            value = [] if value.strip().lower() in ("", "none") else [op.strip() for op in value.split(",")]
        return value

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

    @property
    def message_keys(self) -> MessageKeys:
        """``message_key_columns`` by ``(schema, table)`` as the catalog has them."""
        return {parse_table(table): tuple(columns) for table, columns in self.message_key_columns.items()}


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

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value or None


# Rows per snapshot chunk: the unit of parallel work, of resume after a crash, and of an
# incremental snapshot's read between two watermarks (held in memory until the high watermark).
DEFAULT_SNAPSHOT_CHUNK_ROWS: Final = 10_000
# Connections reading the initial snapshot in parallel. Two keep the producer busy on a small
# host; each is one more backend holding the snapshot, so keep it small.
DEFAULT_SNAPSHOT_WORKERS: Final = 2
# Prefix of the logical messages operators send to pgbridge (pg_logical_emit_message).
DEFAULT_SIGNAL_PREFIX: Final = "pgbridge.signal"
# How often the publication is compared with the tables already snapshotted, so a table added at
# run time gets an incremental snapshot within this time.
DEFAULT_PUBLICATION_CHECK_S: Final = 10.0


class SnapshotConfig(_Section):
    # What happens at start-up (docs/snapshots.md, snapshot/modes.py): "initial" snapshots when the
    # slot is created; "initial_only" does that and exits 0 without streaming; "when_needed" also
    # starts over from an invalidated slot; "no_data" publishes topics and schemas but no rows;
    # "never" only creates the slot.
    mode: Literal["initial", "initial_only", "when_needed", "no_data", "never"] = "initial"
    chunk_rows: int = Field(default=DEFAULT_SNAPSHOT_CHUNK_ROWS, ge=1)
    workers: int = Field(default=DEFAULT_SNAPSHOT_WORKERS, ge=1, le=64)
    signal_prefix: str = Field(default=DEFAULT_SIGNAL_PREFIX, min_length=1)
    publication_check_s: float = Field(default=DEFAULT_PUBLICATION_CHECK_S, gt=0)
    # Per table ("schema.table": "<SQL boolean condition>"), the rows the initial and incremental
    # snapshots read (snapshot/filters.py); streaming is not filtered. Keys are kept canonical.
    filters: dict[str, str] = Field(default_factory=dict)

    @field_validator("filters")
    @classmethod
    def _filter_tables(cls, value: dict[str, str]) -> dict[str, str]:
        canonical: dict[str, str] = {}
        for table, condition in value.items():
            try:
                name = normalize_table(table)
            except ValueError as exc:
                raise ValueError(f"table {table!r}: {exc}") from None
            if not condition.strip():
                raise ValueError(f"the condition of {name} is empty (remove the entry to snapshot every row)")
            if name in canonical:
                raise ValueError(f"{name} is named twice")
            canonical[name] = condition.strip()
        return canonical


class ToastConfig(_Section):
    """What ``after`` holds for a TOASTed column an update did not change (Postgres omits it).

    ``marker`` (the contract's default): null, named in ``unchanged_toast_columns``. ``old_tuple``:
    the old row's value when Postgres sent one (REPLICA IDENTITY FULL), else the marker.
    ``cache``: that, else the last value pgbridge saw for the row's key in this process (a bounded
    LRU of ``cache_entries`` rows; a miss falls back to the marker). ``tables`` overrides the
    policy per ``schema.table``.
    """

    policy: Literal["marker", "old_tuple", "cache"] = "marker"
    cache_entries: int = Field(default=DEFAULT_TOAST_CACHE_ROWS, ge=1)
    tables: dict[str, Literal["marker", "old_tuple", "cache"]] = Field(default_factory=dict)

    @field_validator("tables")
    @classmethod
    def _table_names(cls, value: dict[str, str]) -> dict[str, str]:
        for table in value:
            if table.count(".") != 1 or not all(table.split(".")):
                raise ValueError(f"table {table!r} must be written schema.table")
        return value


class TypesConfig(_Section):
    """How ``numeric`` without a declared precision is published (docs/types.md).

    ``string`` (the default): its exact text, since no fixed decimal holds every value Postgres
    allows. ``decimal``: Avro ``decimal(numeric_precision, numeric_scale)`` (Spark ``DecimalType``);
    a value that does not fit exactly is never rounded: ``numeric_overflow: text`` publishes it in
    the envelope's ``unrepresentable`` map with the decimal null, ``fail`` stops the bridge before confirming it.
    """

    unconstrained_numeric: Literal["string", "decimal"] = "string"
    numeric_precision: int = Field(default=38, ge=1, le=1000)
    numeric_scale: int = Field(default=10, ge=0, le=1000)
    numeric_overflow: Literal["text", "fail"] = "text"

    @model_validator(mode="after")
    def _scale_within_precision(self) -> TypesConfig:
        if self.numeric_scale > self.numeric_precision:
            raise ValueError("types.numeric_scale must not exceed types.numeric_precision")
        return self


class ColumnsConfig(_Section):
    """Column policies (docs/columns.md, encode/columns.py), Debezium's column.* options.

    Each pattern is a Python regex matched in full against ``schema.table.column`` (the catalog's
    names, or their SQL-quoted form). ``exclude``: the column is not published. ``hash``: lowercase
    hex SHA-256 of ``hash_salt`` followed by the value's text. ``mask``: pattern → N, the value
    becomes N ``*``. ``truncate``: pattern → N, a text value is cut to N characters. Several
    matching one column: exclude > hash > mask > truncate.
    """

    exclude: list[str] = Field(default_factory=list)
    hash: list[str] = Field(default_factory=list)
    hash_salt: SecretStr | None = None
    mask: dict[str, Annotated[int, Field(ge=1)]] = Field(default_factory=dict)
    truncate: dict[str, Annotated[int, Field(ge=0)]] = Field(default_factory=dict)

    @field_validator("exclude", "hash", "mask", "truncate")
    @classmethod
    def _regexes(cls, value: Any) -> Any:
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"pattern {pattern!r} is not a Python regex: {exc}") from None
        return value

    @model_validator(mode="after")
    def _salted(self) -> ColumnsConfig:
        if self.hash and not (self.hash_salt and self.hash_salt.get_secret_value()):
            raise ValueError("columns.hash needs columns.hash_salt (PGBRIDGE_COLUMNS__HASH_SALT), a secret "
                             "string that makes the digests unguessable from the values")
        return self

    def rules(self) -> ColumnRules:
        return ColumnRules.compile(exclude=self.exclude, hash=self.hash, mask=self.mask, truncate=self.truncate,
                                   hash_salt=self.hash_salt.get_secret_value() if self.hash_salt else "")


class HttpConfig(_Section):
    port: int = Field(default=8080, ge=0, le=65535)
    host: str = "0.0.0.0"


class BufferConfig(_Section):
    memory_bytes: int = Field(default=DEFAULT_BUFFER_MEMORY_BYTES, ge=1024)
    spill_dir: Path = Path("/tmp/pgbridge-spill")


class HaConfig(_Section):
    """Active/standby replicas of one slot (leader.py)."""

    leader_election: bool = True
    standby_retry_s: float = Field(default=DEFAULT_STANDBY_RETRY_S, gt=0, le=60)
    lease_s: float = Field(default=DEFAULT_LEASE_S, ge=2)


class WatchdogConfig(_Section):
    """The stall watchdog (ack/watchdog.py): how long work may wait without any progress before
    pgbridge reports itself stalled (not ready, ``pgbridge_stalled``, a log line); 0 turns it off."""

    stall_s: float = Field(default=DEFAULT_STALL_S, ge=0)


class LogConfig(_Section):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    json_format: bool = Field(default=False, alias="json")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="PGBRIDGE_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
        case_sensitive=False,
    )

    postgres: PostgresConfig
    kafka: KafkaConfig
    schema_registry: SchemaRegistryConfig = SchemaRegistryConfig()
    snapshot: SnapshotConfig = SnapshotConfig()
    toast: ToastConfig = ToastConfig()
    types: TypesConfig = TypesConfig()
    columns: ColumnsConfig = ColumnsConfig()
    http: HttpConfig = HttpConfig()
    buffer: BufferConfig = BufferConfig()
    log: LogConfig = LogConfig()
    ha: HaConfig = HaConfig()
    watchdog: WatchdogConfig = WatchdogConfig()
    outbox: OutboxConfig = OutboxConfig()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Environment first (wins), then the YAML file passed in as init kwargs. ``load_settings``
        # may hand a mapping of its own (file secrets resolved, or a test's); os.environ is never touched.
        environ = _ENVIRON.get()
        return (env_settings if environ is None else _MappingEnvSource(settings_cls, environ), init_settings)


class _MappingEnvSource(EnvSettingsSource):
    """pydantic-settings' environment source reading a given mapping instead of ``os.environ``."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        self._environ = environ
        super().__init__(settings_cls)
        self.env_vars = self._load_env_vars()  # whatever the base class loaded in __init__

    def _load_env_vars(self) -> Mapping[str, str | None]:
        # Settings are case-insensitive (model_config): keys are matched lower-cased
        return {key.lower(): value for key, value in getattr(self, "_environ", {}).items()}


# The environment ``load_settings`` builds from, for the duration of one ``Settings(...)`` call.
_ENVIRON: ContextVar[Mapping[str, str] | None] = ContextVar("pgbridge_settings_environ", default=None)


_ENV_KEYS_IGNORED: Final = {"PGBRIDGE_CONFIG", "PGBRIDGE_PURE_PYTHON"}  # see pgbridge.native


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}",
                          hint="pass an existing YAML file with --config") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"config file {path} is not valid YAML{where}",
                          hint="fix the YAML syntax") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of sections",
                          hint="start the file with keys such as postgres: and kafka:")
    return data


def env_name(path: tuple[str, ...]) -> str:
    """The environment variable of a setting: ``("postgres", "dsn")`` → ``PGBRIDGE_POSTGRES__DSN``."""
    return "PGBRIDGE_" + "__".join(part.upper() for part in path)


def _required_settings(model: type[BaseModel], path: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The required leaf settings under ``path``: a whole missing section stands for the settings
    in it that have no default (``postgres`` → ``postgres.dsn``), the ones a user has to set."""
    leaves: list[tuple[str, ...]] = []
    for name, field in model.model_fields.items():
        if not field.is_required():
            continue
        inner = field.annotation
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            leaves.extend(_required_settings(inner, (*path, name)))
        else:
            leaves.append((*path, name))
    return leaves


def _missing(loc: tuple[str, ...]) -> list[tuple[str, ...]]:
    model: type[BaseModel] = Settings
    for part in loc:
        annotation = model.model_fields[part].annotation if part in model.model_fields else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return [loc]
        model = annotation
    return _required_settings(model, loc) or [loc]


def _describe(error: ValidationError) -> str:
    """Every problem of the configuration in one line: all missing settings with their variables
    (a first run with nothing set learns everything it needs at once), then unknown and invalid ones."""
    missing: list[tuple[str, ...]] = []
    problems: list[str] = []
    for item in error.errors():
        loc = tuple(str(part) for part in item["loc"])
        path = ".".join(loc) or "(root)"
        if item["type"] == "missing":
            missing.extend(leaf for leaf in _missing(loc) if leaf not in missing)
        elif item["type"] == "extra_forbidden":
            problems.append(f"unknown setting {path} (remove it; see the configuration table in README)")
        else:
            problems.append(f"invalid setting {path}: {item['msg']}")
    if missing:
        names = ", ".join(f"{'.'.join(leaf)} ({env_name(leaf)})" for leaf in missing)
        noun = "setting" if len(missing) == 1 else "settings"
        problems.insert(0, f"missing required {noun} {names}: set the variables or add them to the config file")
    return "; ".join(problems)


FILE_SUFFIX: Final = "_FILE"


def resolve_file_secrets(env: dict[str, str]) -> dict[str, str]:
    """``PGBRIDGE_X_FILE=/path`` → ``PGBRIDGE_X=<file content>``, for secrets mounted as files.

    The Docker/Kubernetes convention (``POSTGRES_PASSWORD_FILE``): the value never enters the
    environment of the orchestrator. One trailing newline is dropped. Setting both ``X`` and
    ``X_FILE`` is an error rather than a silent precedence rule.
    """
    out = dict(env)
    for key, value in env.items():
        upper = key.upper()
        if not upper.startswith("PGBRIDGE_") or not upper.endswith(FILE_SUFFIX) or upper == "PGBRIDGE_CONFIG":
            continue
        target = key[: -len(FILE_SUFFIX)]
        if any(other.upper() == target.upper() for other in env):
            raise ConfigError(f"both {target} and {key} are set", hint="keep only one of them")
        try:
            content = Path(value).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read {key}={value}: {exc.strerror}",
                              hint="mount the secret file or unset the variable") from None
        del out[key]
        out[target] = content[:-1] if content.endswith("\n") else content
    return out


def load_settings(config_file: str | Path | None = None, environ: dict[str, str] | None = None) -> Settings:
    """Build the settings from an optional YAML file and the environment; raise ``ConfigError``."""
    env = dict(os.environ if environ is None else environ)
    resolved = resolve_file_secrets(env)
    if resolved != env:
        env = environ = resolved
    path = config_file or env.get("PGBRIDGE_CONFIG")
    file_data = _read_yaml(Path(path)) if path else {}
    unknown_env = sorted(
        key for key in env
        if key.upper().startswith("PGBRIDGE_") and key.upper() not in _ENV_KEYS_IGNORED
        and key.upper().split("__")[0][len("PGBRIDGE_"):].lower() not in Settings.model_fields
    )
    if unknown_env:
        raise ConfigError(f"unknown environment variable {unknown_env[0]}",
                          hint="remove it; see the configuration table in README")
    token = _ENVIRON.set(environ)
    try:
        return Settings(**file_data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None
    finally:
        _ENVIRON.reset(token)


REDACTED: Final = "**********"
# librdkafka properties whose values `pgbridge config` prints: everything else may hold a secret.
_SECRET_PROPERTY_PARTS: Final = ("password", "secret", "jaas", "token", "credential", "pem", "oauthbearer.config",
                                 "user.info")


def effective_settings(settings: Settings) -> dict[str, Any]:
    """The settings in force as plain data for ``pgbridge config``, with every secret redacted:
    the DSN keeps host, port, user and database but not its password, a registry URL loses its
    user info, and secret-looking librdkafka properties and ``SecretStr`` values become
    ``**********``."""
    from pgbridge.logs import redact

    data = settings.model_dump(mode="json", by_alias=True)
    data["postgres"]["dsn"] = redact(settings.postgres.dsn.get_secret_value())
    data["kafka"]["properties"] = {
        key: REDACTED if any(part in key.lower() for part in _SECRET_PROPERTY_PARTS) else value.get_secret_value()
        for key, value in settings.kafka.properties.items()}
    url = settings.schema_registry.url
    if url is not None:
        data["schema_registry"]["url"] = redact(url)
    return data
