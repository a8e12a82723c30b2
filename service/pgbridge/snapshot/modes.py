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

``open_slot`` and ``create_slot`` carry the decision out on the slot at start-up; the session runs
the initial snapshot itself (snapshot/initial.py) when the action says so.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from typing import Final, Literal

import psycopg

from pgbridge.decode.messages import Relation
from pgbridge.encode.envelope import ChangeEncoder
from pgbridge.errors import SlotInUse
from pgbridge.lsn import format_lsn
from pgbridge.publish.topics import TopicManager
from pgbridge.source import slots
from pgbridge.source.connection import ReplicationConnection
from pgbridge.source.monitor import SlotIdentity
from pgbridge.source.selection import TableSelection

log = logging.getLogger(__name__)
# The start-up lines below were the session's before they moved here; they keep its logger, the name
# operators and log queries know them by.
session_log = logging.getLogger("pgbridge.pipeline")

SqlConn = psycopg.Connection[tuple[object, ...]]

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
    (``schema.table``: the outbox tables, whose rows never reach a table topic) are left out. The
    topics are logged once all are ready."""
    topics = []
    for schema, table in slots.published_tables(conn, publication, selection):
        if f"{schema}.{table}" in skip:
            continue
        relation = slots.relation_from_catalog(conn, schema, table, publication)
        topics.append(prepare(relation))
    session_log.info("snapshot.mode=no_data: topics and writer schemas published, no rows",
                     extra={"topics": topics})
    return topics


def drop_pending_slot(conn: SqlConn, slot: str) -> None:
    """Drop the pending snapshot slot of ``slot`` if there is one: once ``slot`` exists, or is
    created without a snapshot, no initial snapshot will resume through it."""
    pending = slots.pending_slot(slot)
    if slots.slot_info(conn, pending) is not None:
        slots.drop_slot(conn, pending)


def open_slot(conn: SqlConn, slot: str, mode: SnapshotMode, *, database: str, identity: SlotIdentity) -> StartAction:
    """Decide what start-up does with ``slot`` (``decide_start``) and settle the slot as far as that
    needs no new one: an existing slot is checked (ours, not in use, not moved by someone else) and
    gives ``STREAM``; an invalidated one that ``when_needed`` starts over from is dropped first.
    Returns the action that creates a missing slot, or ``STREAM``; ``initial_only`` with the slot
    already there raises ``SnapshotOnlyFinished``."""
    info = slots.slot_info(conn, slot)
    action = decide_start(mode, slot_exists=info is not None, wal_status=None if info is None else info.wal_status)
    if info is not None and action is StartAction.RECREATE_AND_SNAPSHOT:
        session_log.warning("replication slot was invalidated (the WAL it needs was removed); snapshot.mode="
                            "when_needed drops it and takes a new initial snapshot",
                            extra={"slot": slot, "wal_status": info.wal_status,
                                   "restart_lsn": None if info.restart_lsn is None else format_lsn(info.restart_lsn)})
        slots.drop_slot(conn, slot)
        info = None
    if info is not None:
        slots.validate_slot(info, database=database)
        if info.active:
            raise SlotInUse(f"replication slot {slot} is in use by pid {info.active_pid}; "
                            "waiting for it to be released")
        identity.verify_on_open(slot, info.confirmed_flush_lsn)
        drop_pending_slot(conn, slot)
        if action is StartAction.EXIT:
            raise SnapshotOnlyFinished(f"replication slot {slot} exists, so its initial snapshot was taken "
                                       "before; snapshot.mode=initial_only has nothing to do")
        return action
    identity.missing(slot)
    return action


def create_slot(conn: SqlConn, repl: ReplicationConnection, slot: str, *, two_phase: bool) -> None:
    """``never`` and ``no_data``: create ``slot`` now, at the server's position, exporting no
    snapshot (a pending snapshot slot of an earlier mode is dropped first)."""
    drop_pending_slot(conn, slot)
    created = repl.create_slot(slot, two_phase=two_phase, export_snapshot=False)
    session_log.info("slot created", extra={"slot": created.name,
                                            "consistent_point": format_lsn(created.consistent_point)})


def prepare_topic(encoder: ChangeEncoder, topics: TopicManager, relation: Relation) -> str:
    """``no_data``: the table's topic exists and its writer schemas are published (compiling the
    encoder's plan registers them, exactly as the first row would)."""
    topic = encoder.topic_for(relation)
    topics.ensure(topic)
    encoder.table_of(relation)
    return topic


def initial_only_finished(conn: SqlConn, slot: str, table_count: int) -> SnapshotOnlyFinished:
    """``initial_only`` after its snapshot: the stop, naming the consistent point the slot is kept at."""
    created_slot = slots.slot_info(conn, slot)
    point = None if created_slot is None or created_slot.confirmed_flush_lsn is None \
        else format_lsn(created_slot.confirmed_flush_lsn)
    return SnapshotOnlyFinished(f"initial snapshot of {table_count} tables complete; slot {slot} kept at "
                                f"its consistent point {point}: start with another snapshot.mode to stream "
                                "from there")
