"""What ``/healthz`` and ``/readyz`` report: written by the pipeline thread, read by the HTTP thread."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Health:
    """The pipeline's state as an orchestrator sees it.

    Ready means streaming, Kafka reachable and not stalled; ``not_ready_reason`` says which, so a
    ``curl /readyz`` during an incident names the cause (the stall watchdog's reason carries the
    positions).
    """

    streaming: bool = False
    kafka_ok: bool = True
    last_error: str | None = None
    standby: bool = False
    stalled: str | None = None  # the stall watchdog's reason while stalled (ack/watchdog.py)

    @property
    def ready(self) -> bool:
        return self.not_ready_reason is None

    @property
    def not_ready_reason(self) -> str | None:
        if self.standby:
            return "standby: another replica holds the leader lease"
        if not self.streaming:
            return f"not streaming: {self.last_error}" if self.last_error else "not streaming"
        if not self.kafka_ok:
            return "Kafka unreachable"
        return self.stalled
