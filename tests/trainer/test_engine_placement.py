"""Where the trainer's model lives: `placement` turns the configured device into DeepSpeed's
accelerator and a local rank (DeepSpeed, not torch, places the model)."""

import os

import pytest

from services.trainer.engine import placement, use_accelerator


@pytest.mark.parametrize(
    ("device", "world", "gpu", "expected"),
    [
        ("auto", 1, False, ("cpu", None)),
        ("auto", 4, True, ("cuda", None)),
        ("cpu", 1, True, ("cpu", None)),  # a GPU host told to train on the CPU
        ("cuda", 2, True, ("cuda", None)),
        ("cuda:3", 1, True, ("cuda", 3)),
    ],
)
def test_placement(device, world, gpu, expected):
    assert placement(device, world, gpu) == expected


def test_cuda_without_a_gpu_names_the_field():
    with pytest.raises(ValueError, match=r"device=cuda:1: no CUDA device is visible; use device=cpu"):
        placement("cuda:1", 1, False)


def test_one_gpu_for_many_ranks_is_refused():
    with pytest.raises(ValueError, match=r"device=cuda:1 names one GPU, but 2 ranks"):
        placement("cuda:1", 2, True)


def test_use_accelerator_cpu_is_what_deepspeed_then_reports(monkeypatch):
    from deepspeed.accelerator import get_accelerator

    monkeypatch.delenv("DS_ACCELERATOR", raising=False)
    use_accelerator("cpu")
    assert get_accelerator().device_name() == "cpu"
    assert os.environ["DS_ACCELERATOR"] == "cpu"
