"""Compare Debezium's events with pgbridge's, event by event, after the documented normalisation.

The input is what each system published, per topic in offset order (one partition each, so commit
order): Debezium's JSON (``json.loads`` of key and value) and pgbridge's decoded Avro. Debezium's
stream is first folded where it models a change differently (a key-changing update is a delete, a
tombstone and a create in Debezium, a tombstone and an update in pgbridge); then both streams must
have the same events in the same order, and each event the same op, key, row images, source
positions and transaction positions. Column values go through ``debezium_values`` (one rule per
type family). The intended differences are rules too, each asserting what Debezium publishes
instead (a sentinel, a placeholder, a type default) and counted in ``Tally.documented``; anything
else is a difference, and ``Tally.differences`` lists them all. docs/migrating-from-debezium.md
documents every rule and why.
"""

from __future__ import annotations

import json
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from tests.support import debezium_values as dv

PLACEHOLDER: Final = "__debezium_unavailable_value"  # unavailable.value.placeholder's default

Converter = Callable[[object], object]

# family → (Debezium JSON → canonical, pgbridge value → canonical)
FAMILIES: Final[Mapping[str, tuple[Converter, Converter]]] = {
    "int": (dv.identity, dv.identity),
    "bool": (dv.identity, dv.identity),
    "text": (dv.identity, dv.identity),
    "uuid": (dv.uuid_text, dv.identity),
    "decimal": (dv.decimal_text, dv.identity),
    "numeric": (dv.numeric_text, dv.identity),
    "float": (dv.floating, dv.identity),
    "bytea": (dv.hex_bytes, dv.identity),
    "date": (dv.epoch_days, dv.identity),
    "time": (dv.micro_time, dv.identity),
    "timestamp": (dv.micro_timestamp, dv.identity),
    "timestamptz": (dv.zoned_timestamp, dv.identity),
    "interval": (dv.iso_interval, dv.identity),
    "array": (dv.int_array, dv.identity),
    "int4range": (dv.range_of(int), dv.identity),
    "tsrange": (dv.range_of(dv.local_timestamp_text), dv.identity),
    "pair": (dv.composite_of((("a", int), ("b", str))), dv.identity),
    "money": (dv.money, lambda v: dv.money_value(str(v))),
    "bits": (dv.bits, lambda v: dv.bits_value(str(v))),
}


# The documented differences (docs/migrating-from-debezium.md, "Intended differences"), by the id
# ``Tally.documented`` counts them under; ``unrepresentable <family> <text>`` adds one per value.
RULES: Final[Mapping[str, str]] = {
    "key-change": "a key-changing update: Debezium d + tombstone + c, pgbridge tombstone + u",
    "index-key": "REPLICA IDENTITY USING INDEX: Debezium keys by the primary key (a delete's is the type "
                 "default), pgbridge by the index",
    "commit-position": "Debezium has no commit LSN: its source.sequence starts with the end of the previous "
                       "commit record, between pgbridge's previous and own commit_lsn",
    "transaction-id": "transaction.id: pgbridge xid:commit_lsn (one id per transaction), Debezium xid:lsn of the event",
    "unchanged-toast": "unchanged TOAST: pgbridge null + unchanged_toast_columns, Debezium a placeholder string",
    "old-key-default": "old-key image: pgbridge null, Debezium the type's default in a NOT NULL column",
    "message-collection-order": "message data_collection_order: pgbridge 0 (no table), Debezium 1",
    "message-commit-time": "non-transactional message: pgbridge no commit time, Debezium the previous commit's",
    "end-message-collection": "END data_collections: Debezium lists a message as a collection, pgbridge does not",
    "unrepresentable": "pgbridge null + the exact text in unrepresentable, Debezium a sentinel in the field "
                       "(for a range: the text)",
}


@dataclass(frozen=True)
class TableSpec:
    """What the comparison needs to know of a table (the test's schema)."""

    name: str
    columns: Mapping[str, str]           # column → type family (a key of FAMILIES)
    key: tuple[str, ...]                 # pgbridge's Kafka key: primary key, else replica identity index
    debezium_key: tuple[str, ...]        # Debezium's Kafka key: the primary key
    identity: tuple[str, ...] | None     # columns of the old-key image; None for REPLICA IDENTITY FULL
    not_null: frozenset[str] = frozenset()


