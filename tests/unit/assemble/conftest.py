from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pgbridge.assemble.transaction import TransactionAssembler
from tests.unit.assemble.scenario import ROOMY_BUDGET, TINY_BUDGET, Wal, relation


@pytest.fixture
def spill_dir(tmp_path: Path) -> Path:
    return tmp_path / "spill"


@pytest.fixture
def assembler(spill_dir: Path) -> Iterator[TransactionAssembler]:
    assembler = TransactionAssembler(memory_bytes=ROOMY_BUDGET, spill_dir=spill_dir)
    yield assembler
    assembler.close()


@pytest.fixture
def wal(assembler: TransactionAssembler) -> Wal:
    """Feeder over ``assembler``, with the ``items`` relation already announced."""
    feeder = Wal(assembler)
    feeder.feed(relation())
    return feeder


@pytest.fixture(params=[TINY_BUDGET, ROOMY_BUDGET], ids=["spilling", "in-memory"])
def any_wal(request: pytest.FixtureRequest, spill_dir: Path) -> Iterator[Wal]:
    """Like ``wal``, once with a budget that spills every few changes and once with one that never does."""
    assembler = TransactionAssembler(memory_bytes=request.param, spill_dir=spill_dir)
    feeder = Wal(assembler)
    feeder.feed(relation())
    yield feeder
    assembler.close()
