"""Slot safety: how much WAL the slot holds, how close it is to invalidation, and whether it is ours.

Postgres keeps every WAL segment a logical slot may still need (from its ``restart_lsn``). With
``max_slot_wal_keep_size`` set, a slot that falls further behind is *invalidated*: its
``wal_status`` becomes ``lost`` and the changes it had not confirmed are gone for good. Without the
setting the slot fills the disk instead. ``SlotMonitor.check`` runs every
``postgres.slot_check_interval_s`` on the session's SQL connection and publishes:

* retained WAL = current WAL position - ``restart_lsn``,
* ``safe_wal_size`` (headroom before invalidation; +Inf when unlimited) and ``wal_status``,
* the server's WAL rate (bytes/s, smoothed) and the forecast ``safe_wal_size / rate``: how long the
  slot would survive if confirmation stopped now.

What can be detected about the slot's identity, and what is done about it (``SlotError``, fatal:
a restart would otherwise stream from a different point and silently skip changes):

* **invalidated**: ``wal_status = 'lost'``, or ``invalidation_reason`` (PG 17+) / ``conflicting``
  (PG 16+, logical slots on a standby) set.
* **dropped**: the row is gone. While we stream it cannot be dropped (Postgres refuses to drop an
  active slot), so this shows on a reconnect: the pipeline then asks ``SlotIdentity.missing`` before
  it would create a new slot, and refuses within the same leadership term.
* **recreated or moved by someone else**: a slot has no creation id, but its ``confirmed_flush_lsn``
  only ever moves when *we* confirm. If, on reconnect, it is ahead of the last LSN we sent, another
  consumer (or ``pg_replication_slot_advance``, or a drop and re-create) moved it, and the changes
  in between never reached Kafka from us. Only a new leadership term (another replica legitimately
  streamed in between) or a restart of pgbridge accepts that.
* **taken over**: ``active_pid`` differs from our walsender's pid while we think we stream.

The query reads the row as ``to_jsonb`` so one statement works on every supported version.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Final

import psycopg

from pgbridge.errors import SlotError, SourceUnavailable
from pgbridge.lsn import Lsn, format_lsn, parse_lsn
from pgbridge.metrics import WAL_STATUSES, Metrics

log = logging.getLogger(__name__)

# Weight of the newest sample in the WAL-rate moving average: ~5 samples of memory, so a burst
# shows within a minute at the default interval without one quiet interval zeroing the forecast.
RATE_SMOOTHING: Final = 0.3
_DROP_HINT: Final = ("changes since the last confirmed LSN may be lost; re-snapshot: `pgbridge slot drop`, "
                     "then restart with snapshot.mode=initial")

_SLOT_QUERY: Final = (
    "SELECT to_jsonb(s),"
    " (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END)::text,"
    " current_setting('max_slot_wal_keep_size'),"
    # Failover protection (Postgres 17+; NULL / empty before): the standby slots the primary waits
    # for before sending changes to failover slots, and which physical slots have a standby on them.
    " current_setting('synchronized_standby_slots', true),"
    " (SELECT jsonb_object_agg(p.slot_name, p.active) FROM pg_replication_slots p"
    "  WHERE p.slot_type = 'physical')"
    " FROM pg_replication_slots s WHERE slot_name = %s")


@dataclass(frozen=True, slots=True)
class SlotState:
    """One reading of the slot, plus the server's WAL position at the same moment."""

    name: str
    active_pid: int | None
    wal_status: str | None
    invalidation_reason: str | None
    restart_lsn: Lsn | None
    confirmed_flush_lsn: Lsn | None
    safe_wal_size: int | None  # None: unlimited (max_slot_wal_keep_size = -1)
    server_lsn: Lsn
    max_keep_size: str
    failover: bool = False  # a failover slot (Postgres 17+)
    synced: bool = False  # synchronized from a primary (read on a standby, or after its promotion)
    standby_slots: tuple[str, ...] = ()  # synchronized_standby_slots
    active_physical_slots: frozenset[str] = frozenset()

    @property
    def failover_protected(self) -> bool:
        """What the ``pgbridge_slot_failover_synced`` gauge says (1): the slot is a failover slot,
        and either this server holds it synchronized (``synced``: a standby, or a promoted one), or
        this primary names standby slots in ``synchronized_standby_slots`` and each has a standby
        streaming on it. Then a logical change reaches pgbridge only after those standbys have its
        WAL, and their slot sync worker keeps a copy of the slot: a failover to one of them loses
        nothing. What the primary cannot see is whether that worker is running and caught up
        (``sync_replication_slots`` on the standby); ``synced`` on the standby shows it."""
        if not self.failover:
            return False
        if self.synced:
            return True
        return bool(self.standby_slots) and all(name in self.active_physical_slots for name in self.standby_slots)

    @property
    def retained_wal_bytes(self) -> int:
        return max(0, self.server_lsn - self.restart_lsn) if self.restart_lsn is not None else 0

    @property
    def invalidated(self) -> bool:
        return self.wal_status == "lost" or self.invalidation_reason is not None


