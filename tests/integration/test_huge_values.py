"""Hostile input: one 500 MB text value, in a transaction with ordinary small rows (issue 16).

The value is built on the server: a 1 MB block of random md5 hex repeated 500 times. pglz (whose
window is 4 kB) cannot shrink it, so the TOASTed value, the WAL and the pgoutput Insert really are
500 MB. No Kafka record can carry it (the producer's ``message.max.bytes`` is 1,000,000 by default):

* ``kafka.oversize_policy=stop`` (the default): pgbridge exits 1 with the one oversize line naming
  the table, the key, the size, the limit and the settings; the slot does not confirm the
  transaction's commit and the row after the huge one is never published.
* ``dead_letter``: the dead-letter record replaces it; the small rows before and after it and the
  next transaction arrive, the slot confirms past both, pgbridge keeps running.

With ``postgres.streaming`` on (the default) Postgres streams the transaction before it commits
(its decoded size passes ``logical_decoding_work_mem``), so pgbridge buffers it and the huge row
goes to the spill file; with streaming off it arrives at commit and flows straight through. Each
policy runs one of the two. Both measure pgbridge's peak RSS (``ru_maxrss`` of the child, exact):
the value arrives as one CopyData message, so libpq's input buffer (which libpq keeps) and the
decoded value hold it at least twice, and the encoded record once more: both paths are bound to 3
copies plus the process's baseline.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from tests.support.bridge import BridgeProcess, bridge_env, read_events
from tests.support.broker import Broker
from tests.support.kafka import read_topic
from tests.support.postgres import slot_confirmed_flush_lsn, wal_insert_lsn
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

BLOCK_CHUNKS = 31_250  # md5 hex digests of 32 characters: a 1,000,000-byte block of random hex
REPEATS = 500
HUGE = 32 * BLOCK_CHUNKS * REPEATS  # 500,000,000 bytes
BASELINE = 200 * 1024 * 1024  # the interpreter, librdkafka, psycopg and the plans, with margin
DDL = "CREATE TABLE docs (id int PRIMARY KEY, body text)"
TRANSACTION = (
    "INSERT INTO docs VALUES (1, 'small before')",
    f"INSERT INTO docs SELECT 2, repeat(string_agg(md5(random()::text), ''), {REPEATS}) "
    f"FROM generate_series(1, {BLOCK_CHUNKS})",
    "INSERT INTO docs VALUES (3, 'small after')",
)


class _Run:
    """pgbridge as a child reaped with ``wait4``, which reports its exact peak RSS."""

    def __init__(self, env: dict[str, str]) -> None:
        self.bridge = BridgeProcess(env).start()
        self.status: int | None = None
        self.peak_rss = 0

    @property
    def pid(self) -> int:
        assert self.bridge.process is not None
        return self.bridge.process.pid

    def alive(self) -> bool:
        if self.status is not None:
            return False
        pid, status, usage = os.wait4(self.pid, os.WNOHANG)
        if pid == 0:
            return True
        self._reaped(status, usage.ru_maxrss)
        return False

    def wait(self, timeout: float) -> int:
        wait_until(lambda: not self.alive(), timeout=timeout, interval=0.2,
                   message=f"pgbridge still running after {timeout:.0f}s: {self.bridge.log()[-3000:]}")
        assert self.status is not None
        return self.status

    def terminate(self, timeout: float = 60.0) -> int:
        os.kill(self.pid, signal.SIGTERM)
        return self.wait(timeout)

    def _reaped(self, status: int, maxrss_kib: int) -> None:
        self.status = os.waitstatus_to_exitcode(status)
        self.peak_rss = maxrss_kib * 1024
        assert self.bridge.process is not None
        self.bridge.process.returncode = self.status  # Popen must not wait for it again

    def close(self) -> None:
        if self.status is None:
            os.kill(self.pid, signal.SIGKILL)
            self.wait(30)


def _env(pg_dsn: str, bootstrap: str, prefix: str, extra: dict[str, str]) -> dict[str, str]:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(DDL)
    return bridge_env(pg_dsn, bootstrap, prefix,
                      extra={"PGBRIDGE_POSTGRES__TABLES": "public.docs", "PGBRIDGE_SNAPSHOT__MODE": "never",
                             **extra})


def _started(env: dict[str, str], pg_dsn: str, prefix: str) -> _Run:
    run = _Run(env)
    wait_until(lambda: slot_confirmed_flush_lsn(pg_dsn, prefix) or not run.alive(), timeout=60,
               message="slot never created")
    assert run.alive(), run.bridge.log()
    return run


def _huge_transaction(pg_dsn: str) -> int:
    """Commit the transaction, then a small one; return a WAL position at or below the first's
    commit record (a slot confirming no further re-sends the transaction after a restart)."""
    started = time.monotonic()
    with psycopg.connect(pg_dsn) as conn:
        for statement in TRANSACTION:
            conn.execute(statement)
        below_commit = wal_insert_lsn(pg_dsn)
    took = time.monotonic() - started
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        row = conn.execute("SELECT length(body), pg_column_size(body) FROM docs WHERE id = 2").fetchone()
        conn.execute("INSERT INTO docs VALUES (4, 'next transaction')")
    assert row is not None and row[0] == HUGE and row[1] >= HUGE  # stored uncompressed: the WAL is 500 MB too
    print(f"\nPostgres: the {HUGE:,}-character value committed in {took:.1f}s, stored in {row[1]:,} bytes")
    return below_commit


def _spill_files(spill_dir: Path) -> list[int]:
    sizes = []
    for path in spill_dir.glob("*.spill"):
        with contextlib.suppress(FileNotFoundError):
            sizes.append(path.stat().st_size)
    return sizes


def _wait(run: _Run, spill_dir: Path, done: Callable[[], bool], what: str) -> int:
    """Wait for ``done`` while pgbridge works; return the largest spill file seen meanwhile."""
    largest = [0]

    def check() -> bool:
        largest[0] = max([largest[0], *_spill_files(spill_dir)])
        return done()

    wait_until(check, timeout=150, interval=0.1, message=f"{what}: {run.bridge.log()[-3000:]}")
    return largest[0]


def _peak(run: _Run, label: str, copies: int) -> None:
    print(f"pgbridge peak RSS ({label}): {run.peak_rss / 2**20:,.0f} MiB for a {HUGE / 2**20:,.0f} MiB value "
          f"({run.peak_rss / HUGE:.2f}x)")
    assert run.peak_rss < copies * HUGE + BASELINE, (
        f"peak RSS {run.peak_rss:,} bytes: more than {copies} copies of the {HUGE:,}-byte value")


def test_stop_names_the_huge_row_spills_it_and_confirms_nothing_of_its_transaction(
        pg_dsn: str, apache_kafka: Broker, topic_prefix: str) -> None:
    env = _env(pg_dsn, apache_kafka.bootstrap, topic_prefix, {})
    spill_dir = Path(env["PGBRIDGE_BUFFER__SPILL_DIR"])
    run = _started(env, pg_dsn, topic_prefix)
    try:
        below_commit = _huge_transaction(pg_dsn)
        started = time.monotonic()
        spilled = _wait(run, spill_dir, lambda: not run.alive(), "pgbridge did not stop")
        print(f"pgbridge exited {time.monotonic() - started:.1f}s after the commit; largest spill file {spilled:,} bytes")
    finally:
        run.close()
    log = run.bridge.log()
    assert run.status == 1, log[-3000:]
    assert "MemoryError" not in log and "Traceback" not in log, log[-3000:]
    lines = [line for line in log.splitlines() if "record too large for Kafka" in line]
    assert len(lines) == 1 and len(lines[0]) < 2000, log[-3000:]  # one line, never the value
    line = lines[0]
    for part in ("table public.docs key {id=2}", "event 2", "producer's message.max.bytes of 1,000,000",
                 "(refused before sending)", "PGBRIDGE_KAFKA__PROPERTIES__MESSAGE.MAX.BYTES",
                 f"--entity-name {topic_prefix}.public.docs", "PGBRIDGE_KAFKA__OVERSIZE_POLICY=dead_letter"):
        assert part in line, (part, line)
    size = int(line.split(" is ", 1)[1].split(" bytes encoded", 1)[0].replace(",", ""))
    assert HUGE < size < HUGE + 1000, line
    # Postgres streamed the transaction: pgbridge held it in its buffer, the huge row on disk.
    assert spilled > HUGE, "the huge row never reached the spill file"
    assert not _spill_files(spill_dir), "spill files left behind"
    # The slot may confirm WAL inside the open transaction (the keepalive rule, docs/operations.md),
    # never its commit record: a restart decodes the whole transaction again and stops there.
    confirmed = slot_confirmed_flush_lsn(pg_dsn, topic_prefix)
    assert confirmed is not None and confirmed <= below_commit, "the slot confirmed the refused row's commit"
    events = read_events(apache_kafka.bootstrap, f"{topic_prefix}.public.docs", topic_prefix, min_count=0,
                         timeout=20, idle=1.0)
    published = {e.value["after"]["id"] for e in events if e.value is not None}
    assert published <= {1}, f"rows after the refused one were published: {published}"
    _peak(run, "stop, streamed and spilled", 3)


def test_dead_letter_replaces_the_huge_row_and_goes_on_without_streaming(
        pg_dsn: str, apache_kafka: Broker, topic_prefix: str) -> None:
    env = _env(pg_dsn, apache_kafka.bootstrap, topic_prefix,
               {"PGBRIDGE_KAFKA__OVERSIZE_POLICY": "dead_letter", "PGBRIDGE_POSTGRES__STREAMING": "false"})
    spill_dir = Path(env["PGBRIDGE_BUFFER__SPILL_DIR"])
    run = _started(env, pg_dsn, topic_prefix)
    try:
        _huge_transaction(pg_dsn)
        target = wal_insert_lsn(pg_dsn)
        started = time.monotonic()

        def confirmed_both() -> bool:
            assert run.alive(), run.bridge.log()[-3000:]
            return (slot_confirmed_flush_lsn(pg_dsn, topic_prefix) or 0) >= target

        spilled = _wait(run, spill_dir, confirmed_both, "the slot never confirmed the transactions")
        print(f"pgbridge confirmed both transactions {time.monotonic() - started:.1f}s after the commit")
        letters = read_topic(apache_kafka.bootstrap, f"{topic_prefix}._dead_letter", min_count=1, timeout=30,
                             idle=1.0)
        events = read_events(apache_kafka.bootstrap, f"{topic_prefix}.public.docs", topic_prefix, min_count=3,
                             timeout=30, idle=1.0)
        assert run.terminate() == 0, run.bridge.log()[-3000:]
    finally:
        run.close()
    assert "Traceback" not in run.bridge.log()
    # At least once: a reconnect (the walsender's timeout on a loaded machine) delivers the
    # transaction again, identically; what counts is each change and the one dead letter.
    values = [e.value for e in events if e.value is not None]
    changes = {(v["source"]["commit_lsn"], v["transaction"]["total_order"]): v["after"]["id"] for v in values}
    assert [changes[at] for at in sorted(changes)] == [1, 3, 4]
    distinct_letters = {letter.value for letter in letters}
    assert len(distinct_letters) == 1 and letters[0].value is not None and len(letters[0].value) < 2000
    if len(values) > 3 or len(letters) > 1:
        assert "transient failure; reconnecting" in run.bridge.log(), "a change delivered twice without a reconnect"
    letter = json.loads(letters[0].value)
    assert (letter["reason"], letter["refused_by"], letter["table"], letter["key"], letter["total_order"],
            letter["limit_bytes"]) == ("record_too_large", "producer", "public.docs", "{id=2}", 2, 1_000_000), letter
    assert HUGE < letter["size_bytes"] < HUGE + 1000, letter
    assert spilled == 0, "a transaction decoded at its commit was buffered"
    _peak(run, "dead_letter, not streamed", 3)