@dataclass
class Tally:
    events: Counter[str] = field(default_factory=Counter)
    fields: int = 0
    documented: Counter[str] = field(default_factory=Counter)
    differences: list[str] = field(default_factory=list)
    key_changes: Counter[tuple[int, str]] = field(default_factory=Counter)  # (xid, table) → folds
    commits: list[int] = field(default_factory=list)  # pgbridge's commit LSNs in order (transactions topic)

    def differ(self, where: str, what: str, ours: object, theirs: object) -> None:
        self.differences.append(f"{where}: {what}: pgbridge {ours!r} vs Debezium {theirs!r}")

    def check(self, where: str, what: str, ours: object, theirs: object) -> None:
        self.fields += 1
        if not dv.same(ours, theirs):
            self.differ(where, what, ours, theirs)

    def expect(self, rule: str, holds: bool, where: str, ours: object, theirs: object) -> None:
        """A documented difference: counted if Debezium and pgbridge show exactly it, else a difference."""
        self.fields += 1
        if holds:
            self.documented[rule] += 1
        else:
            self.differ(where, f"expected the documented difference '{rule}'", ours, theirs)

    def report(self) -> str:
        ops = ", ".join(f"{op}={n}" for op, n in sorted(self.events.items()))
        rules = "".join(f"\n  {n:4d} x {rule}: {RULES[rule.split(' ')[0]]}"
                        for rule, n in sorted(self.documented.items()))
        return (f"compared {sum(self.events.values())} events ({ops}); {self.fields} fields; "
                f"documented differences asserted:{rules}")


@dataclass(frozen=True)
class Side:
    """One published record: its key and value (None: tombstone), and for Debezium the row image
    that pgbridge's key is derived from (tombstones inherit it from the change they follow)."""

    key: Any
    value: Any
    key_image: Mapping[str, Any] | None = None


def fold_debezium(spec: TableSpec, records: Sequence[tuple[Any, Any]], tally: Tally) -> list[Side]:
    """Debezium's table stream in pgbridge's event model.

    A key-changing update is, in Debezium, ``d`` (old key) + tombstone + ``c`` (new key) at the same
    LSN; pgbridge publishes a tombstone for the old key then one ``u`` with both images. Folded:
    tombstone + ``u`` (before of the ``d``, after and key of the ``c``, transaction position of the
    ``d``). Every other record is kept, tombstones taking the row image of the delete before them.
    """
    out: list[Side] = []
    i = 0
    while i < len(records):
        key, value = records[i]
        if (value is not None and value["op"] == "d" and i + 2 < len(records) and records[i + 1][1] is None
                and records[i + 2][1] is not None and records[i + 2][1]["op"] == "c"
                and records[i + 2][1]["source"]["lsn"] == value["source"]["lsn"]
                and records[i + 2][1]["source"]["txId"] == value["source"]["txId"]):
            create = records[i + 2][1]
            tally.key_changes[(int(value["source"]["txId"]), spec.name)] += 1
            tally.documented["key-change"] += 1
            out.append(Side(key, None, value["before"]))
            out.append(Side(records[i + 2][0], {**value, "op": "u", "after": create["after"]}, create["after"]))
            i += 3
            continue
        if value is None:
            out.append(Side(key, None, out[-1].key_image if out else None))
        else:
            out.append(Side(key, value, value["after"] if value["op"] in ("c", "u", "r") else value["before"]))
        i += 1
    return out


def compare_table(spec: TableSpec, ours: Sequence[tuple[Any, Any]], theirs: Sequence[tuple[Any, Any]],
                  tally: Tally) -> None:
    folded = fold_debezium(spec, theirs, tally)
    if len(ours) != len(folded):
        tally.differ(spec.name, "number of records", _ops(ours), _ops([(s.key, s.value) for s in folded]))
        return
    for position, ((our_key, our_value), side) in enumerate(zip(ours, folded, strict=True)):
        where = f"{spec.name}[{position}]"
        tally.events["tombstone" if our_value is None else our_value["op"]] += 1
        _compare_key(spec, where, our_key, side, tally)
        if (our_value is None) != (side.value is None):
            tally.differ(where, "tombstone", our_value, side.value)
        elif our_value is not None:
            _compare_change(spec, where, our_value, side.value, tally)


def _ops(records: Sequence[tuple[Any, Any]]) -> list[str]:
    return ["tombstone" if value is None else str(value["op"]) for _, value in records]


def _compare_key(spec: TableSpec, where: str, our_key: Any, side: Side, tally: Tally) -> None:
    if our_key is None or side.key is None:  # truncates (and keyless tables) have a null key in both
        tally.check(where, "key", our_key, side.key)
        return
    image = side.key_image or {}
    if spec.key != spec.debezium_key:
        # Debezium keys by the primary key even when the replica identity is another unique index,
        # so a delete's key is the primary key's type default (Postgres sent only the index columns)
        tally.expect("index-key",
                     side.key == {c: image.get(c) for c in spec.debezium_key}, f"{where} key", our_key, side.key)
    theirs = {c: _canonical_theirs(spec.columns[c], image.get(c)) for c in spec.key}
    for column in spec.key:
        tally.check(f"{where} key", column, _canonical_ours(spec.columns[column], our_key.get(column)),
                    theirs[column])