def standby_slot_names(setting: str | None) -> tuple[str, ...]:
    """The slot names of ``synchronized_standby_slots`` (a comma list; ``*`` is not allowed)."""
    return tuple(name.strip().strip('"') for name in (setting or "").split(",") if name.strip())


def slot_state_from_row(row: dict[str, Any], server_lsn: str, max_keep_size: str,
                        standby_slots: str | None = None,
                        physical_active: dict[str, Any] | None = None) -> SlotState:
    """Pure: the ``to_jsonb`` row of pg_replication_slots (any version) → ``SlotState``."""

    def lsn(key: str) -> Lsn | None:
        value = row.get(key)
        return None if value is None else parse_lsn(str(value))

    reason = row.get("invalidation_reason")
    if reason is None and row.get("conflicting") is True:
        reason = "conflict with recovery"
    pid = row.get("active_pid")
    safe = row.get("safe_wal_size")
    return SlotState(name=str(row.get("slot_name")), active_pid=None if pid is None else int(pid),
                     wal_status=row.get("wal_status"), invalidation_reason=None if reason is None else str(reason),
                     restart_lsn=lsn("restart_lsn"), confirmed_flush_lsn=lsn("confirmed_flush_lsn"),
                     safe_wal_size=None if safe is None else int(safe), server_lsn=parse_lsn(server_lsn),
                     max_keep_size=max_keep_size, failover=row.get("failover") is True,
                     synced=row.get("synced") is True, standby_slots=standby_slot_names(standby_slots),
                     active_physical_slots=frozenset(name for name, active in (physical_active or {}).items()
                                                     if active is True))


def invalidation_forecast_s(safe_wal_size: int | None, wal_rate: float) -> float:
    """Seconds until ``safe_wal_size`` is used up at ``wal_rate`` bytes/s; +Inf if never."""
    if safe_wal_size is None or wal_rate <= 0:
        return math.inf
    return max(0.0, safe_wal_size / wal_rate)


def read_slot(conn: psycopg.Connection[tuple[object, ...]], slot: str) -> SlotState | None:
    try:
        row = conn.execute(_SLOT_QUERY, (slot,)).fetchone()
    except psycopg.OperationalError as exc:
        raise SourceUnavailable(f"slot check failed: {str(exc).strip()}") from None
    if row is None:
        return None
    data, server_lsn, keep, standby_slots, physical = row
    assert isinstance(data, dict)
    return slot_state_from_row(data, str(server_lsn), str(keep), None if standby_slots is None else str(standby_slots),
                               physical if isinstance(physical, dict) else None)


class SlotIdentity:
    """What this process knows about its slot across sessions of one leadership term.

    ``sent(lsn)`` records every LSN confirmed to Postgres; ``verify_on_open`` compares the slot found
    on (re)connect against that memory. ``new_term()`` forgets it when leadership was (re)acquired:
    the slot may then legitimately have been advanced by another replica.
    """

    def __init__(self) -> None:
        self.last_sent_lsn: Lsn | None = None
        self.streamed = False

    def new_term(self) -> None:
        self.last_sent_lsn = None
        self.streamed = False

    def sent(self, lsn: Lsn) -> None:
        if self.last_sent_lsn is None or lsn > self.last_sent_lsn:
            self.last_sent_lsn = lsn

    def missing(self, slot: str) -> None:
        """The slot is gone; refuse to create a new one if we streamed from the old one this term."""
        if self.streamed:
            raise SlotError(f"replication slot {slot} was dropped while pgbridge was using it"
                            f" (last confirmed {format_lsn(self.last_sent_lsn or Lsn(0))})", hint=_DROP_HINT)

    def verify_on_open(self, slot: str, confirmed_flush_lsn: Lsn | None) -> None:
        last = self.last_sent_lsn
        if last is not None and confirmed_flush_lsn is not None and confirmed_flush_lsn > last:
            raise SlotError(
                f"replication slot {slot} is at {format_lsn(confirmed_flush_lsn)}, past the "
                f"{format_lsn(last)} pgbridge confirmed: it was advanced, or dropped and re-created, by "
                "someone else", hint="changes in between did not reach Kafka; if that was deliberate "
                "restart pgbridge, else re-snapshot (`pgbridge slot drop`, snapshot.mode=initial)")

    def streaming(self) -> None:
        self.streamed = True


