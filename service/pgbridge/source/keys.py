"""Which columns key a table's Kafka records: the primary key, else the replica identity index, or
the columns ``kafka.message_key_columns`` names for the table (Debezium's ``message.key.columns``).

Asked of the catalog once per Relation shape (``rel_id`` and column names): a Relation message after
``ALTER TABLE`` may add or drop key columns, and a key column missing from the Relation (or a table
with ``REPLICA IDENTITY NOTHING`` and no key) gives no key at all rather than a partial one, which
would merge distinct rows on one Kafka key. Configured key columns are never dropped that way: a
table that cannot supply them is a configuration error, refused at start (``check_configured``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

import psycopg

from pgbridge.decode.messages import IDENTITY_DEFAULT, IDENTITY_FULL, Relation
from pgbridge.errors import ConfigError, SourceUnavailable
from pgbridge.identifiers import parse_table, table_name

if TYPE_CHECKING:
    from pgbridge.config import KafkaConfig
from pgbridge.source import slots

MessageKeys = Mapping[tuple[str, str], tuple[str, ...]]
"""``(schema, table)`` as the catalog has them → the Kafka key columns configured for it."""


def message_keys(kafka: KafkaConfig) -> MessageKeys:
    """``kafka.message_key_columns`` by ``(schema, table)`` as the catalog has them."""
    return {parse_table(table): tuple(columns) for table, columns in kafka.message_key_columns.items()}


class KeyColumns:
    """``relation → key column names`` (``()`` for none), cached per Relation shape."""

    def __init__(self, conn: psycopg.Connection[tuple[object, ...]], message_keys: MessageKeys | None = None) -> None:
        self._conn = conn
        self._message_keys: MessageKeys = message_keys or {}
        self._cache: dict[tuple[int, tuple[str, ...]], tuple[str, ...]] = {}

    def __call__(self, relation: Relation) -> tuple[str, ...]:
        cache_key = (relation.rel_id, tuple(column.name for column in relation.columns))
        cached = self._cache.get(cache_key)
        if cached is None:
            configured = self._message_keys.get((relation.namespace, relation.name))
            cached = self._cache[cache_key] = (usable_key(self._lookup(relation.rel_id), relation)
                                               if configured is None else message_key(configured, relation))
        return cached

    @classmethod
    def checked(cls, conn: psycopg.Connection[tuple[object, ...]], kafka: KafkaConfig,
                publication: str) -> KeyColumns:
        """The key columns of ``kafka.message_key_columns`` (else each table's own), refused at start
        when an entry cannot hold (``check_configured``)."""
        keys = cls(conn, message_keys(kafka))
        keys.check_configured(publication)
        return keys

    def check_configured(self, publication: str) -> None:
        """Refuse (``ConfigError``) a ``kafka.message_key_columns`` entry whose table is not published,
        lacks a named column, or whose replica identity leaves a column out of a delete's old row."""
        published = set(slots.published_tables(self._conn, publication))
        for schema, table in self._message_keys:
            if (schema, table) not in published:
                raise ConfigError(f"kafka.message_key_columns names {table_name(schema, table)}, which publication "
                                  f"{publication} does not publish",
                                  hint="publish the table or remove its entry (schema.table, quoted as in SQL)")
            relation = slots.relation_from_catalog(self._conn, schema, table, publication)
            self(relation)
            nullable = nullable_columns(self._conn, relation.rel_id, self._message_keys[(schema, table)])
            if nullable:
                raise ConfigError(nullable_message(schema, table, nullable), hint=NULLABLE_HINT)

    def _lookup(self, rel_id: int) -> tuple[str, ...]:
        try:
            return slots.key_columns(self._conn, rel_id)
        except psycopg.OperationalError as exc:
            raise SourceUnavailable(f"catalog lookup failed: {exc}") from None


def usable_key(names: tuple[str, ...], relation: Relation) -> tuple[str, ...]:
    """The catalog's key columns if the Relation carries every one of them, else no key.

    The catalog is read now, the Relation comes from the stream's past: a key column renamed
    since is missing from it under its new name. Under replica identity DEFAULT the Relation
    flags the primary key's columns as they were named then, so those stand in for the missing
    names (in the catalog's key order); any other mismatch gives no key."""
    present = {column.name for column in relation.columns}
    key = tuple(name for name in names if name in present)
    if len(key) == len(names):
        return key
    flagged = [column.name for column in relation.columns if column.is_key]
    if relation.replica_identity != IDENTITY_DEFAULT or len(flagged) != len(names):
        return ()
    renamed = [name for name in flagged if name not in names]
    if len(renamed) != len(names) - len(key):
        return ()
    stand_in = iter(renamed)
    return tuple(name if name in present else next(stand_in) for name in names)


def message_key(names: tuple[str, ...], relation: Relation) -> tuple[str, ...]:
    """``names``, the configured key columns of ``relation``, once checked: each is a published
    column, and each is in the replica identity (or it is FULL), so deletes and key changes, whose
    old row Postgres sends with the identity's columns only, still carry the whole key."""
    table = table_name(relation.namespace, relation.name)
    columns = [column.name for column in relation.columns]
    missing = [name for name in names if name not in columns]
    if missing:
        raise ConfigError(f"kafka.message_key_columns: {table} has no published column {', '.join(missing)} "
                          f"(its columns: {', '.join(columns)})",
                          hint="name columns exactly as the catalog has them (case-sensitive, unquoted)")
    identity = {column.name for column in relation.columns if column.is_key}
    outside = [name for name in names if name not in identity]
    if relation.replica_identity != IDENTITY_FULL and outside:
        raise ConfigError(f"kafka.message_key_columns: {table}'s replica identity does not include "
                          f"{', '.join(outside)}, so a delete's old row would not carry its Kafka key",
                          hint=f"ALTER TABLE {table} REPLICA IDENTITY FULL; or REPLICA IDENTITY USING INDEX "
                               "on a unique index covering the key columns")
    return names


NULLABLE_HINT: Final = "ALTER TABLE ... ALTER COLUMN ... SET NOT NULL, or choose NOT NULL key columns"


def nullable_message(schema: str, table: str, columns: list[str]) -> str:
    return (f"kafka.message_key_columns: {table_name(schema, table)}.{', '.join(columns)} may be null, and a "
            "Kafka key field is not nullable (a null key value would stop pgbridge)")


def nullable_columns(conn: psycopg.Connection[tuple[object, ...]], rel_id: int, names: tuple[str, ...]) -> list[str]:
    """Those of ``names`` that are not ``NOT NULL`` in the catalog, in ``names`` order."""
    rows = conn.execute("SELECT attname FROM pg_attribute WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped"
                        " AND NOT attnotnull AND attname = ANY(%s)", (rel_id, list(names))).fetchall()
    found = {str(row[0]) for row in rows}
    return [name for name in names if name in found]
