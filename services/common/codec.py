"""Ragged-array codec: batches of variable-length 1-D arrays <-> `cascade.v1.Ragged`.

Wire format (DESIGN.md section 4): `data` holds the rows' values concatenated as raw little-endian
bytes, `lengths` the number of elements of each row. Decoding validates the invariant
len(data) == sum(lengths) * itemsize and raises `InvalidArgument` naming the field otherwise.
This module knows nothing of models or services; it only moves numbers.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from services.common.errors import InvalidArgument
from services.common.pb import common_pb2

_NUMPY = {
    common_pb2.DTYPE_INT32: np.dtype("<i4"),
    common_pb2.DTYPE_FLOAT32: np.dtype("<f4"),
}
_NAMES = {"int32": common_pb2.DTYPE_INT32, "float32": common_pb2.DTYPE_FLOAT32}


def encode(rows: Sequence[Sequence[float] | np.ndarray], dtype: str) -> common_pb2.Ragged:
    """Encode rows (lists, numpy or torch 1-D arrays) as a Ragged message of `dtype`."""
    if dtype not in _NAMES:
        raise ValueError(f"dtype must be one of {sorted(_NAMES)}, got {dtype!r}")
    code = _NAMES[dtype]
    np_dtype = _NUMPY[code]
    arrays = [_as_numpy(r).astype(np_dtype, copy=False).reshape(-1) for r in rows]
    data = np.concatenate(arrays).tobytes() if arrays else b""
    return common_pb2.Ragged(dtype=code, data=data, lengths=[a.size for a in arrays])


def encode_flat(flat: np.ndarray, lengths: Sequence[int], dtype: str) -> common_pb2.Ragged:
    """Encode an already concatenated array with its row lengths (no per-row copies)."""
    code = _NAMES[dtype]
    flat = _as_numpy(flat).astype(_NUMPY[code], copy=False).reshape(-1)
    if flat.size != sum(lengths):
        raise ValueError(f"flat array has {flat.size} elements but lengths sum to {sum(lengths)}")
    return common_pb2.Ragged(dtype=code, data=flat.tobytes(), lengths=list(lengths))


def decode_flat(msg: common_pb2.Ragged, field: str, dtype: str | None = None) -> tuple[np.ndarray, list[int]]:
    """Decode to (concatenated values, row lengths), validating the message.

    `field` names the request field in errors; `dtype` ("int32" / "float32"), when given, is
    the element type the caller requires.
    """
    if msg.dtype not in _NUMPY:
        raise InvalidArgument(field, f"dtype must be DTYPE_INT32 or DTYPE_FLOAT32, got {msg.dtype}")
    if dtype is not None and msg.dtype != _NAMES[dtype]:
        raise InvalidArgument(field, f"expected {dtype} values, got {common_pb2.DType.Name(msg.dtype)}")
    np_dtype = _NUMPY[msg.dtype]
    lengths = list(msg.lengths)
    total = sum(lengths)
    if len(msg.data) != total * np_dtype.itemsize:
        raise InvalidArgument(
            field,
            f"data holds {len(msg.data)} bytes but lengths sum to {total} elements "
            f"({total * np_dtype.itemsize} bytes of {np_dtype.name})",
        )
    flat = np.frombuffer(msg.data, dtype=np_dtype)
    return flat, lengths


def decode(msg: common_pb2.Ragged, field: str, dtype: str | None = None) -> list[np.ndarray]:
    """Decode to a list of 1-D numpy arrays (views into one buffer, read-only)."""
    flat, lengths = decode_flat(msg, field, dtype)
    return split(flat, lengths)


def split(flat: np.ndarray, lengths: Sequence[int]) -> list[np.ndarray]:
    """Cut a concatenated array into rows of the given lengths."""
    offsets = np.cumsum([0, *lengths])
    return [flat[offsets[i] : offsets[i + 1]] for i in range(len(lengths))]


def require_finite(flat: np.ndarray, field: str) -> None:
    """Raise InvalidArgument when a float array holds NaN or inf."""
    if flat.dtype.kind == "f" and flat.size and not np.isfinite(flat).all():
        bad = int(np.flatnonzero(~np.isfinite(flat))[0])
        raise InvalidArgument(field, f"value at flat index {bad} is {flat[bad]} (must be finite)")


def require_lengths(lengths: Sequence[int], expected: Sequence[int], field: str, against: str) -> None:
    """Raise InvalidArgument unless the row lengths of `field` equal those of `against`."""
    if list(lengths) != list(expected):
        if len(lengths) != len(expected):
            detail = f"has {len(lengths)} rows, {against} has {len(expected)}"
        else:
            i = next(i for i, (a, b) in enumerate(zip(lengths, expected)) if a != b)
            detail = f"row {i} has {lengths[i]} elements, {against} row {i} has {expected[i]}"
        raise InvalidArgument(field, f"row lengths must match {against}: {detail}")


def _as_numpy(row) -> np.ndarray:
    if isinstance(row, np.ndarray):
        return row
    if hasattr(row, "detach"):  # torch.Tensor, without importing torch here
        return row.detach().cpu().numpy()
    return np.asarray(row)
