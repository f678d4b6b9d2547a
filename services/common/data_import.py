"""Import a downloaded copy of NVIDIA's released RL data into a cascade data folder, streaming.

Every `*.jsonl` (or `*.jsonl.gz`) file under the source folder is read line by line — never a whole
file in memory — and each row is checked by the record loader (`TaskRecord.parse`, which infers its
domain from its NeMo Gym shape) and written, byte for byte as it came, to
`<out>/<domain>/train.jsonl` or `<out>/<domain>/validation.jsonl`. A row goes to validation when
`held_out(seed, key, fraction)` says so, up to `val_max` rows per domain. A malformed line (bad JSON,
a field the loader refuses) is reported with its file and line number and the import goes on; a
row whose id repeats one already written to its domain is left out (the loader refuses repeated
ids), reported when its content differs. This module knows nothing about the CLI.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from services.common.errors import InvalidArgument
from services.common.tasks import TaskRecord


@dataclass
class ImportReport:
    """What an import did: rows per domain and split, and every line it left out."""

    counts: dict[str, Counter] = field(default_factory=dict)
    """domain -> Counter(train=..., validation=...)."""
    problems: list[str] = field(default_factory=list)
    """`file:line: why` for each malformed or conflicting line (the first `max_problems`)."""
    malformed: int = 0
    duplicates: int = 0

    def add(self, domain: str, split: str) -> None:
        self.counts.setdefault(domain, Counter())[split] += 1


def held_out(seed: int, key: str, fraction: float) -> bool:
    """Whether a row goes to validation: u = first 8 bytes of sha256(f"{seed}:{key}") / 2^64, u < fraction.

    Depends only on the seed and the row's key (domain and id), never on file order, so a re-import
    splits the same way and the same id lands in the same split.
    """
    digest = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def _hash64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def source_files(root: Path) -> list[Path]:
    """The JSONL files under `root`, sorted (hidden folders such as `.cache` skipped)."""
    files = [p for p in sorted(root.rglob("*")) if p.is_file() and p.name.endswith((".jsonl", ".jsonl.gz"))
             and not any(part.startswith(".") for part in p.relative_to(root).parts)]
    if not files:
        raise InvalidArgument("dir", f"{root} holds no .jsonl or .jsonl.gz files")
    return files


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    opener: Callable[..., IO[str]] = gzip.open if path.name.endswith(".gz") else open  # type: ignore[assignment]
    with opener(path, "rt", encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if line.strip():
                yield n, line.rstrip("\r\n")


def import_folder(src: Path, out: Path, seed: int = 0, val_fraction: float = 0.02, val_max: int = 512,
                  max_problems: int = 1000, on_problem: Callable[[str], None] | None = None) -> ImportReport:
    """Stream every file of `src` into `out/<domain>/{train,validation}.jsonl`; see the module docstring."""
    src, out = Path(src), Path(out)
    if not src.is_dir():
        raise InvalidArgument("dir", f"{src} is not a folder")
    if not 0.0 <= val_fraction <= 1.0:
        raise InvalidArgument("val_fraction", f"must be within [0, 1], got {val_fraction}")
    if out.exists() and any(out.iterdir()):
        raise InvalidArgument("out", f"{out} is not empty; give a new folder")
    files = source_files(src)
    report, sinks = ImportReport(), {}
    seen: dict[int, tuple[int, int, int]] = {}  # hash of domain:id -> (content hash, file index, line): small ints

    def problem(text: str) -> None:
        if len(report.problems) < max_problems:
            report.problems.append(text)
        if on_problem:
            on_problem(text)

    try:
        for index, path in enumerate(files):
            for n, line in _lines(path):
                where = f"{path}:{n}"
                try:
                    rec = TaskRecord.parse(json.loads(line))
                except json.JSONDecodeError as exc:
                    report.malformed += 1
                    problem(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})")
                    continue
                except InvalidArgument as exc:
                    report.malformed += 1
                    problem(f"{where}: field '{exc.field}': {exc.message}")
                    continue
                key, digest = _hash64(f"{rec.domain}:{rec.id}"), _hash64(line)
                first = seen.get(key)
                if first is not None:
                    report.duplicates += 1
                    if first[0] != digest:
                        taken = f"{files[first[1]]}:{first[2]}"
                        problem(f"{where}: id {rec.id!r} of domain {rec.domain} is taken by {taken} (other content); left out")
                    continue
                seen[key] = (digest, index, n)
                split = "train"
                if held_out(seed, f"{rec.domain}:{rec.id}", val_fraction) and report.counts.get(rec.domain, Counter())["validation"] < val_max:
                    split = "validation"
                if (rec.domain, split) not in sinks:
                    (out / rec.domain).mkdir(parents=True, exist_ok=True)
                    sinks[rec.domain, split] = (out / rec.domain / f"{split}.jsonl").open("w", encoding="utf-8")
                sinks[rec.domain, split].write(line + "\n")
                report.add(rec.domain, split)
    finally:
        for sink in sinks.values():
            sink.close()
    for domain in report.counts:  # every domain gets both files, so a stage can name it
        for split in ("train", "validation"):
            (out / domain / f"{split}.jsonl").touch()
    return report
