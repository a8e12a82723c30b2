"""The ``postgres`` section: the source database, slot, publication and table selection."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Final, Literal

from pydantic import (
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    NoDecode,
)

from pgbridge.config.base import _Section
from pgbridge.identifiers import normalize_table, parse_table, split_table_list

# Standby status updates at least this often: well under the server's default wal_sender_timeout
# (60 s), and often enough that confirmed_flush_lsn trails delivery by seconds, not minutes.
DEFAULT_STATUS_INTERVAL_S: Final = 5.0
# Slot safety query (pg_replication_slots, current WAL position): cheap, and 10 s resolves a WAL
# rate forecast well within the minutes an operator has to react to a slot near invalidation.
DEFAULT_SLOT_CHECK_INTERVAL_S: Final = 10.0
# Heartbeat messages are off by default: the keepalive rule (ack/tracker.py) already confirms the
# server position when nothing is outstanding. Turn them on (e.g. 60 s) for a database with no WAL
# traffic of its own on a server whose other databases keep writing (RDS, shared clusters).
DEFAULT_HEARTBEAT_INTERVAL_S: Final = 0.0


def split_patterns(text: str) -> list[str]:
    """A comma list of patterns (the environment form). A pattern that contains a comma itself
    (``x{1,3}``) must be given as a YAML list or a JSON array instead."""
    return [item.strip() for item in text.split(",") if item.strip()]


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

    # Decoding on a standby (Postgres 16+): a standby cannot write, so pgbridge's own writes
    # (heartbeat messages, incremental snapshot watermarks and reads, the running-xacts record a
    # slot created on a standby waits for) go to this connection to the primary. Unset on a
    # standby: heartbeats and incremental snapshots are off, each with a log line. Unused when
    # postgres.dsn is a primary (docs/operations.md, "Decoding on a standby").
    primary_dsn: SecretStr | None = None

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
    # Schema changes as events (docs/schema-changes.md): an event trigger writes each DDL command of
    # a published table into the WAL, published in commit order on {prefix}.schema_changes, and a
    # renamed column's new field names its old name in Avro aliases. Off by default: creating the
    # trigger needs a superuser (pgbridge installs it when its role is one; `pgbridge check` prints
    # the SQL otherwise), and without it renames are a dropped and an added field, as before.
    ddl_events: bool = False

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
        for pattern in value or ():
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"postgres.{info.field_name}: {pattern!r} is not a valid regular expression "
                                 f"({exc})") from None
        return value

    @model_validator(mode="after")
    def _one_selection(self) -> PostgresConfig:
        if self.tables is not None and (self.table_include is not None or self.table_exclude):
            other = "table_include" if self.table_include is not None else "table_exclude"
            raise ValueError(f"postgres.tables and postgres.{other} cannot both be set: list exact tables in "
                             f"postgres.tables, or select by pattern with postgres.table_include/table_exclude")
        return self

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
