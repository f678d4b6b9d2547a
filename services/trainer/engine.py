"""The DeepSpeed engine around one HF model: forward, loss, backward and one optimizer step.

`Engine` builds the model of the configured kind (causal LM, or a sequence classifier with one
output on the same base), torch AdamW (no compiled ops needed), a LambdaLR over the stage's
schedule, and a DeepSpeed engine from the config (ZeRO stage, fp32 or bf16, gradient clipping).
`train_step` runs this rank's shard, in micro-batches when asked, and all-reduces the metrics so
every rank returns the whole batch's figures. It knows nothing of gRPC, wire formats, request
ids or where checkpoints live beyond the directory it is handed.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import logging
import os
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from services.common.logits import sampled_token_logits
from services.common.modelio import load_tokenizer, resolve_uri
from services.common.rm_inputs import resolve_pad_id
from services.trainer import mismatch
from services.trainer.batch import Batch
from services.trainer.config import TrainerConfig
from services.trainer.losses import LossInputs, LossParams, LossSpec
from services.trainer.schedules import build_lr_lambda
from services.trainer.sharing import SharedLayout, share_prompts

log = logging.getLogger(__name__)
T = TypeVar("T")

# Ranks > 0 wait for rank 0's next command inside a collective, and a trainer may sit idle for
# hours between stages, so the process group's timeout is long.
DIST_TIMEOUT = timedelta(days=7)


def _remove_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def placement(device: str, world: int, cuda_available: bool) -> tuple[str, int | None]:
    """(DeepSpeed accelerator, local rank) for the configured `device`; DeepSpeed, not torch, places
    the model (on <accelerator>:<LOCAL_RANK>), so both must be chosen before it starts.

    auto -> cuda when a GPU is visible, else cpu; cpu -> cpu; cuda -> cuda on this rank's local
    rank; cuda:N -> cuda:N, for a trainer alone (ranks of a group each take cuda:<LOCAL_RANK>).
    The local rank is None unless `device` names one."""
    if device == "auto":
        device = "cuda" if cuda_available else "cpu"
    if device == "cpu":
        return "cpu", None
    if not cuda_available:
        raise ValueError(f"device={device}: no CUDA device is visible; use device=cpu (or auto)")
    if ":" not in device:
        return "cuda", None
    if world > 1:
        raise ValueError(f"device={device} names one GPU, but {world} ranks share this trainer; "
                         "use device=cuda (each rank takes cuda:<LOCAL_RANK>)")
    return "cuda", int(device.split(":")[1])


def use_accelerator(name: str) -> None:
    """Make DeepSpeed use `name` (cpu or cuda), whatever it would detect (it picks cuda whenever
    torch sees a GPU, so device=cpu on a GPU host would otherwise train on the GPU)."""
    os.environ["DS_ACCELERATOR"] = name  # read when DeepSpeed first chooses, in this process or a child
    from deepspeed.accelerator import get_accelerator, set_accelerator

    if get_accelerator().device_name() != name:  # chosen earlier in this process
        if name == "cpu":
            from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator as Chosen
        else:
            from deepspeed.accelerator.cuda_accelerator import CUDA_Accelerator as Chosen
        set_accelerator(Chosen())


SHM_COMM_OP = "deepspeed_shm_comm"


def skip_shm_comm_build() -> None:
    """Keep DeepSpeed from building its shared-memory all-reduce op at `init_distributed`.

    On CPU, DeepSpeed's torch backend JIT-compiles `deepspeed_shm_comm` (minutes on 2 cores, at the
    first start on a machine) under a lock file in the torch extensions folder; a trainer killed
    while it holds that file (a SIGKILL during start-up) leaves it behind, and every later start on
    the machine then waits for it forever. The op only serves DeepSpeed's inference all-reduce;
    a trainer's collectives go through torch.distributed, so it is declared unavailable instead."""
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__[SHM_COMM_OP] = False


