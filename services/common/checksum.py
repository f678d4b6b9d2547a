"""End-to-end checksums of published weights (DESIGN.md section 6).

The checksum of a weight directory is a sha256 tree of depth one over one byte stream. The
stream holds the directory's regular files in sorted relative-path order, each as
`<relative path>\\0<size>\\0<bytes>`; it is cut into consecutive blocks of BLOCK bytes (the last
one shorter), each block is hashed with sha256, and the checksum is the hex sha256 of the block
digests concatenated in order:

    checksum = sha256(sha256(block_0) || sha256(block_1) || ... || sha256(block_n-1))

The blocks are independent, so several cores hash one version at once (a single sha256 pass is
one core's work: ~6 ms per 10 MB here, as long as writing the file). A receiver recomputes it
before loading; a mismatch is `ChecksumMismatch`, never a silent load.

`DirDigest` is that definition, fed file by file: `sha256_dir` feeds it from disk, a writer feeds
it the bytes it writes (so a publisher hashes once, while writing, and never reads back), and
`read_weights` feeds it the bytes a loader will use (so a receiver reads each file once and
loads exactly the bytes it verified, staging them while the last blocks hash).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np

from services.common.errors import ChecksumMismatch

CHUNK = 4 * 1024 * 1024
"""Bytes read from a file at a time."""
BLOCK = 1024 * 1024
"""Bytes of the stream per leaf of the checksum tree (part of the checksum's definition)."""


def hash_workers() -> int:
    """Threads hashing blocks at once: the cores this process may use, at most 4."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, min(4, cores))


class DirDigest:
    """The directory checksum, fed one file at a time in sorted relative-path order.

    Full blocks are hashed on a small thread pool (sha256 and file I/O release the GIL), so the
    caller's read or write of the next piece overlaps the hashing, and blocks hash on several cores
    at once. At most MAX_WAITING blocks wait (bounded memory for callers that feed fresh bytes; a
    reader's buffer or a writer's tensors are views, so a generous bound lets the caller's I/O run
    ahead of the hashing); a piece must not change until `hexdigest` (callers feed bytes, fresh
    buffers, or tensors that nothing writes meanwhile).
    """

    MAX_WAITING = 32

    def __init__(self, workers: int | None = None):
        self._workers = workers or hash_workers()
        self._last: str | None = None
        self._block: list = []
        self._room = BLOCK
        self._leaves: list[Future] = []
        self._waiting: deque[Future] = deque()
        self._pool = _pool(self._workers)

    def start_file(self, rel: str, size: int) -> None:
        """Begin the file at relative path `rel` of `size` bytes; its bytes follow via `update`."""
        if self._last is not None and rel <= self._last:
            raise ValueError(f"checksum files must come in sorted order: {rel!r} after {self._last!r}")
        self._last = rel
        self.update(rel.encode() + b"\0" + str(size).encode() + b"\0")

    def update(self, data) -> None:
        view = memoryview(data).cast("B")
        while len(view) >= self._room:
            self._block.append(view[: self._room])
            view = view[self._room :]
            self._send()
        if len(view):
            self._block.append(view)
            self._room -= len(view)

    def _send(self) -> None:
        if self._block:
            leaf = self._pool.submit(_leaf, self._block)
            self._leaves.append(leaf)
            self._waiting.append(leaf)
            self._block, self._room = [], BLOCK
        while len(self._waiting) > self.MAX_WAITING:
            self._waiting.popleft().result()

    def hexdigest(self) -> str:
        self._send()
        return hashlib.sha256(b"".join(leaf.result() for leaf in self._leaves)).hexdigest()


_pools: dict[tuple[int, int], ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()


def _pool(workers: int) -> ThreadPoolExecutor:
    """One pool per size for the whole process, shared by every digest (each waits on its own
    futures): starting threads for every digest cost about 1 ms a load. Keyed by pid too: a forked
    child inherits the pool object but not its threads."""
    key = (os.getpid(), workers)
    with _pools_lock:
        if key not in _pools:
            _pools[key] = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sha256")
        return _pools[key]


def _leaf(pieces: list) -> bytes:
    h = hashlib.sha256()
    for piece in pieces:
        h.update(piece)
    return h.digest()


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


def _read(directory: Path, keep: Callable[[str], bool], reuse: Mapping[str, np.ndarray]) -> tuple[DirDigest, dict[str, np.ndarray]]:
    """(the digest fed with every file, {relative path: contents} of the files `keep` selects), every
    file read once; the digest's last blocks may still be hashing."""
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
    return digest, kept


def _check(directory: Path, actual: str, expected: str) -> None:
    if actual != expected.lower():
        raise ChecksumMismatch(f"weights at {directory}: sha256 {actual} != expected {expected}")


def sha256_dir(directory: Path) -> str:
    """Hex checksum over every weight file of `directory` (see module docstring)."""
    return _read(directory, lambda rel: False, {})[0].hexdigest()


def verify_dir(directory: Path, expected: str) -> str:
    """Recompute the checksum; raise ChecksumMismatch unless it equals `expected`."""
    actual = sha256_dir(directory)
    _check(directory, actual, expected)
    return actual


class ReadWeights:
    """Files read once, whose checksum is still being finished: `files` may be staged meanwhile
    (nothing may become live) and `check` then says whether they are the expected bytes."""

    def __init__(self, directory: Path, digest: DirDigest, files: dict[str, np.ndarray]):
        self.directory, self._digest, self.files = Path(directory), digest, files

    def check(self, expected: str) -> str:
        """Raise ChecksumMismatch unless the bytes read have checksum `expected`; return it."""
        actual = self._digest.hexdigest()
        _check(self.directory, actual, expected)
        return actual


def read_weights(directory: Path, keep: Callable[[str], bool], reuse: Mapping[str, np.ndarray] | None = None) -> ReadWeights:
    """Read `directory` once, hashing as it reads, and return the contents of the files `keep` selects
    (relative path -> writable uint8 array) before the last blocks' hashes are in: a loader stages
    them while the hashing ends and calls `check` before making anything live. `reuse`: arrays the
    caller no longer needs (relative path -> array), read into when a file has the same size - no
    fresh memory to allocate and fault in on every load; their old contents are overwritten even
    when the checksum then fails.

    The staged bytes are the very bytes that were hashed, so what the caller loads is what was
    verified (no second read that could differ).
    """
    digest, kept = _read(directory, keep, reuse or {})
    return ReadWeights(directory, digest, kept)


def read_verified(
    directory: Path, expected: str, keep: Callable[[str], bool], reuse: Mapping[str, np.ndarray] | None = None
) -> dict[str, np.ndarray]:
    """`read_weights` and `check` in one call: the contents of the kept files, or ChecksumMismatch
    (and then nothing is returned)."""
    read = read_weights(directory, keep, reuse)
    read.check(expected)
    return read.files
