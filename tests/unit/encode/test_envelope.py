"""ChangeEncoder end to end: changes in, Kafka records out, decoded the way a consumer would.

Every record is decoded with fastavro using the writer schema found in ``_schemas`` under the
fingerprint in its header, and re-encoded with fastavro to check the hand-written envelope
writer byte for byte.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from fastavro.schema import to_parsing_canonical_form

from pgbridge.assemble.units import RowChange, TruncateChange
from pgbridge.decode.messages import Relation, TupleData
from pgbridge.encode import ChangeEncoder, EncodeError, EventContext, OutRecord, SingleObjectRegistrar
from pgbridge.encode.envelope import default_key_columns
from pgbridge.encode.wire import fingerprint64, fingerprint_hex, parsing_canonical_form
from pgbridge.errors import PublishError
from pgbridge.lsn import Lsn
from pgbridge.publish.routing import TopicRouter
from tests.unit.encode.avro_helpers import SchemaLog, fastavro_bytes, relation

INT8, INT4, TEXT, NUMERIC, TEXT_ARRAY, TIMESTAMPTZ, FLOAT8 = 20, 23, 25, 1700, 1009, 1184, 701
NUMERIC_12_2 = ((12 << 16) | 2) + 4

ORDERS = relation(("id", INT8, -1, True), ("note", TEXT), ("amount", NUMERIC, NUMERIC_12_2), ("tags", TEXT_ARRAY),
                  name="orders")
CTX = EventContext(commit_lsn=0x16_B374_D900, xid=4242, ts_us=1_714_566_896_789_012, origin=None,
                   total_order=3, collection_order=2)
SOURCE = {"db": "shop", "schema": "public", "table": "orders", "commit_lsn": 0x16_B374_D900, "xid": 4242,
          "ts_us": 1_714_566_896_789_012, "snapshot": False, "origin": None}
TRANSACTION = {"id": f"4242:{0x16_B374_D900}", "total_order": 3, "data_collection_order": 2}


def row(*values: bytes | None, kinds: bytes | None = None) -> TupleData:
    return TupleData(kinds if kinds is not None else bytes(b"n"[0] if v is None else b"t"[0] for v in values),
                     tuple(values))


ROW = row(b"1", b"first order", b"12.50", b'{a,"b c",NULL}')
AFTER = {"id": 1, "note": "first order", "amount": Decimal("12.50"), "tags": ["a", "b c", None]}


class Harness:
    def __init__(self, **kwargs: Any) -> None:
        self.log = SchemaLog()
        self.encoder = ChangeEncoder(topic_prefix="pgbridge", router=TopicRouter("pgbridge"), database="shop",
                                     registrar=SingleObjectRegistrar(self.log.announce), **kwargs)

    def decode(self, records: list[OutRecord]) -> list[tuple[str, Any, Any]]:
        """(topic, key, value) of each record, after checking the writer byte for byte."""
        out = []
        for record in records:
            for data in (record.key, record.value):
                if data is not None:
                    datum = self.log.decode(data)
                    assert fastavro_bytes(self.log.schema_of(data), datum) == data[10:]
            out.append((record.topic, self.log.decode(record.key), self.log.decode(record.value)))
        return out

    def change(self, op: str, rel: Relation, *, new: TupleData | None = None, old: TupleData | None = None,
               old_kind: str | None = None, ctx: EventContext = CTX) -> list[tuple[str, Any, Any]]:
        change = RowChange(op, rel, Lsn(0x16_B374_D848), old_kind, old, new)  # type: ignore[arg-type]
        return self.decode(self.encoder.encode_row(change, ctx))


def envelope(op: str, before: Any, after: Any, *, lsn: int = 0x16_B374_D848, **source: Any) -> dict[str, Any]:
    return {"before": before, "after": after, "op": op, "source": {**SOURCE, "lsn": lsn, **source},
            "transaction": TRANSACTION, "unchanged_toast_columns": [], "unrepresentable": None}


# --- one op at a time -----------------------------------------------------------------------------


def test_insert_is_one_record_under_the_primary_key_with_the_full_envelope() -> None:
    h = Harness()
    assert h.change("c", ORDERS, new=ROW) == [("pgbridge.public.orders", {"id": 1}, envelope("c", None, AFTER))]


def test_writer_schemas_reach_schemas_before_the_first_record_and_only_once() -> None:
    h = Harness()
    (record,) = h.encoder.encode_row(RowChange("c", ORDERS, Lsn(1), None, None, ROW), CTX)
    assert len(h.log.records) == 2  # key and value schema, announced while compiling the table
    assert record.key is not None and record.value is not None
    assert h.log.schema_of(record.key)["name"] == "Key"
    assert h.log.schema_of(record.value)["name"] == "Envelope"
    for _ in range(3):
        h.encoder.encode_row(RowChange("c", ORDERS, Lsn(1), None, None, ROW), CTX)
    assert len(h.log.records) == 2


def test_schemas_announces_the_full_writer_schema_under_its_fingerprint() -> None:
    h = Harness()
    (record,) = h.encoder.encode_row(RowChange("c", ORDERS, Lsn(1), None, None, ROW), CTX)
    assert record.key is not None and record.value is not None
    assert h.log.schema_of(record.value) == h.encoder.value_schema(ORDERS)
    assert h.log.schema_of(record.key) == h.encoder.key_schema(ORDERS)
    for key, schema in h.log.records:
        assert key == fingerprint_hex(fingerprint64(json.loads(schema)))
        # fastavro's canonical form (and so any consumer's fingerprint) agrees with ours.
        assert parsing_canonical_form(json.loads(schema)) == to_parsing_canonical_form(json.loads(schema))


def test_update_without_old_image_has_a_null_before() -> None:
    h = Harness()
    assert h.change("u", ORDERS, new=ROW) == [("pgbridge.public.orders", {"id": 1}, envelope("u", None, AFTER))]


def test_update_that_changes_the_key_tombstones_the_old_key_first() -> None:
    h = Harness()
    old = row(b"7", None, None, None)  # REPLICA IDENTITY DEFAULT: 'K' image, key columns only
    before = {"id": 7, "note": None, "amount": None, "tags": None}
    assert h.change("u", ORDERS, new=ROW, old=old, old_kind="K") == [
        ("pgbridge.public.orders", {"id": 7}, None),
        ("pgbridge.public.orders", {"id": 1}, envelope("u", before, AFTER)),
    ]


def test_update_whose_old_key_equals_the_new_one_has_no_tombstone() -> None:
    h = Harness()
    old = row(b"1", None, None, None)
    records = h.change("u", ORDERS, new=ROW, old=old, old_kind="K")
    assert [key for _, key, _ in records] == [{"id": 1}]


def test_delete_carries_the_key_image_and_is_followed_by_a_tombstone() -> None:
    h = Harness()
    old = row(b"1", None, None, None)
    before = {"id": 1, "note": None, "amount": None, "tags": None}
    assert h.change("d", ORDERS, old=old, old_kind="K") == [
        ("pgbridge.public.orders", {"id": 1}, envelope("d", before, None)),
        ("pgbridge.public.orders", {"id": 1}, None),
    ]


def test_snapshot_read_has_no_transaction_and_is_marked_snapshot() -> None:
    h = Harness()
    snapshot_ctx = EventContext(commit_lsn=0x100, xid=0, ts_us=5, origin=None, total_order=0, collection_order=0,
                                snapshot=True)
    (record,) = h.decode([h.encoder.encode_snapshot_row(ORDERS, ROW, snapshot_ctx)])
    assert record == ("pgbridge.public.orders", {"id": 1}, {
        "before": None, "after": AFTER, "op": "r",
        "source": {**SOURCE, "lsn": 0x100, "commit_lsn": 0x100, "xid": 0, "ts_us": 5, "snapshot": True},
        "transaction": None, "unchanged_toast_columns": [], "unrepresentable": None})


def test_truncate_is_one_keyless_record_per_table_with_no_row_images() -> None:
    h = Harness()
    other = relation(("k", INT4, -1, True), name="other", rel_id=16400)
    truncate = TruncateChange(relations=(ORDERS, other), options=0, lsn=Lsn(0x500))
    records = h.decode([h.encoder.encode_truncate(truncate, rel, CTX) for rel in truncate.relations])
    assert records == [
        ("pgbridge.public.orders", None, envelope("t", None, None, lsn=0x500)),
        ("pgbridge.public.other", None, envelope("t", None, None, lsn=0x500, table="other")),
    ]


def test_origin_of_the_transaction_is_in_source() -> None:
    h = Harness()
    ctx = EventContext(CTX.commit_lsn, CTX.xid, CTX.ts_us, "upstream", CTX.total_order, CTX.collection_order)
    ((_, _, value),) = h.change("c", ORDERS, new=ROW, ctx=ctx)
    assert value["source"]["origin"] == "upstream"


# --- replica identities ---------------------------------------------------------------------------


def test_replica_identity_full_gives_a_full_before_image_and_a_null_key_by_default() -> None:
    full = relation(*[(c.name, c.type_oid, c.type_modifier, True) for c in ORDERS.columns], identity="f",
                    name="orders")
    assert default_key_columns(full) == ()
    h = Harness()
    old = row(b"1", b"old note", b"10.00", b"{}")
    before = {"id": 1, "note": "old note", "amount": Decimal("10.00"), "tags": []}
    assert h.change("u", full, new=ROW, old=old, old_kind="O") == [
        ("pgbridge.public.orders", None, envelope("u", before, AFTER))]
    assert h.change("d", full, old=old, old_kind="O") == [
        ("pgbridge.public.orders", None, envelope("d", before, None))]  # no key, so no tombstone


def test_replica_identity_full_with_a_primary_key_resolver_is_keyed() -> None:
    full = relation(*[(c.name, c.type_oid, c.type_modifier, True) for c in ORDERS.columns], identity="f",
                    name="orders")
    h = Harness(key_resolver=lambda rel: ("id",))
    old = row(b"9", b"old note", b"10.00", b"{}")
    records = h.change("u", full, new=ROW, old=old, old_kind="O")
    assert [(key, value is None) for _, key, value in records] == [({"id": 9}, True), ({"id": 1}, False)]


def test_replica_identity_index_keys_by_the_index_columns() -> None:
    indexed = relation(("id", INT8), ("code", TEXT, -1, True), ("region", INT4, -1, True), identity="i")
    h = Harness()
    ((_, key, _),) = h.change("c", indexed, new=row(b"1", b"X1", b"7"))
    assert key == {"code": "X1", "region": 7}
    assert h.encoder.key_schema(indexed) is not None


def test_replica_identity_nothing_gives_a_null_key() -> None:
    nothing = relation(("id", INT8), ("note", TEXT), identity="n")
    h = Harness()
    assert h.encoder.key_schema(nothing) is None
    ((_, key, value),) = h.change("c", nothing, new=row(b"1", b"x"))
    assert key is None and value["after"] == {"id": 1, "note": "x"}


def test_a_replica_identity_index_other_than_the_primary_key_is_the_kafka_key_so_deletes_are_keyed() -> None:
    # A primary key as resolved Kafka key, but the replica identity is another unique index: a
    # delete carries only the index's columns, so they key every op of the table.
    indexed = relation(("id", INT8), ("code", TEXT, -1, True), identity="i")
    h = Harness(key_resolver=lambda rel: ("id",))
    records = h.change("d", indexed, old=row(None, b"X1"), old_kind="K")
    assert [(key, value and value["op"]) for _, key, value in records] == [({"code": "X1"}, "d"), ({"code": "X1"}, None)]


def test_key_columns_unknown_to_the_relation_are_refused() -> None:
    h = Harness(key_resolver=lambda rel: ("nope",))
    with pytest.raises(EncodeError, match="nope"):
        h.change("c", ORDERS, new=ROW)


# --- unchanged TOAST ------------------------------------------------------------------------------


def test_unchanged_toast_columns_are_null_and_listed() -> None:
    h = Harness()
    new = TupleData(b"tuut", (b"1", None, None, b"{}"))
    ((_, _, value),) = h.change("u", ORDERS, new=new)
    assert value["after"] == {"id": 1, "note": None, "amount": None, "tags": []}
    assert value["unchanged_toast_columns"] == ["note", "amount"]


def test_a_key_column_with_unchanged_toast_takes_its_value_from_the_old_key_image() -> None:
    keyed_by_text = relation(("code", TEXT, -1, True), ("payload", TEXT))
    h = Harness()
    new = TupleData(b"ut", (None, b"new"))
    old = TupleData(b"tn", (b"long code", None))
    records = h.change("u", keyed_by_text, new=new, old=old, old_kind="K")
    assert [key for _, key, _ in records] == [{"code": "long code"}]
    assert records[0][2]["unchanged_toast_columns"] == ["code"]


# --- schemas --------------------------------------------------------------------------------------


def test_value_schema_is_a_debezium_like_envelope_with_nullable_typed_fields() -> None:
    h = Harness()
    value = h.encoder.value_schema(ORDERS)
    assert (value["name"], value["namespace"]) == ("Envelope", "pgbridge.public.orders")
    assert [f["name"] for f in value["fields"]] == ["before", "after", "op", "source", "transaction",
                                                    "unchanged_toast_columns", "unrepresentable"]
    assert value["fields"][6] == {"name": "unrepresentable", "type": ["null", {"type": "map", "values": "string"}],
                                  "default": None, "doc": value["fields"][6]["doc"]}
    row_record = value["fields"][0]["type"][1]
    assert (row_record["name"], row_record["namespace"]) == ("Value", "pgbridge.public.orders")
    assert value["fields"][1]["type"] == ["null", "Value"]
    assert row_record["fields"][2] == {
        "name": "amount", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}],
        "default": None, "pg_type": "numeric", "pg_precision": 12, "pg_scale": 2}
    # one field per column and no other field, every one nullable with default null and its pg_type
    assert [f["name"] for f in row_record["fields"]] == ["id", "note", "amount", "tags"]
    assert all(f["type"][0] == "null" and f["default"] is None for f in row_record["fields"])
    assert [f["pg_type"] for f in row_record["fields"]] == ["int8", "text", "numeric", "_text"]
    assert value["fields"][3]["type"]["name"] == "Source"
    assert value["fields"][4]["type"][1]["name"] == "Transaction"
    assert h.log.records == []  # describing schemas announces nothing


def test_key_schema_holds_the_key_columns_not_nullable() -> None:
    key = Harness().encoder.key_schema(ORDERS)
    assert key == {"type": "record", "name": "Key", "namespace": "pgbridge.public.orders",
                   "fields": [{"name": "id", "type": "long", "pg_type": "int8"}]}


def test_custom_types_get_their_name_from_type_messages() -> None:
    rel = relation(("id", INT8, -1, True), ("mood", 16385))
    h = Harness(type_names={16385: ("public", "mood")}.get)
    fields = h.encoder.value_schema(rel)["fields"][0]["type"][1]["fields"]
    assert fields[1]["pg_type"] == "public.mood"
    ((_, _, value),) = h.change("c", rel, new=row(b"1", b"happy"))
    assert value["after"]["mood"] == "happy"


def test_topics_names_and_fields_are_sanitised() -> None:
    odd = relation(("id", INT8, -1, True), ("a-b", TEXT), ("a_b", TEXT), ("1st", TEXT), ("naïve", TEXT),
                   namespace="My Schema", name="ordrés-2024.v2")
    h = Harness()
    assert h.encoder.topic_for(odd) == "pgbridge.My_Schema.ordr_s-2024.v2"
    value = h.encoder.value_schema(odd)
    assert value["namespace"] == "pgbridge.My_Schema.ordr_s_2024_v2"
    fields = value["fields"][0]["type"][1]["fields"]
    assert [(f["name"], f.get("pg_name")) for f in fields] == [
        ("id", None), ("a_b_2", "a-b"), ("a_b", None), ("_1st", "1st"), ("na_ve", "naïve")]
    ((topic, _, decoded),) = h.change("c", odd, new=row(b"1", b"dash", b"under", b"first", b"n"))
    assert topic == "pgbridge.My_Schema.ordr_s-2024.v2"
    assert decoded["after"] == {"id": 1, "a_b_2": "dash", "a_b": "under", "_1st": "first", "na_ve": "n"}
    assert decoded["source"]["table"] == "ordrés-2024.v2"


def test_a_prefix_with_dots_and_dashes_makes_a_valid_namespace() -> None:
    encoder = ChangeEncoder(topic_prefix="acme-prod.cdc", router=TopicRouter("acme-prod.cdc"),
                            database="d", registrar=SingleObjectRegistrar(print))
    assert encoder.topic_for(ORDERS) == "acme-prod.cdc.public.orders"
    assert encoder.value_schema(ORDERS)["namespace"] == "acme_prod.cdc.public.orders"
    assert encoder.messages_topic == "acme-prod.cdc.messages"
    assert encoder.transactions_topic == "acme-prod.cdc.transactions"


def test_an_overlong_topic_name_is_refused() -> None:
    encoder = ChangeEncoder(topic_prefix="p" * 200, router=TopicRouter("p" * 200),
                            database="d", registrar=SingleObjectRegistrar(print))
    with pytest.raises(PublishError, match="longer than Kafka"):
        encoder.topic_for(relation(("id", INT8), name="t" * 60))


def test_a_relation_resent_by_a_streamed_transaction_reuses_the_compiled_schema() -> None:
    h = Harness()
    h.change("c", ORDERS, new=ROW)
    streamed = Relation(xid=99, rel_id=ORDERS.rel_id, namespace=ORDERS.namespace, name=ORDERS.name,
                        replica_identity=ORDERS.replica_identity, columns=ORDERS.columns)
    h.change("c", streamed, new=ROW)
    assert len(h.log.records) == 2


def test_a_new_column_makes_a_new_writer_schema_announced_before_its_records() -> None:
    h = Harness()
    (first,) = h.encoder.encode_row(RowChange("c", ORDERS, Lsn(1), None, None, ROW), CTX)
    altered = relation(*[(c.name, c.type_oid, c.type_modifier, c.is_key) for c in ORDERS.columns],
                       ("shipped_at", TIMESTAMPTZ), name="orders")
    new_row = TupleData(ROW.kinds + b"t", (*ROW.values, b"2024-05-01 12:00:00+02"))
    (second,) = h.encoder.encode_row(RowChange("c", altered, Lsn(2), None, None, new_row), CTX)
    assert first.value is not None and second.value is not None
    assert first.value[:10] != second.value[:10]
    assert len(h.log.records) == 3  # the key schema did not change, so it is not announced again
    assert h.log.decode(second.value)["after"]["shipped_at"] == datetime(2024, 5, 1, 10, tzinfo=UTC)
    assert h.log.decode(first.value)["after"] == AFTER  # old records still decode with their schema


# --- errors ---------------------------------------------------------------------------------------


def test_values_outside_their_avro_type_are_null_with_their_text_in_the_unrepresentable_map() -> None:
    h = Harness()
    ((_, _, value),) = h.change("c", ORDERS, new=row(b"1", b"x", b"NaN", b"{{a},{b}}"))
    assert value["after"] == {"id": 1, "note": "x", "amount": None, "tags": None}
    assert value["unrepresentable"] == {"after.amount": "NaN", "after.tags": "{{a},{b}}"}


def test_unrepresentable_values_of_both_images_are_keyed_by_image_and_column_name() -> None:
    full = relation(*[(c.name, c.type_oid, c.type_modifier, True) for c in ORDERS.columns], identity="f",
                    name="orders")
    h = Harness()
    old = row(b"1", b"x", b"NaN", b"{}")
    new = TupleData(b"tntt", (b"1", None, b"1.00", b"[0:1]={a,b}"))
    ((_, _, value),) = h.change("u", full, new=new, old=old, old_kind="O")
    assert value["before"] == {"id": 1, "note": "x", "amount": None, "tags": []}
    assert value["after"] == {"id": 1, "note": None, "amount": Decimal("1.00"), "tags": None}
    assert value["unrepresentable"] == {"before.amount": "NaN", "after.tags": "[0:1]={a,b}"}
    # the map's entries keep the order of the columns, before first: encoding again gives the same bytes
    change = RowChange("u", full, Lsn(0x16_B374_D848), "O", old, new)
    assert h.encoder.encode_row(change, CTX) == Harness().encoder.encode_row(change, CTX)


def test_unrepresentable_values_beside_unchanged_toast_columns() -> None:
    h = Harness()
    new = TupleData(b"tutt", (b"1", None, b"NaN", b"{{a}}"))
    ((_, _, value),) = h.change("u", ORDERS, new=new)
    assert value["after"] == {"id": 1, "note": None, "amount": None, "tags": None}
    assert value["unchanged_toast_columns"] == ["note"]
    assert value["unrepresentable"] == {"after.amount": "NaN", "after.tags": "{{a}}"}


def test_a_malformed_value_names_its_column_and_the_settings_to_check() -> None:
    rel = relation(("id", INT8, -1, True), ("at", TIMESTAMPTZ))
    h = Harness()
    with pytest.raises(EncodeError, match=r"public\.t\.at \(timestamptz\)") as caught:
        h.change("c", rel, new=TupleData(b"nt", (None, b"Tue Nov 14 22:13:20 2023 PST")))
    assert caught.value.hint is not None and "DateStyle=ISO" in caught.value.hint


def test_a_malformed_value_after_an_unrepresentable_one_still_names_its_column() -> None:
    rel = relation(("id", INT8, -1, True), ("amount", NUMERIC, NUMERIC_12_2), ("at", TIMESTAMPTZ))
    h = Harness()
    with pytest.raises(EncodeError, match=r"public\.t\.at \(timestamptz\)"):
        h.change("c", rel, new=row(b"1", b"NaN", b"Tue Nov 14 22:13:20 2023 PST"))


def test_a_row_with_the_wrong_number_of_columns_is_refused() -> None:
    with pytest.raises(EncodeError, match="has 2 columns, its relation 4"):
        Harness().change("c", ORDERS, new=row(b"1", b"x"))


def test_binary_column_values_are_encoded_from_their_send_form() -> None:
    rel = relation(("id", INT8, -1, True), ("score", FLOAT8))
    h = Harness()
    new = TupleData(b"bb", ((1).to_bytes(8, "big"), b"\x3f\xf8\x00\x00\x00\x00\x00\x00"))
    ((_, key, value),) = h.change("c", rel, new=new)
    assert key == {"id": 1} and value["after"] == {"id": 1, "score": 1.5}


# --- messages and transaction boundaries ----------------------------------------------------------


def test_transactional_message_goes_to_the_messages_topic_with_its_transaction() -> None:
    h = Harness()
    ((topic, key, value),) = h.decode([h.encoder.encode_message("audit", b"\x00payload", 0x777, CTX, True)])
    assert (topic, key) == ("pgbridge.messages", {"prefix": "audit"})
    assert value == {"prefix": "audit", "content": b"\x00payload", "transactional": True, "db": "shop",
                     "lsn": 0x777, "commit_lsn": CTX.commit_lsn, "xid": 4242, "ts_us": CTX.ts_us, "origin": None,
                     "transaction": TRANSACTION}


def test_non_transactional_message_has_no_commit_fields() -> None:
    h = Harness()
    ((_, _, value),) = h.decode([h.encoder.encode_message("hb", b"", 0x778, None, False)])
    assert value == {"prefix": "hb", "content": b"", "transactional": False, "db": "shop", "lsn": 0x778,
                     "commit_lsn": None, "xid": None, "ts_us": None, "origin": None, "transaction": None}


def test_transaction_boundaries_are_keyed_by_transaction_id_and_count_events_on_end() -> None:
    h = Harness()
    begin = h.encoder.encode_tx_boundary(status="BEGIN", xid=4242, commit_lsn=CTX.commit_lsn, ts_us=CTX.ts_us,
                                         event_count=0, per_table={})
    end = h.encoder.encode_tx_boundary(status="END", xid=4242, commit_lsn=CTX.commit_lsn, ts_us=CTX.ts_us,
                                       event_count=3, per_table={"public.orders": 2, "public.other": 1})
    common = {"id": TRANSACTION["id"], "ts_us": CTX.ts_us, "commit_lsn": CTX.commit_lsn, "xid": 4242}
    assert h.decode([begin, end]) == [
        ("pgbridge.transactions", {"id": TRANSACTION["id"]},
         {"status": "BEGIN", "event_count": None, "data_collections": None, **common}),
        ("pgbridge.transactions", {"id": TRANSACTION["id"]},
         {"status": "END", "event_count": 3, "data_collections": [
             {"data_collection": "public.orders", "event_count": 2},
             {"data_collection": "public.other", "event_count": 1}], **common}),
    ]
    with pytest.raises(ValueError, match="BEGIN or END"):
        h.encoder.encode_tx_boundary(status="COMMIT", xid=1, commit_lsn=1, ts_us=1,  # type: ignore[arg-type]
                                     event_count=0, per_table={})


def test_every_record_of_a_transaction_is_identical_when_encoded_again() -> None:
    def run() -> list[OutRecord]:
        encoder = Harness().encoder
        return [*encoder.encode_row(RowChange("c", ORDERS, Lsn(5), None, None, ROW), CTX),
                encoder.encode_message("m", b"x", 6, CTX, True),
                encoder.encode_tx_boundary(status="END", xid=1, commit_lsn=2, ts_us=3, event_count=1,
                                           per_table={"public.orders": 1})]
    assert run() == run()

