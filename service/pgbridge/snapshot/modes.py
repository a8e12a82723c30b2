"""``snapshot.mode``: at start-up, whether pgbridge snapshots, only creates the slot, or streams.

The decision is a pure function of the mode and of the slot as ``pg_replication_slots`` shows it
(``decide_start``), so every mode's behaviour is one row of a table:

| slot \\ mode          | initial      | initial_only        | when_needed          | no_data       | never  |
| -------------------- | ------------ | ------------------- | -------------------- | ------------- | ------ |
| missing              | snapshot     | snapshot, then exit | snapshot             | schemas       | create |
| usable               | stream       | exit (done before)  | stream               | stream        | stream |
| invalidated (`lost`) | fail (clear) | fail (clear)        | drop, snapshot again | fail (clear)  | fail   |

``initial_only`` keeps the slot it created at the snapshot's consistent point ``C``: a later start
with any streaming mode streams from ``C``, which is exactly where the snapshot's rows stop, so
nothing is lost or repeated. ``no_data`` creates the slot and, before streaming, makes every
published table's topic and writer schemas exist, so a consumer can subscribe and decode before the
first change (Debezium's ``no_data``, formerly ``schema_only``). ``when_needed`` recovers from an
invalidated slot by starting over; the other modes refuse it, since streaming from a new slot would
silently skip the changes whose WAL is gone.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from typing import Final, Literal

import psycopg

from pgbridge.decode.messages import Relation
from pgbridge.source import slots
from pgbridge.source.selection import TableSelection

log = logging.getLogger(__name__)

SnapshotMode = Literal["initial", "initial_only", "when_needed", "no_data", "never"]

# wal_status of a slot whose WAL was removed (max_slot_wal_keep_size, or any other invalidation on
# Postgres 16+, which reports every invalidated slot as lost).
WAL_STATUS_LOST: Final = "lost"


class StartAction(enum.Enum):
    """What the session does with the slot before it streams."""

    STREAM = "stream"  # the slot exists and can stream: validate it and stream
    SNAPSHOT = "snapshot"  # no slot: create it through the initial snapshot
    RECREATE_AND_SNAPSHOT = "recreate_and_snapshot"  # invalidated slot: drop it, then SNAPSHOT
    CREATE_WITH_SCHEMAS = "create_with_schemas"  # no slot: create it, announce topics and schemas
    CREATE = "create"  # no slot: create it, nothing else
    EXIT = "exit"  # initial_only with the slot already there: the snapshot was taken before


class SnapshotOnlyFinished(Exception):
    """``snapshot.mode=initial_only`` is done: the process stops (exit 0) without streaming. Not a
    ``PgbridgeError``: nothing failed, and no handler of errors may treat it as one."""


def decide_start(mode: SnapshotMode, *, slot_exists: bool, wal_status: str | None) -> StartAction:
    """The start-up action for ``mode`` and the slot's state (see the table in the module docstring).

    A lost slot is ``STREAM`` for every mode but ``when_needed``: ``slots.validate_slot`` then
    refuses it with the error that names the fix."""
    if slot_exists:
        if mode == "when_needed" and wal_status == WAL_STATUS_LOST:
            return StartAction.RECREATE_AND_SNAPSHOT
        if mode == "initial_only" and wal_status != WAL_STATUS_LOST:
            return StartAction.EXIT
        return StartAction.STREAM
    if mode == "never":
        return StartAction.CREATE
    if mode == "no_data":
        return StartAction.CREATE_WITH_SCHEMAS
    return StartAction.SNAPSHOT


def snapshots_added_tables(mode: SnapshotMode) -> bool:
    """Whether a table added to the publication at run time gets an incremental snapshot: in the
    modes that snapshot existing rows at all."""
    return mode in ("initial", "initial_only", "when_needed")


def announce_tables(conn: psycopg.Connection[tuple[object, ...]], publication: str,
                    prepare: Callable[[Relation], str], selection: TableSelection | None = None,
                    skip: frozenset[str] = frozenset()) -> list[str]:
    """``no_data``: for every captured table (published, and selected by ``selection``, the
    ``postgres.table_include``/``table_exclude`` filter), ``prepare`` its Relation (create the topic,
    publish the writer schemas); returns the topics. The Relation is the one the snapshots build from the
    catalog, which encodes to the same writer schema as the one pgoutput sends. Tables in ``skip``
    (``schema.table``: the outbox tables, whose rows never reach a table topic) are left out."""
    topics = []
    for schema, table in slots.published_tables(conn, publication, selection):
        if f"{schema}.{table}" in skip:
            continue
        relation = slots.relation_from_catalog(conn, schema, table, publication)
        topics.append(prepare(relation))
    return topics
