"""`cascade teacher score`: teacher log-probs of JSONL sequences, in-process or via a teacher service.

Input lines: {"prompt_ids": [...], "completion_ids": [...], "domain": "math"?}. Output (stdout or
--output): one JSON line per input line with "logprobs" (one per completion token) and, with
--top-k, "topk_ids" / "topk_logprobs" ([len][k]). Heavy imports (torch, grpc) happen inside the
command so `cascade --help` stays fast.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

app = typer.Typer(help="Teacher log-prob scoring.", no_args_is_help=True)

CHUNK = 256


def read_lines(path: Path, default_domain: str) -> list[tuple[str, list[int], list[int]]]:
    """(domain, prompt_ids, completion_ids) per line; a malformed line is a ValueError naming it."""
    out = []
    with path.open() as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{n}: not valid JSON ({exc.msg})") from None
            for key in ("prompt_ids", "completion_ids"):
                ids = rec.get(key) if isinstance(rec, dict) else None
                if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
                    raise ValueError(f"{path}:{n}: {key} must be a list of integer token ids")
            domain = rec.get("domain") or default_domain
            if not isinstance(domain, str):
                raise ValueError(f"{path}:{n}: domain must be a string")  # noqa: TRY004 - the CLI reports ValueError as one line
            out.append((domain, rec["prompt_ids"], rec["completion_ids"]))
    if not out:
        raise ValueError(f"{path}: no sequences (expected JSONL lines with prompt_ids and completion_ids)")
    return out


@app.command("score")
def score(
    input: Path = typer.Option(..., "--input", "-i", exists=True, dir_okay=False, help="JSONL with prompt_ids, completion_ids, optional domain."),
    model: Path | None = typer.Option(None, "--model", help="Score in-process with this HF model directory (every domain)."),
    server: str | None = typer.Option(None, "--server", help="Score via teacher service(s) host:port[,host:port...]."),
    domain: str = typer.Option("default", "--domain", help="Domain of lines that name none."),
    top_k: int = typer.Option(0, "--top-k", min=0, max=64, help="Also print the k most likely tokens per position."),
    temperature: float = typer.Option(1.0, "--temperature", help="Teacher temperature (> 0)."),
    max_batch_tokens: int = typer.Option(8192, "--max-batch-tokens", min=16, help="In-process: padded tokens per forward batch."),
    backend: str = typer.Option("hf", "--backend", help="In-process: hf (transformers) or vllm (vLLM's engine; its "
                                "other settings from CASCADE_TEACHER_*, e.g. KV_CACHE_MEMORY_BYTES)."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write JSONL here instead of stdout."),
) -> None:
    """Print the teacher log-prob of every completion token, one JSON line per input line."""
    if (model is None) == (server is None):
        raise ValueError("give exactly one of --model DIR (in-process) or --server ADDR")
    if server is not None and backend != "hf":
        raise ValueError("--backend chooses the in-process teacher (--model); a teacher service has its own backend")
    from rich.console import Console
    from rich.progress import Progress

    from services.teacher.client import Sample

    lines = read_lines(input, domain)
    scorer = _in_process(model, max_batch_tokens, backend) if model is not None else _remote(server, {d for d, _, _ in lines})
    sink = output.open("w") if output else sys.stdout
    try:
        with Progress(console=Console(stderr=True), transient=True) as progress:
            task = progress.add_task("scoring", total=len(lines))
            for start in range(0, len(lines), CHUNK):
                chunk = [Sample(*line) for line in lines[start : start + CHUNK]]
                result = scorer(chunk, top_k, temperature)
                for i in range(len(chunk)):
                    rec = {"logprobs": [round(float(x), 6) for x in result.logprobs[i]]}
                    if top_k:
                        rec["topk_ids"] = result.topk_ids[i].tolist()
                        rec["topk_logprobs"] = [[round(float(x), 6) for x in row] for row in result.topk_logprobs[i]]
                    sink.write(json.dumps(rec) + "\n")
                progress.advance(task, len(chunk))
    finally:
        if output:
            sink.close()


def _in_process(model: Path, max_batch_tokens: int, backend: str = "hf"):
    """A scorer running one local teacher for every domain of the file."""
    import numpy as np

    from services.teacher.client import TeacherScores
    from services.teacher.config import TeacherConfig
    from services.teacher.core import TeacherCore

    core = TeacherCore(TeacherConfig(max_batch_tokens=max_batch_tokens, backend=backend))
    core.load_teacher("local", str(model))

    def run(samples, top_k, temperature):
        prompts, index, seen = [], [], {}
        for s in samples:
            key = tuple(s.prompt_ids)
            if key not in seen:
                seen[key] = len(prompts)
                prompts.append(np.asarray(s.prompt_ids, dtype=np.int32))
            index.append(seen[key])
        completions = [np.asarray(s.completion_ids, dtype=np.int32) for s in samples]
        result = core.score("local", prompts, completions, index, top_k, temperature)
        k = top_k
        return TeacherScores(
            [s.logprobs for s in result.scores],
            [s.topk_ids.reshape(-1, k) if k else None for s in result.scores],
            [s.topk_logprobs.reshape(-1, k) if k else None for s in result.scores],
            {"local": result.weight_version},
        )

    return run


def _remote(server: str, domains: set[str]):
    """A scorer sending each domain's lines to the service(s) at `server`."""
    from services.teacher.client import TeacherClient

    client = TeacherClient({d: server for d in domains})

    def run(samples, top_k, temperature):
        import grpc

        try:
            return client.score_samples(samples, top_k, temperature)
        except grpc.RpcError as err:
            raise ValueError(f"teacher service {server}: {err.code().name}: {err.details()}") from None

    return run
