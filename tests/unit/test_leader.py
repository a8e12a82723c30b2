"""The leader lease's state machine without Postgres: the lock poll and the session watcher are
replaced by scripted answers (what ``_try_once`` and the watcher would report), the rest is real."""

from __future__ import annotations

import threading
from collections.abc import Iterable

import pytest

from pgbridge.errors import SourceUnavailable, TransientError
from pgbridge.leader import (
    LOCK_NAMESPACE,
    STANDING_BY,
    UNREACHABLE,
    UNREACHABLE_LOG_EVERY_S,
    LeaderLease,
    LeadershipLost,
    PollLog,
)
from pgbridge.metrics import LEADER, Metrics


class ScriptedLease(LeaderLease):
    """A lease whose lock polls answer from ``answers`` (True: granted, False: held by another
    replica, an exception: Postgres unreachable) and whose watcher is a flag the test sets."""

    def __init__(self, metrics: Metrics, answers: Iterable[bool | Exception], *, stop_after: int | None = None,
                 stop: threading.Event | None = None) -> None:
        super().__init__("host=127.0.0.1 port=1 dbname=x", "slot", metrics, retry_s=0.0, lease_s=5.0,
                         connect_timeout_s=1.0)
        self._answers = iter(answers)
        self.polls = 0
        self.closes = 0
        self.watchers = 0
        self._stop_after = stop_after
        self._stop = stop

    def _try_once(self) -> bool:
        self.polls += 1
        if self._stop is not None and self._stop_after is not None and self.polls >= self._stop_after:
            self._stop.set()
        answer = next(self._answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def _start_watcher(self) -> None:
        self.watchers += 1

    def _close(self) -> None:
        self.closes += 1

    def lose(self) -> None:
        """What the watcher does when the lock's session fails."""
        self._lost.set()
        self._metrics.leader.set(0)


def _leader_gauge(metrics: Metrics) -> float | None:
    return metrics.registry.get_sample_value(LEADER)


def test_the_lock_key_is_stable_across_versions() -> None:
    """Replicas of two pgbridge versions (a rolling upgrade) must contend for the same lock."""
    assert LOCK_NAMESPACE == "pgbridge:"


def test_a_free_lock_is_taken_at_once_and_the_replica_becomes_leader() -> None:
    metrics = Metrics()
    lease = ScriptedLease(metrics, [True])
    assert not lease.held and _leader_gauge(metrics) == 0
    assert lease.acquire(threading.Event())
    assert lease.held and lease.terms == 1 and lease.watchers == 1
    assert _leader_gauge(metrics) == 1
    lease.check()  # held: nothing raised


def test_a_standby_polls_until_the_lock_is_free() -> None:
    metrics = Metrics()
    lease = ScriptedLease(metrics, [False, False, False, True])
    assert lease.acquire(threading.Event())
    assert lease.polls == 4 and lease.held


def test_an_unreachable_postgres_is_retried_with_a_new_connection() -> None:
    metrics = Metrics()
    lease = ScriptedLease(metrics, [SourceUnavailable("refused"), SourceUnavailable("refused"), True])
    assert lease.acquire(threading.Event())
    assert lease.closes == 2 and lease.held


def test_a_stop_while_standing_by_gives_up_without_leading() -> None:
    metrics = Metrics()
    stop = threading.Event()
    lease = ScriptedLease(metrics, [False] * 10, stop_after=3, stop=stop)
    assert not lease.acquire(stop)
    assert lease.polls == 3 and not lease.held and lease.terms == 0
    assert _leader_gauge(metrics) == 0


def test_a_stop_before_acquiring_never_polls() -> None:
    stop = threading.Event()
    stop.set()
    lease = ScriptedLease(Metrics(), [True])
    assert not lease.acquire(stop)
    assert lease.polls == 0


def test_a_lost_session_ends_the_lease_with_a_transient_error() -> None:
    metrics = Metrics()
    lease = ScriptedLease(metrics, [True, True])
    assert lease.acquire(threading.Event())
    lease.lose()
    assert not lease.held and _leader_gauge(metrics) == 0
    with pytest.raises(LeadershipLost, match="standing by") as lost:
        lease.check()
    assert isinstance(lost.value, TransientError)  # the process stands by again, it does not exit
    # standing by again and winning starts a new term with a fresh lease
    assert lease.acquire(threading.Event())
    assert lease.held and lease.terms == 2
    lease.check()


def test_release_steps_down_and_closes_the_lock_connection() -> None:
    metrics = Metrics()
    lease = ScriptedLease(metrics, [True])
    assert lease.acquire(threading.Event())
    lease.release()
    assert not lease.held and _leader_gauge(metrics) == 0 and lease.closes == 1


def test_waiting_is_told_standby_or_unreachable_for_each_unsuccessful_poll() -> None:
    # health.py: standing by is ready; an unreachable Postgres is not.
    told: list[str | None] = []
    lease = ScriptedLease(Metrics(), [False, SourceUnavailable("refused"), False, True])
    assert lease.acquire(threading.Event(), waiting=told.append)
    assert told == [None, "Postgres unreachable: refused", None]


def test_each_change_of_poll_outcome_is_logged_and_an_outage_again_every_30_s() -> None:
    said = PollLog()
    assert said.should_log(STANDING_BY, 0.0)  # a standby...
    assert not said.should_log(STANDING_BY, 100.0)  # ...says so once
    assert said.should_log(UNREACHABLE, 101.0)  # then loses Postgres: said at once
    assert not said.should_log(UNREACHABLE, 101.0 + UNREACHABLE_LOG_EVERY_S - 1)
    assert said.should_log(UNREACHABLE, 101.0 + UNREACHABLE_LOG_EVERY_S)  # still down: said again
    assert said.repeats == 3
    assert said.should_log(STANDING_BY, 200.0)  # back, standing by again
    assert said.repeats == 1


def test_a_standby_that_loses_postgres_logs_it(caplog: pytest.LogCaptureFixture) -> None:
    lease = ScriptedLease(Metrics(), [False, SourceUnavailable("refused"), SourceUnavailable("refused"), True])
    with caplog.at_level("INFO", logger="pgbridge.leader"):
        assert lease.acquire(threading.Event())
    messages = [record.getMessage() for record in caplog.records]
    assert messages == ["standing by: another replica holds the leader lock",
                        "leader lock: Postgres unreachable; retrying",
                        "leader lock acquired; this replica streams"]
