"""Schema changes as events (``postgres.ddl_events``): a DDL message → ``{prefix}.schema_changes``.

```
 MessageChange(prefix pgbridge.ddl) ─▶ parse_ddl_message ─▶ this pgbridge's table? ─┐ no: ignored,
   (the dispatcher hands it to          (decode/ddl.py)      (publication, selection) │ no place in
    SchemaChanges.take, never to                                                    ▼ the order
    {prefix}.messages)       RenameHistory.apply ─▶ encoder.forget(relid) ─▶ records (in the transaction's unit):
                             (encode/renames.py)    (next Relation: aliases)   history, then the event
```
``column_changes`` says what one command did, by attribute number: a column whose number is new was
added, one whose number is gone was dropped, one whose name changed was renamed (with the aliases
its field carries from then on), one whose type or modifier changed was retyped (with whether old
values convert exactly: encode/retype.py); a table whose name or schema changed was renamed.
``schema_change_value`` lays the record out (``schemas/schema_change.avsc``).

Both records of a DDL event are produced in the unit of the DDL's transaction, at its place in the
transaction's order: the event reaches Kafka in commit order with the row changes around it, and
the history record (``{slot}/schema/{relid}`` on the progress topic, JSON) is acknowledged (under
exactly-once: committed) before the confirmed LSN can pass the DDL, which is what a restart needs
(encode/renames.py). A transaction exactly-once mode skips (already whole in Kafka) still goes
through ``take``: its Relations come next. A command on a table of another publication or outside
the selection is ignored (the trigger serves every publication of the database).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from pgbridge.assemble.units import MessageChange
from pgbridge.decode.ddl import DDL_FENCE, DdlCommand, TableShape, parse_ddl_message
from pgbridge.encode.envelope import ChangeEncoder, EventContext, OutRecord
from pgbridge.encode.renames import RenameHistory, TableVersion, field_aliases
from pgbridge.encode.retype import converts_exactly
from pgbridge.encode.schemas import Schema, standalone_schema
from pgbridge.lsn import Lsn

log = logging.getLogger(__name__)

KEY_SCHEMA: Final = "schema_change_key"
VALUE_SCHEMA: Final = "schema_change"

COLUMN_ADDED: Final = "column_added"
COLUMN_DROPPED: Final = "column_dropped"
COLUMN_RENAMED: Final = "column_renamed"
COLUMN_RETYPED: Final = "column_retyped"
TABLE_CREATED: Final = "table_created"
TABLE_DROPPED: Final = "table_dropped"
TABLE_RENAMED: Final = "table_renamed"


def _change(change: str, attnum: int | None = None, name_before: str | None = None, name_after: str | None = None,
            type_before: str | None = None, type_after: str | None = None, converts: bool | None = None,
            aliases: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"change": change, "attnum": attnum, "name_before": name_before, "name_after": name_after,
            "type_before": type_before, "type_after": type_after, "converts_exactly": converts,
            "aliases": list(aliases)}


def qualified(shape: TableShape) -> str:
    return f"{shape.schema}.{shape.table}"


def column_changes(command: str, before: TableShape | None, after: TableShape | None,
                   former: Mapping[int, tuple[str, ...]]) -> list[dict[str, Any]]:
    """The ``changes`` of one command, table-level first, then by attribute number. ``former`` is
    the rename history after the command (encode/renames.py), for a renamed field's aliases.
    Without ``before`` (a table the trigger met first now) only a ``CREATE`` says something."""
    if after is None:
        return [] if before is None else [_change(TABLE_DROPPED, name_before=qualified(before))]
    if before is None:
        return [_change(TABLE_CREATED, name_after=qualified(after))] if command.startswith("CREATE") else []
    out = []
    if (before.schema, before.table) != (after.schema, after.table):
        out.append(_change(TABLE_RENAMED, name_before=qualified(before), name_after=qualified(after)))
    old, new = before.by_attnum(), after.by_attnum()
    for attnum in sorted(old.keys() | new.keys()):
        was, now = old.get(attnum), new.get(attnum)
        if now is None:
            assert was is not None
            out.append(_change(COLUMN_DROPPED, attnum, name_before=was.name, type_before=was.type))
        elif was is None:
            out.append(_change(COLUMN_ADDED, attnum, name_after=now.name, type_after=now.type))
        else:
            if was.name != now.name:
                out.append(_change(COLUMN_RENAMED, attnum, was.name, now.name, was.type, now.type,
                                   aliases=field_aliases(former.get(attnum, ()), now.name)))
            if (was.type_oid, was.typmod) != (now.type_oid, now.typmod):
                out.append(_change(COLUMN_RETYPED, attnum, was.name, now.name, was.type, now.type,
                                   converts=converts_exactly(was, now)))
    return out


def _shape(shape: TableShape | None, topic_of: Callable[[str, str], str]) -> dict[str, Any] | None:
    if shape is None:
        return None
    return {"schema": shape.schema, "table": shape.table, "topic": topic_of(shape.schema, shape.table),
            "replica_identity": shape.replica_identity,
            "columns": [{"attnum": c.attnum, "name": c.name, "pg_type": c.type, "type_oid": c.type_oid,
                         "type_modifier": c.typmod, "not_null": c.not_null, "key": c.key} for c in shape.columns]}


def schema_change_key(command: DdlCommand) -> dict[str, Any]:
    current = command.current
    return {"schema": current.schema, "table": current.table}


def schema_change_value(command: DdlCommand, before: TableShape | None, changes: list[dict[str, Any]], *,
                        database: str, lsn: int, ctx: EventContext,
                        topic_of: Callable[[str, str], str]) -> dict[str, Any]:
    """The record's value: ``before`` as completed by the publisher (the trigger's, else the last
    event's), ``source`` and ``transaction`` as a row change's."""
    current = command.current
    return {"command": command.command, "object_identity": command.identity, "relid": command.relid,
            "before": _shape(before, topic_of), "after": _shape(command.after, topic_of), "changes": changes,
            "source": {"db": database, "schema": current.schema, "table": current.table, "lsn": lsn,
                       "commit_lsn": ctx.commit_lsn, "xid": ctx.xid, "ts_us": ctx.ts_us, "snapshot": False,
                       "origin": ctx.origin},
            "transaction": {"id": f"{ctx.xid}:{ctx.commit_lsn}", "total_order": ctx.total_order,
                            "data_collection_order": ctx.collection_order}}


@dataclass(frozen=True, slots=True)
class TakenChange:
    """A captured DDL event, taken into the history: what ``records`` needs to publish it."""

    command: DdlCommand
    before: TableShape | None  # the trigger's, else the shape of the table's previous event
    version: TableVersion
    lsn: Lsn


class SchemaChanges:
    """One session's rename history and the records of its DDL events (see the module docstring).

    ``captured(schema, table)`` is this pgbridge's table selection; ``history_topic`` and ``slot``
    place the history records (snapshot/progress.py's topic, read back at start)."""

    def __init__(self, *, encoder: ChangeEncoder, history: RenameHistory, publication: str,
                 captured: Callable[[str, str], bool], topic: str, history_topic: str, slot: str) -> None:
        self._encoder = encoder
        self._history = history
        self._publication = publication
        self._captured = captured
        self.topic = topic
        self._history_topic = history_topic
        self._slot = slot
        encoder.column_aliases = history  # writer schemas get their aliases from here

    def _mine(self, command: DdlCommand) -> bool:
        return any(self._publication in shape.publications and self._captured(shape.schema, shape.table)
                   for shape in (command.before, command.after) if shape is not None)

    def take(self, event: MessageChange, commit_lsn: Lsn) -> TakenChange | None:
        """Take a DDL message into the history; ``None`` for the trigger's fence or a table this
        pgbridge does not capture. ``before`` falls back to the shape of the table's previous event
        when the trigger has none (its table is unlogged: a Postgres crash empties it)."""
        if bytes(event.content) == DDL_FENCE:
            return None
        command = parse_ddl_message(event.content, event.lsn)
        if not self._mine(command):
            return None
        before = command.before
        if before is None:
            current = self._history.current(command.relid)
            before = None if current is None else current.shape
        version = self._history.apply(command.relid, before, command.after, (commit_lsn, event.lsn))
        self._encoder.forget(command.relid)
        log.info("schema change", extra={"table": f"{command.current.schema}.{command.current.table}",
                                         "command": command.command, "lsn": event.lsn})
        return TakenChange(command, before, version, event.lsn)

    def records(self, taken: TakenChange, ctx: EventContext) -> list[OutRecord]:
        """The history record, then the event, both for the DDL transaction's unit."""
        command, encoder = taken.command, self._encoder
        history = OutRecord(self._history_topic, RenameHistory.record_key(self._slot, command.relid).encode(),
                            json.dumps(self._history.record(command.relid), separators=(",", ":")).encode())
        changes = column_changes(command.command, taken.before, command.after, taken.version.former)
        value = schema_change_value(command, taken.before, changes, database=encoder.database, lsn=taken.lsn,
                                    ctx=ctx, topic_of=encoder.topic_of)
        return [history, encoder.fixed_record(self.topic, KEY_SCHEMA, schema_change_key(command), VALUE_SCHEMA, value)]


def schema_change_schemas(encoder: ChangeEncoder, topic: str) -> list[tuple[str, str, Schema]]:
    """(topic, subject, schema) of the ``{prefix}.schema_changes`` key and value, as ``run`` registers them."""
    return [(topic, encoder.subject(topic, schema, key=is_key), schema)
            for schema, is_key in ((standalone_schema(KEY_SCHEMA), True), (standalone_schema(VALUE_SCHEMA), False))]
