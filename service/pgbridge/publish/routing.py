"""Whether a change is published: ``kafka.skipped_operations`` and ``kafka.tombstones_on_delete``.

Pure decisions the dispatcher applies before anything is produced (docs/routing.md):

* a skipped operation (``c``, ``u``, ``d``, ``t``) produces nothing and takes no place in its
  transaction's order: ``transaction.total_order``, ``data_collection_order`` and the END record's
  ``event_count`` / ``data_collections`` count published events only, so a consumer that waits for
  a transaction's announced count (the Spark consistent mirror) is never left waiting for an event
  that will not come. Its LSN is confirmed as any other's: the transaction still seals its unit.
* without tombstones, a keyed delete is its delete record alone. The tombstone of an update that
  changed the key stays: it is the only record that retires the old key under compaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, NamedTuple

from pgbridge.config import KafkaConfig
from pgbridge.encode.envelope import OutRecord

OPERATIONS: Final = ("c", "u", "d", "t")


class PublishFilter(NamedTuple):
    """The ops never published, and whether a keyed delete is followed by its tombstone."""

    skipped: frozenset[str] = frozenset()
    tombstones_on_delete: bool = True

    @classmethod
    def of(cls, config: KafkaConfig) -> PublishFilter:
        return cls(frozenset(config.skipped_operations), config.tombstones_on_delete)

    def skips(self, op: str) -> bool:
        return op in self.skipped


def row_records(records: list[OutRecord], op: str, tombstones_on_delete: bool) -> Sequence[OutRecord]:
    """The records of one encoded row change that are published: a delete's trailing tombstone
    (``encode_row`` puts it last, after the delete record) only with ``tombstones_on_delete``."""
    if op == "d" and not tombstones_on_delete and len(records) == 2 and records[1].value is None:
        return records[:1]
    return records
