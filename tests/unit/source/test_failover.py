"""The failover-protection rule behind ``pgbridge_slot_failover_synced`` and ``pgbridge check``."""

from __future__ import annotations

from typing import Any

import pytest

from pgbridge.source.connection import quote_literal
from pgbridge.source.monitor import slot_state_from_row, standby_slot_names


def _state(row: dict[str, Any], standby_slots: str | None = None, physical: dict[str, Any] | None = None) -> bool:
    base = {"slot_name": "pgbridge", "active_pid": 1, "wal_status": "reserved", "restart_lsn": "0/10",
            "confirmed_flush_lsn": "0/20"}
    return slot_state_from_row({**base, **row}, "0/30", "-1", standby_slots, physical).failover_protected


@pytest.mark.parametrize(("row", "standby_slots", "physical", "protected"), [
    ({}, None, None, False),  # Postgres < 17: no failover column
    ({"failover": False, "synced": False}, "standby1", {"standby1": True}, False),  # not a failover slot
    ({"failover": True, "synced": False}, "", {"standby1": True}, False),  # nothing waits for the standby
    ({"failover": True, "synced": False}, "standby1", {"standby1": False}, False),  # standby not streaming
    ({"failover": True, "synced": False}, "standby1", {}, False),  # named slot does not exist
    ({"failover": True, "synced": False}, "standby1, standby2", {"standby1": True}, False),
    ({"failover": True, "synced": False}, "standby1", {"standby1": True}, True),
    ({"failover": True, "synced": False}, 'standby1,"standby2"', {"standby1": True, "standby2": True}, True),
    ({"failover": True, "synced": True}, None, None, True),  # read on the standby / after promotion
])
def test_failover_protection(row: dict[str, Any], standby_slots: str | None, physical: dict[str, Any] | None,
                             protected: bool) -> None:
    assert _state(row, standby_slots, physical) is protected


def test_standby_slot_names() -> None:
    assert standby_slot_names(None) == ()
    assert standby_slot_names("") == ()
    assert standby_slot_names(' a , "b" ') == ("a", "b")


def test_quote_literal() -> None:
    assert quote_literal("it's") == "'it''s'"
