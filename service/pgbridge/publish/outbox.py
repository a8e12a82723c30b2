"""The outbox event router (Debezium's ``EventRouter`` SMT), docs/routing.md.

An INSERT into an outbox table (``outbox.tables``) becomes one record on
``outbox.topic`` with ``{aggregate_type}`` replaced by the row's aggregate type (default
``outbox.event.{aggregate_type}``: outside ``{prefix}.``, so table consumers and the Spark mirror
never see it). Key: the aggregate id's text as UTF-8 (records of one aggregate share a partition,
so they keep commit order); value: the payload column's bytes as stored (json/jsonb/text as UTF-8
text, bytea raw); headers ``id`` and ``type``. Updates and deletes of outbox rows are not events:
they are ignored, logged once per table and op, and counted. The outbox table's own topic gets
nothing (no change, truncate or snapshot row).

Pure apart from logging: the dispatcher produces what ``record`` returns under the transaction's
delivery unit, so the LSN is confirmed only after the outbox records are acknowledged, and under
``kafka.exactly_once`` they are part of the Kafka transaction like every other record.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final, NamedTuple

from pgbridge.decode.messages import KIND_BINARY, KIND_TEXT, Relation, TupleData
from pgbridge.errors import ConfigError, FatalError
from pgbridge.identifiers import parse_table
from pgbridge.publish.topics import sanitize

if TYPE_CHECKING:
    import psycopg

    from pgbridge.config import OutboxConfig

log = logging.getLogger(__name__)

AGGREGATE_TYPE: Final = "{aggregate_type}"
# Postgres type OIDs the outbox columns may have
_TEXT, _VARCHAR, _UUID, _INT4, _INT8, _JSON, _JSONB, _BYTEA = 25, 1043, 2950, 23, 20, 114, 3802, 17
_TYPE_NAMES: Final = {_TEXT: "text", _VARCHAR: "varchar", _UUID: "uuid", _INT4: "integer", _INT8: "bigint",
                      _JSON: "json", _JSONB: "jsonb", _BYTEA: "bytea"}
_IDENTIFIER_TYPES: Final = frozenset({_TEXT, _VARCHAR, _UUID, _INT4, _INT8})
_NAME_TYPES: Final = frozenset({_TEXT, _VARCHAR})
_PAYLOAD_TYPES: Final = frozenset({_JSONB, _JSON, _TEXT, _VARCHAR, _BYTEA})


class OutboxColumns(NamedTuple):
    """The outbox table's column names, in the order ``record`` reads them."""

    id: str
    aggregate_type: str
    aggregate_id: str
    type: str
    payload: str

    def allowed(self) -> dict[str, frozenset[int]]:
        return {self.id: _IDENTIFIER_TYPES, self.aggregate_type: _NAME_TYPES, self.aggregate_id: _IDENTIFIER_TYPES,
                self.type: _NAME_TYPES, self.payload: _PAYLOAD_TYPES}


def column_problems(table: str, types: Mapping[str, int], columns: OutboxColumns) -> list[str]:
    """Each outbox column missing from ``types`` (column name → type OID) or of a type pgbridge
    cannot turn into a key, header or value, as one message naming the table and column."""
    problems = []
    for name, allowed in columns.allowed().items():
        oid = types.get(name)
        expected = " or ".join(_TYPE_NAMES[t] for t in sorted(allowed))
        if oid is None:
            problems.append(f"outbox table {table} has no column {name} (expected {expected})")
        elif oid not in allowed:
            problems.append(f"outbox column {table}.{name} has type oid {oid}, not {expected}")
    return problems


def value_bytes(kind: int, raw: bytes | None, oid: int) -> bytes | None:
    """A column's value as the bytes an outbox record carries: its text as UTF-8 (uuid and integers
    as Postgres prints them, jsonb without its binary version byte), bytea raw; None for null."""
    if raw is None or kind not in (KIND_TEXT, KIND_BINARY):
        return None
    if kind == KIND_TEXT:
        return bytes.fromhex(raw[2:].decode()) if oid == _BYTEA else raw
    if oid == _JSONB:
        return raw[1:]  # jsonb's binary form: version byte 1, then the text
    if oid == _UUID:
        return str(uuid.UUID(bytes=raw)).encode()
    if oid in (_INT4, _INT8):
        return str(int.from_bytes(raw, "big", signed=True)).encode()
    return raw


