"""``kafka.message_key_columns`` (source/keys.py): configured Kafka key columns, checked against the
table's columns and replica identity, and used by the encoder for every op's key."""

from __future__ import annotations

from typing import Any, cast

import psycopg
import pytest

from pgbridge.assemble.units import RowChange
from pgbridge.config import load_settings
from pgbridge.decode.messages import Relation, TupleData
from pgbridge.encode import ChangeEncoder, EventContext, SingleObjectRegistrar
from pgbridge.errors import ConfigError
from pgbridge.lsn import Lsn
from pgbridge.publish.routing import TopicRouter
from pgbridge.source.keys import KeyColumns, message_key, message_keys
from tests.support.relations import relation
from tests.unit.encode.avro_helpers import SchemaLog


def _relation(identity: str, *columns: tuple[str, bool]) -> Relation:
    return relation(*((name, 23, -1, key) for name, key in columns), identity=identity, rel_id=7, name="Orders")


FULL = _relation("f", ("id", True), ("tenant", True), ("amount", True))
DEFAULT = _relation("d", ("id", True), ("tenant", True), ("amount", False))


def test_configured_columns_are_the_key_under_replica_identity_full() -> None:
    assert message_key(("tenant", "amount"), FULL) == ("tenant", "amount")


def test_columns_within_the_replica_identity_are_accepted_in_the_configured_order() -> None:
    assert message_key(("tenant", "id"), DEFAULT) == ("tenant", "id")


def test_a_column_outside_the_replica_identity_is_refused_with_the_alter_table_fix() -> None:
    with pytest.raises(ConfigError, match=r'public\."Orders"\'s replica identity does not include amount') as error:
        message_key(("amount",), DEFAULT)
    assert error.value.hint is not None and 'ALTER TABLE public."Orders" REPLICA IDENTITY FULL' in error.value.hint


def test_a_column_the_table_lacks_is_refused_naming_the_table_columns() -> None:
    with pytest.raises(ConfigError, match=r"has no published column Tenant \(its columns: id, tenant, amount\)"):
        message_key(("Tenant",), FULL)


def test_the_resolver_uses_configured_columns_without_asking_the_catalog() -> None:
    keys = KeyColumns(cast(psycopg.Connection[tuple[object, ...]], None), {("public", "Orders"): ("tenant",)})
    assert keys(FULL) == ("tenant",)


def test_the_encoder_keys_every_op_by_the_configured_columns_and_tombstones_that_key() -> None:
    log = SchemaLog()
    keys = KeyColumns(cast(psycopg.Connection[tuple[object, ...]], None), {("public", "Orders"): ("tenant", "id")})
    encoder = ChangeEncoder(topic_prefix="p", router=TopicRouter("p"),
                            database="db", registrar=SingleObjectRegistrar(log.announce),
                            key_resolver=keys)
    ctx = EventContext(commit_lsn=1, xid=2, ts_us=3, origin=None, total_order=1, collection_order=1)
    row = TupleData(b"ttt", (b"1", b"42", b"10"))
    moved = TupleData(b"ttt", (b"1", b"43", b"10"))

    def encode(op: str, old: TupleData | None, new: TupleData | None) -> list[Any]:
        change = RowChange(op, FULL, Lsn(5), "O" if old else None, old, new)  # type: ignore[arg-type]
        return [(log.decode(r.key), r.value is None) for r in encoder.encode_row(change, ctx)]

    assert encode("c", None, row) == [({"tenant": 42, "id": 1}, False)]
    # a change of a key column tombstones the old key first, as for a primary key change
    assert encode("u", row, moved) == [({"tenant": 42, "id": 1}, True), ({"tenant": 43, "id": 1}, False)]
    assert encode("d", moved, None) == [({"tenant": 43, "id": 1}, False), ({"tenant": 43, "id": 1}, True)]


BASE = {"PGBRIDGE_POSTGRES__DSN": "postgresql://x", "PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS": "k:9092"}


def test_the_setting_reads_json_and_canonicalises_table_names() -> None:
    settings = load_settings(environ={**BASE, "PGBRIDGE_KAFKA__MESSAGE_KEY_COLUMNS":
                                      '{"Public.\\"Orders\\"": ["tenant", "id"], "s.t": ["a"]}'})
    assert settings.kafka.message_key_columns == {'public."Orders"': ["tenant", "id"], "s.t": ["a"]}
    assert message_keys(settings.kafka) == {("public", "Orders"): ("tenant", "id"), ("s", "t"): ("a",)}


@pytest.mark.parametrize("value", ['{"public.t": []}', '{"public.t": ["a", "a"]}', '{"no_schema": ["a"]}'])
def test_bad_message_key_columns_are_refused(value: str) -> None:
    with pytest.raises(ConfigError, match=r"kafka\.message_key_columns"):
        load_settings(environ={**BASE, "PGBRIDGE_KAFKA__MESSAGE_KEY_COLUMNS": value})
