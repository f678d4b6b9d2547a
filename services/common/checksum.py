"""End-to-end checksums of published weights (DESIGN.md section 6).

The sha256 of a weight directory is computed over its regular files in sorted relative-path
order; for each file the hash is fed `<relative path>\\0<size>\\0<bytes>`. A receiver recomputes
it before loading; a mismatch is `ChecksumMismatch`, never a silent load.

`DirDigest` is that definition, fed file by file: `sha256_dir` feeds it from disk, a writer feeds
it the bytes it writes (so a publisher hashes once, while writing, and never reads back), and
`read_verified` feeds it the bytes a loader will use (so a receiver reads each file once and
loads exactly the bytes it verified).
"""

from __future__ import annotations

import hashlib
import os
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np

from services.common.errors import ChecksumMismatch

CHUNK = 4 * 1024 * 1024


class DirDigest:
    """The directory checksum, fed one file at a time in sorted relative-path order.

    The hashing runs on one helper thread, in the order fed, so the caller's read or write of the
    next piece overlaps the hashing of this one (sha256 and file I/O both release the GIL). Pieces
    go over in batches of about CHUNK bytes, at most MAX_IN_FLIGHT batches queued (bounded memory);
    a piece must not change until `hexdigest` (callers feed bytes, fresh buffers, or tensors that
    nothing writes meanwhile).
    """

    MAX_IN_FLIGHT = 2

    def __init__(self):
        self._h = hashlib.sha256()
        self._last: str | None = None
        self._batch: list = []
        self._batch_bytes = 0
        self._queued: deque[Future] = deque()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sha256")

    def start_file(self, rel: str, size: int) -> None:
        """Begin the file at relative path `rel` of `size` bytes; its bytes follow via `update`."""
        if self._last is not None and rel <= self._last:
            raise ValueError(f"checksum files must come in sorted order: {rel!r} after {self._last!r}")
        self._last = rel
        self.update(rel.encode() + b"\0" + str(size).encode() + b"\0")

    def update(self, data) -> None:
        self._batch.append(data)
        self._batch_bytes += memoryview(data).nbytes
        if self._batch_bytes >= CHUNK:
            self._send()

    def _send(self) -> None:
        if self._batch:
            self._queued.append(self._pool.submit(_hash_all, self._h, self._batch))
            self._batch, self._batch_bytes = [], 0
        while len(self._queued) > self.MAX_IN_FLIGHT:
            self._queued.popleft().result()

    def hexdigest(self) -> str:
        self._send()
        while self._queued:
            self._queued.popleft().result()
        self._pool.shutdown()
        return self._h.hexdigest()


def _hash_all(h, pieces: list) -> None:
    for piece in pieces:
        h.update(piece)


def weight_files(directory: Path) -> list[Path]:
    """Regular files of a weight directory in checksum order (hidden files excluded)."""
    directory = Path(directory)
    return sorted(
        (p for p in directory.rglob("*") if p.is_file() and not any(part.startswith(".") for part in p.relative_to(directory).parts)),
        key=lambda p: p.relative_to(directory).as_posix(),
    )


def read_into_buffer(path: Path, digest: DirDigest, rel: str, reuse: np.ndarray | None = None) -> np.ndarray:
    """The whole file in one writable uint8 array (`reuse` when it has the file's size), each chunk
    fed to `digest` as soon as it is read (its hashing overlaps the next read). A loader can view
    tensors in the array without copying."""
    with path.open("rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        buf = reuse if reuse is not None and reuse.shape == (size,) else np.empty(size, dtype=np.uint8)
        digest.start_file(rel, len(buf))
        done = 0
        while done < len(buf) and (n := f.readinto(memoryview(buf[done : done + CHUNK]))):
            digest.update(memoryview(buf[done : done + n]))
            done += n
        if done < len(buf) or f.read(1):
            raise ChecksumMismatch(f"weights at {path}: the file changed size while it was read")
    return buf


def _digest(directory: Path, keep: Callable[[str], bool], reuse: Mapping[str, np.ndarray]) -> tuple[str, dict[str, np.ndarray]]:
    """(checksum, {relative path: contents} of the files `keep` selects), every file read once."""
    directory = Path(directory)
    digest, kept = DirDigest(), {}
    for path in weight_files(directory):
        rel = path.relative_to(directory).as_posix()
        if keep(rel):
            kept[rel] = read_into_buffer(path, digest, rel, reuse.get(rel))
            continue
        digest.start_file(rel, path.stat().st_size)
        with path.open("rb") as f:
            while block := f.read(CHUNK):
                digest.update(block)
    return digest.hexdigest(), kept


def _check(directory: Path, actual: str, expected: str) -> None:
    if actual != expected.lower():
        raise ChecksumMismatch(f"weights at {directory}: sha256 {actual} != expected {expected}")


def sha256_dir(directory: Path) -> str:
    """Hex sha256 over every weight file of `directory` (see module docstring)."""
    return _digest(directory, lambda rel: False, {})[0]


def verify_dir(directory: Path, expected: str) -> str:
    """Recompute the checksum; raise ChecksumMismatch unless it equals `expected`."""
    actual = sha256_dir(directory)
    _check(directory, actual, expected)
    return actual


def read_verified(
    directory: Path, expected: str, keep: Callable[[str], bool], reuse: Mapping[str, np.ndarray] | None = None
) -> dict[str, np.ndarray]:
    """Verify `directory` against `expected` and return the contents of the files `keep` selects
    (relative path -> writable uint8 array). `reuse`: arrays the caller no longer needs (relative
    path -> array), read into when a file has the same size - no fresh memory to allocate and fault
    in on every load; their old contents are overwritten even when the checksum then fails.

    Each file is read once: the returned bytes are the very bytes that were hashed, so what the
    caller loads is what was verified (no second read that could differ). ChecksumMismatch as
    `verify_dir`, and then nothing is returned.
    """
    actual, kept = _digest(directory, keep, reuse or {})
    _check(directory, actual, expected)
    return kept