def _compare_change(spec: TableSpec, where: str, ours: Mapping[str, Any], theirs: Mapping[str, Any],
                    tally: Tally) -> None:
    tally.check(where, "op", ours["op"], theirs["op"])
    source, their_source = ours["source"], theirs["source"]
    for field_name, their_name in (("db", "db"), ("schema", "schema"), ("table", "table"), ("lsn", "lsn"),
                                   ("xid", "txId"), ("ts_us", "ts_us"), ("origin", "origin")):
        tally.check(where, f"source.{field_name}", source[field_name], their_source[their_name])
    tally.check(where, "source.snapshot", str(source["snapshot"]).lower(), their_source["snapshot"])
    _compare_transaction(where, ours, theirs, tally)
    _compare_commit_position(where, source["commit_lsn"], their_source["sequence"], tally)
    for image in ("before", "after"):
        _compare_image(spec, where, image, ours, theirs, tally)


def _compare_commit_position(where: str, commit_lsn: int, sequence: str, tally: Tally) -> None:
    """Debezium's events carry no commit LSN. ``source.sequence`` is ``[last commit, lsn]``, the
    first being the end LSN of the commit record of the transaction before this one (null for the
    first transaction after the connector started): it must lie after pgbridge's ``commit_lsn`` of
    the previous transaction and not after this one's. That checks both systems agree on which
    transaction precedes which, and on where each commits."""
    previous_end = json.loads(sequence)[0]
    index = bisect_left(tally.commits, commit_lsn)
    if index == len(tally.commits) or tally.commits[index] != commit_lsn:
        tally.differ(where, "commit_lsn not on the transactions topic", commit_lsn, sequence)
    elif previous_end is None:  # Debezium's first transaction since it started: must be pgbridge's first
        tally.check(where, "position of the first transaction", index, 0)
    elif index == 0:
        tally.differ(where, "a commit before pgbridge's first transaction", None, sequence)
    else:
        tally.expect("commit-position", tally.commits[index - 1] < int(previous_end) <= commit_lsn,
                     f"{where} source.commit_lsn", (tally.commits[index - 1], commit_lsn), sequence)


def _compare_transaction(where: str, ours: Mapping[str, Any], theirs: Mapping[str, Any], tally: Tally) -> None:
    our_tx, their_tx = ours["transaction"], theirs["transaction"]
    if our_tx is None or their_tx is None:
        tally.check(where, "transaction", our_tx, their_tx)
        return
    tally.check(where, "transaction.total_order", our_tx["total_order"], their_tx["total_order"])
    source, their_source = ours["source"], theirs["source"]
    tally.expect("transaction-id",
                 our_tx["id"] == f"{source['xid']}:{source['commit_lsn']}"
                 and their_tx["id"] == f"{their_source['txId']}:{their_source['lsn']}",
                 f"{where} transaction.id", our_tx["id"], their_tx["id"])
    tally.check(where, "transaction.data_collection_order", our_tx["data_collection_order"],
                their_tx["data_collection_order"])


def _compare_image(spec: TableSpec, where: str, image: str, ours: Mapping[str, Any], theirs: Mapping[str, Any],
                   tally: Tally) -> None:
    our_row, their_row = ours[image], theirs[image]
    if our_row is None or their_row is None:
        tally.check(where, image, our_row, their_row)
        return
    if set(our_row) != set(their_row) or set(our_row) != set(spec.columns):
        tally.differ(where, f"{image} columns", sorted(our_row), sorted(their_row))
        return
    unrepresentable = ours["unrepresentable"] or {}
    for column, family in spec.columns.items():
        at = f"{where} {image}.{column}"
        ours_value, theirs_value = our_row[column], their_row[column]
        text = unrepresentable.get(f"{image}.{column}")
        if text is not None:
            sentinel = text if family in dv.TEXT_WHEN_UNREPRESENTABLE else dv.UNREPRESENTABLE_AS.get(
                (family, text), dv.Unmappable)
            tally.expect(f"unrepresentable {family} {text}",
                         ours_value is None and theirs_value == sentinel, at, (ours_value, text), theirs_value)
        elif image == "after" and column in ours["unchanged_toast_columns"]:
            tally.expect("unchanged-toast",
                         ours_value is None and theirs_value == PLACEHOLDER, at, ours_value, theirs_value)
        elif (image == "before" and spec.identity is not None and column not in spec.identity
              and column in spec.not_null):
            # An old-key image holds only the identity columns; Debezium fills a NOT NULL one it
            # did not get with its type's default (a nullable one is null in both)
            tally.expect("old-key-default",
                         ours_value is None and theirs_value == dv.type_default(family), at, ours_value,
                         theirs_value)
        else:
            tally.check(at, "value", _canonical_ours(family, ours_value), _canonical_theirs(family, theirs_value))
    tally.check(where, "unrepresentable keys", sorted(k for k in unrepresentable if k.split(".", 1)[1] not in spec.columns), [])