def topic_problem(template: str, prefix: str) -> str | None:
    """Why ``outbox.topic`` cannot name outbox topics, or None: it must be outside ``{prefix}.``
    (table consumers and the Spark mirror subscribe to that prefix)."""
    if template.startswith(f"{prefix}.") or template == prefix:
        return f"outbox.topic {template!r} is inside kafka.topic_prefix {prefix!r}"
    if template.replace(AGGREGATE_TYPE, "") != sanitize(template.replace(AGGREGATE_TYPE, "")):
        return f"outbox.topic {template!r} has characters outside A-Z a-z 0-9 . _ - besides {AGGREGATE_TYPE}"
    return None


class OutboxRecord(NamedTuple):
    topic: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, str | bytes | None]]


class OutboxRouter:
    """Which relations are outbox tables, and the record of an outbox row."""

    def __init__(self, config: OutboxConfig, prefix: str) -> None:
        problem = topic_problem(config.topic, prefix)
        if problem is not None:
            raise ConfigError(problem, hint="use a topic outside the prefix, e.g. outbox.event.{aggregate_type}")
        self.tables = frozenset(config.table_names)
        self.columns = OutboxColumns(config.id_column, config.aggregate_type_column, config.aggregate_id_column,
                                     config.type_column, config.payload_column)
        self._topic = config.topic
        self._plans: dict[int, tuple[Relation, tuple[tuple[int, int], ...] | None]] = {}
        self.ignored: Counter[tuple[str, str]] = Counter()

    def plan(self, relation: Relation) -> tuple[tuple[int, int], ...] | None:
        """(position, type OID) of each outbox column for an outbox table's Relation, else None;
        ``FatalError`` when the table's columns do not fit (checked once per Relation version)."""
        entry = self._plans.get(id(relation))
        if entry is not None and entry[0] is relation:
            return entry[1]
        table = f"{relation.namespace}.{relation.name}"
        plan = None
        if table in self.tables:
            types = {c.name: c.type_oid for c in relation.columns}
            problems = column_problems(table, types, self.columns)
            if problems:
                raise FatalError(problems[0], hint="fix the outbox table or the outbox.*_column settings")
            positions = {c.name: i for i, c in enumerate(relation.columns)}
            plan = tuple((positions[name], types[name]) for name in self.columns)
        self._plans[id(relation)] = (relation, plan)
        return plan

    def record(self, relation: Relation, row: TupleData, plan: tuple[tuple[int, int], ...]) -> OutboxRecord:
        """The record of an INSERT into an outbox table."""
        event_id, aggregate_type, aggregate_id, event_type, payload = (
            value_bytes(row.kinds[i], row.values[i], oid) for i, oid in plan)
        if aggregate_type is None:
            raise FatalError(f"outbox row {event_id!r} of {relation.namespace}.{relation.name} has a null "
                             f"{self.columns.aggregate_type}: it names the topic",
                             hint="make the aggregate type column NOT NULL")
        topic = sanitize(self._topic.replace(AGGREGATE_TYPE, aggregate_type.decode()))
        return OutboxRecord(topic, aggregate_id, payload, [("id", event_id), ("type", event_type)])

    def ignore(self, relation: Relation, op: str) -> None:
        """An update, delete or truncate of an outbox table: not an event. Logged once per table and op."""
        table = f"{relation.namespace}.{relation.name}"
        self.ignored[(table, op)] += 1
        if self.ignored[(table, op)] == 1:
            log.warning("outbox table change ignored: only inserts are outbox events",
                        extra={"table": table, "op": op})


def catalog_problems(conn: psycopg.Connection[tuple[object, ...]], config: OutboxConfig) -> list[str]:
    """Each outbox table that does not exist, or whose outbox columns are missing or of a type
    pgbridge cannot carry, as one message (``pgbridge check`` and the start of ``run``)."""
    columns = OutboxColumns(config.id_column, config.aggregate_type_column, config.aggregate_id_column,
                            config.type_column, config.payload_column)
    problems: list[str] = []
    for quoted in config.tables:
        schema, name = parse_table(quoted)
        table = f"{schema}.{name}"
        rows = conn.execute("SELECT a.attname, a.atttypid::int FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
                            " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s"
                            " AND a.attnum > 0 AND NOT a.attisdropped", (schema, name)).fetchall()
        if not rows:
            problems.append(f"outbox table {table} does not exist")
            continue
        problems.extend(column_problems(table, {str(n): int(str(t)) for n, t in rows}, columns))
    return problems


def outbox_router(conn: psycopg.Connection[tuple[object, ...]], config: OutboxConfig, prefix: str) -> OutboxRouter | None:
    """The router of ``outbox.tables`` (None without any), after checking them in the catalog."""
    if not config.tables:
        return None
    router = OutboxRouter(config, prefix)
    problems = catalog_problems(conn, config)
    if problems:
        raise ConfigError(problems[0], hint="fix the outbox table or the outbox.*_column settings")
    return router