def init_distributed(backend: str | None, local_rank: int | None = None) -> tuple[int, int]:
    """Join (or, alone, create) the torch.distributed group; return (rank, world_size).
    Reads MASTER_ADDR / MASTER_PORT / RANK / WORLD_SIZE / LOCAL_RANK; without them: one rank, on
    `local_rank` (the N of device=cuda:N) or 0."""
    import deepspeed
    from deepspeed.accelerator import get_accelerator

    if not dist.is_initialized():
        backend = backend or get_accelerator().communication_backend_name()
        if int(os.environ.get("WORLD_SIZE", "1")) == 1:
            # Alone: rendezvous through a private file, not a TCP port that another process may take
            # between choosing it and binding it.
            import tempfile

            os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK=str(local_rank or 0))
            fd, path = tempfile.mkstemp(prefix="cascade-trainer-rdzv-")
            os.close(fd)
            os.unlink(path)
            dist.init_process_group(backend, init_method=f"file://{path}", rank=0, world_size=1, timeout=DIST_TIMEOUT)
            # the store lives in that file for the whole run (new process groups use it): removed at exit
            atexit.register(_remove_quietly, path)
        skip_shm_comm_build()
        deepspeed.init_distributed(dist_backend=backend, auto_mpi_discovery=False, timeout=DIST_TIMEOUT)
    return dist.get_rank(), dist.get_world_size()


def start_rank(cfg: TrainerConfig) -> tuple[int, int]:
    """DeepSpeed's accelerator and this rank's device chosen from `cfg.device`, then the group
    joined; (rank, world_size). Safe to call again (the group is joined once)."""
    accelerator, local_rank = placement(cfg.device, int(os.environ.get("WORLD_SIZE", "1")), torch.cuda.is_available())
    use_accelerator(accelerator)
    return init_distributed(cfg.dist_backend, local_rank)


def resolve_precision(cfg: TrainerConfig) -> tuple[str, str]:
    """(device, precision) after `auto`: cuda + bf16 when a GPU is there, else cpu + fp32."""
    device = cfg.device if cfg.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    precision = cfg.precision if cfg.precision != "auto" else ("bf16" if device.startswith("cuda") else "fp32")
    return device, precision


def build_ds_config(cfg: TrainerConfig, precision: str) -> dict:
    """The DeepSpeed config dict: one micro-batch per step (accumulation is ours), ZeRO stage, dtype, clipping."""
    return {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": cfg.grad_clip,
        "zero_optimization": {"stage": cfg.zero_stage},
        "bf16": {"enabled": precision == "bf16"},
        "fp16": {"enabled": False},
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 1 << 30,
        "wall_clock_breakdown": False,
    }


def build_model(cfg: TrainerConfig):
    """The model of cfg.model_kind from cfg.model, fp32, in train mode (DeepSpeed casts to bf16)."""
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    directory = str(resolve_uri(cfg.model, "model"))
    if cfg.model_kind == "causal_lm":
        model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32, local_files_only=True)
    else:
        model = AutoModelForSequenceClassification.from_pretrained(
            directory, num_labels=1, dtype=torch.float32, local_files_only=True
        )
    return model.train()


def torch_optimizer(wrapped) -> torch.optim.Optimizer:
    """The torch optimizer inside DeepSpeed's wrappers (bf16, ZeRO): the one that holds the state."""
    opt = wrapped
    while not isinstance(opt, torch.optim.Optimizer) and getattr(opt, "optimizer", None) is not None:
        opt = opt.optimizer
    if not isinstance(opt, torch.optim.Optimizer):
        raise RuntimeError(f"no torch optimizer inside {type(wrapped).__name__}")
    return opt


def logits_start(loss_mask: torch.Tensor) -> int:
    """First position whose logits a loss reads: one before the earliest loss token of any row
    (the last position when no token is in the loss, so at least one column is kept)."""
    cols = loss_mask.any(dim=0).nonzero()
    first = int(cols[0]) if len(cols) else loss_mask.shape[1]
    return min(max(first - 1, 0), loss_mask.shape[1] - 1)


