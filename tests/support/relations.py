"""The one builder of pgoutput ``Relation`` messages for tests (decode/messages.py's types)."""

from __future__ import annotations

from pgbridge.decode.messages import Column, Relation

TEXT_OID = 25

ColumnSpec = str | tuple[str, int] | tuple[str, int, int] | tuple[str, int, int, bool]


def column(spec: ColumnSpec) -> Column:
    """``name`` (a text column) or ``(name, type_oid[, type_modifier[, is_key]])``."""
    if isinstance(spec, str):
        return Column(is_key=False, name=spec, type_oid=TEXT_OID, type_modifier=-1)
    typmod = spec[2] if len(spec) > 2 else -1
    is_key = spec[3] if len(spec) > 3 else False
    return Column(is_key=bool(is_key), name=spec[0], type_oid=spec[1], type_modifier=int(typmod))


def relation(*columns: ColumnSpec, identity: str = "d", namespace: str = "public", name: str = "t",
             rel_id: int = 16384, xid: int | None = None, key: int = 0) -> Relation:
    """A Relation of ``columns`` (see ``column``); ``key`` marks that many leading columns as key
    columns, on top of the ones a tuple marks itself."""
    built = tuple(column(spec) for spec in columns)
    built = tuple(Column(is_key=c.is_key or i < key, name=c.name, type_oid=c.type_oid, type_modifier=c.type_modifier)
                  for i, c in enumerate(built))
    return Relation(xid=xid, rel_id=rel_id, namespace=namespace, name=name, replica_identity=identity,
                    columns=built)
