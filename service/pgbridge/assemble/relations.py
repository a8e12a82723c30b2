"""Relation and type metadata as pgoutput announces it.

Row messages carry only a relation OID; the column layout arrives earlier in a Relation message
(re-sent whenever the schema changes or the walsender's cache was invalidated). Custom types are
named by Type messages. ``RelationCache`` is the metadata in force for what is being published now.

A streamed transaction is different: the Relation messages inside its stream blocks describe the
schema *as that uncommitted transaction sees it* (an ``ALTER TABLE`` in it, say). Until it commits they
must not leak into other transactions, so they go to a ``RelationOverlay`` that is merged into the
cache when the transaction commits (or is prepared) and dropped when it aborts. This mirrors
pgoutput, which marks a schema as sent for later transactions only when the streamed transaction
that carried it commits.
"""

from __future__ import annotations

from collections.abc import Mapping

from pgbridge.decode.messages import Relation, TypeInfo
from pgbridge.errors import InvariantError

_UNKNOWN_RELATION_HINT = (
    "Postgres always sends a Relation message before the first change of a table; restart pgbridge "
    "so the walsender re-sends relation metadata"
)


class RelationCache:
    """Current Relation per relation OID and (namespace, name) per custom type OID."""

    def __init__(self) -> None:
        self._relations: dict[int, Relation] = {}
        self._types: dict[int, tuple[str, str]] = {}

    @property
    def by_oid(self) -> Mapping[int, Relation]:
        """The Relations in force by OID, read-only: the assembler's ``plain_row`` looks each row's
        relation up in it directly (``get`` is one Python call more a row, for the error)."""
        return self._relations

    def apply(self, msg: Relation | TypeInfo) -> None:
        """Remember a Relation or Type message; a newer one replaces the older."""
        if isinstance(msg, Relation):
            self._relations[msg.rel_id] = msg
        else:
            self._types[msg.type_oid] = (msg.namespace, msg.name)

    def find(self, rel_id: int) -> Relation | None:
        return self._relations.get(rel_id)

    def get(self, rel_id: int) -> Relation:
        """The Relation in force for ``rel_id``; an unknown OID breaks the protocol's ordering."""
        relation = self._relations.get(rel_id)
        if relation is None:
            raise InvariantError(
                f"change refers to relation OID {rel_id}, but no Relation message for it was received",
                hint=_UNKNOWN_RELATION_HINT,
            )
        return relation

    def type_name(self, oid: int) -> tuple[str, str] | None:
        """(namespace, name) of a custom type announced by a Type message; None for built-ins."""
        return self._types.get(oid)

    def __len__(self) -> int:
        return len(self._relations)


class RelationOverlay:
    """Relation and Type messages of one streamed transaction, layered over the shared cache.

    Lookups see the transaction's own versions first, then whatever the shared cache holds at that
    moment. Messages are kept even when the subtransaction that carried them aborts: a Relation
    message only states the table's shape at that point, pgoutput does not re-send it later in the
    same streamed transaction, and an aborted ``ALTER`` makes the walsender invalidate and re-send
    the schema before the next change anyway.
    """

    def __init__(self, base: RelationCache) -> None:
        self._base = base
        self._relations: dict[int, Relation] = {}
        self._types: dict[int, TypeInfo] = {}

    def apply(self, msg: Relation | TypeInfo) -> None:
        if isinstance(msg, Relation):
            self._relations[msg.rel_id] = msg
        else:
            self._types[msg.type_oid] = msg

    def get(self, rel_id: int) -> Relation:
        relation = self._relations.get(rel_id)
        return relation if relation is not None else self._base.get(rel_id)

    def merge(self) -> None:
        """Publish this transaction's metadata to the shared cache (it committed or was prepared)."""
        for type_info in self._types.values():
            self._base.apply(type_info)
        for relation in self._relations.values():
            self._base.apply(relation)
        self._relations.clear()
        self._types.clear()
