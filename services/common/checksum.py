"""End-to-end checksums of published weights (DESIGN.md section 6).

The sha256 of a weight directory is computed over its regular files in sorted relative-path
order; for each file the hash is fed `<relative path>\\0<size>\\0<bytes>`. A receiver recomputes
it before loading; a mismatch is `ChecksumMismatch`, never a silent load.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from services.common.errors import ChecksumMismatch

CHUNK = 4 * 1024 * 1024


def weight_files(directory: Path) -> list[Path]:
    """Regular files of a weight directory in checksum order (hidden files excluded)."""
    directory = Path(directory)
    return sorted(
        (p for p in directory.rglob("*") if p.is_file() and not any(part.startswith(".") for part in p.relative_to(directory).parts)),
        key=lambda p: p.relative_to(directory).as_posix(),
    )


def sha256_dir(directory: Path) -> str:
    """Hex sha256 over every weight file of `directory` (see module docstring)."""
    directory = Path(directory)
    h = hashlib.sha256()
    for path in weight_files(directory):
        rel = path.relative_to(directory).as_posix()
        h.update(rel.encode() + b"\0" + str(path.stat().st_size).encode() + b"\0")
        with path.open("rb") as f:
            while block := f.read(CHUNK):
                h.update(block)
    return h.hexdigest()


def verify_dir(directory: Path, expected: str) -> str:
    """Recompute the checksum; raise ChecksumMismatch unless it equals `expected`."""
    actual = sha256_dir(directory)
    if actual != expected.lower():
        raise ChecksumMismatch(f"weights at {directory}: sha256 {actual} != expected {expected}")
    return actual
