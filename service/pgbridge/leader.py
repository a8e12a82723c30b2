"""Active/standby: leader election on a Postgres session advisory lock.

Every replica of one slot runs the same configuration. Before it streams, a replica takes
``pg_try_advisory_lock(hashtextextended('pgbridge:' || slot, 0))`` on a connection of its own, in
the slot's database, and holds it for as long as it streams. The others retry every
``ha.standby_retry_s`` and stay not ready. The lock goes with the session that holds it:

* the leader exits or is SIGKILLed: the kernel closes its socket, the backend ends at once and the
  lock is free for the next standby poll (takeover = poll interval + connect + slot start);
* the leader's host or network vanishes: the lock backend has ``idle_session_timeout`` set and the
  leader's watcher runs a query every ``ha.standby_retry_s``, so a silent leader loses the lock
  after ``ha.lease_s``;
* the leader loses its lock connection (server restart, terminated backend): the watcher thread
  marks the lease lost, the pipeline tears the session down (``LeadershipLost``), and the process
  goes back to standing by.

The lock is not the only fence: a logical slot has a single active consumer, so even a leader
that has not yet noticed its lost lease cannot stream alongside the new one (the new leader waits,
``SlotInUse``, with retries capped at ``ha.standby_retry_s``). The lock makes the standby cheap (one
idle connection, no Kafka producer) and the roles visible (``pgbridge_leader``, ``/readyz``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Final

import psycopg

from pgbridge.errors import SourceUnavailable, TransientError
from pgbridge.metrics import Metrics
from pgbridge.source.connection import build_conninfo, connect_failure, safe_target

log = logging.getLogger(__name__)

LOCK_NAMESPACE: Final = "pgbridge:"
_LOCK_KEY_SQL: Final = "hashtextextended(%s, 0)"


class LeadershipLost(TransientError):
    """The advisory lock's session ended: stop streaming and stand by again."""


STANDING_BY: Final = "standing by"
UNREACHABLE: Final = "unreachable"
# While Postgres stays unreachable, the poll's warning is repeated this often (each poll is not).
UNREACHABLE_LOG_EVERY_S: Final = 30.0


class PollLog:
    """Which unsuccessful lock polls are logged: each change of outcome (standing by, Postgres
    unreachable), and an outage again every ``UNREACHABLE_LOG_EVERY_S``, so an operator reading
    the log during a long one sees it is still going on, not one line minutes ago."""

    def __init__(self) -> None:
        self.state: str | None = None
        self.repeats = 0  # polls in a row with this outcome
        self._logged_at = 0.0

    def should_log(self, state: str, now: float) -> bool:
        if state != self.state:
            self.state, self.repeats, self._logged_at = state, 1, now
            return True
        self.repeats += 1
        if state == UNREACHABLE and now - self._logged_at >= UNREACHABLE_LOG_EVERY_S:
            self._logged_at = now
            return True
        return False


class LeaderLease:
    """Holds (or waits for) the advisory lock of one slot on a dedicated connection."""

    def __init__(self, dsn: str, slot: str, metrics: Metrics, *, retry_s: float, lease_s: float,
                 connect_timeout_s: float) -> None:
        self._dsn = dsn
        self._slot = slot
        self._metrics = metrics
        self._retry_s = retry_s
        self._lease_s = lease_s
        self._connect_timeout_s = connect_timeout_s
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None
        self._lost = threading.Event()
        self._held = False
        self._watcher: threading.Thread | None = None
        self._stop_watch = threading.Event()
        self.terms = 0

    @property
    def held(self) -> bool:
        return self._held and not self._lost.is_set()

    def acquire(self, stop: threading.Event, *, waiting: Callable[[str | None], None] | None = None) -> bool:
        """Block until the lock is ours (True) or ``stop`` is set (False). ``waiting`` is told the
        outcome of each unsuccessful poll: ``None`` when another replica holds the lock (standing
        by), else why Postgres could not be asked (health.py tells the two apart)."""
        said = PollLog()
        while not stop.is_set():
            try:
                if self._try_once():
                    self._held = True
                    self._lost.clear()
                    self.terms += 1
                    self._metrics.leader.set(1)
                    self._start_watcher()
                    log.info("leader lock acquired; this replica streams", extra={"slot": self._slot})
                    return True
                if said.should_log(STANDING_BY, time.monotonic()):
                    log.info("standing by: another replica holds the leader lock",
                             extra={"slot": self._slot, "retry_s": self._retry_s})
                if waiting is not None:
                    waiting(None)
            except SourceUnavailable as exc:
                if said.should_log(UNREACHABLE, time.monotonic()):
                    log.warning("leader lock: Postgres unreachable; retrying",
                                extra={"error": str(exc), "retry_s": self._retry_s, "attempts": said.repeats})
                self._close()
                if waiting is not None:
                    waiting(f"Postgres unreachable: {exc}")
            stop.wait(self._retry_s)
        return False

    def check(self) -> None:
        """Raise ``LeadershipLost`` if the lease's session is gone (O(1): reads an event)."""
        if self._lost.is_set():
            raise LeadershipLost("lost the leader lock's Postgres session; standing by")

    def release(self) -> None:
        self._stop_watch.set()
        if self._watcher is not None:
            self._watcher.join(timeout=5)
            self._watcher = None
        self._held = False
        self._metrics.leader.set(0)
        self._close()

    # -- internals ---------------------------------------------------------------------------------
    def _connect(self) -> psycopg.Connection[tuple[object, ...]]:
        conninfo = build_conninfo(self._dsn, replication=False, connect_timeout_s=self._connect_timeout_s)
        try:
            conn = psycopg.connect(conninfo, autocommit=True, application_name="pgbridge-leader")
            # A leader that vanished without closing its socket loses the lock after lease_s.
            if conn.info.server_version >= 140000:
                conn.execute(f"SET idle_session_timeout = {int(self._lease_s * 1000)}")
        except psycopg.OperationalError as exc:
            failure = connect_failure(safe_target(self._dsn), str(exc), hint="check postgres.dsn")
            # The leader lock is retried whatever the reason; the pipeline's own connections classify it.
            raise SourceUnavailable(str(failure)) from None
        return conn

    def _try_once(self) -> bool:
        if self._conn is None or self._conn.closed:
            self._conn = self._connect()
        try:
            row = self._conn.execute(f"SELECT pg_try_advisory_lock({_LOCK_KEY_SQL})",
                                     (LOCK_NAMESPACE + self._slot,)).fetchone()
        except psycopg.OperationalError as exc:
            raise SourceUnavailable(f"leader lock query failed: {str(exc).strip()}") from None
        return bool(row and row[0])

    def _start_watcher(self) -> None:
        self._stop_watch.clear()
        conn = self._conn
        assert conn is not None

        def watch() -> None:
            while not self._stop_watch.wait(self._retry_s):
                try:
                    conn.execute("SELECT 1")
                except Exception as exc:  # any failure of the lock session ends the lease
                    log.warning("leader lock session lost", extra={"error": str(exc).strip()})
                    self._lost.set()
                    self._metrics.leader.set(0)
                    return

        self._watcher = threading.Thread(target=watch, name="pgbridge-leader", daemon=True)
        self._watcher.start()

    def _close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                log.debug("closing the leader connection failed", exc_info=True)
            self._conn = None
