"""What the mirror remembers between micro-batches, and the transaction-consistent cut. Pure.

Positions. Every change has the position ``(commit_lsn, total_order)``, identical in every copy
pgbridge ever publishes of it (snapshot reads: ``(snapshot LSN, 0)``). Per Kafka partition,
pgbridge writes in position order, and a copy re-published after a crash comes later in the
partition than the original. So per table and partition the mirror keeps the highest position it
applied (``TableProgress.partitions``), and a change at or below it is a duplicate — except
snapshot reads, which all share one position and are applied while they equal it.

The cut. Consistent mode applies a transaction only when every one of its events has been read:
``{prefix}.transactions`` END records (in commit order) carry per-table event counts, and
``consistent_cut`` walks them in order, stopping at the first transaction some of whose events
are still missing. Everything at or below the returned commit LSN is complete, so applying exactly
that prefix leaves the mirror in a state Postgres had.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

Position = tuple[int, int]
"""``(commit_lsn, total_order)``."""


METADATA_KEY = "pgbridge"


@dataclass
class TableProgress:
    """The job's progress on one table, kept in the ``userMetadata`` of each Delta commit it makes
    (``delta.last_progress`` reads it back): no file beside the table."""

    key_fields: list[str] = field(default_factory=list)
    schema_id: str | None = None  # writer schema of the newest change applied
    partitions: dict[str, Position] = field(default_factory=dict)  # partition → highest position applied
    truncated_at: Position | None = None
    app: str | None = None  # the job (its checkpoint) that made the commit
    batch: int | None = None  # the micro-batch that made it
    cut: int | None = None  # consistent mode: every transaction with commit LSN <= cut is applied
    # the ``_pgbridge/pending`` table only: records it holds past the cut (``None``: not recorded,
    # a job before this field), so a micro-batch skips reading it, and an empty one stays a
    # commit without data (``delta_tables.mark``), when it is known to be empty
    pending: int | None = None

    def to_metadata(self) -> str:
        return json.dumps({METADATA_KEY: {
            "key_fields": self.key_fields, "schema_id": self.schema_id,
            "partitions": {p: list(v) for p, v in sorted(self.partitions.items())},
            "truncated_at": list(self.truncated_at) if self.truncated_at else None,
            "app": self.app, "batch": self.batch, "cut": self.cut, "pending": self.pending}}, sort_keys=True)

    @staticmethod
    def from_metadata(text: str) -> TableProgress:
        """Raises ``KeyError`` for metadata some other writer left (not the job's)."""
        raw = json.loads(text)[METADATA_KEY]
        truncated = raw.get("truncated_at")
        return TableProgress(key_fields=list(raw.get("key_fields") or []), schema_id=raw.get("schema_id"),
                             partitions={p: (int(v[0]), int(v[1])) for p, v in (raw.get("partitions") or {}).items()},
                             truncated_at=(int(truncated[0]), int(truncated[1])) if truncated else None,
                             app=raw.get("app"), batch=None if raw.get("batch") is None else int(raw["batch"]),
                             cut=None if raw.get("cut") is None else int(raw["cut"]),
                             pending=None if raw.get("pending") is None else int(raw["pending"]))

    @staticmethod
    def found_in(text: str | None) -> TableProgress | None:
        """The job's progress in a commit's metadata, ``None`` when the commit has none (another
        writer's, or an upkeep commit of a format that keeps no metadata)."""
        if not text:
            return None
        try:
            return TableProgress.from_metadata(text)
        except (ValueError, KeyError, TypeError):
            return None

    def applied(self, app: str, batch: int) -> bool:
        """True if this job already committed micro-batch ``batch`` (or a later one) to the table."""
        return self.app == app and self.batch is not None and self.batch >= batch

    def advance(self, partition_max: Mapping[int, Position], truncate: Position | None) -> None:
        for partition, position in partition_max.items():
            current = self.partitions.get(str(partition))
            if current is None or position > current:
                self.partitions[str(partition)] = position
        if truncate is not None and (self.truncated_at is None or truncate > self.truncated_at):
            self.truncated_at = truncate


def new_changes_condition(progress: TableProgress) -> str:
    """Spark SQL predicate over ``partition``, ``commit_lsn``, ``total_order``, ``transaction``:
    true for changes not applied yet (see the module docstring)."""
    clauses = []
    for partition, (lsn, order) in sorted(progress.partitions.items()):
        after = f"(commit_lsn > {lsn} OR (commit_lsn = {lsn} AND total_order > {order}))"
        same_snapshot = f"(transaction IS NULL AND commit_lsn = {lsn} AND total_order = {order})"
        clauses.append(f"(partition = {int(partition)} AND ({after} OR {same_snapshot}))")
    known = ", ".join(str(int(p)) for p in sorted(progress.partitions))
    if known:
        clauses.append(f"(partition NOT IN ({known}))")
    condition = " OR ".join(clauses) if clauses else "true"
    if progress.truncated_at is not None:
        lsn, order = progress.truncated_at
        condition = f"({condition}) AND (commit_lsn > {lsn} OR (commit_lsn = {lsn} AND total_order >= {order}))"
    return condition


@dataclass(frozen=True)
class TransactionEnd:
    commit_lsn: int
    counts: Mapping[str, int]  # data collection "schema.table" → events


def consistent_cut(cut: int, ends: Iterable[TransactionEnd], read_counts: Mapping[tuple[int, str], int],
                   tables: set[str] | None) -> int:
    """The highest commit LSN through which every transaction's events have all been read.

    ``cut`` is the previous cut; ``ends`` the END records read so far (any order, duplicates
    allowed); ``read_counts`` maps ``(commit_lsn, "schema.table")`` to distinct events read;
    ``tables`` limits the check to mirrored tables (``None``: all).
    """
    by_lsn: dict[int, TransactionEnd] = {}
    for end in ends:
        if end.commit_lsn > cut:
            by_lsn[end.commit_lsn] = end
    for lsn in sorted(by_lsn):
        end = by_lsn[lsn]
        complete = all(read_counts.get((lsn, table), 0) >= count for table, count in end.counts.items()
                       if tables is None or table in tables)
        if not complete:
            break
        cut = lsn
    return cut


def past_cut(cut: int, read_counts: Mapping[tuple[int, str], int], boundary_lsns: Iterable[int]) -> int:
    """Records of a micro-batch that wait for a later one: its transactions' events (``read_counts``
    as for ``consistent_cut``) and transaction boundaries committed after ``cut``."""
    return (sum(n for (lsn, _), n in read_counts.items() if lsn > cut)
            + sum(1 for lsn in boundary_lsns if lsn > cut))
