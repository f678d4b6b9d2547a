"""Writing one published weight version: HF layout, hashed once, while it is written.

A version is the model's `model.safetensors` plus the files `save_pretrained` and the tokenizer's
`save_pretrained` put beside it (config, generation config, tokenizer, chat template). Those side
files do not change while a trainer trains, so they are rendered once and kept as bytes; the
tensors stream from the model's memory straight into the file, with no serialized copy in
between. Every byte goes through one `DirDigest` as it is written, in checksum order, so the
version's sha256 (the same value as `sha256_dir`) costs one pass and no read-back.
This module knows nothing of gRPC, DeepSpeed, ranks or the store's layout.
"""

from __future__ import annotations

import itertools
import json
import struct
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import torch

from services.common.checksum import DirDigest, weight_files

WEIGHTS = "model.safetensors"
METADATA = {"format": "pt"}
"""What save_pretrained stamps on its safetensors; from_pretrained refuses a file without it."""

DTYPE_CODES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL",
}
"""torch dtype -> the dtype name of the safetensors format."""


def can_stream(module) -> bool:
    """False when transformers rewrites this model's tensors on save (fused experts and the like);
    such a model is written by `save_pretrained` instead, which knows the conversion."""
    return not getattr(module, "_weight_conversions", None)


def export_tensors(module) -> dict[str, torch.Tensor]:
    """The state dict as save_pretrained stores it: a tied tensor (the LM head sharing the embedding)
    once, under its first name; the loader re-ties it from the config."""
    out, seen = {}, set()
    for name, t in module.state_dict().items():
        key = (t.device, t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)
        if key not in seen:
            seen.add(key)
            out[name] = t
    return out


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def safetensors_head(tensors: Mapping[str, torch.Tensor]) -> tuple[bytes, list[str]]:
    """(the file's first bytes: u64 little-endian header length + JSON header padded to 8 bytes,
    the tensor names in data order). Wider dtypes come first so every tensor stays aligned."""
    names = sorted(tensors, key=lambda n: (-tensors[n].element_size(), n))
    header: dict = {"__metadata__": METADATA}
    offset = 0
    for name in names:
        t = tensors[name]
        if t.dtype not in DTYPE_CODES:
            raise ValueError(f"tensor {name!r} has dtype {t.dtype}, which the weight export does not write")
        header[name] = {"dtype": DTYPE_CODES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + nbytes(t)]}
        offset += nbytes(t)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text, names


def raw_bytes(t: torch.Tensor) -> memoryview:
    """The tensor's bytes as a safetensors file stores them (row-major), copied only when it is not
    already a contiguous CPU tensor (a GPU tensor is copied to the CPU one tensor at a time)."""
    flat = t.detach().to("cpu").contiguous().reshape(-1)
    return memoryview(flat.view(torch.uint8).numpy())


def safetensors_pieces(tensors: Mapping[str, torch.Tensor]) -> tuple[int, Iterator]:
    """(file size, the file's bytes in pieces): the header, then each tensor's memory in turn."""
    head, names = safetensors_head(tensors)
    size = len(head) + sum(nbytes(t) for t in tensors.values())
    return size, itertools.chain([head], (raw_bytes(tensors[n]) for n in names))


def render_side_files(module, tokenizer) -> dict[str, bytes]:
    """Every file of a version but the weights, as save_pretrained and the tokenizer's save_pretrained
    write them (save_pretrained with an empty state dict writes the configs only)."""
    with tempfile.TemporaryDirectory() as tmp:
        module.save_pretrained(tmp, state_dict={})
        tokenizer.save_pretrained(tmp)
        root = Path(tmp)
        return {
            p.relative_to(root).as_posix(): p.read_bytes()
            for p in weight_files(root)
            if not p.name.endswith((".safetensors", ".safetensors.index.json"))
        }


def write_version(directory: Path, side_files: Mapping[str, bytes], tensors: Mapping[str, torch.Tensor]) -> str:
    """Write `side_files` and `tensors` (as model.safetensors) into `directory` in checksum order,
    hashing every piece as it is written; return the directory's sha256 (equal to sha256_dir)."""
    if WEIGHTS in side_files:
        raise ValueError(f"side files must not include {WEIGHTS}")
    digest = DirDigest()
    for rel in sorted([*side_files, WEIGHTS]):
        size, pieces = safetensors_pieces(tensors) if rel == WEIGHTS else (len(side_files[rel]), iter([side_files[rel]]))
        path = Path(directory) / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        digest.start_file(rel, size)
        with path.open("wb") as f:
            for piece in pieces:
                digest.update(piece)
                f.write(piece)
    return digest.hexdigest()
