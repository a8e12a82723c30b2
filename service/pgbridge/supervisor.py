"""The reconnect loop around ``pipeline.Session``: leader lease, backoff, standby, clean stop.

```
 stop set? ─▶ leader lease held? ──no──▶ LeaderLease.acquire (standing by: ready, not streaming)
                 │ yes
                 ▼
           Session.open / run ──StopRequested──▶ shutdown, drop the slot if asked, return
                 │ LeadershipLost ──▶ stand by again (a fenced producer stops instead)
                 │ SlotInUse      ──▶ retry at the standby interval
                 │ TransientError ──▶ confirm what Kafka acknowledged, close, back off (0.5 s doubling
                 │                    to 30 s), open a new session
                 ▼ anything else  ──▶ close and raise (the CLI exits 1)
```
A new session resumes from the slot's confirmed LSN, so a reconnect loses nothing: what was
delivered but not yet confirmed (Postgres went away first) is delivered again, identical. The
session itself (one connection's streaming loop) is ``pipeline.Session``; this module only decides
whether and when to run another.
"""

from __future__ import annotations

import logging
import threading
from functools import partial
from typing import Final

import psycopg

from pgbridge.config import Settings
from pgbridge.errors import PrivilegeError, PublishError, SlotInUse, StopRequested, TransientError
from pgbridge.health import Health
from pgbridge.leader import LeaderLease, LeadershipLost
from pgbridge.metrics import Metrics, reconnect_target
from pgbridge.pipeline import Session
from pgbridge.snapshot.initial import SnapshotInterrupted
from pgbridge.snapshot.modes import SnapshotOnlyFinished
from pgbridge.source import slots
from pgbridge.source.monitor import SlotIdentity

log = logging.getLogger(__name__)

BACKOFF_INITIAL_S: Final = 0.5
BACKOFF_MAX_S: Final = 30.0


def _stopped(settings: Settings, *, drained: bool) -> None:
    """After a clean stop (SIGTERM/SIGINT): with ``postgres.drop_slot_on_stop``, drop the slot, but
    only if everything read was delivered and confirmed; a crash or error exit never gets here."""
    pg = settings.postgres
    if not pg.drop_slot_on_stop:
        return
    if not drained:
        log.warning("postgres.drop_slot_on_stop: slot kept, the stop did not drain (unacknowledged records or "
                    "a transaction cut short); the next start resumes from it", extra={"slot": pg.slot})
        return
    slots.drop_slot_on_stop(pg.dsn.get_secret_value(), pg.slot, connect_timeout_s=pg.connect_timeout_s)


def _standing_by(health: Health, error: str | None) -> None:
    """Each unsuccessful poll of the leader lock: standing by (ready) when Postgres answered and
    another replica holds the lock; not connected (not ready) when Postgres is unreachable."""
    health.standby = error is None
    health.last_error = None if error is None else f"leader lock: {error}"
    health.beat()


def run_forever(settings: Settings, metrics: Metrics, health: Health, stop: threading.Event) -> None:
    """Stream until ``stop`` is set; reconnect with capped exponential backoff on transient errors.

    With ``ha.leader_election`` the process first takes the leader lease (leader.py) and stands by
    until it has it (ready, not streaming: health.py); losing the lease's session ends the session
    and it stands by again.
    """
    ha = settings.ha
    lease = LeaderLease(settings.postgres.dsn.get_secret_value(), settings.postgres.slot, metrics,
                        retry_s=ha.standby_retry_s, lease_s=ha.lease_s,
                        connect_timeout_s=settings.postgres.connect_timeout_s) if ha.leader_election else None
    identity = SlotIdentity()
    backoff = BACKOFF_INITIAL_S
    if settings.postgres.drop_slot_on_stop:
        log.warning("postgres.drop_slot_on_stop is on: a clean stop drops the replication slot, so the next start "
                    "takes a new snapshot (as snapshot.mode says) and changes made between the stop and the "
                    "restart are never captured", extra={"slot": settings.postgres.slot,
                                                        "snapshot_mode": settings.snapshot.mode})
    try:
        while not stop.is_set():
            if lease is not None and not lease.held:
                lease.release()
                if not lease.acquire(stop, waiting=partial(_standing_by, health)):
                    return
                health.standby = False
                identity.new_term()  # another replica may have streamed from the slot meanwhile
            session = Session(settings, metrics, health, stop, identity=identity, lease=lease)
            try:
                session.open()
                backoff = BACKOFF_INITIAL_S
                health.last_error = None
                session.run()
                _stopped(settings, drained=session.shutdown())
                return
            except StopRequested:
                _stopped(settings, drained=session.shutdown())
                return
            except SnapshotInterrupted:
                log.info("stopped during the initial snapshot; the next start resumes it")
                session.close()
                return
            except SnapshotOnlyFinished as exc:
                log.info("snapshot.mode=initial_only: stopping without streaming", extra={"reason": str(exc)})
                session.close()
                return
            except LeadershipLost as exc:
                session.publisher.check_fenced()  # frozen while a standby took over: stop, never commit
                health.last_error = str(exc)
                # The lease's Postgres session ended (a restart, a network cut, a terminated backend):
                # a session torn down for a transient Postgres failure like any other, whichever of
                # the two connections noticed first.
                metrics.reconnects.labels(reconnect_target(exc)).inc()
                log.warning("leadership lost; standing by", extra={"error": str(exc)})
                session.close()
                continue
            except SlotInUse as exc:
                # Another consumer streams: a standby (or a replica without the lease) polls at the
                # standby interval so it takes over within seconds of the slot being released.
                health.last_error = str(exc)
                identity.new_term()
                log.info("slot busy; waiting", extra={"error": str(exc), "retry_s": ha.standby_retry_s})
                session.close()
                stop.wait(ha.standby_retry_s)
                continue
            except (TransientError, psycopg.OperationalError) as exc:  # the latter: Postgres went away mid-query
                session.publisher.check_fenced()  # a fenced producer stops here, it never reconnects
                health.last_error = str(exc)
                metrics.reconnects.labels(reconnect_target(exc)).inc()
                log.warning("transient failure; reconnecting", extra={"error": str(exc), "retry_in_s": backoff})
                session.close_after_transient()
            except PublishError:
                session.stop_on_refused()
                raise
            except psycopg.errors.InsufficientPrivilege as exc:  # a missing GRANT, wherever it was needed
                session.close()
                raise PrivilegeError(str(exc).strip()) from exc
            except BaseException:
                session.close()
                raise
            stop.wait(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX_S)
    finally:
        if lease is not None:
            lease.release()
