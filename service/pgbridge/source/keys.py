"""Which columns key a table's Kafka records: the primary key, else the replica identity index.

Asked of the catalog once per Relation shape (``rel_id`` and column names): a Relation message after
``ALTER TABLE`` may add or drop key columns, and a key column missing from the Relation (or a table
with ``REPLICA IDENTITY NOTHING`` and no key) gives no key at all rather than a partial one, which
would merge distinct rows on one Kafka key.
"""

from __future__ import annotations

import psycopg

from pgbridge.decode.messages import Relation
from pgbridge.errors import SourceUnavailable
from pgbridge.source import slots


class KeyColumns:
    """``relation → key column names`` (``()`` for none), cached per Relation shape."""

    def __init__(self, conn: psycopg.Connection[tuple[object, ...]]) -> None:
        self._conn = conn
        self._cache: dict[tuple[int, tuple[str, ...]], tuple[str, ...]] = {}

    def __call__(self, relation: Relation) -> tuple[str, ...]:
        cache_key = (relation.rel_id, tuple(column.name for column in relation.columns))
        cached = self._cache.get(cache_key)
        if cached is None:
            cached = self._cache[cache_key] = usable_key(self._lookup(relation.rel_id), relation)
        return cached

    def _lookup(self, rel_id: int) -> tuple[str, ...]:
        try:
            return slots.key_columns(self._conn, rel_id)
        except psycopg.OperationalError as exc:
            raise SourceUnavailable(f"catalog lookup failed: {exc}") from None


def usable_key(names: tuple[str, ...], relation: Relation) -> tuple[str, ...]:
    """The catalog's key columns if the Relation carries every one of them, else no key."""
    present = {column.name for column in relation.columns}
    key = tuple(name for name in names if name in present)
    return key if len(key) == len(names) else ()
