"""`cascade init-model`: build a tiny model directory from scratch (trained tokenizer, random weights).

This module reads the command line and an optional corpus file, shows progress and a summary; the
building itself is `services.common.tinymodel.init_model`, which knows nothing of the CLI.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from services.common.errors import InvalidArgument

console = Console()


def read_corpus(path: Path) -> list[str]:
    """Texts of a corpus file: `.txt` = one text per non-empty line; `.jsonl` = per line a JSON
    string, an object with a `text` string, or an object with `messages` (their contents)."""
    if not path.is_file():
        raise InvalidArgument("corpus", f"{path} is not a file")
    lines = path.read_text(encoding="utf-8").splitlines()
    if path.suffix == ".txt":
        texts = [line for line in lines if line.strip()]
    elif path.suffix == ".jsonl":
        texts = [_jsonl_text(line, f"corpus line {n}") for n, line in enumerate(lines, 1) if line.strip()]
    else:
        raise InvalidArgument("corpus", f"{path.name}: expected a .txt or .jsonl file")
    if not texts:
        raise InvalidArgument("corpus", f"{path} holds no text")
    return texts


def _jsonl_text(line: str, field: str) -> str:
    try:
        record = json.loads(line)
    except ValueError as exc:
        raise InvalidArgument(field, f"is not valid JSON ({exc.msg})") from None
    if isinstance(record, str):
        return record
    if isinstance(record, dict) and isinstance(record.get("text"), str):
        return record["text"]
    if isinstance(record, dict) and isinstance(record.get("messages"), list):
        return "\n".join(str(m.get("content") or "") for m in record["messages"] if isinstance(m, dict))
    raise InvalidArgument(field, "expected a JSON string or an object with 'text' or 'messages'")


def init_model(
    out: Annotated[Path, typer.Option("--out", help="Directory to write the model into (must be empty).")],
    preset: Annotated[str, typer.Option("--preset", help="Model shape: tiny (dense) or tiny-moe.")] = "tiny",
    seed: Annotated[int, typer.Option("--seed", help="Seed of the weights and of the default corpus.")] = 0,
    corpus: Annotated[
        Path | None,
        typer.Option("--corpus", help="Tokenizer corpus (.txt or .jsonl); default: the synthetic tasks' texts."),
    ] = None,
    vocab_size: Annotated[
        int | None, typer.Option("--vocab-size", help="Target vocabulary (default: the preset's).")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Write into a non-empty directory, replacing files.")] = False,
) -> None:
    """Build a tiny causal LM from scratch: train a byte-level BPE tokenizer, initialise random weights."""
    from transformers.utils import logging as hf_logging

    from services.common.tinymodel import PRESETS
    from services.common.tinymodel import init_model as build

    if preset not in PRESETS:
        raise InvalidArgument("--preset", f"{preset!r} is not one of {', '.join(PRESETS)}")
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"--out {out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise FileExistsError(f"--out {out} is not empty (use --force to write into it)")
    texts = read_corpus(corpus) if corpus is not None else None
    hf_logging.disable_progress_bar()
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task(f"building {preset} (seed {seed})", total=None)
        build(out, preset=preset, seed=seed, corpus=texts, vocab_size=vocab_size)
        progress.update(task, completed=1)
    _print_summary(out)


def _print_summary(out: Path) -> None:
    card = json.loads((out / "cascade_model.json").read_text())
    table = Table(title=f"model written to {out}", show_header=False)
    for key in ("preset", "architecture", "parameters", "vocab_size", "layers", "seed"):
        value = card[key]
        table.add_row(key, f"{value:,}" if key == "parameters" else str(value))
    console.print(table)
