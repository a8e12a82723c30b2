"""Long-running server processes of the cluster tests (HDFS, Spark standalone), one owner for each
process's start, log file and end.

Every daemon gets its own session (so a kill reaches every process it spawned, e.g. a Spark
worker's executors), the parent death signal (it dies with the test run even on SIGKILL), and a
log file kept in its work directory for the failure messages. A work directory named
``<prefix><pid>-*`` is removed on close; one left by a run that was SIGKILLed is removed the next
time a group with the same prefix starts.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from pgbridge.embedded._process import ServerProcess, remove_stale_dirs


class Daemon:
    """One server process, started by ``start()``, killed (with its whole session) by ``kill()``;
    the process itself is ``pgbridge.embedded._process.ServerProcess``'s, as the embedded servers'."""

    def __init__(self, name: str, command: Sequence[str], *, cwd: Path,
                 env: Mapping[str, str] | None = None) -> None:
        self.name = name
        self.command = list(command)
        self.cwd = cwd
        self.env = dict(env) if env is not None else None
        self.log_path = cwd / f"{name}.log"
        self._process = ServerProcess(self.log_path)

    def __repr__(self) -> str:
        return f"<Daemon {self.name} pid={self.pid}>"

    @property
    def running(self) -> bool:
        return self._process.running

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def start(self) -> Daemon:
        self.cwd.mkdir(parents=True, exist_ok=True)
        self._process.start(self.command, cwd=self.cwd, env=self.env)
        return self

    def check_alive(self) -> None:
        """``RuntimeError`` with the log's tail if the process has exited (for readiness waits)."""
        if self._process.exit_code is not None:
            raise RuntimeError(f"{self.name} exited with {self._process.exit_code}; log:\n{self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL to the process and everything in its session; waits for the process."""
        self._process.kill(session=True)

    def log_tail(self, lines: int = 40) -> str:
        return self._process.log_tail(lines)


class DaemonGroup:
    """Daemons sharing one temporary work directory; ``close()`` kills them in reverse start order
    and removes the directory."""

    def __init__(self, prefix: str) -> None:
        base = Path(tempfile.gettempdir())
        remove_stale_dirs(base, prefix)
        self.workdir = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=base))
        self.daemons: list[Daemon] = []

    def start(self, name: str, command: Sequence[str], env: Mapping[str, str] | None = None) -> Daemon:
        daemon = Daemon(name, command, cwd=self.workdir / name, env=env)
        self.daemons.append(daemon)
        return daemon.start()

    def run(self, name: str, command: Sequence[str], *, timeout: float) -> str:
        """Run a one-shot command (a format step) in the work directory; its output, or
        ``RuntimeError`` with it when it fails."""
        done = subprocess.run(list(command), cwd=self.workdir, capture_output=True, text=True, timeout=timeout,
                              check=False)
        output = done.stdout + done.stderr
        (self.workdir / f"{name}.log").write_text(output)
        if done.returncode != 0:
            raise RuntimeError(f"{name} failed with {done.returncode}:\n" + "\n".join(output.splitlines()[-30:]))
        return output

    def check_alive(self) -> None:
        for daemon in self.daemons:
            daemon.check_alive()

    def logs(self, lines: int = 30) -> str:
        """The tail of every daemon's log, for a failure message."""
        return "\n".join(f"--- {daemon.name}\n{daemon.log_tail(lines)}" for daemon in self.daemons)

    @contextlib.contextmanager
    def starting(self, what: str) -> Iterator[None]:
        """Around a group's start: on failure every daemon is killed and the directory removed, and
        the error names ``what`` with the tail of each daemon's log (read before the removal)."""
        try:
            yield
        except Exception as exc:
            logs = self.logs()
            self.close()
            raise RuntimeError(f"{what} did not start: {exc}\n{logs}") from exc
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        try:
            for daemon in reversed(self.daemons):
                daemon.kill()
        finally:
            shutil.rmtree(self.workdir, ignore_errors=True)
