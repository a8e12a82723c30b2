"""A real Confluent-compatible Schema Registry for the tests: Apicurio Registry, in memory.

Apicurio Registry (Apache-2.0) serves the Confluent API under ``/apis/ccompat/v7`` and enforces
compatibility itself (``PUT /config/{subject}``), so the evolution tests see a real registry's
verdicts and error bodies. Its distribution archive comes from Maven (``jvm/registry/pom.xml``,
``jvm/fetch.py``) and is unpacked once next to it in the cache. Storage is in memory: a restart
forgets everything, so an outage is simulated with ``pause()`` / ``resume()`` (SIGSTOP/SIGCONT:
connections hang, as with a wedged or partitioned server), which keeps the registered schemas.

``tests/support/registry_double.py`` remains only for faults a real registry cannot be made to
produce on demand (a given HTTP status N times).

``SchemaRegistry(tls=..., users=...)`` serves HTTPS only (Quarkus: PEM certificate and key, plain
HTTP disabled) and requires HTTP basic auth of one of ``users`` on every path (Quarkus' embedded
user realm and an ``authenticated`` permission), as a production registry behind its own TLS would.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from jvm.fetch import fetch

from pgbridge.embedded._process import death_signal_prefix, log_tail, wait_for
from pgbridge.embedded.ports import free_port

HOST: Final = "127.0.0.1"
CCOMPAT: Final = "/apis/ccompat/v7"
START_TIMEOUT_S: Final = 120.0


def _runner_jar() -> Path:
    """The unpacked Quarkus runner jar (``lib/`` beside it), unpacked on first use."""
    folder = fetch("registry")
    app = folder / "app"
    marker = app / ".unpacked"
    if not marker.exists():
        archive = next(folder.glob("apicurio-registry-app-*-all.zip"))
        shutil.rmtree(app, ignore_errors=True)
        with zipfile.ZipFile(archive) as zipped:
            zipped.extractall(app)
        marker.write_text("ok\n")
    return next(app.glob("apicurio-registry-app-*-runner.jar"))


class SchemaRegistry:
    """One Apicurio Registry process on a free loopback port; ``url`` is its Confluent API."""

    def __init__(self, *, tls: tuple[Path, Path, Path] | None = None,
                 users: Mapping[str, str] | None = None) -> None:
        """``tls``: (certificate, key, CA certificate) PEM files to serve HTTPS with; ``users``:
        user -> password for basic auth (this client uses the first)."""
        self.tls = tls
        self.users = dict(users or {})
        self.port = free_port()
        self.workdir = Path(tempfile.mkdtemp(prefix="pgbridge-registry-"))
        self.log_path = self.workdir / "registry.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{HOST}:{self.port}{CCOMPAT}"

    def _security_options(self) -> list[str]:
        options: list[str] = []
        if self.tls is not None:
            cert, key, _ = self.tls
            options += [f"-Dquarkus.http.ssl-port={self.port}", f"-Dquarkus.http.port={free_port()}",
                        f"-Dquarkus.http.ssl.certificate.files={cert}",
                        f"-Dquarkus.http.ssl.certificate.key-files={key}",
                        "-Dquarkus.http.insecure-requests=disabled"]
        if self.users:
            options += ["-Dquarkus.http.auth.basic=true", "-Dquarkus.security.users.embedded.enabled=true",
                        "-Dquarkus.security.users.embedded.plain-text=true",
                        "-Dquarkus.http.auth.permission.all.paths=/*",
                        "-Dquarkus.http.auth.permission.all.policy=authenticated",
                        *(f"-Dquarkus.security.users.embedded.users.{user}={password}"
                          for user, password in self.users.items())]
        return options

    def start(self) -> SchemaRegistry:
        jar = _runner_jar()
        command = [*death_signal_prefix(), shutil.which("java") or "java", "-Xms64m", "-Xmx384m",
                   # a test's registry lives briefly and serves little: C2's compiling would not pay
                   "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                   f"-Dquarkus.http.port={self.port}", f"-Dquarkus.http.host={HOST}",
                   "-Dquarkus.log.level=WARN", *self._security_options(), "-jar", str(jar)]
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log,
                                             stderr=subprocess.STDOUT, cwd=self.workdir, start_new_session=True)

        def ready() -> bool:
            if self._process is not None and self._process.poll() is not None:
                raise RuntimeError(f"the registry exited; log:\n{log_tail(self.log_path)}")
            with contextlib.suppress(OSError, urllib.error.URLError):
                subjects: object = self._request("GET", "/subjects")
                return subjects == []
            return False

        try:
            wait_for(ready, timeout=START_TIMEOUT_S, interval=0.25, what=f"the Schema Registry on port {self.port}")
        except BaseException:
            self.close()
            raise
        return self

    def pause(self) -> None:
        """SIGSTOP: the port still accepts connections, nothing answers (an outage that keeps state)."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def _signal(self, signum: signal.Signals) -> None:
        if self._process is not None and self._process.poll() is None:
            os.kill(self._process.pid, signum)

    def close(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self.resume()
            self._process.kill()
            self._process.wait(30)
        self._process = None
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> SchemaRegistry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the Confluent API, for test set-up and assertions ----------------------------------------
    def _request(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/vnd.schemaregistry.v1+json"}
        if self.users:
            user, password = next(iter(self.users.items()))
            headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        context = ssl.create_default_context(cafile=str(self.tls[2])) if self.tls else None
        request = urllib.request.Request(f"{self.url}{path}", data=data, method=method, headers=headers)
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            text = response.read().decode()
        return json.loads(text) if text else None

    def set_compatibility(self, level: str, subject: str | None = None) -> None:
        self._request("PUT", f"/config/{subject}" if subject else "/config", {"compatibility": level})

    def register(self, subject: str, schema: Any) -> int:
        reply = self._request("POST", f"/subjects/{subject}/versions", {"schema": json.dumps(schema)})
        return int(reply["id"])

    def subjects(self) -> dict[str, list[int]]:
        """Subject → the schema id of each version, oldest first."""
        found: dict[str, list[int]] = {}
        for subject in self._request("GET", "/subjects"):
            versions = self._request("GET", f"/subjects/{subject}/versions")
            found[subject] = [int(self._request("GET", f"/subjects/{subject}/versions/{v}")["id"])
                              for v in sorted(versions)]
        return found


def start_registry() -> SchemaRegistry:
    return SchemaRegistry().start()
