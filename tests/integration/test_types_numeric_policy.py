"""``types.unconstrained_numeric: decimal`` end to end: exact decimals, the envelope's ``unrepresentable``
map for the rest, or a stop that confirms nothing past the value that did not fit."""

from __future__ import annotations

from decimal import Decimal

import pytest

from tests.support.bridge import BridgeProcess, bridge_env, load_schemas
from tests.support.broker import Broker
from tests.support.kafka import read_topic
from tests.support.postgres import commit_bound, run_sql, slot_confirmed_flush_lsn

pytestmark = pytest.mark.integration

SETUP = "CREATE TABLE public.m (id int PRIMARY KEY, v numeric, vs numeric[])"
DECIMAL = {"PGBRIDGE_POSTGRES__TABLES": "public.m", "PGBRIDGE_SNAPSHOT__MODE": "never",
           "PGBRIDGE_TYPES__UNCONSTRAINED_NUMERIC": "decimal", "PGBRIDGE_TYPES__NUMERIC_PRECISION": "20",
           "PGBRIDGE_TYPES__NUMERIC_SCALE": "4"}



@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_unconstrained_numeric_as_decimal_keeps_every_value_exact(pg_dsn: str, kafka_broker: Broker,
                                                                   topic_prefix: str, binary: bool) -> None:
    run_sql(pg_dsn, SETUP)
    env = bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix,
                     extra={**DECIMAL, "PGBRIDGE_POSTGRES__BINARY": "true" if binary else "false"})
    with BridgeProcess(env).start() as bridge:
        bridge.wait_confirmed(pg_dsn, topic_prefix, timeout=60)
        run_sql(pg_dsn, "INSERT INTO m VALUES (1, 1234567890123456.7891, '{1.5,NULL,-0.0001}'), "
                     "(2, 12345678901234567, '{}'), (3, 0.00001, NULL), (4, 'NaN', '{NaN}'), "
                     "(5, -1.50000000, NULL), (6, NULL, NULL)")
        records = read_topic(kafka_broker.bootstrap, f"{topic_prefix}.public.m", min_count=6, timeout=60)
        assert bridge.terminate() == 0, bridge.log()
    store = load_schemas(kafka_broker.bootstrap, topic_prefix)
    events = [store.decode(r.value) for r in records if r.value is not None]
    assert all(list(e["after"]) == ["id", "v", "vs"] for e in events)  # one field per column, no other
    unrepresentable = [e["unrepresentable"] or {} for e in events]
    assert [(e["after"]["v"], u.get("after.v"), e["after"]["vs"], u.get("after.vs"))
            for e, u in zip(events, unrepresentable, strict=True)] == [
        (Decimal("1234567890123456.7891"), None, [Decimal("1.5000"), None, Decimal("-0.0001")], None),
        (None, "12345678901234567", [], None),  # 17 integer digits > 20 - 4
        (None, "0.00001", None, None),  # a fifth fraction digit would be rounded away
        (None, "NaN", None, "{NaN}"),
        (Decimal("-1.5000"), None, None, None),
        (None, None, None, None),
    ]
    assert all(set(u) <= {"after.v", "after.vs"} for u in unrepresentable)


def test_fail_overflow_stops_before_confirming_and_a_wider_decimal_resumes(pg_dsn: str, kafka_broker: Broker,
                                                                          topic_prefix: str) -> None:
    run_sql(pg_dsn, SETUP)
    topic = f"{topic_prefix}.public.m"
    env = bridge_env(pg_dsn, kafka_broker.bootstrap, topic_prefix,
                     extra={**DECIMAL, "PGBRIDGE_TYPES__NUMERIC_OVERFLOW": "fail"})
    with BridgeProcess(env).start() as bridge:
        bridge.wait_confirmed(pg_dsn, topic_prefix, timeout=60)
        run_sql(pg_dsn, "INSERT INTO m VALUES (1, 1.25, NULL)")
        read_topic(kafka_broker.bootstrap, topic, min_count=1, timeout=60)
        bound = commit_bound(pg_dsn, "INSERT INTO m VALUES (2, 0.00001, NULL)")
        assert bridge.process is not None
        assert bridge.process.wait(60) == 1, bridge.log()
        errors = [line for line in bridge.log().splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "public.m.v" in errors[0] and "does not fit decimal(20,4)" in errors[0], errors
        assert "types.numeric_precision" in errors[0]
    confirmed = slot_confirmed_flush_lsn(pg_dsn, topic_prefix)
    assert confirmed is not None and confirmed <= bound
    # the operator widens the scale and restarts: the row that stopped the bridge arrives exactly
    with BridgeProcess({**env, "PGBRIDGE_TYPES__NUMERIC_SCALE": "6"}).start() as bridge:
        records = read_topic(kafka_broker.bootstrap, topic, min_count=2, timeout=60)
        assert bridge.terminate() == 0, bridge.log()
    store = load_schemas(kafka_broker.bootstrap, topic_prefix)
    last = store.decode([r for r in records if r.value is not None][-1].value)
    assert (last["after"]["id"], last["after"]["v"], last["unrepresentable"]) == (2, Decimal("0.000010"), None)
