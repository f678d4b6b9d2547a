"""Deterministic batch drawing: same (seed, stage, step) -> same batch; epochs cover every record."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from services.common.errors import InvalidArgument
from services.orchestrator.batches import data_cursor, draw_batch, draw_indices, epoch_permutation

RECORDS = [f"r{i}" for i in range(10)]


def test_same_key_same_batch_and_other_keys_differ():
    a = draw_batch(RECORDS, seed=0, stage=1, step=3, batch_size=4)
    assert a == draw_batch(RECORDS, seed=0, stage=1, step=3, batch_size=4)
    others = [draw_batch(RECORDS, 1, 1, 3, 4), draw_batch(RECORDS, 0, 2, 3, 4), draw_batch(RECORDS, 0, 1, 4, 4)]
    assert all(o != a for o in others)


def test_an_epoch_visits_every_record_once():
    batches = [draw_indices(10, seed=7, stage="rl", step=s, batch_size=5) for s in range(2)]
    assert sorted(batches[0] + batches[1]) == list(range(10))
    assert batches[0] + batches[1] == epoch_permutation(10, 7, "rl", 0)


def test_a_step_crossing_the_epoch_boundary_takes_the_next_permutation():
    got = draw_indices(10, seed=7, stage=0, step=2, batch_size=4)  # positions 8..11
    assert got == epoch_permutation(10, 7, 0, 0)[8:] + epoch_permutation(10, 7, 0, 1)[:2]


def test_batch_larger_than_the_data_wraps():
    assert sorted(draw_indices(3, 0, 0, 0, 6)) == [0, 0, 1, 1, 2, 2]


def test_stable_across_processes():
    code = ("from services.orchestrator.batches import draw_indices;"
            "print(draw_indices(50, 3, 'if-rl', 5, 8))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "123", "PATH": ""}, cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == str(draw_indices(50, 3, "if-rl", 5, 8))


@pytest.mark.parametrize(("n", "batch", "step", "field"), [(0, 4, 0, "records"), (5, 0, 0, "batch_size"),
                                                             (5, 2, -1, "step")])
def test_bad_arguments_name_the_field(n, batch, step, field):
    with pytest.raises(InvalidArgument) as info:
        draw_indices(n, 0, 0, step, batch)
    assert info.value.field == field


def test_cursor_points_at_the_next_step():
    assert data_cursor(2, 9) == "stage=2;step=10"
