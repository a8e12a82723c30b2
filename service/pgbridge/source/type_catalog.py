"""Type metadata from ``pg_type`` for the encoder: domains, arrays, enums, composites and extension types.

pgoutput's Type message names a non-builtin type but says nothing about it; the encoder needs a
domain's base type (to encode ``CREATE DOMAIN price AS numeric(12,2)`` as a decimal), an array's
element type, a composite's attributes, and the send function that tells the binary format.
Looked up on the SQL connection when a Relation message is compiled. Other types are cached per
OID: they rarely change, and a changed type reaches the encoder through a new Relation message
whose columns are looked up again only if their OID is new. Composites are read again for every
Relation message: ``ALTER TYPE ... ADD/DROP ATTRIBUTE`` keeps the OID, so a cache would keep the
old attributes for as long as the process lives.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from pgbridge.errors import SourceUnavailable


@dataclass(frozen=True, slots=True)
class PgTypeInfo:
    """What ``pg_type`` says about a type outside the encoder's builtin table."""

    oid: int
    namespace: str
    name: str
    kind: str  # typtype: b base, c composite, d domain, e enum, p pseudo, r range, m multirange
    category: str  # typcategory: A for arrays
    base_oid: int  # typbasetype of a domain
    base_typmod: int  # typtypmod of a domain
    element_oid: int  # typelem of an array
    delimiter: str  # typdelim
    send: str  # prosrc of typsend: the C function, which is what tells the binary format
    attributes: tuple[CompositeAttribute, ...] = ()  # a composite's live attributes, in attnum order


@dataclass(frozen=True, slots=True)
class CompositeAttribute:
    """One attribute of a composite type (``pg_attribute`` of its ``typrelid``, dropped ones left out)."""

    name: str
    type_oid: int
    type_modifier: int


_QUERY = (
    "SELECT t.oid, n.nspname, t.typname, t.typtype, t.typcategory, t.typbasetype, t.typtypmod, t.typelem,"
    " t.typdelim, coalesce(p.prosrc, ''), t.typrelid FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace"
    " LEFT JOIN pg_proc p ON p.oid = t.typsend WHERE t.oid = %s"
)
_ATTRIBUTES = (
    "SELECT attname, atttypid, atttypmod FROM pg_attribute WHERE attrelid = %s AND attnum > 0"
    " AND NOT attisdropped ORDER BY attnum"
)


class CatalogTypes:
    """``oid → PgTypeInfo`` (``None`` for an unknown OID); cached per OID except composites."""

    def __init__(self, conn: psycopg.Connection[tuple[object, ...]]) -> None:
        self._conn = conn
        self._cache: dict[int, PgTypeInfo | None] = {}

    def __call__(self, oid: int) -> PgTypeInfo | None:
        if oid in self._cache:
            return self._cache[oid]
        try:
            row = self._conn.execute(_QUERY, (oid,)).fetchone()
            info = None
            if row is not None:
                attributes: tuple[CompositeAttribute, ...] = ()
                if row[3] == "c":
                    attributes = tuple(
                        CompositeAttribute(str(name), int(str(type_oid)), int(str(type_modifier)))
                        for name, type_oid, type_modifier in self._conn.execute(_ATTRIBUTES, (row[10],)))
                info = PgTypeInfo(oid=int(str(row[0])), namespace=str(row[1]), name=str(row[2]), kind=str(row[3]),
                                  category=str(row[4]), base_oid=int(str(row[5])), base_typmod=int(str(row[6])),
                                  element_oid=int(str(row[7])), delimiter=str(row[8]), send=str(row[9]),
                                  attributes=attributes)
        except psycopg.OperationalError as exc:
            raise SourceUnavailable(f"catalog lookup of type {oid} failed: {exc}") from None
        if info is None or info.kind != "c":
            self._cache[oid] = info
        return info
