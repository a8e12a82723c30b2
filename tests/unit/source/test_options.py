"""What pgbridge asks the walsender for, per server version and settings (source/options.py)."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from pgbridge.config import PostgresConfig
from pgbridge.errors import FatalError
from pgbridge.source.options import negotiate_proto_version, replication_options


def _pg(**overrides: object) -> PostgresConfig:
    return PostgresConfig.model_validate({"dsn": SecretStr("postgresql://x"), "publication": "pub", **overrides})


@pytest.mark.parametrize(("server", "proto"), [(130000, 1), (140005, 2), (150010, 3), (160000, 4), (180001, 4)])
def test_the_highest_protocol_the_server_speaks_is_chosen(server: int, proto: int) -> None:
    assert negotiate_proto_version(server, None) == proto


def test_a_configured_protocol_wins() -> None:
    assert negotiate_proto_version(180000, 2) == 2


def test_pg18_gets_every_feature_it_has() -> None:
    options = replication_options(_pg(binary=True, two_phase=True), 4, 180000)
    assert options == {"proto_version": "4", "publication_names": '"pub"', "messages": "true",
                       "streaming": "parallel", "binary": "true", "two_phase": "true", "origin": "any"}


def test_pg15_streams_on_and_has_no_origin_option() -> None:
    options = replication_options(_pg(two_phase=True), 3, 150000)
    assert options["streaming"] == "on" and options["two_phase"] == "true"
    assert "origin" not in options and "binary" not in options


def test_protocol_1_has_neither_streaming_nor_two_phase() -> None:
    options = replication_options(_pg(two_phase=True), 1, 140000)
    assert "streaming" not in options and "two_phase" not in options


def test_streaming_off_is_respected() -> None:
    assert "streaming" not in replication_options(_pg(streaming=False), 4, 160000)


def test_origin_none_before_pg16_is_refused_with_a_hint() -> None:
    with pytest.raises(FatalError, match="needs PostgreSQL 16"):
        replication_options(_pg(origin="none"), 3, 150000)


def test_origin_none_on_pg16_is_passed_on() -> None:
    assert replication_options(_pg(origin="none"), 4, 160000)["origin"] == "none"