def causal_logprobs(model, ids: torch.Tensor, att: torch.Tensor, position_ids: torch.Tensor | None, mask: torch.Tensor,
                    params: LossParams) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(log pi_train per token (B, T) with gradient, the kept logits, entropy per token (B, T)) of a causal LM.

    log pi_train(y_t) is taken on the distribution the sampler drew from, softmax(filter(logits / T))
    (services/common/logits.py), at position t - 1; column 0 and columns before the first loss token
    are 0. Packed rows (`position_ids` given) go to `packed_logprobs`."""
    if position_ids is not None:
        return packed_logprobs(model, ids, position_ids, mask, params)
    # Only positions from the first loss token on need logits (the LM head and its softmax are most
    # of a small model's compute, and prompts are often half of a row): logits of positions
    # start..T-1 give the log-probs of tokens start+1..T-1; earlier ones are 0 and masked out.
    start = logits_start(mask)
    keep = ids.shape[1] - start
    logits = model(input_ids=ids, attention_mask=att, logits_to_keep=keep, use_cache=False).logits.float()
    targets = ids[:, start + 1:]
    z = sampled_token_logits(logits[:, :-1], targets, params.temperature, params.top_k, params.top_p)
    lse = z.logsumexp(dim=-1)
    token_lp = z.gather(-1, targets[..., None]).squeeze(-1) - lse
    lead = token_lp.new_zeros(token_lp.shape[0], start + 1)
    logprobs = torch.cat([lead, token_lp], dim=1)
    with torch.no_grad():
        probs = torch.softmax(z, dim=-1)
        ent = lse - torch.where(probs > 0, probs * z, 0.0).sum(dim=-1)
        entropy = torch.cat([lead, ent], dim=1)
    return logprobs, logits, entropy


def packed_logprobs(model, ids: torch.Tensor, position_ids: torch.Tensor, mask: torch.Tensor,
                    params: LossParams) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`causal_logprobs` of packed rows (several conversations a row, positions restarting at each).

    A packed row's prompts lie all along it, so no first column saves the LM head anything: it runs
    only on the hidden states h_{t-1} of the tokens y_t in the loss (mask 1; the rest are 0), the
    decoder without an attention mask (HF attends block-diagonally from the restarting positions; no
    KV cache, without which it would not). The kept logits are those positions' (N, V)."""
    hidden = model.get_decoder()(input_ids=ids, position_ids=position_ids.to(ids.device), use_cache=False).last_hidden_state
    want = mask > 0
    want[:, 0] = False  # column 0 has no prediction
    if not want.any():  # still one position, so every parameter is in the graph (its loss weight is 0)
        want[0, -1] = True
    return token_logprobs(model, hidden[:, :-1][want[:, 1:]], ids, want, params)


def token_logprobs(model, hidden: torch.Tensor, ids: torch.Tensor, want: torch.Tensor,
                   params: LossParams) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(log-probs (B, T), logits (N, V), entropy (B, T)) of the N tokens `want` marks in `ids` (B, T),
    from `hidden` (N, H), the hidden states that predict them (in `want.nonzero()` order); 0 elsewhere.
    log pi_train(y_t) is taken on the distribution the sampler drew from (services/common/logits.py)."""
    logits = model.get_output_embeddings()(hidden).float()
    targets = ids[want]
    z = sampled_token_logits(logits, targets, params.temperature, params.top_k, params.top_p)
    lse = z.logsumexp(dim=-1)
    logprobs = z.new_zeros(ids.shape)
    logprobs[want] = z.gather(-1, targets[:, None]).squeeze(-1) - lse
    with torch.no_grad():
        probs = torch.softmax(z, dim=-1)
        entropy = z.new_zeros(ids.shape)
        entropy[want] = lse - torch.where(probs > 0, probs * z, 0.0).sum(dim=-1)
    return logprobs, logits, entropy


SHARING_ATTENTION = ("sdpa", "eager")
"""Attention implementations that take the shared layout's additive (R, 1, W, W) mask as given."""


