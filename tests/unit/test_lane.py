"""The insert lane (``pgbridge/lane.py``) publishes what the stages publish, byte for byte.

Each scenario is a stream of XLogData frames run through the real streaming loop
(``Session.run``) with the real decoder, assembler, encoder and dispatcher twice: once with the
lane, once without it. The records handed to the producer (topic, key, value, unit, and what
``describe`` would name if Kafka refused the record), the per-table metrics and the received LSN
must be the same, and the lane must have taken the rows it is for, so a lane that quietly hands
everything to the stages fails here too. The harness and the scenario are
tests/support/session_runs.py, shared with tests/unit/test_compiled_path.py.
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from pgbridge import lane as lane_module
from pgbridge.encode import plan as plan_module
from pgbridge.lane import InsertLane
from pgbridge.lsn import Lsn
from tests.support.kernels import compiled
from tests.support.session_runs import PublishesAlike, SessionRun, scenario, session_run


@pytest.fixture(autouse=True)
def _kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lane exists only with both kernels: imported directly, whatever ``PGBRIDGE_PURE_PYTHON``
    says, and a failure naming the fix when they are not built (as every kernel test,
    tests/support/kernels.py)."""
    monkeypatch.setattr(lane_module, "_decode_kernel", compiled("pgbridge.decode._native"))
    monkeypatch.setattr(plan_module, "_native", compiled("pgbridge.encode._native"))


class _CountingLane(InsertLane):
    taken = 0

    def insert(self, frame: bytes) -> Lsn:
        end = super().insert(frame)
        if end:
            _CountingLane.taken += 1
        return end


def _run(batches: list[list[bytes]], tmp: pathlib.Path, *, lane: bool, **options: Any) -> SessionRun:
    """The stream through ``Session.run``, with the lane (counting the rows it takes) or without;
    ``options`` go to ``session_run`` (those it does not know to the ``ChangeEncoder``)."""
    _CountingLane.taken = 0
    return session_run(batches, tmp, taken=lambda: _CountingLane.taken, lane=_CountingLane if lane else None,
                       **options)


class TestTheLanePublishesWhatTheStagesPublish(PublishesAlike):
    """The shared checks (tests/support/session_runs.py), the lane under test and the stages the
    reference: the plain rows and the log rows go through the lane; the NaN/é row, the update and
    the delete do not."""

    scenario_taken = 44
    filtered_taken = 42

    def run(self, batches: list[list[bytes]], tmp: pathlib.Path, tested: bool, **options: Any) -> SessionRun:
        return _run(batches, tmp, lane=tested, **options)


def test_without_the_kernel_in_the_encoder_the_lane_leaves_every_row_to_the_stages(tmp_path: pathlib.Path) -> None:
    batches = scenario()
    run = _run(batches, tmp_path / "python", lane=True, native=False)
    assert run.taken == 0
    assert run.records == _run(batches, tmp_path / "stages", lane=False).records
