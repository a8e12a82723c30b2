"""snapshot.mode: the start-up decision per mode and slot state (snapshot/modes.py)."""

from __future__ import annotations

import pytest

from pgbridge.config import load_settings
from pgbridge.errors import ConfigError
from pgbridge.snapshot.modes import SnapshotMode, StartAction, decide_start, snapshots_added_tables

MODES: tuple[SnapshotMode, ...] = ("initial", "initial_only", "when_needed", "no_data", "never")


@pytest.mark.parametrize(("mode", "action"), [
    ("initial", StartAction.SNAPSHOT), ("initial_only", StartAction.SNAPSHOT),
    ("when_needed", StartAction.SNAPSHOT), ("no_data", StartAction.CREATE_WITH_SCHEMAS),
    ("never", StartAction.CREATE)])
def test_a_missing_slot_is_created_as_the_mode_says(mode: SnapshotMode, action: StartAction) -> None:
    assert decide_start(mode, slot_exists=False, wal_status=None) is action


@pytest.mark.parametrize("wal_status", ["reserved", "extended", "unreserved", None])
def test_a_usable_slot_streams_except_under_initial_only_which_is_done(wal_status: str | None) -> None:
    for mode in MODES:
        expected = StartAction.EXIT if mode == "initial_only" else StartAction.STREAM
        assert decide_start(mode, slot_exists=True, wal_status=wal_status) is expected


def test_only_when_needed_recreates_an_invalidated_slot_the_others_stream_and_fail_validation() -> None:
    assert decide_start("when_needed", slot_exists=True, wal_status="lost") is StartAction.RECREATE_AND_SNAPSHOT
    for mode in ("initial", "initial_only", "no_data", "never"):
        assert decide_start(mode, slot_exists=True, wal_status="lost") is StartAction.STREAM


def test_tables_added_at_run_time_are_snapshotted_only_in_modes_that_snapshot_rows() -> None:
    assert [m for m in MODES if snapshots_added_tables(m)] == ["initial", "initial_only", "when_needed"]


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_is_accepted_by_the_configuration(mode: str) -> None:
    env = {"PGBRIDGE_POSTGRES__DSN": "host=x", "PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS": "k:9092",
           "PGBRIDGE_SNAPSHOT__MODE": mode}
    assert load_settings(environ=env).snapshot.mode == mode


def test_an_unknown_mode_names_the_setting() -> None:
    env = {"PGBRIDGE_POSTGRES__DSN": "host=x", "PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS": "k:9092",
           "PGBRIDGE_SNAPSHOT__MODE": "schema_only"}
    with pytest.raises(ConfigError, match=r"snapshot\.mode"):
        load_settings(environ=env)