def gather_rows(flat: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """flat[index] whose backward adds the gradients of repeated indices in one order on every run.

    A prompt's last hidden state predicts the first token of each of its completions, so `index`
    repeats. On CPU, advanced indexing's backward adds repeats with atomics from every thread (an
    order, and float sums, that change from run to run, more often on a loaded machine: torch lists it
    among its nondeterministic operations); index_select's backward (index_add_) adds them serially.
    On CUDA it is the other way round, so other devices keep advanced indexing."""
    return flat.index_select(0, index) if flat.device.type == "cpu" else flat[index]


def shared_logprobs(model, layout: SharedLayout, ids: torch.Tensor,
                    params: LossParams) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`causal_logprobs` of a batch laid out with shared prompts (services/trainer/sharing.py): the
    decoder runs once over the shared rows under their block mask, and the LM head only on the hidden
    states that predict a loss token (gathered by `layout.predictor`). Log-probs and entropy come back
    in the unshared (B, T) layout of `ids`."""
    dev = ids.device
    inner = getattr(model, "module", model)  # a DeepSpeed engine's own `config` is DeepSpeed's
    mask = layout.attention_mask(next(inner.parameters()).dtype).to(dev)
    hidden = model.get_decoder()(input_ids=layout.input_ids.to(dev), position_ids=layout.position_ids.to(dev),
                                 attention_mask=mask, use_cache=False).last_hidden_state
    flat = hidden.reshape(-1, hidden.shape[-1])
    predicting = gather_rows(flat, layout.predictor.to(dev))
    return token_logprobs(model, predicting, ids, layout.want.to(dev), params)


def can_share(model) -> bool:
    """Whether the model's attention takes a shared layout's block mask (SHARING_ATTENTION)."""
    inner = getattr(model, "module", model)
    return getattr(inner.config, "_attn_implementation", None) in SHARING_ATTENTION


class Engine:
    """One rank's DeepSpeed engine; every method is collective unless it says otherwise."""

    def __init__(self, cfg: TrainerConfig):
        import deepspeed

        self.cfg = cfg
        self.rank, self.world = start_rank(cfg)
        self.device_name, self.precision = resolve_precision(cfg)
        torch.manual_seed(cfg.seed)
        model = build_model(cfg)
        optimizer = torch.optim.AdamW(
            model.parameters(), lr=cfg.schedule.lr, betas=cfg.betas, eps=cfg.adam_eps, weight_decay=cfg.weight_decay
        )
        lr_lambda = build_lr_lambda(cfg.schedule)
        self.engine, _, _, self.scheduler = deepspeed.initialize(
            model=model, optimizer=optimizer, config=build_ds_config(cfg, self.precision),
            lr_scheduler=lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda),
        )
        mcfg = model.config
        self.vocab_size = int(mcfg.vocab_size)
        self.max_length = int(getattr(mcfg, "max_position_embeddings", 1 << 30))
        # The id rows are padded with; a sequence classifier pools at the last token that is not it, so
        # the model config must name it (HF reads config.pad_token_id): the config's, else the tokenizer's.
        self.pad_id = resolve_pad_id(mcfg.pad_token_id, load_tokenizer(resolve_uri(cfg.model, "model")), cfg.model)
        mcfg.pad_token_id = self.pad_id

    @property
    def module(self):
        return self.engine.module

    @property
    def global_step(self) -> int:
        return int(self.engine.global_steps)

    @property
    def lr(self) -> float:
        """Learning rate the next optimizer step will use (local)."""
        return float(self.engine.get_lr()[0])

    def _inputs(
        self, spec: LossSpec, mb: Batch, denominator: float, params: LossParams, share: bool = False
    ) -> tuple[LossInputs, torch.Tensor, torch.Tensor | None, int]:
        """The loss's inputs of micro-batch `mb`, the logits kept, the entropy per token, and the
        token positions the decoder ran over (rows x width of the layout it ran on)."""
        dev = self.engine.device
        ids, att = mb.input_ids.to(dev), mb.attention_mask.to(dev)
        mask = mb.loss_mask.to(dev)
        opt = {k: (None if getattr(mb, k) is None else getattr(mb, k).to(dev)) for k in
               ("advantages", "inference_logprobs", "teacher_logprobs", "reference_logprobs", "pairs")}
        if spec.model_kind == "sequence_classifier":
            logits = self.engine(input_ids=ids, attention_mask=att).logits.float()
            return LossInputs(mask=mask, rewards=logits[:, 0], denominator=denominator, **opt), logits, None, ids.numel()
        layout = None
        if share and mb.position_ids is None and bool(mb.loss_mask.any()):
            layout = share_prompts(mb.input_ids, mb.attention_mask, mb.loss_mask, self.cfg.share_tokens, self.pad_id)
        if layout is not None:
            logprobs, logits, entropy = shared_logprobs(self.engine, layout, ids, params)
            decoded = layout.rows * layout.width
        else:
            logprobs, logits, entropy = causal_logprobs(self.engine, ids, att, mb.position_ids, mask, params)
            decoded = ids.numel()
        return LossInputs(mask=mask, logprobs=logprobs, denominator=denominator, **opt), logits, entropy, decoded

    def train_step(
        self, spec: LossSpec, shard: Batch, params: LossParams, denominator: float, lr: float | None = None,
        weight_decay: float | None = None, grad_clip: float | None = None, share: bool = False,
    ) -> dict[str, float]:
        """Forward + backward over this rank's shard (micro-batched), one optimizer step; whole-batch metrics.
        `lr` overrides the schedule's rate for this step only (the scheduler resets it for the next);
        `weight_decay` and `grad_clip` are this step's (None = the configured ones); `share` lays each
        micro-batch's rows of one prompt after a single copy of it (services/trainer/sharing.py).
        Metric `decoder_tokens`: the token positions the decoder ran over, padding included."""
        by_pairs = spec.unit == "pairs"
        micro = shard.micro_batches(self.cfg.micro_batch_tokens, by_pairs)
        sums: dict[str, float] = {}
        pieces: list[mismatch.MismatchPiece] = []
        loss_sum = weight_sum = tokens = entropy_sum = decoded_sum = 0.0
        for i, mb in enumerate(micro):
            self.engine.set_gradient_accumulation_boundary(i == len(micro) - 1)
            inputs, logits, entropy, decoded = self._inputs(spec, mb, denominator, params, share)
            decoded_sum += decoded
            out = spec.fn(inputs, params)
            # DeepSpeed averages gradients over ranks; shard losses are fractions of the batch loss.
            self.engine.backward(out.loss * self.world + 0.0 * logits.sum())
            loss_sum += float(out.loss.detach())
            weight_sum += out.weight
            for k, v in out.metrics.items():
                sums[k] = sums.get(k, 0.0) + v * out.weight
            if by_pairs:
                tokens += float(mb.attention_mask.sum()) if out.weight else 0.0
            else:
                tokens += float(inputs.mask.sum())
                entropy_sum += float((entropy * inputs.mask).sum())
                if inputs.inference_logprobs is not None:
                    pieces.append(mismatch.collect(inputs.logprobs, inputs.inference_logprobs, inputs.mask))
        self.set_step_options(lr, self.cfg.weight_decay if weight_decay is None else weight_decay,
                              self.cfg.grad_clip if grad_clip is None else grad_clip)
        lr = self.lr
        local_norm = None if self.cfg.zero_stage else self._grad_norm()
        self.engine.step()
        norm = self.engine.get_global_grad_norm()
        keys = sorted(sums)
        reduced = self._all_sum([loss_sum, weight_sum, tokens, entropy_sum, decoded_sum, *(sums[k] for k in keys)])
        metrics = {"loss": reduced[0], "lr": lr, "tokens": reduced[2], "decoder_tokens": reduced[4]}
        metrics["grad_norm"] = float(norm) if norm is not None else float(local_norm)
        if not by_pairs:
            metrics["entropy"] = reduced[3] / max(reduced[2], 1.0)
        for k, v in zip(keys, reduced[5:]):
            metrics[k] = v / max(reduced[1], 1.0)
        if shard.inference_logprobs is not None and not by_pairs:
            metrics.update(mismatch.summarize(self._all_pieces(pieces), params.eps_low, params.eps_high))
        return metrics

    def set_step_options(self, lr: float | None, weight_decay: float, grad_clip: float) -> None:
        """This step's learning rate (None = the scheduler's), AdamW weight decay and gradient clip (local).
        DeepSpeed keeps the clip in its config (stage 0, fp32) and in its bf16/ZeRO optimizer wrappers
        (`clip_grad`); each is set, so whichever path clips reads this step's value."""
        for group in self.engine.optimizer.param_groups:
            if lr is not None:
                group["lr"] = lr
            group["weight_decay"] = weight_decay
        self.engine._config.gradient_clipping = grad_clip
        opt = self.engine.optimizer
        while opt is not None:
            if hasattr(opt, "clip_grad"):
                opt.clip_grad = grad_clip
            opt = getattr(opt, "optimizer", None)

    def _all_pieces(self, pieces: list[mismatch.MismatchPiece]) -> mismatch.MismatchPiece:
        """Every rank's mismatch pieces joined (collective when world > 1)."""
        mine = mismatch.combine(pieces)
        if self.world == 1:
            return mine
        gathered: list = [None] * self.world
        dist.all_gather_object(gathered, mine)
        return mismatch.combine(gathered)

    def load_weights(self, tensors: dict[str, torch.Tensor], seed: int) -> tuple[int, int]:
        """Copy `tensors` into the parameters of the same name (shapes were checked by the caller) and
        start every other parameter afresh (from `seed`: matrices normal(0, initializer_range), biases
        0, other vectors such as norm scales 1), then refresh DeepSpeed's fp32 master copies (bf16,
        ZeRO 1-3) from them. Return (copied, fresh) counts. Collective under ZeRO-3; the optimizer's
        state is the caller's to reset."""
        std = float(getattr(self.module.config, "initializer_range", 0.02))
        gen = torch.Generator().manual_seed(seed)
        copied = fresh = 0
        with torch.no_grad(), self.full_parameters(modifier_rank=0) as module:
            for name, p in module.named_parameters():
                src = tensors.get(name)
                if src is not None:
                    p.copy_(src.to(p.dtype))
                    copied += 1
                else:
                    if p.dim() > 1:
                        value = torch.randn(p.shape, generator=gen) * std
                    else:
                        value = torch.zeros(p.shape) if name.endswith("bias") else torch.ones(p.shape)
                    p.copy_(value.to(p.dtype))
                    fresh += 1
        refresh = getattr(self.engine.optimizer, "refresh_fp32_params", None)
        if refresh is not None:
            refresh()
        return copied, fresh

    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        """Name -> full shape of every parameter (ZeRO-3 partitions report their whole shape); local."""
        return {n: tuple(getattr(p, "ds_shape", p.shape)) for n, p in self.module.named_parameters()}

    def reset_optimizer(self) -> None:
        """Forget AdamW's moments and step count (local): the next step starts them afresh, as a new
        run's first step would. DeepSpeed wraps the torch optimizer (bf16, ZeRO); the state lives in the
        innermost one, which builds it again on its next step."""
        torch_optimizer(self.engine.optimizer).state.clear()

    def _grad_norm(self) -> float:
        grads = [p.grad.detach().float() for p in self.module.parameters() if p.grad is not None]
        return float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))) if grads else 0.0

    def _all_sum(self, values: list[float]) -> list[float]:
        t = torch.tensor(values, dtype=torch.float64)
        if self.world > 1:
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t.tolist()

    def save(self, directory: Path, tag: str, client_state: dict) -> None:
        """DeepSpeed checkpoint (model, optimizer, scheduler, step) into directory/tag."""
        self.engine.save_checkpoint(str(directory), tag=tag, client_state=client_state, save_latest=False)

    def load(self, directory: Path, tag: str) -> dict:
        """Restore directory/tag exactly; return the client state saved with it."""
        path, client = self.engine.load_checkpoint(
            str(directory), tag=tag, load_optimizer_states=True, load_lr_scheduler_states=True
        )
        if path is None:
            raise FileNotFoundError(f"checkpoint {directory}/{tag} could not be loaded")
        return client or {}

    @contextlib.contextmanager
    def full_parameters(self, modifier_rank: int | None = None):
        """Every parameter whole on every rank (ZeRO-3 gathers them) for the duration of the block;
        with `modifier_rank`, what that rank writes into them is partitioned back at its end."""
        if self.cfg.zero_stage == 3:
            import deepspeed

            with deepspeed.zero.GatheredParameters(list(self.module.parameters()), modifier_rank=modifier_rank):
                yield self.module
        else:
            yield self.module

    def export(self, write: Callable[[Any], T] | None) -> T | None:
        """Rank 0 passes `write`, called with the whole model (to write a weight version) and its
        result returned; other ranks pass None and only help gather ZeRO-3 partitions."""
        with self.full_parameters() as module:
            return write(module) if write is not None else None

    def param_digest(self) -> str:
        """sha256 over parameter names and fp32 bytes: equal on every rank iff they are in sync."""
        h = hashlib.sha256()
        with self.full_parameters() as module:
            for name, p in sorted(module.named_parameters()):
                h.update(name.encode() + b"\0" + p.detach().float().cpu().numpy().tobytes())
        return h.hexdigest()
