"""The ragged-array codec: round trips, invariants and errors that name the field."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.common import codec
from services.common.errors import InvalidArgument
from services.common.pb import common_pb2

int_rows = st.lists(st.lists(st.integers(-(2**31), 2**31 - 1), max_size=20), max_size=10)
float_rows = st.lists(st.lists(st.floats(width=32, allow_nan=False), max_size=20), max_size=10)


@given(int_rows)
def test_int32_round_trip(rows):
    msg = codec.encode(rows, "int32")
    back = codec.decode(msg, "ids", "int32")
    assert [r.tolist() for r in back] == rows
    assert list(msg.lengths) == [len(r) for r in rows]
    assert len(msg.data) == 4 * sum(len(r) for r in rows)


@given(float_rows)
def test_float32_round_trip_is_bit_exact(rows):
    back = codec.decode(codec.encode(rows, "float32"), "lp", "float32")
    for got, want in zip(back, rows):
        np.testing.assert_array_equal(got, np.asarray(want, dtype=np.float32))


def test_bytes_are_little_endian():
    msg = codec.encode([[1, 256]], "int32")
    assert msg.data == b"\x01\x00\x00\x00\x00\x01\x00\x00"


def test_encode_flat_matches_encode():
    rows = [[1, 2, 3], [], [4]]
    flat = np.array([1, 2, 3, 4])
    assert codec.encode_flat(flat, [3, 0, 1], "int32") == codec.encode(rows, "int32")


def test_torch_rows_are_accepted():
    import torch

    msg = codec.encode([torch.tensor([1.5, -2.0])], "float32")
    assert codec.decode(msg, "x")[0].tolist() == [1.5, -2.0]


@pytest.mark.parametrize(
    "msg, needle",
    [
        (common_pb2.Ragged(dtype=common_pb2.DTYPE_INT32, data=b"\x00" * 7, lengths=[2]), "7 bytes"),
        (common_pb2.Ragged(dtype=common_pb2.DTYPE_UNSPECIFIED, data=b"", lengths=[]), "dtype"),
        (common_pb2.Ragged(dtype=common_pb2.DTYPE_FLOAT32, data=b"\x00" * 4, lengths=[1]), "expected int32"),
    ],
)
def test_bad_messages_name_the_field(msg, needle):
    with pytest.raises(InvalidArgument) as info:
        codec.decode(msg, "batch.input_ids", "int32")
    assert info.value.field == "batch.input_ids"
    assert needle in str(info.value)


def test_require_finite_points_at_the_bad_value():
    with pytest.raises(InvalidArgument, match=r"advantages: value at flat index 2 is nan"):
        codec.require_finite(np.array([0.0, 1.0, np.nan], dtype=np.float32), "advantages")


def test_require_lengths_reports_the_first_mismatch():
    with pytest.raises(InvalidArgument, match="row 1 has 2 elements, input_ids row 1 has 3"):
        codec.require_lengths([1, 2], [1, 3], "loss_mask", "input_ids")
    with pytest.raises(InvalidArgument, match="has 1 rows, input_ids has 2"):
        codec.require_lengths([1], [1, 3], "loss_mask", "input_ids")
