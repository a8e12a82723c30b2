"""The DDL messages of pgbridge's event trigger (source/ddl_trigger.py): content bytes → ``DdlCommand``.

With ``postgres.ddl_events`` the trigger writes one transactional logical message per DDL command
and published table, prefix ``DDL_PREFIX``, content UTF-8 JSON (format ``DDL_FORMAT``)::

    {"format": 1, "command": "ALTER TABLE", "identity": "public.orders", "relid": 16390,
     "before": SHAPE | null, "after": SHAPE | null}
    SHAPE = {"schema": "public", "table": "orders", "replica_identity": "d",
             "publications": ["pgbridge"],
             "columns": [{"attnum": 1, "name": "id", "type": "integer", "type_oid": 23,
                          "typmod": -1, "not_null": true, "key": true}, ...]}

``before`` is the table as the trigger last recorded it (null for a table it meets for the first
time), ``after`` the catalog at the end of the command (null for a dropped table). Attribute numbers
are what make a rename a rename: Postgres keeps a column's ``attnum`` through ``RENAME COLUMN`` and
``ALTER COLUMN TYPE`` and never reuses a dropped one. Pure: no I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from pgbridge.errors import FatalError
from pgbridge.lsn import format_lsn

DDL_PREFIX: Final = "pgbridge.ddl"
"""Prefix of the trigger's logical messages (``pg_logical_emit_message(true, DDL_PREFIX, ...)``)."""
DDL_FENCE: Final = b""
"""Content of the message that ends each firing of the trigger (source/ddl_trigger.py says why); ignored."""
DDL_FORMAT: Final = 1
"""The content format this pgbridge reads; the trigger writes the one of the pgbridge that installed it."""

_REINSTALL: Final = ("reinstall the DDL trigger with this pgbridge (pgbridge check prints its SQL) and "
                     "restart; or set postgres.ddl_events to false")


@dataclass(frozen=True, slots=True)
class DdlColumn:
    """One live column (``pg_attribute``): ``type`` as ``format_type`` writes it (``numeric(10,2)``)."""

    attnum: int
    name: str
    type: str
    type_oid: int
    typmod: int
    not_null: bool
    key: bool  # a column of the primary key


@dataclass(frozen=True, slots=True)
class TableShape:
    """A table at one moment: its names, replica identity (``d``/``f``/``i``/``n``), the
    publications that publish it (itself, a partition or its root) and its live columns."""

    schema: str
    table: str
    replica_identity: str
    publications: tuple[str, ...]
    columns: tuple[DdlColumn, ...]

    def by_attnum(self) -> dict[int, DdlColumn]:
        return {column.attnum: column for column in self.columns}

    def to_json(self) -> dict[str, Any]:
        """The trigger's form of the shape (what ``shape_of`` reads), for pgbridge's own records."""
        return {"schema": self.schema, "table": self.table, "replica_identity": self.replica_identity,
                "publications": list(self.publications),
                "columns": [{"attnum": c.attnum, "name": c.name, "type": c.type, "type_oid": c.type_oid,
                             "typmod": c.typmod, "not_null": c.not_null, "key": c.key} for c in self.columns]}


@dataclass(frozen=True, slots=True)
class DdlCommand:
    """One DDL command's effect on one table (``relid``, which a table rename keeps)."""

    command: str  # the command tag: ALTER TABLE, CREATE TABLE, DROP TABLE, ...
    identity: str  # object identity, schema-qualified and quoted as needed
    relid: int
    before: TableShape | None
    after: TableShape | None

    @property
    def current(self) -> TableShape:
        """The shape that names the table now: ``after``, or ``before`` for a dropped table."""
        shape = self.after or self.before
        assert shape is not None  # parse_ddl_message refuses a command with neither
        return shape


def _field(obj: dict[str, Any], name: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = obj.get(name)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"{where}.{name} is {value!r}")
    return value


def shape_of(obj: Any, where: str = "shape") -> TableShape:
    """A ``SHAPE`` object (see the module docstring); ``ValueError`` naming the field otherwise."""
    if not isinstance(obj, dict):
        raise ValueError(f"{where} is {type(obj).__name__}, not an object")
    columns = []
    for i, col in enumerate(_field(obj, "columns", list, where)):
        at = f"{where}.columns[{i}]"
        if not isinstance(col, dict):
            raise ValueError(f"{at} is not an object")
        columns.append(DdlColumn(attnum=_field(col, "attnum", int, at), name=_field(col, "name", str, at),
                                 type=_field(col, "type", str, at), type_oid=_field(col, "type_oid", int, at),
                                 typmod=_field(col, "typmod", int, at), not_null=_field(col, "not_null", bool, at),
                                 key=_field(col, "key", bool, at)))
    publications = _field(obj, "publications", list, where)
    if not all(isinstance(p, str) for p in publications):
        raise ValueError(f"{where}.publications holds a non-string")
    return TableShape(schema=_field(obj, "schema", str, where), table=_field(obj, "table", str, where),
                      replica_identity=_field(obj, "replica_identity", str, where),
                      publications=tuple(publications), columns=tuple(sorted(columns, key=lambda c: c.attnum)))


def parse_ddl_message(content: bytes, lsn: int = 0) -> DdlCommand:
    """The ``DdlCommand`` of one trigger message; ``FatalError`` otherwise: the trigger and this
    pgbridge disagree, and skipping the event would lose what a rename means."""
    try:
        obj = json.loads(bytes(content).decode("utf-8"))
        if not isinstance(obj, dict):
            raise ValueError("the content is not a JSON object")
        if obj.get("format") != DDL_FORMAT:
            raise ValueError(f"format {obj.get('format')!r}, this pgbridge reads format {DDL_FORMAT}")
        before, after = obj.get("before"), obj.get("after")
        if before is None and after is None:
            raise ValueError("neither before nor after is set")
        return DdlCommand(command=_field(obj, "command", str, "message"),
                          identity=_field(obj, "identity", str, "message"),
                          relid=_field(obj, "relid", int, "message"),
                          before=None if before is None else shape_of(before, "before"),
                          after=None if after is None else shape_of(after, "after"))
    except (ValueError, UnicodeDecodeError) as exc:  # json.JSONDecodeError is a ValueError
        raise FatalError(f"DDL message ({DDL_PREFIX}) at {format_lsn(lsn)} is malformed: {exc}",
                         hint=_REINSTALL) from None
