"""Whether a change is published, and on which topic (docs/routing.md).

Pure decisions, applied before anything is produced:

* ``kafka.skipped_operations``: a skipped operation (``c``, ``u``, ``d``, ``t``) produces nothing
  and takes no place in its transaction's order: ``transaction.total_order``,
  ``data_collection_order`` and the END record's ``event_count`` / ``data_collections`` count
  published events only, so a consumer that waits for a transaction's announced count (the Spark
  consistent mirror) is never left waiting for an event that will not come. Its LSN is confirmed
  as any other's: the transaction still seals its unit.
* ``kafka.tombstones_on_delete``: without tombstones a keyed delete is its delete record alone.
  The tombstone of an update that changed the key stays: it is the only record that retires the
  old key under compaction.
* ``kafka.topic_routes``: the first route whose ``match`` matches a table's whole ``schema.table``
  sends its records to ``{prefix}.{topic}`` (``\\1``... the match's groups). A topic that holds
  several tables gets ``TABLE_KEY_FIELD`` as the first field of its keys, so equal keys of two
  tables stay two keys under compaction (Debezium's ``__dbz__physicalTableIdentifier``); the
  encoder writes it (``encode.schemas.with_table_field``).

``TopicRouter`` names every topic the encoder's records go to (it is the encoder's
``RecordTopics``): each table's, the logical messages' and the transaction boundaries'.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Final, NamedTuple

from pgbridge.encode.schemas import TABLE_KEY_FIELD
from pgbridge.errors import ConfigError, FatalError
from pgbridge.publish.topics import (
    MAX_TOPIC_LENGTH,
    messages_topic,
    table_topic,
    topic_name,
    transactions_topic,
)
from pgbridge.topic_routes import routed_name_problem

if TYPE_CHECKING:
    from pgbridge.config import KafkaConfig, TopicRoute
    from pgbridge.encode.envelope import OutRecord

OPERATIONS: Final = ("c", "u", "d", "t")


class PublishFilter(NamedTuple):
    """The ops never published, and whether a keyed delete is followed by its tombstone."""

    skipped: frozenset[str] = frozenset()
    tombstones_on_delete: bool = True

    @classmethod
    def of(cls, config: KafkaConfig) -> PublishFilter:
        return cls(frozenset(config.skipped_operations), config.tombstones_on_delete)

    def skips(self, op: str) -> bool:
        return op in self.skipped


def row_records(records: list[OutRecord], op: str, tombstones_on_delete: bool) -> Sequence[OutRecord]:
    """The records of one encoded row change that are published: a delete's trailing tombstone
    (``encode_row`` puts it last, after the delete record) only with ``tombstones_on_delete``."""
    if op == "d" and not tombstones_on_delete and len(records) == 2 and records[1].value is None:
        return records[:1]
    return records


# --- topic routes ---------------------------------------------------------------------------------


class Route(NamedTuple):
    """Where a table's records go, and whether their keys carry ``TABLE_KEY_FIELD``."""

    topic: str
    table_key: bool = False


class TopicRouter:
    """Names each table's topic: the first matching route, else ``{prefix}.{schema}.{table}``.

    ``tables`` are the published tables known at start: a topic two of them share is *shared*
    and its keys carry the table. A table first seen later that lands on a topic another table
    already holds alone stops the bridge (its keys would collide with the first table's); after a
    restart that topic is known as shared.
    """

    def __init__(self, prefix: str, routes: Sequence[TopicRoute] = (),
                 tables: Iterable[tuple[str, str]] = ()) -> None:
        self._prefix = prefix
        self.messages = messages_topic(prefix)
        self.transactions = transactions_topic(prefix)
        self._routes = [(re.compile(route.match), route.topic) for route in routes]
        self._holders: dict[str, set[str]] = {}
        for schema, table in tables if self._routes else ():
            self._holders.setdefault(self.topic_of(schema, table), set()).add(f"{schema}.{table}")
        self._shared = {topic for topic, names in self._holders.items() if len(names) > 1}

    @classmethod
    def of(cls, config: KafkaConfig, tables: Iterable[tuple[str, str]] = ()) -> TopicRouter:
        return cls(config.topic_prefix, config.topic_routes, tables)

    def topic_of(self, schema: str, table: str) -> str:
        """The topic of ``schema.table``; ``ConfigError`` if its route makes an invalid name."""
        name = f"{schema}.{table}"
        for pattern, template in self._routes:
            found = pattern.fullmatch(name)
            if found is None:
                continue
            routed = found.expand(template)
            problem = routed_name_problem(routed)
            if problem is None and len(self._prefix) + 1 + len(routed) > MAX_TOPIC_LENGTH:
                problem = f"{self._prefix}.{routed[:40]}... is longer than Kafka's {MAX_TOPIC_LENGTH} characters"
            if problem is not None:
                raise ConfigError(f"kafka.topic_routes sends {name} to an invalid topic: {problem}",
                                  hint=f"change the route whose match is {pattern.pattern}")
            return topic_name(self._prefix, routed)
        return table_topic(self._prefix, schema, table)

    def route(self, schema: str, table: str) -> Route:
        if not self._routes:  # the contract's one topic per table
            return Route(table_topic(self._prefix, schema, table))
        topic = self.topic_of(schema, table)
        name = f"{schema}.{table}"
        holders = self._holders.setdefault(topic, set())
        if name not in holders:
            if holders and topic not in self._shared:
                raise FatalError(f"{name} is routed onto {topic}, which holds {', '.join(sorted(holders))} "
                                 f"with keys that do not name their table",
                                 hint=f"restart pgbridge: the topic then gets the {TABLE_KEY_FIELD} key field "
                                      "(the keys of the tables already on it change form)")
            holders.add(name)
        return Route(topic, topic in self._shared)

    def shared_topics(self) -> dict[str, list[str]]:
        """Topics holding several of the known tables, each with its tables (for ``pgbridge check``)."""
        return {topic: sorted(self._holders[topic]) for topic in sorted(self._shared)}
