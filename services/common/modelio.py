"""Model and tokenizer loading from an HF directory (local path or file:// URI).

Nothing here downloads: loading is local-files-only, always. This module knows nothing of
serving or training; it returns transformers objects.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

from services.common.errors import FailedPrecondition, InvalidArgument

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
