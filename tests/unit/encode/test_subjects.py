"""Schema Registry subject names (``encode.subjects``), and that the encoder registers under them.

``schema_registry.subject_name_strategy``: ``topic`` → ``{topic}-key`` / ``{topic}-value``;
``record`` → the record's full name; ``topic_record`` → ``{topic}-{full name}``, as Confluent's
TopicNameStrategy, RecordNameStrategy and TopicRecordNameStrategy.
"""

from __future__ import annotations

from typing import Any

import pytest

from pgbridge.assemble.units import RowChange
from pgbridge.decode.messages import TupleData
from pgbridge.encode import ChangeEncoder, EventContext
from pgbridge.encode.subjects import SubjectNameStrategy, record_full_name, subject_name
from pgbridge.encode.wire import confluent_header
from pgbridge.lsn import Lsn
from pgbridge.publish.routing import TopicRouter
from tests.unit.encode.avro_helpers import relation

ORDERS = relation(("id", 20, -1, True), ("note", 25), name="orders")
CTX = EventContext(commit_lsn=0x100, xid=7, ts_us=1, origin=None, total_order=1, collection_order=1)
TOPIC = "app.public.orders"


class RecordingRegistrar:
    """Answers a Confluent header and remembers the subjects it was asked about."""

    def __init__(self) -> None:
        self.subjects: list[str] = []

    def header_for(self, subject: str, schema: dict[str, Any]) -> bytes:
        self.subjects.append(subject)
        return confluent_header(len(self.subjects))


def test_record_full_name() -> None:
    assert record_full_name({"type": "record", "name": "Key", "namespace": "app.public.orders"}) == \
        "app.public.orders.Key"
    assert record_full_name({"type": "record", "name": "a.b.C", "namespace": "ignored"}) == "a.b.C"
    assert record_full_name({"type": "record", "name": "C"}) == "C"


@pytest.mark.parametrize(("strategy", "key", "value"), [
    ("topic", f"{TOPIC}-key", f"{TOPIC}-value"),
    ("record", "app.public.orders.Key", "app.public.orders.Envelope"),
    ("topic_record", f"{TOPIC}-app.public.orders.Key", f"{TOPIC}-app.public.orders.Envelope"),
])
def test_the_encoder_registers_table_schemas_under_the_strategy_s_subjects(strategy: SubjectNameStrategy,
                                                                          key: str, value: str) -> None:
    registrar = RecordingRegistrar()
    encoder = ChangeEncoder(topic_prefix="app", router=TopicRouter("app"),
                            database="shop", registrar=registrar, subject_strategy=strategy)
    new = TupleData(b"tt", (b"1", b"x"))
    encoder.encode_row(RowChange("c", ORDERS, Lsn(0x90), None, None, new), CTX)
    assert registrar.subjects == [key, value]
    assert encoder.subjects(ORDERS) == (key, value)  # what `pgbridge schemas` prints
    assert subject_name(strategy, TOPIC, encoder.key_schema(ORDERS) or {}, key=True) == key


@pytest.mark.parametrize(("strategy", "expected"), [
    ("topic", ["app.transactions-key", "app.transactions-value"]),
    ("record", ["pgbridge.TransactionKey", "pgbridge.TransactionBoundary"]),
    ("topic_record", ["app.transactions-pgbridge.TransactionKey", "app.transactions-pgbridge.TransactionBoundary"]),
])
def test_transaction_boundaries_follow_the_strategy_too(strategy: SubjectNameStrategy, expected: list[str]) -> None:
    registrar = RecordingRegistrar()
    encoder = ChangeEncoder(topic_prefix="app", router=TopicRouter("app"),
                            database="shop", registrar=registrar, subject_strategy=strategy)
    encoder.encode_tx_boundary(status="BEGIN", xid=7, commit_lsn=0x100, ts_us=1, event_count=0, per_table={})
    assert registrar.subjects == expected
    fixed = encoder.fixed_schemas()
    assert [subject for _topic, subject, _schema in fixed[:2]] == expected
    assert [topic for topic, _subject, _schema in fixed] == ["app.transactions"] * 2 + ["app.messages"] * 2


def test_the_default_strategy_is_the_topic_name_strategy() -> None:
    registrar = RecordingRegistrar()
    encoder = ChangeEncoder(topic_prefix="app", router=TopicRouter("app"),
                            database="shop", registrar=registrar)
    encoder.encode_row(RowChange("c", ORDERS, Lsn(0x90), None, None, TupleData(b"tt", (b"1", b"x"))), CTX)
    assert registrar.subjects == [f"{TOPIC}-key", f"{TOPIC}-value"]
