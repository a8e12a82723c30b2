"""The in-stream table filter: changes of tables that are in the stream but not selected are dropped.

A publication can carry more tables than ``postgres.table_include`` / ``table_exclude`` select: an
existing publication made by a DBA, one created ``FOR ALL TABLES`` (``postgres.publication_mode:
all_tables``) or one pgbridge may not alter (``disabled``). The assemble stage is the earliest that
knows the relation of a change, so the filter runs here, before a streamed or prepared transaction
buffers (or spills) a change nobody will publish. Dropped changes never reach the encoder, so a
transaction's ``total_order`` counts only what is published, as if the table were not in the
publication at all. Pure: no I/O, only a log line the first time each table is dropped.
"""

from __future__ import annotations

import logging

from pgbridge.assemble.spill import BufferedEvent
from pgbridge.assemble.units import RowChange, TruncateChange
from pgbridge.decode.messages import Relation
from pgbridge.source.selection import TableSelection

log = logging.getLogger(__name__)


class CaptureFilter:
    """Keeps the changes of selected tables; counts the dropped ones per ``schema.table``."""

    def __init__(self, selection: TableSelection) -> None:
        self._selection = selection
        self.dropped: dict[str, int] = {}

    def selects(self, relation: Relation) -> bool:
        """Whether ``relation``'s table is selected (no count, no log line)."""
        return self._selection.matches(relation.namespace, relation.name)

    def _selected(self, relation: Relation) -> bool:
        if self.selects(relation):
            return True
        name = f"{relation.namespace}.{relation.name}"
        count = self.dropped.get(name, 0)
        if count == 0:
            log.info("dropping changes of a table that is in the stream but not selected",
                     extra={"table": name, "selection": self._selection.describe()})
        self.dropped[name] = count + 1
        return False

    def keep(self, event: BufferedEvent) -> BufferedEvent | None:
        """``event``, or ``None`` when it is a change of an unselected table. A TRUNCATE of several
        tables keeps only the selected ones (``None`` if there are none)."""
        if isinstance(event, RowChange):
            return event if self._selected(event.relation) else None
        if isinstance(event, TruncateChange):
            kept = tuple(relation for relation in event.relations if self._selected(relation))
            if len(kept) == len(event.relations):
                return event
            return TruncateChange(relations=kept, options=event.options, lsn=event.lsn) if kept else None
        return event
