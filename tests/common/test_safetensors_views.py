"""safetensors_views: the tensors of an in-memory safetensors file, as views (no copy), and
readable errors for a malformed file."""

import json
import struct

import numpy as np
import pytest
import torch
from safetensors.torch import save

from services.common.errors import InvalidArgument
from services.common.modelio import safetensors_views

TENSORS = {
    "w": torch.randn(3, 4), "h": torch.randn(5).to(torch.bfloat16), "i": torch.arange(3, dtype=torch.int8),
    "b": torch.tensor([True, False]), "s": torch.tensor(2.5, dtype=torch.float64), "e": torch.zeros(0, 2),
}


def buffer_of(blob: bytes) -> np.ndarray:
    return np.frombuffer(bytearray(blob), dtype=np.uint8)


def test_views_equal_what_safetensors_wrote_and_share_the_buffer():
    buf = buffer_of(save(TENSORS, {"format": "pt"}))
    views = safetensors_views(buf, "model.safetensors")
    assert views.keys() == TENSORS.keys()
    assert all(views[k].dtype == t.dtype and views[k].shape == t.shape and torch.equal(views[k], t) for k, t in TENSORS.items())
    buf[:] = 0  # the views are the buffer: no copy was made
    assert not views["w"].any()


def header(entries: dict, data: bytes) -> np.ndarray:
    text = json.dumps(entries).encode()
    return buffer_of(struct.pack("<Q", len(text)) + text + data)


@pytest.mark.parametrize(
    "buf, words",
    [
        (buffer_of(b"\x01"), "shorter"),
        (buffer_of(struct.pack("<Q", 10**9) + b"{}"), "runs past"),
        (buffer_of(struct.pack("<Q", 2) + b"{x"), "not JSON"),
        (header({"a": {"dtype": "C64", "shape": [1], "data_offsets": [0, 8]}}, b"\0" * 8), "malformed"),
        (header({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8), "does not fit"),
        (header({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 8), "does not fit"),
    ],
)
def test_a_malformed_file_is_invalid_argument_naming_the_file(buf, words):
    with pytest.raises(InvalidArgument) as err:
        safetensors_views(buf, "model.safetensors")
    assert err.value.field == "weights.uri" and "model.safetensors" in err.value.message and words in err.value.message


def test_an_unaligned_tensor_is_copied_rather_than_refused():
    data = b"\0" + np.arange(3, dtype=np.float32).tobytes()
    views = safetensors_views(header({"a": {"dtype": "F32", "shape": [3], "data_offsets": [1, 13]}}, data), "x")
    assert views["a"].tolist() == [0.0, 1.0, 2.0]
