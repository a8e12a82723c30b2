"""Rename history: which earlier names each column of a table had, so its field carries Avro aliases.

A reader on a table's newest writer schema reads an old record's value under the new name only if
the new field lists the old name in ``aliases`` (Avro schema resolution). The names a column had
come from the DDL events (decode/ddl.py) in commit order: a column keeps its attribute number
through renames, so ``former[attnum]`` collects the names it had before, most recent first; a
dropped column's history goes with it (its number is never reused).

Where the history lives, and why there: every version of a table's history is written to
pgbridge's compacted progress topic (snapshot/progress.py, key ``{slot}/schema/{relid}``) before
the transaction that changed it can be confirmed, together with the position (commit LSN, message
LSN) of the DDL event that made it. At start the version in force is the last one *below the slot's
confirmed LSN*: everything at or after it is decoded again, and its DDL events rebuild the later
versions identically. So a restart compiles exactly the writer schemas the first run compiled, at
every point of the stream, aliases included: replaying a stretch from before a rename never gives
an old shape a name from its future. Kept in Kafka next to the records it describes, like snapshot
progress; the registry's previous schema would not do (it is the newest, not the one at the
restart position, and registry-less mode has none), nor would Postgres (its catalog is the present).

Relations are matched by ``rel_id`` (a table rename keeps it) and columns by name through the
shape of the table's last event. Pure: no I/O; the publisher persists ``record``'s output.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from pgbridge.decode.ddl import TableShape, shape_of
from pgbridge.decode.messages import Relation
from pgbridge.encode.naming import avro_name

# Versions of one table kept in its progress record: the newest below the confirmed LSN is all a
# restart needs; a few more cover DDL decoded but not yet confirmed.
MAX_VERSIONS: Final = 16
RECORD_KEY: Final = "schema"  # {slot}/schema/{relid}

Position = tuple[int, int]
"""(commit LSN of the transaction, LSN of the DDL message): where a version took effect."""


class ColumnAliases(Protocol):
    """What the encoder asks when it compiles a Relation's writer schemas."""

    def aliases(self, relation: Relation) -> Mapping[str, tuple[str, ...]]: ...


@dataclass(frozen=True, slots=True)
class TableVersion:
    """A table's shape after one DDL event, and every column's earlier names."""

    position: Position
    shape: TableShape | None  # None: the table was dropped
    former: Mapping[int, tuple[str, ...]]

    def to_json(self) -> dict[str, Any]:
        return {"commit_lsn": self.position[0], "lsn": self.position[1],
                "shape": None if self.shape is None else self.shape.to_json(),
                "former": {str(attnum): list(names) for attnum, names in self.former.items()}}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> TableVersion:
        shape = obj.get("shape")
        return cls(position=(int(obj["commit_lsn"]), int(obj["lsn"])),
                   shape=None if shape is None else shape_of(shape),
                   former={int(attnum): tuple(str(n) for n in names) for attnum, names in obj["former"].items()})


def next_former(previous: Mapping[int, tuple[str, ...]], before: TableShape | None,
                after: TableShape | None) -> dict[int, tuple[str, ...]]:
    """Earlier names per attribute number after one command: a renamed column gains its old name
    in front (its current name never counts), a dropped one loses its history."""
    if after is None:
        return {}
    old = {} if before is None else before.by_attnum()
    former: dict[int, tuple[str, ...]] = {}
    for column in after.columns:
        names = previous.get(column.attnum, ())
        was = old.get(column.attnum)
        if was is not None and was.name != column.name:
            names = (was.name, *names)
        names = tuple(dict.fromkeys(n for n in names if n != column.name))
        if names:
            former[column.attnum] = names
    return former


def field_aliases(former: tuple[str, ...], field: str) -> tuple[str, ...]:
    """The Avro aliases of a field named ``field`` whose column was called ``former`` before:
    each earlier name as the Avro name it had as a field, without repeats or the field's own."""
    return tuple(dict.fromkeys(a for a in (avro_name(name) for name in former) if a != field))


@dataclass(slots=True)
class _Table:
    current: TableVersion | None = None  # in force at the stream's position
    versions: list[TableVersion] = field(default_factory=list)  # persisted, oldest first


class RenameHistory:
    """Every table's rename history at the stream's position (``ColumnAliases`` for the encoder)."""

    def __init__(self) -> None:
        self._tables: dict[int, _Table] = {}

    @classmethod
    def load(cls, records: Mapping[str, Mapping[str, Any]], slot: str, confirmed_lsn: int | None) -> RenameHistory:
        """The history in force at ``confirmed_lsn`` (``None``: a slot not created yet, so the
        newest) from the progress records of ``slot``."""
        history = cls()
        prefix = f"{slot}/{RECORD_KEY}/"
        for key, value in records.items():
            if not key.startswith(prefix):
                continue
            versions = sorted((TableVersion.from_json(v) for v in value["versions"]), key=lambda v: v.position)
            due = [v for v in versions if confirmed_lsn is None or v.position[0] < confirmed_lsn]
            history._tables[int(key[len(prefix):])] = _Table(current=due[-1] if due else None, versions=versions)
        return history

    def current(self, relid: int) -> TableVersion | None:
        table = self._tables.get(relid)
        return None if table is None else table.current

    def apply(self, relid: int, before: TableShape | None, after: TableShape | None,
              position: Position) -> TableVersion:
        """Take one DDL event (``before`` as completed by the caller); returns the new version,
        which replaces any persisted one at or after ``position`` (a replay writes them again)."""
        table = self._tables.setdefault(relid, _Table())
        previous = {} if table.current is None else table.current.former
        version = TableVersion(position=position, shape=after, former=next_former(previous, before, after))
        table.current = version
        table.versions = [*(v for v in table.versions if v.position < position), version][-MAX_VERSIONS:]
        return version

    def record(self, relid: int) -> dict[str, Any]:
        """The progress record of ``relid``'s history (key ``record_key``)."""
        table = self._tables[relid]
        return {"relid": relid, "versions": [v.to_json() for v in table.versions]}

    @staticmethod
    def record_key(slot: str, relid: int) -> str:
        return f"{slot}/{RECORD_KEY}/{relid}"

    def aliases(self, relation: Relation) -> dict[str, tuple[str, ...]]:
        """Column name → the earlier names of that column (raw Postgres names, most recent first),
        for the columns of ``relation`` the table's current shape knows."""
        version = self.current(relation.rel_id)
        if version is None or version.shape is None or not version.former:
            return {}
        attnums = {column.name: column.attnum for column in version.shape.columns}
        out: dict[str, tuple[str, ...]] = {}
        for column in relation.columns:
            attnum = attnums.get(column.name)
            names = version.former.get(attnum) if attnum is not None else None
            if names:
                out[column.name] = names
        return out
