"""What ``/healthz``, ``/readyz`` and ``/streamingz`` report: written by the pipeline thread, read by
the HTTP thread.

Three questions, three endpoints (http.py), because an orchestrator asks each for a different
reason:

* **alive** (``/healthz``, the liveness probe): the process is not wedged. 503 only when restarting
  it is the fix: the pipeline thread stopped beating (``beat``) for ``wedged_after_s`` in a phase
  whose loop beats at least every few seconds (streaming, the initial snapshot, standing by), or
  the stall watchdog (ack/watchdog.py) has seen records wait for Kafka with nothing acknowledged for
  that long, i.e. well past ``kafka.delivery_timeout_ms``, by which librdkafka should have failed
  them. A *source* stall (the walsender sends nothing) is not a liveness failure: restarting would
  make the walsender decode again from the slot's restart LSN, so it only costs readiness.
* **ready** (``/readyz``, the readiness probe): alive and doing its job, which is any of
  snapshotting, standing by for the leader lock, or streaming, with Kafka reachable and not
  stalled. Not ready while connecting or reconnecting (Postgres unreachable, slot busy), with Kafka
  unreachable, or stalled. A long initial snapshot and a healthy standby are ready, so
  ``helm install --wait``, ``kubectl rollout status`` and PodDisruptionBudgets work.
* **streaming** (``/streamingz``, and the ``pgbridge_streaming`` gauge): this replica holds the slot
  and streams, Kafka reachable, not stalled. For alerts and scripts that want "changes flow now".

Each "no" comes with its reason, so a ``curl`` during an incident names the cause.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from pgbridge.ack.watchdog import STALL_DELIVERY, Stall

PHASE_STARTING: Final = "starting"  # connecting, opening or creating the slot, reconnecting
PHASE_STANDBY: Final = "standby"  # another replica holds the leader lock; this one waits to take over
PHASE_SNAPSHOT: Final = "snapshot"  # the initial snapshot runs (streaming starts after it)
PHASE_STREAMING: Final = "streaming"

# Phases whose loop beats at least every few seconds; other phases (connecting, creating a slot,
# which waits for every open transaction on the server) may block for long, legitimately.
BEATING_PHASES: Final = frozenset({PHASE_STANDBY, PHASE_SNAPSHOT, PHASE_STREAMING})

# The floor of ``wedged_after_s``: the longest a beating loop may legitimately go between beats
# (one decoded message of a huge value, a 60 s standby retry) stays well below it.
MIN_WEDGED_S: Final = 120.0


def wedged_after_s(*, stall_s: float, delivery_timeout_ms: int, standby_retry_s: float) -> float:
    """How long without a beat (or with a delivery stall) before ``/healthz`` fails: twice the
    longest legitimate wait the settings allow, and never less than ``MIN_WEDGED_S``."""
    return max(MIN_WEDGED_S, 2 * stall_s, 2 * delivery_timeout_ms / 1000, 2 * standby_retry_s)


@dataclass
class Health:
    """The pipeline's state as an orchestrator sees it (see the module docstring)."""

    streaming: bool = False
    snapshotting: bool = False
    kafka_ok: bool = True
    last_error: str | None = None
    standby: bool = False
    stall: Stall | None = None  # the stall watchdog's verdict (ack/watchdog.py)
    wedged_after_s: float = MIN_WEDGED_S
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    beat_at: float | None = None  # the clock when the pipeline thread last beat

    def beat(self) -> None:
        """The pipeline thread is making progress (called from every loop it runs)."""
        self.beat_at = self.clock()

    @property
    def phase(self) -> str:
        if self.standby:
            return PHASE_STANDBY
        if self.streaming:
            return PHASE_STREAMING
        if self.snapshotting:
            return PHASE_SNAPSHOT
        return PHASE_STARTING

    @property
    def stalled(self) -> str | None:
        return self.stall.reason if self.stall is not None else None

    # -- /healthz ----------------------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self.wedged_reason is None

    @property
    def wedged_reason(self) -> str | None:
        phase = self.phase
        if phase in BEATING_PHASES and self.beat_at is not None:
            silent = self.clock() - self.beat_at
            if silent >= self.wedged_after_s:
                return f"wedged: the pipeline thread has not made progress for {silent:.0f}s ({phase})"
        stall = self.stall
        if stall is not None and stall.kind == STALL_DELIVERY and stall.for_s >= self.wedged_after_s:
            return f"wedged: {stall.reason}"
        return None

    # -- /readyz -----------------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return self.not_ready_reason is None

    @property
    def not_ready_reason(self) -> str | None:
        wedged = self.wedged_reason
        if wedged is not None:
            return wedged
        phase = self.phase
        if phase == PHASE_STANDBY:
            return None  # standing by is this replica's job; it holds no Kafka connection
        if phase == PHASE_STARTING:
            return self._starting()
        return self._kafka_or_stall()

    # -- /streamingz -------------------------------------------------------------------------------
    @property
    def is_streaming(self) -> bool:
        return self.not_streaming_reason is None

    @property
    def not_streaming_reason(self) -> str | None:
        phase = self.phase
        if phase == PHASE_STANDBY:
            return "standby: another replica holds the leader lock"
        if phase == PHASE_SNAPSHOT:
            return "initial snapshot in progress"
        if phase == PHASE_STARTING:
            return self._starting()
        return self._kafka_or_stall()

    def _starting(self) -> str:
        return f"not connected: {self.last_error}" if self.last_error else "starting"

    def _kafka_or_stall(self) -> str | None:
        if not self.kafka_ok:
            return "Kafka unreachable"
        return self.stalled