def _canonical_theirs(family: str, value: object) -> object:
    if value is None:
        return None
    try:
        return FAMILIES[family][0](value)
    except dv.Unmappable as exc:
        return f"<unmappable: {exc}>"


def _canonical_ours(family: str, value: object) -> object:
    return None if value is None else FAMILIES[family][1](value)


def compare_messages(ours: Sequence[Mapping[str, Any]], theirs: Sequence[Mapping[str, Any]], tally: Tally) -> None:
    """``{prefix}.messages`` (pgbridge) against ``{prefix}.message`` (Debezium), in order."""
    if len(ours) != len(theirs):
        tally.differ("messages", "number", len(ours), len(theirs))
        return
    for position, (our, their) in enumerate(zip(ours, theirs, strict=True)):
        where = f"message[{position}]"
        tally.events["m"] += 1
        source = their["source"]
        tally.check(where, "op", "m", their["op"])
        tally.check(where, "prefix", our["prefix"], their["message"]["prefix"])
        tally.check(where, "content", our["content"], dv.hex_bytes(their["message"]["content"]))
        tally.check(where, "lsn", our["lsn"], source["lsn"])
        tally.check(where, "xid", our["xid"], source["txId"])
        tally.check(where, "transactional", our["transactional"], source["txId"] is not None)
        if our["transactional"]:
            tally.check(where, "ts_us", our["ts_us"], source["ts_us"])
            tally.check(where, "transaction.total_order", our["transaction"]["total_order"],
                        their["transaction"]["total_order"])
            tally.expect("message-collection-order",
                         our["transaction"]["data_collection_order"] == 0
                         and their["transaction"]["data_collection_order"] == 1,
                         f"{where} transaction.data_collection_order", our["transaction"], their["transaction"])
        else:
            tally.expect("message-commit-time",
                         our["ts_us"] is None and our["transaction"] is None and their["transaction"] is None
                         and isinstance(source["ts_us"], int), f"{where} ts_us", our["ts_us"], source["ts_us"])


def commit_lsns(boundaries: Sequence[Mapping[str, Any]]) -> list[int]:
    """pgbridge's commit LSNs in publication order, from its transactions topic (for ``Tally.commits``)."""
    return [b["commit_lsn"] for b in boundaries if b["status"] == "END"]


MESSAGE_COLLECTION: Final = "io.debezium.connector.postgresql.LogicalDecodingMessageMonitor"


def compare_transactions(ours: Sequence[Mapping[str, Any]], theirs: Sequence[Mapping[str, Any]],
                         tally: Tally) -> None:
    """BEGIN/END boundaries: same transactions in the same order, END counts per table equal once
    Debezium's extra events (key changes: two events; messages: a collection of their own) are
    accounted for by their documented rules."""
    our_ends = [o for o in ours if o["status"] == "END"]
    their_ends = [t for t in theirs if t["status"] == "END"]
    tally.check("transactions", "BEGIN/END sequence", [(o["status"], o["xid"]) for o in ours],
                [(t["status"], int(t["id"].split(":")[0])) for t in theirs])
    if len(our_ends) != len(their_ends):
        return
    for our, their in zip(our_ends, their_ends, strict=True):
        xid = our["xid"]
        where = f"transaction {xid} END"
        tally.events["END"] += 1
        folds = {table: n for (fold_xid, table), n in tally.key_changes.items() if fold_xid == xid}
        tally.check(where, "event_count", our["event_count"] + sum(folds.values()), their["event_count"])
        tally.check(where, "ts_ms", our["ts_us"] // 1000, their["ts_ms"])
        their_tables = {}
        for entry in their["data_collections"]:
            if entry["data_collection"].startswith(MESSAGE_COLLECTION):
                tally.expect("end-message-collection",
                             entry["event_count"] >= 1, where, None, entry)
            else:
                their_tables[entry["data_collection"]] = entry["event_count"]
        our_tables = {e["data_collection"]: e["event_count"] + folds.get(e["data_collection"].split(".")[-1], 0)
                      for e in our["data_collections"]}
        tally.check(where, "data_collections", our_tables, their_tables)
