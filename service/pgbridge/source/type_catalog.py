"""Type metadata from ``pg_type`` for the encoder: domains, arrays, enums and extension types.

pgoutput's Type message names a non-builtin type but says nothing about it; the encoder needs a
domain's base type (to encode ``CREATE DOMAIN price AS numeric(12,2)`` as a decimal), an array's
element type, and the send function that tells the binary format. Looked up once per type OID on
the SQL connection and cached: types rarely change, and a changed type reaches the encoder
through a new Relation message whose columns are looked up again only if their OID is new.
"""

from __future__ import annotations

import psycopg

from pgbridge.encode.typemap import PgTypeInfo
from pgbridge.errors import SourceUnavailable

_QUERY = (
    "SELECT t.oid, n.nspname, t.typname, t.typtype, t.typcategory, t.typbasetype, t.typtypmod, t.typelem,"
    " t.typdelim, coalesce(p.prosrc, '') FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace"
    " LEFT JOIN pg_proc p ON p.oid = t.typsend WHERE t.oid = %s"
)


class CatalogTypes:
    """``oid → PgTypeInfo`` (``None`` for an unknown OID), cached per OID."""

    def __init__(self, conn: psycopg.Connection[tuple[object, ...]]) -> None:
        self._conn = conn
        self._cache: dict[int, PgTypeInfo | None] = {}

    def __call__(self, oid: int) -> PgTypeInfo | None:
        if oid in self._cache:
            return self._cache[oid]
        try:
            row = self._conn.execute(_QUERY, (oid,)).fetchone()
        except psycopg.OperationalError as exc:
            raise SourceUnavailable(f"catalog lookup of type {oid} failed: {exc}") from None
        info = None
        if row is not None:
            info = PgTypeInfo(oid=int(str(row[0])), namespace=str(row[1]), name=str(row[2]), kind=str(row[3]),
                              category=str(row[4]), base_oid=int(str(row[5])), base_typmod=int(str(row[6])),
                              element_oid=int(str(row[7])), delimiter=str(row[8]), send=str(row[9]))
        self._cache[oid] = info
        return info
