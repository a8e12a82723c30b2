"""What the Postgres and broker launchers share: dying with their parent, stale-directory removal,
and deadline waits.

A throwaway server must never outlive the process that started it, whether that process exits,
returns from an exception, or is killed with SIGKILL. ``close()`` and ``atexit`` hooks cover the
first two; the parent death signal (``setpriv --pdeathsig KILL``) covers the third, and
``remove_stale_dirs`` deletes what such a death leaves on disk the next time anyone starts a server.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from pgbridge.embedded import EmbeddedError

T = TypeVar("T")


def death_signal_prefix() -> list[str]:
    """``setpriv --pdeathsig KILL --``: the server dies with us even if we are killed with SIGKILL.

    The death signal fires when the *thread* that started the child exits, so it is only used from
    the main thread (where the CLI and pytest fixtures start servers); elsewhere it is ``[]``.
    """
    if threading.current_thread() is not threading.main_thread():
        return []
    return list(_setpriv_pdeathsig())


@functools.cache
def _setpriv_pdeathsig() -> tuple[str, ...]:
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return ()
    command = (setpriv, "--pdeathsig", "KILL", "--")
    probe = subprocess.run([*command, "true"], capture_output=True, timeout=30, check=False)
    return command if probe.returncode == 0 else ()


def command_lines() -> list[str]:
    """The command line of every process we can see, NULs as spaces."""
    lines = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                lines.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
    return lines


def remove_stale_dirs(base: Path, prefix: str) -> None:
    """Delete directories left by earlier processes that died without cleaning up (SIGKILL,
    ``os._exit``): named ``<prefix><pid>-*``, ours, that pid is gone, and no process names the
    directory on its command line (a server still running there is left alone)."""
    stale = []
    for path in base.glob(f"{prefix}*-*"):
        pid = path.name[len(prefix) :].split("-", 1)[0]
        with contextlib.suppress(OSError):
            if pid.isdigit() and path.stat().st_uid == os.geteuid() and not Path(f"/proc/{pid}").exists():
                stale.append(path)
    if not stale:
        return
    in_use = " ".join(command_lines())
    for path in stale:
        if str(path) not in in_use:
            shutil.rmtree(path, ignore_errors=True)


def wait_for(predicate: Callable[[], T], *, timeout: float, interval: float, what: str) -> T:
    """Call ``predicate`` until it returns something truthy and return that; ``EmbeddedError``
    naming ``what`` after ``timeout`` seconds. Always called at least once, and once at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise EmbeddedError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(min(interval, remaining))


def log_tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` of a server's log file, for error messages."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


class ServerProcess:
    """One server's child process: started in its own session (a signal to the session reaches
    whatever it spawned, e.g. a Spark worker's executors) with the parent death signal, its output
    appended to ``log_path``. The one owner of start, liveness, signals and SIGKILL for the embedded
    servers (``apache_kafka``) and the test suite's cluster daemons (``tests/support/daemons.py``)."""

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        self._popen: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen is not None and self.running else None

    @property
    def exit_code(self) -> int | None:
        """The exit status of a process that was started and has ended (``None`` otherwise)."""
        return None if self._popen is None else self._popen.poll()

    def start(self, command: Sequence[str], *, cwd: Path, env: Mapping[str, str] | None = None,
              banner: str | None = None) -> None:
        """Start ``command``; ``banner`` is written to the log first (a restart appends to it)."""
        with self.log_path.open("ab") as log:
            if banner:
                log.write(f"--- pgbridge.embedded: {banner}\n".encode())
                log.flush()
            self._popen = subprocess.Popen([*death_signal_prefix(), *command], stdin=subprocess.DEVNULL,
                                           stdout=log, stderr=subprocess.STDOUT, cwd=cwd,
                                           env=dict(env) if env is not None else None, start_new_session=True)

    def signal(self, signum: signal.Signals) -> None:
        """``signum`` to the process, if it runs."""
        if self._popen is not None and self._popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._popen.pid, signum)

    def kill(self, *, session: bool = False) -> None:
        """SIGKILL (to the whole session with ``session``) and wait for the process."""
        popen, self._popen = self._popen, None
        if popen is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if session:
                os.killpg(popen.pid, signal.SIGKILL)
            else:
                popen.kill()
        popen.wait(30)

    def terminate(self, timeout: float) -> None:
        """SIGTERM and wait up to ``timeout`` (a controlled shutdown), then SIGKILL."""
        popen, self._popen = self._popen, None
        if popen is None or popen.poll() is not None:
            return
        popen.terminate()
        try:
            popen.wait(timeout)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait(30)

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log_path, lines)
