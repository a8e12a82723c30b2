"""The sections of snapshots, TOAST, types, column policies, HTTP, buffering, HA, the watchdog and logging."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from pydantic import (
    ConfigDict,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)

from pgbridge.config.base import _Section
from pgbridge.identifiers import normalize_table

# Per buffered (streamed or prepared) transaction, bytes held in memory before spilling to disk.
# 64 MiB keeps peak RSS of a single huge transaction well below a typical 256 MiB container limit.
DEFAULT_BUFFER_MEMORY_BYTES: Final = 64 * 1024 * 1024
# A standby polls the leader lock this often: the takeover time after the leader dies is about
# this plus a connect and START_REPLICATION.
DEFAULT_STANDBY_RETRY_S: Final = 1.0
# A leader whose host vanished without closing its socket loses the lock (idle_session_timeout on
# the lock's session) after this long; well above the leader's 1 s keep-alive query.
DEFAULT_LEASE_S: Final = 10.0
# A few thousand rows of a few TOASTed kilobytes each: tens of MiB at most, and the hot rows of a
# table that updates small columns next to big ones are what the cache is for.
DEFAULT_TOAST_CACHE_ROWS: Final = 2_000
# A minute without any progress while work waits: longer than any healthy pause (a broker leader
# election, a registry retry, a Postgres checkpoint), shorter than a delivery timeout chain.
DEFAULT_STALL_S: Final = 60.0


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
