"""``postgres.drop_slot_on_stop``: off by default; ``pgbridge check`` warns when leader election
could hand the work to a standby that would find no slot."""

from __future__ import annotations

from pgbridge.check.postgres import drop_on_stop_problems
from pgbridge.config import Settings, load_settings

BASE = {"PGBRIDGE_POSTGRES__DSN": "host=x", "PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS": "k:9092"}


def _settings(**env: str) -> Settings:
    return load_settings(environ={**BASE, **env})


def test_off_by_default_and_nothing_to_report() -> None:
    settings = _settings()
    assert settings.postgres.drop_slot_on_stop is False
    assert drop_on_stop_problems(settings) == []


def test_with_leader_election_check_warns_with_the_fix() -> None:
    problems = drop_on_stop_problems(_settings(PGBRIDGE_POSTGRES__DROP_SLOT_ON_STOP="true"))
    assert [p.severity for p in problems] == ["warning"]
    assert "PGBRIDGE_POSTGRES__DROP_SLOT_ON_STOP=false" in problems[0].line()


def test_a_single_replica_without_leader_election_is_fine() -> None:
    assert drop_on_stop_problems(_settings(PGBRIDGE_POSTGRES__DROP_SLOT_ON_STOP="true",
                                           PGBRIDGE_HA__LEADER_ELECTION="false")) == []
