"""Which tables are captured: ``postgres.table_include`` / ``table_exclude`` regular expressions.

Debezium users select tables with ``table.include.list`` / ``table.exclude.list``; these are the
same idea. Each pattern is a Python regular expression matched in full against ``schema.table``
written as the catalog stores the names, unquoted: ``public.Order Items`` for the table psql shows
as ``public."Order Items"``, ``public.orders`` for one created as ``Public.Orders`` (Postgres
folded it). A table is selected when it matches an include pattern (no include list: every table)
and no exclude pattern.

Selection is resolved against the catalog to what the publication gets: ordinary and partitioned
tables only, never a system schema, and never a partition on its own, because a partitioned table
is one table (the contract) captured through its root. Pure functions, no I/O (the catalog query
is in source/publication.py). Built from the ``postgres`` section (``pattern_selection``,
``stream_filter``), whose validation already refused a pattern that does not compile.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from pgbridge.config import PostgresConfig

# Schemas whose tables are Postgres' own; never captured whatever the patterns say.
SYSTEM_SCHEMAS: Final = frozenset({"pg_catalog", "information_schema", "pg_toast"})
# Per-session temporary schemas (pg_temp_3, pg_toast_temp_3): their tables cannot be published.
_TEMPORARY_SCHEMA: Final = re.compile(r"pg_(toast_)?temp_\d+")


def is_system_schema(schema: str) -> bool:
    return schema in SYSTEM_SCHEMAS or _TEMPORARY_SCHEMA.fullmatch(schema) is not None


@dataclass(slots=True, eq=False)
class TableSelection:
    """Include (``None``: everything) then exclude, each pattern matched in full; keeps a cache of
    the answers by name (not frozen for that reason)."""

    include: tuple[re.Pattern[str], ...] | None
    exclude: tuple[re.Pattern[str], ...] = ()
    names: frozenset[tuple[str, str]] | None = None  # postgres.tables: exact (schema, table) pairs
    _seen: dict[tuple[str, str], bool] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_patterns(cls, include: Iterable[str] | None, exclude: Iterable[str] = ()) -> TableSelection:
        return cls(include=None if include is None else tuple(re.compile(p) for p in include),
                   exclude=tuple(re.compile(p) for p in exclude))

    @classmethod
    def from_names(cls, tables: Iterable[tuple[str, str]]) -> TableSelection:
        """Exactly these ``(schema, table)`` pairs (``postgres.tables``), no pattern involved."""
        return cls(include=(), names=frozenset(tables))

    def matches(self, schema: str, table: str) -> bool:
        """Whether ``schema.table`` (catalog names, unquoted) is selected. Remembered per name: the
        in-stream filter asks once per change."""
        known = self._seen.get((schema, table))
        if known is not None:
            return known
        name = f"{schema}.{table}"
        if self.names is not None:
            selected = (schema, table) in self.names
        else:
            selected = ((self.include is None or any(p.fullmatch(name) for p in self.include))
                        and not any(p.fullmatch(name) for p in self.exclude))
        self._seen[(schema, table)] = selected
        return selected

    def describe(self) -> str:
        """The patterns as configured, for error messages."""
        if self.names is not None:
            return "postgres.tables " + ", ".join(f"{schema}.{table}" for schema, table in sorted(self.names))
        include = "(every table)" if self.include is None else ", ".join(p.pattern for p in self.include)
        text = f"postgres.table_include {include}"
        if self.exclude:
            text += f", postgres.table_exclude {', '.join(p.pattern for p in self.exclude)}"
        return text


def pattern_selection(pg: PostgresConfig) -> TableSelection | None:
    """``table_include`` / ``table_exclude`` compiled; ``None`` when neither is set."""
    if pg.table_include is None and not pg.table_exclude:
        return None
    return TableSelection.from_patterns(pg.table_include, pg.table_exclude)


def stream_filter(pg: PostgresConfig) -> TableSelection | None:
    """What the in-stream filter keeps (assemble/capture.py): the patterns; or ``postgres.tables``
    when the publication may hold more (``all_tables``, ``disabled``); else ``None`` (with
    ``filtered`` and ``postgres.tables`` the publication is used as it is, as before)."""
    patterns = pattern_selection(pg)
    if patterns is not None:
        return patterns
    if pg.tables is not None and pg.publication_mode != "filtered":
        return TableSelection.from_names(pg.table_pairs or [])
    return None


@dataclass(frozen=True, slots=True)
class CatalogTable:
    """One row of ``pg_class`` that could be published."""

    schema: str
    name: str
    partitioned: bool  # relkind 'p'
    is_partition: bool  # relispartition: published through its root, never alone


def select_tables(catalog: Iterable[CatalogTable], selection: TableSelection) -> list[tuple[str, str]]:
    """The ``(schema, table)`` pairs the publication gets, sorted: selected tables that are not in
    a system schema and not partitions (a partition's rows are captured through its root)."""
    return sorted((t.schema, t.name) for t in catalog
                  if not t.is_partition and not is_system_schema(t.schema) and selection.matches(t.schema, t.name))
