"""The image's HEALTHCHECK (``python -m pgbridge.probe``): it asks the port pgbridge's own settings
name, whether ``http.port`` comes from the environment or from the ``PGBRIDGE_CONFIG`` file."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from pgbridge.config import load_settings
from pgbridge.health import Health
from pgbridge.probe import main, probe_url
from tests.support.http import serving


@pytest.fixture
def environ(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for key in list(os.environ):
        if key.upper().startswith("PGBRIDGE_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("PGBRIDGE_POSTGRES__DSN", "postgresql://u@db/app")
    monkeypatch.setenv("PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS", "kafka:9092")
    return monkeypatch


@pytest.fixture
def health() -> Health:
    return Health(streaming=True)


@pytest.fixture
def port(health: Health) -> Iterator[int]:
    with serving(health) as bound:
        yield bound


def test_the_port_comes_from_the_config_file(environ: pytest.MonkeyPatch, port: int, health: Health,
                                             tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "pgbridge.yaml"
    config.write_text(f"http:\n  port: {port}\n", encoding="utf-8")
    environ.setenv("PGBRIDGE_CONFIG", str(config))
    assert main([]) == 0
    assert main(["/streamingz"]) == 0
    health.streaming = False
    assert main(["/healthz"]) == 0
    assert main(["/readyz"]) == 1
    assert "answered 503: not ready: starting" in capsys.readouterr().err


def test_the_environment_wins_over_the_file(environ: pytest.MonkeyPatch, port: int, tmp_path: Path) -> None:
    config = tmp_path / "pgbridge.yaml"
    config.write_text("http:\n  port: 1\n", encoding="utf-8")
    environ.setenv("PGBRIDGE_CONFIG", str(config))
    environ.setenv("PGBRIDGE_HTTP__PORT", str(port))
    assert main([]) == 0


def test_a_wedged_pipeline_fails_the_check(environ: pytest.MonkeyPatch, port: int, health: Health,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    environ.setenv("PGBRIDGE_HTTP__PORT", str(port))
    health.wedged_after_s = 1
    health.clock = lambda: 100.0
    health.beat_at = 0.0
    assert main([]) == 1
    assert "wedged" in capsys.readouterr().err


def test_http_off_nothing_listening_or_bad_config_fail(environ: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    environ.setenv("PGBRIDGE_HTTP__PORT", "0")
    assert main([]) == 1
    assert "HTTP off" in capsys.readouterr().err
    environ.setenv("PGBRIDGE_HTTP__PORT", "1")  # nothing listens on port 1
    assert main([]) == 1
    environ.setenv("PGBRIDGE_HTTP__PORT", "not a port")
    assert main([]) == 1
    assert "invalid configuration" in capsys.readouterr().err


def test_the_url_uses_loopback_for_a_wildcard_host(environ: pytest.MonkeyPatch) -> None:
    assert probe_url(load_settings(None)) == "http://127.0.0.1:8080/healthz"
    environ.setenv("PGBRIDGE_HTTP__HOST", "::")
    assert probe_url(load_settings(None), "/readyz") == "http://[::1]:8080/readyz"
    environ.setenv("PGBRIDGE_HTTP__HOST", "10.1.2.3")
    assert probe_url(load_settings(None)) == "http://10.1.2.3:8080/healthz"
