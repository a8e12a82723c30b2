"""``/metrics``, ``/healthz``, ``/readyz`` and ``/streamingz`` on a small threaded HTTP server.

What each probe means is in health.py: ``/healthz`` alive (not wedged), ``/readyz`` alive and
doing its job (snapshotting, standing by or streaming), ``/streamingz`` streaming now. Each answers
200 with one word or 503 with the reason.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from pgbridge.health import Health
from pgbridge.metrics import Metrics


class _Handler(BaseHTTPRequestHandler):
    metrics: Metrics
    health: Health

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._send(200, generate_latest(self.metrics.registry), CONTENT_TYPE_LATEST)
        elif path == "/healthz":
            self._verdict(self.health.wedged_reason, "ok", "not alive")
        elif path == "/readyz":
            self._verdict(self.health.not_ready_reason, "ready", "not ready")
        elif path == "/streamingz":
            self._verdict(self.health.not_streaming_reason, "streaming", "not streaming")
        else:
            self._send(404, b"not found\n", "text/plain")

    def _verdict(self, reason: str | None, yes: str, no: str) -> None:
        body = f"{yes}\n" if reason is None else f"{no}: {reason}\n"
        self._send(200 if reason is None else 503, body.encode(), "text/plain")

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


# How often ``serve_forever`` looks for a shutdown request: ``shutdown()`` (pgbridge stopping)
# waits up to this long; the standard library's 0.5 s made every stop up to half a second slower.
SHUTDOWN_POLL_S: Final = 0.05


def serve(host: str, port: int, metrics: Metrics, health: Health) -> ThreadingHTTPServer:
    handler = type("Handler", (_Handler,), {"metrics": metrics, "health": health})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(SHUTDOWN_POLL_S,), name="pgbridge-http",
                              daemon=True)
    thread.start()
    return server