class SlotMonitor:
    """Periodic slot check of one session: metrics, WAL-rate forecast, and the identity checks."""

    def __init__(self, slot: str, metrics: Metrics, *, interval_s: float, walsender_pid: int | None) -> None:
        self.slot = slot
        self.metrics = metrics
        self.interval_s = interval_s
        self.walsender_pid = walsender_pid
        self.wal_rate = 0.0
        self._next_at = 0.0
        self._last_sample: tuple[float, Lsn] | None = None
        self._warned_status: str | None = None

    def due(self, now: float) -> bool:
        return now >= self._next_at

    def check(self, conn: psycopg.Connection[tuple[object, ...]], now: float | None = None) -> SlotState:
        now = time.monotonic() if now is None else now
        self._next_at = now + self.interval_s
        state = read_slot(conn, self.slot)
        if state is None:
            raise SlotError(f"replication slot {self.slot} disappeared while pgbridge was streaming",
                            hint=_DROP_HINT)
        self.observe(state, now)
        return state

    def observe(self, state: SlotState, now: float) -> None:
        """Publish one reading and raise ``SlotError`` if the slot can no longer be trusted."""
        if state.invalidated:
            raise SlotError(f"replication slot {self.slot} was invalidated"
                            f" ({state.invalidation_reason or 'wal_status lost'}): the WAL it needs was removed",
                            hint=_DROP_HINT + "; raise max_slot_wal_keep_size to avoid it")
        if self.walsender_pid is not None and state.active_pid is not None \
                and state.active_pid != self.walsender_pid:
            raise SlotError(f"replication slot {self.slot} is now used by pid {state.active_pid}, not by "
                            f"this pgbridge (walsender pid {self.walsender_pid})",
                            hint="two consumers compete for the slot; run one pgbridge per slot, or enable "
                            "ha.leader_election on all replicas")
        if self._last_sample is not None:
            then, lsn = self._last_sample
            elapsed = now - then
            if elapsed > 0:
                rate = max(0, state.server_lsn - lsn) / elapsed
                self.wal_rate = rate if self.wal_rate == 0 else \
                    RATE_SMOOTHING * rate + (1 - RATE_SMOOTHING) * self.wal_rate
        self._last_sample = (now, state.server_lsn)
        m = self.metrics
        m.slot_retained_wal.set(state.retained_wal_bytes)
        m.slot_safe_wal_size.set(math.inf if state.safe_wal_size is None else state.safe_wal_size)
        m.server_wal_rate.set(self.wal_rate)
        forecast = invalidation_forecast_s(state.safe_wal_size, self.wal_rate)
        m.slot_invalidation_forecast.set(forecast)
        for status in WAL_STATUSES:
            m.slot_wal_status.labels(status).set(1 if status == state.wal_status else 0)
        m.slot_failover_synced.set(1 if state.failover_protected else 0)
        if state.wal_status in ("extended", "unreserved") and state.wal_status != self._warned_status:
            log.warning("replication slot is close to invalidation",
                        extra={"slot": self.slot, "wal_status": state.wal_status,
                               "safe_wal_size": state.safe_wal_size, "forecast_s": round(forecast)})
        self._warned_status = state.wal_status


# Prefix of pgbridge's own heartbeat messages; the pipeline drops them instead of publishing them.
HEARTBEAT_PREFIX: Final = "pgbridge.heartbeat"


def emit_heartbeat(conn: psycopg.Connection[tuple[object, ...]]) -> Lsn:
    """Write a non-transactional logical message into this database's WAL.

    Decoding it wakes the walsender for *this* database, which then reports a WAL position past it;
    with nothing outstanding the tracker confirms that position, so the slot's restart_lsn and
    confirmed_flush_lsn keep moving even when the database itself is otherwise silent.
    """
    try:
        row = conn.execute("SELECT pg_logical_emit_message(false, %s, ''::text)::text",
                           (HEARTBEAT_PREFIX,)).fetchone()
    except psycopg.OperationalError as exc:
        raise SourceUnavailable(f"heartbeat failed: {str(exc).strip()}") from None
    return parse_lsn(str(row[0])) if row else Lsn(0)
