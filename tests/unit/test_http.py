"""The HTTP endpoints (http.py) on a real socket: status codes and bodies of /healthz, /readyz,
/streamingz and /metrics for each state of ``Health``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pgbridge.health import Health
from tests.support.http import get, serving


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def health(clock: Clock) -> Health:
    return Health(wedged_after_s=120, clock=clock)


@pytest.fixture
def port(health: Health) -> Iterator[int]:
    with serving(health) as bound:
        yield bound



def _all(port: int) -> dict[str, tuple[int, str]]:
    return {path: get(port, path) for path in ("/healthz", "/readyz", "/streamingz")}


def test_starting(port: int, health: Health) -> None:
    health.last_error = "connection refused"
    assert _all(port) == {
        "/healthz": (200, "ok\n"),
        "/readyz": (503, "not ready: not connected: connection refused\n"),
        "/streamingz": (503, "not streaming: not connected: connection refused\n"),
    }


def test_snapshotting_and_standby_are_ready_not_streaming(port: int, health: Health) -> None:
    health.snapshotting = True
    assert _all(port) == {
        "/healthz": (200, "ok\n"),
        "/readyz": (200, "ready\n"),
        "/streamingz": (503, "not streaming: initial snapshot in progress\n"),
    }
    health.snapshotting = False
    health.standby = True
    assert _all(port)["/readyz"] == (200, "ready\n")
    assert _all(port)["/streamingz"] == (503, "not streaming: standby: another replica holds the leader lock\n")


def test_streaming(port: int, health: Health) -> None:
    health.streaming = True
    health.beat()
    assert _all(port) == {"/healthz": (200, "ok\n"), "/readyz": (200, "ready\n"), "/streamingz": (200, "streaming\n")}
    # a query string is ignored, as Kubernetes and load balancers sometimes add one
    assert get(port, "/readyz?verbose=1") == (200, "ready\n")
    health.kafka_ok = False
    assert get(port, "/readyz") == (503, "not ready: Kafka unreachable\n")
    assert get(port, "/healthz") == (200, "ok\n")


def test_a_wedged_pipeline_fails_healthz(port: int, health: Health, clock: Clock) -> None:
    health.streaming = True
    health.beat()
    clock.now += 121
    code, body = get(port, "/healthz")
    assert code == 503
    assert body == "not alive: wedged: the pipeline thread has not made progress for 121s (streaming)\n"
    assert get(port, "/readyz")[0] == 503
    health.beat()
    assert get(port, "/healthz") == (200, "ok\n")


def test_metrics_and_unknown_paths(port: int) -> None:
    code, body = get(port, "/metrics")
    assert code == 200 and "pgbridge_streaming 0.0" in body
    assert get(port, "/nope") == (404, "not found\n")
