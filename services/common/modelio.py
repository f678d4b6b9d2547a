"""Model and tokenizer loading from an HF directory (local path or file:// URI).

Nothing here downloads: loading is local-files-only, always. `safetensors_views` reads the
tensors of a safetensors file already in memory (the bytes a checksum was verified on) without
copying them. This module knows nothing of serving or training; it returns transformers objects.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from urllib.parse import urlparse

from services.common.errors import FailedPrecondition, InvalidArgument

MAX_SAFETENSORS_HEADER = 100 * 1024 * 1024
_SAFETENSORS_DTYPES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
    "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
}
_DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16"}


def resolve_uri(uri: str | Path, field: str = "uri") -> Path:
    """`/path`, `relative/path` or `file:///path` -> an existing local directory."""
    text = str(uri)
    if not text:
        raise InvalidArgument(field, "is empty; expected a local path or file:// URI")
    parsed = urlparse(text)
    if parsed.scheme == "file":
        path = Path(parsed.path)
    elif parsed.scheme in ("", None) or len(parsed.scheme) == 1:  # plain path (or a Windows drive)
        path = Path(text)
    else:
        raise InvalidArgument(field, f"scheme {parsed.scheme!r} is not supported (use a path or file://)")
    if not path.exists():
        raise InvalidArgument(field, f"{path} does not exist")
    return path


def torch_dtype(name: str):
    import torch

    if name not in _DTYPES:
        raise InvalidArgument("dtype", f"{name!r} is not one of {sorted(_DTYPES)}")
    return getattr(torch, _DTYPES[name])


def load_tokenizer(path: str | Path):
    """The tokenizer of an HF directory (with its chat template), local files only."""
    from transformers import AutoTokenizer

    directory = resolve_uri(path, "tokenizer")
    tok = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    if tok.pad_token_id is None:
        raise FailedPrecondition(f"tokenizer at {directory} has no pad token; rebuild it with `cascade init-model`")
    return tok


def load_causal_lm(path: str | Path, device: str = "cpu", dtype: str = "float32"):
    """An AutoModelForCausalLM from an HF directory, in eval mode, on `device`."""
    from transformers import AutoModelForCausalLM

    directory = resolve_uri(path, "model")
    model = AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch_dtype(dtype), local_files_only=True)
    return model.to(device).eval()


def architecture_of(path: str | Path) -> tuple[str, int]:
    """(architecture class name, vocab size) from a directory's config.json, without loading weights."""
    import json

    directory = resolve_uri(path, "model")
    config_file = directory / "config.json"
    if not config_file.exists():
        raise InvalidArgument("model", f"{directory} has no config.json (not an HF model directory)")
    cfg = json.loads(config_file.read_text())
    archs = cfg.get("architectures") or ["unknown"]
    return archs[0], int(cfg.get("vocab_size", 0))


def safetensors_views(buffer, name: str, field: str = "weights.uri") -> dict:
    """The tensors of the safetensors file held in `buffer` (a writable uint8 numpy array), each a
    view into it: nothing is copied, and the tensors keep the buffer alive. A malformed file is
    InvalidArgument naming `field` (`name` says which file)."""
    import torch

    def bad(why: str) -> InvalidArgument:
        return InvalidArgument(field, f"{name} is not a readable safetensors file: {why}")

    if len(buffer) < 8:
        raise bad("shorter than its 8-byte header length")
    length = int.from_bytes(buffer[:8].tobytes(), "little")
    if length > min(MAX_SAFETENSORS_HEADER, len(buffer) - 8):
        raise bad(f"header length {length} runs past the file ({len(buffer)} bytes)")
    try:
        header = json.loads(buffer[8 : 8 + length].tobytes())
    except ValueError as exc:
        raise bad(f"the header is not JSON ({exc})") from None
    if not isinstance(header, dict):
        raise bad("the header is not a JSON object")
    data = torch.from_numpy(buffer[8 + length :])
    out = {}
    for key, entry in header.items():
        if key != "__metadata__":
            out[key] = _view(data, key, entry, bad)
    return out


def _view(data, key: str, entry, bad):
    """One header entry -> its tensor, a view of `data`, after checking dtype, shape and offsets."""
    import torch

    try:
        dtype = getattr(torch, _SAFETENSORS_DTYPES[entry["dtype"]])
        shape = [int(d) for d in entry["shape"]]
        begin, end = (int(x) for x in entry["data_offsets"])
    except (KeyError, TypeError, ValueError):
        raise bad(f"tensor {key!r} has a malformed entry {entry!r}") from None
    size = math.prod(shape) * dtype.itemsize
    if min(shape, default=0) < 0 or not 0 <= begin <= end <= len(data) or end - begin != size:
        raise bad(f"tensor {key!r}: shape {shape} of {entry['dtype']} does not fit data_offsets {[begin, end]} in {len(data)} bytes")
    piece = data[begin:end]
    if begin % dtype.itemsize:  # unaligned for its dtype: the one case that copies
        piece = piece.clone()
    return piece.view(dtype).reshape(shape)
