"""The outbox event router's pure parts: column checks, payload bytes, the topic, the record."""

from __future__ import annotations

import logging
import uuid

import pytest

from pgbridge.config import OutboxConfig
from pgbridge.decode.messages import KIND_BINARY, KIND_NULL, KIND_TEXT, TupleData
from pgbridge.errors import ConfigError, FatalError
from pgbridge.publish.outbox import OutboxColumns, OutboxRouter, column_problems, topic_problem, value_bytes
from tests.unit.encode.avro_helpers import relation

TEXT, VARCHAR, UUID, INT8, JSONB, BYTEA, BOOL = 25, 1043, 2950, 20, 3802, 17, 16
COLUMNS = OutboxColumns("id", "aggregatetype", "aggregateid", "type", "payload")
OUTBOX = relation(("id", UUID, -1, True), ("aggregatetype", TEXT), ("aggregateid", TEXT), ("type", TEXT),
                  ("payload", JSONB), name="outbox")


def test_missing_columns_and_wrong_types_are_named_with_the_types_expected() -> None:
    types = {"id": UUID, "aggregatetype": BOOL, "aggregateid": TEXT, "type": TEXT}
    assert column_problems("public.outbox", types, COLUMNS) == [
        f"outbox column public.outbox.aggregatetype has type oid {BOOL}, not text or varchar",
        "outbox table public.outbox has no column payload (expected bytea or text or json or varchar or jsonb)"]
    assert column_problems("public.outbox", {**types, "aggregatetype": VARCHAR, "payload": BYTEA}, COLUMNS) == []


def test_payload_bytes_are_the_value_as_stored() -> None:
    assert value_bytes(KIND_TEXT, b'{"a": 1}', JSONB) == b'{"a": 1}'
    assert value_bytes(KIND_BINARY, b'\x01{"a": 1}', JSONB) == b'{"a": 1}'  # jsonb binary: version byte
    assert value_bytes(KIND_TEXT, b"\\x00ff", BYTEA) == b"\x00\xff"
    assert value_bytes(KIND_BINARY, b"\x00\xff", BYTEA) == b"\x00\xff"
    assert value_bytes(KIND_NULL, None, JSONB) is None


def test_identifiers_read_in_binary_are_their_postgres_text() -> None:
    u = uuid.UUID(int=7)
    assert value_bytes(KIND_BINARY, u.bytes, UUID) == str(u).encode()
    assert value_bytes(KIND_BINARY, (-5).to_bytes(8, "big", signed=True), INT8) == b"-5"
    assert value_bytes(KIND_TEXT, b"-5", INT8) == b"-5"


def test_the_outbox_topic_must_be_outside_the_prefix() -> None:
    assert topic_problem("outbox.event.{aggregate_type}", "app") is None
    assert topic_problem("app_events.{aggregate_type}", "app") is None
    assert "inside kafka.topic_prefix" in str(topic_problem("app.events.{aggregate_type}", "app"))
    assert "characters outside" in str(topic_problem("events/{aggregate_type}", "app"))
    with pytest.raises(ConfigError, match=r"inside kafka\.topic_prefix"):
        OutboxRouter(OutboxConfig(tables=["public.outbox"], topic="app.x"), "app")


def test_an_insert_is_one_record_on_its_aggregate_types_topic() -> None:
    router = OutboxRouter(OutboxConfig(tables=["public.outbox"]), "app")
    plan = router.plan(OUTBOX)
    assert plan is not None
    row = TupleData(b"ttttt", (b"0000-1", b"Order Line", b"42", b"Created", b'{"n": 1}'))
    record = router.record(OUTBOX, row, plan)
    assert record == ("outbox.event.Order_Line", b"42", b'{"n": 1}', [("id", b"0000-1"), ("type", b"Created")])


def test_a_table_not_named_is_not_an_outbox_and_a_misfit_one_stops() -> None:
    router = OutboxRouter(OutboxConfig(tables=["public.outbox"]), "app")
    assert router.plan(relation(("id", INT8, -1, True), name="orders")) is None
    misfit = relation(("id", UUID, -1, True), name="outbox")
    with pytest.raises(FatalError, match=r"outbox table public\.outbox has no column aggregatetype"):
        router.plan(misfit)


def test_a_null_aggregate_type_stops_naming_the_row() -> None:
    router = OutboxRouter(OutboxConfig(tables=["public.outbox"]), "app")
    plan = router.plan(OUTBOX)
    assert plan is not None
    with pytest.raises(FatalError, match="null aggregatetype"):
        router.record(OUTBOX, TupleData(b"tnttt", (b"1", None, b"4", b"T", b"{}")), plan)


def test_updates_and_deletes_are_logged_once_per_table_and_op_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    router = OutboxRouter(OutboxConfig(tables=["public.outbox"]), "app")
    with caplog.at_level(logging.WARNING, logger="pgbridge.publish.outbox"):
        for op in ("u", "u", "d", "u"):
            router.ignore(OUTBOX, op)
    assert [r.getMessage() for r in caplog.records] == ["outbox table change ignored: only inserts are outbox events"] * 2
    assert router.ignored == {("public.outbox", "u"): 3, ("public.outbox", "d"): 1}
