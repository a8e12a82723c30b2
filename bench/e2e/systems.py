"""The systems under test, each run as its own OS process so its CPU and memory are its alone.

A system is started against a database whose table and publication already exist, and is ready
once its replication slot is active: from then on every commit reaches it. ``python -m pgbridge
run`` is configured through ``PGBRIDGE_*`` variables exactly as a deployment would be; Debezium's
runner lives in ``bench/debezium/``.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import psycopg

from e2e.procstat import ProcSample, sample
from pgbridge.embedded.ports import free_port

READY_TIMEOUT_S = 180.0


class System(Protocol):
    key: str
    label: str

    def topic(self, prefix: str, table: str) -> str: ...

    def start(self, dsn: str, bootstrap: str, *, prefix: str, slot: str, publication: str, table: str,
              log_dir: Path) -> None: ...

    @property
    def pid(self) -> int: ...

    def commit_us(self, value: bytes) -> int: ...

    def prepare_decoding(self, bootstrap: str, prefix: str) -> None: ...

    def extra(self) -> dict[str, object]: ...

    def stop(self) -> None: ...


def wait_slot_active(dsn: str, slot: str, process: subprocess.Popen[bytes], log: Path,
                     timeout: float = READY_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone()
            if row is not None and row[0]:
                return
            if process.poll() is not None:
                raise RuntimeError(f"{process.args!r} exited with {process.returncode} before streaming; "
                                   f"log {log}:\n{log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.1)
    raise RuntimeError(f"slot {slot} not active after {timeout:g}s; log {log}")


class Pgbridge:
    """``python -m pgbridge run`` as a child process; its commit→ack histogram is scraped at the end."""

    key = "pgbridge"
    label = "pgbridge"

    def __init__(self, extra_env: dict[str, str] | None = None, source: Path | None = None, *,
                 key: str = "pgbridge") -> None:
        self.key = key
        self.label = key
        self.extra_env = extra_env or {}
        self.source = source  # a checkout whose service/ is run instead of the installed pgbridge
        self.process: subprocess.Popen[bytes] | None = None
        self.http_port = 0
        self.log_path = Path()
        self._schemas: object = None
        self._metrics_text = ""

    def topic(self, prefix: str, table: str) -> str:
        return f"{prefix}.public.{table}"

    def start(self, dsn: str, bootstrap: str, *, prefix: str, slot: str, publication: str, table: str,
              log_dir: Path) -> None:
        self.http_port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("PGBRIDGE_")}
        env.update({
            "PGBRIDGE_POSTGRES__DSN": dsn,
            "PGBRIDGE_POSTGRES__SLOT": slot,
            "PGBRIDGE_POSTGRES__PUBLICATION": publication,
            "PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS": bootstrap,
            "PGBRIDGE_KAFKA__TOPIC_PREFIX": prefix,
            "PGBRIDGE_SNAPSHOT__MODE": "never",
            "PGBRIDGE_HTTP__PORT": str(self.http_port),
            "PGBRIDGE_HTTP__HOST": "127.0.0.1",
            "PGBRIDGE_BUFFER__SPILL_DIR": tempfile.mkdtemp(prefix="pgbridge-bench-spill-"),
            "PGBRIDGE_LOG__LEVEL": "WARNING",
        })
        env.update(self.extra_env)
        if self.source is not None:
            env["PYTHONPATH"] = os.pathsep.join([str(self.source / "service"), env.get("PYTHONPATH", "")])
        self.log_path = log_dir / f"{prefix}.log"
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen([sys.executable, "-m", "pgbridge", "run"], env=env,
                                            stdout=log, stderr=subprocess.STDOUT)
        wait_slot_active(dsn, slot, self.process, self.log_path)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def prepare_decoding(self, bootstrap: str, prefix: str) -> None:
        from e2e.tail import read_all
        from pgbridge.consumer import SchemaStore

        store = SchemaStore()
        for key, value in read_all(bootstrap, f"{prefix}._schemas"):
            assert key is not None and value is not None
            store.add(key, value)
        self._schemas = store

    def commit_us(self, value: bytes) -> int:
        from pgbridge.consumer import SchemaStore

        assert isinstance(self._schemas, SchemaStore)
        return int(self._schemas.decode(value)["source"]["ts_us"])

    def scrape(self) -> None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/metrics", timeout=5) as response:
                self._metrics_text = response.read().decode()
        except OSError:
            self._metrics_text = ""

    def extra(self) -> dict[str, object]:
        """The bridge's own commit→ack histogram (per transaction), as p50/p99 bucket bounds."""
        buckets = [(float("inf") if le == "+Inf" else float(le), float(count)) for le, count in re.findall(
            r'pgbridge_commit_to_ack_seconds_bucket\{le="([^"]+)"\} ([0-9.e+]+)', self._metrics_text)]
        if not buckets or buckets[-1][1] == 0:
            return {}
        total = buckets[-1][1]

        def quantile(q: float) -> float:
            return next(le for le, count in buckets if count >= q * total)

        return {"metrics_commit_to_ack_p50_le_s": quantile(0.5), "metrics_commit_to_ack_p99_le_s": quantile(0.99),
                "metrics_transactions": total}

    def stop(self) -> None:
        if self.process is None:
            return
        self.scrape()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


@dataclass
class Usage:
    """CPU seconds spent between two samples, and peak RSS over the process's life."""

    cpu_s: float
    peak_rss_mb: float
    main_thread_cpu_s: float


def usage(before: ProcSample, after: ProcSample) -> Usage:
    return Usage(cpu_s=after.cpu_s - before.cpu_s, peak_rss_mb=after.hwm_kb / 1024,
                 main_thread_cpu_s=after.main_thread_cpu_s - before.main_thread_cpu_s)


def sample_or_fail(pid: int) -> ProcSample:
    result = sample(pid)
    if result is None:
        raise RuntimeError(f"process {pid} is gone")
    return result
