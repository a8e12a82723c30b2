"""Probe a running pgbridge's HTTP endpoints: status codes and parsed Prometheus samples."""

from __future__ import annotations

import contextlib
import urllib.error
import urllib.request
from collections.abc import Iterator

from prometheus_client.parser import text_string_to_metric_families

from pgbridge.health import Health
from pgbridge.http import serve
from pgbridge.metrics import Metrics

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@contextlib.contextmanager
def serving(health: Health) -> Iterator[int]:
    """pgbridge's HTTP server in this process on a free loopback port, for unit tests of what it
    answers; yields the port."""
    server = serve("127.0.0.1", 0, Metrics(), health)
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def get(port: int, path: str, *, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def status(port: int, path: str) -> int:
    """HTTP status of ``path``; 0 when nothing answers."""
    try:
        return get(port, path, timeout=2.0)[0]
    except OSError:
        return 0


def scrape(port: int) -> Samples:
    """Every sample of ``/metrics`` keyed by (name, sorted labels)."""
    code, text = get(port, "/metrics")
    assert code == 200, text
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def metric(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value; 0.0 when the series does not exist yet."""
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)
