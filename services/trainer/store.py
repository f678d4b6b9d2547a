"""The trainer's store on disk: published weight versions, checkpoint directories, the step journal.

Layout under the store root:

    weights/v<N>/          one published version: HF layout (config, safetensors, tokenizer)
    weights/v<N>.sha256    its checksum (services.common.checksum.sha256_dir), written first
    checkpoints/<tag>/     one DeepSpeed checkpoint (model, optimizer, scheduler, client state)
    checkpoints/latest     the tag of the newest checkpoint
    journal.jsonl          applied step ids with their metrics, one JSON object a line, after a
                           header line naming this journal (`{"journal": "<id>"}`)
    journals/<id>.jsonl    journals a checkpoint load replaced, kept for the checkpoints that point into them

Every directory appears by an atomic rename of a finished temporary one (`.tmp-*`, ignored by
listings), so a reader never sees half a version. Exactly once: the journal is appended (and
fsynced) after each applied step, so a restarted trainer still refuses those step ids even
without a checkpoint; loading a checkpoint rewrites the journal to the checkpoint's own set (the
later steps' effects were rolled back, so they may be applied again). A checkpoint holds that set
as a mark, (journal id, entries), not as a copy: a save costs the same at step 20,000 as at step 1
(a copy in the checkpoint grew with every step: 41 ms a save at 1 step, 216 ms at 20,000). This
module knows nothing of models, engines or gRPC; it moves directories and small records.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from services.common.checksum import sha256_dir, weight_files
from services.common.errors import InvalidArgument, NotFound

_TAG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_VERSION = re.compile(r"^v(\d+)$")
DEFAULT_CHUNK = 4 * 1024 * 1024
MAX_CHUNK = 64 * 1024 * 1024


@dataclass(frozen=True)
class Chunk:
    """One piece of one file of a version (see WeightChunk in trainer.proto)."""

    path: str
    offset: int
    data: bytes
    file_size: int
    sha256: str = ""


def check_tag(tag: str) -> str:
    """A checkpoint tag: letters, digits, `.`, `_`, `-`; not starting with `.`; at most 128 characters."""
    if not _TAG.match(tag):
        raise InvalidArgument("tag", f"{tag!r} is not a valid checkpoint tag (letters, digits, . _ -; not starting with .)")
    return tag


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".tmp-{path.name}-{os.getpid()}")
    with tmp.open("w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class Store:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.weights = self.root / "weights"
        self.checkpoints = self.root / "checkpoints"
        self.journal_path = self.root / "journal.jsonl"
        self.journals = self.root / "journals"
        self._journal: tuple[str, int] | None = None
        """(id, entries) of the live journal once read (this process is its only writer)."""
        for d in (self.weights, self.checkpoints):
            d.mkdir(parents=True, exist_ok=True)

    # -- published weights -------------------------------------------------------------------
    def versions(self) -> list[int]:
        return sorted(int(m.group(1)) for p in self.weights.iterdir() if p.is_dir() and (m := _VERSION.match(p.name)))

    def latest_version(self) -> int:
        v = self.versions()
        return v[-1] if v else 0

    def publish(self, write: Callable[[Path], str | None]) -> tuple[int, Path, str]:
        """Call write(tmp_dir), rename it to weights/v<N>; return (N, path, sha256). `write` returns the
        directory's sha256 when it hashed the files as it wrote them (see trainer/export.py), or
        None, and then the directory is read back and hashed here."""
        version = self.latest_version() + 1
        tmp = self.weights / f".tmp-v{version}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        try:
            digest = write(tmp) or sha256_dir(tmp)
            _atomic_write(self.weights / f"v{version}.sha256", digest + "\n")
            final = self.weights / f"v{version}"
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return version, final, digest

    def version_dir(self, version: int) -> Path:
        """Directory of `version` (0 = the latest); NotFound when it was never published."""
        v = version or self.latest_version()
        path = self.weights / f"v{v}"
        if v == 0 or not path.is_dir():
            raise NotFound(f"weight version {version} is not published (published: {self.versions() or 'none'})")
        return path

    def version_sha(self, version: int) -> str:
        path = self.version_dir(version)
        side = path.with_name(f"{path.name}.sha256")
        return side.read_text().strip() if side.exists() else sha256_dir(path)

    def chunks(self, version: int, chunk_bytes: int = 0, from_path: str = "",
               from_offset: int = 0) -> tuple[int, Iterator[Chunk]]:
        """(resolved version, its files in checksum order in pieces; the last piece carries the sha256).
        `from_path` / `from_offset` resume a cut-off fetch there (earlier files skipped). Checks the
        arguments at once, not at the first `next`."""
        if chunk_bytes < 0 or chunk_bytes > MAX_CHUNK:
            raise InvalidArgument("chunk_bytes", f"is {chunk_bytes}; must be 0 (default 4 MiB) to {MAX_CHUNK}")
        directory = self.version_dir(version)
        resolved = int(directory.name[1:])
        files = weight_files(directory)
        if from_path:
            sizes = {p.relative_to(directory).as_posix(): p.stat().st_size for p in files}
            if from_path not in sizes:
                raise InvalidArgument("from_path", f"{from_path!r} is not a file of version {resolved}")
            if from_offset > sizes[from_path]:
                raise InvalidArgument("from_offset", f"is {from_offset}; {from_path} has {sizes[from_path]} bytes")
        elif from_offset:
            raise InvalidArgument("from_offset", "needs from_path")
        return resolved, self._iter_chunks(directory, chunk_bytes or DEFAULT_CHUNK, self.version_sha(resolved),
                                           from_path, from_offset)

    @staticmethod
    def _iter_chunks(directory: Path, size: int, digest: str, from_path: str = "",
                     from_offset: int = 0) -> Iterator[Chunk]:
        pending: Chunk | None = None
        for path in weight_files(directory):
            rel, total = path.relative_to(directory).as_posix(), path.stat().st_size
            if from_path and rel < from_path:
                continue
            with path.open("rb") as f:
                offset = from_offset if rel == from_path else 0
                f.seek(offset)
                while True:
                    data = f.read(size)
                    if pending is not None:
                        yield pending
                    pending = Chunk(rel, offset, data, total)
                    offset += len(data)
                    if offset >= total:
                        break
        if pending is not None:
            yield Chunk(pending.path, pending.offset, pending.data, pending.file_size, digest)

    # -- checkpoints -------------------------------------------------------------------------
    def checkpoint_dir(self, tag: str) -> Path:
        return self.checkpoints / check_tag(tag)

    def temp_tag(self, tag: str) -> str:
        return f".tmp-{check_tag(tag)}"

    def commit_checkpoint(self, tag: str) -> Path:
        """Rename the finished temp checkpoint to `tag` (replacing an older one) and mark it latest."""
        final, tmp = self.checkpoint_dir(tag), self.checkpoints / self.temp_tag(tag)
        if final.exists():
            old = self.checkpoints / f".old-{tag}-{os.getpid()}"
            os.rename(final, old)
            os.rename(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, final)
        _atomic_write(self.checkpoints / "latest", tag + "\n")
        return final

    def resolve_checkpoint(self, tag: str) -> str:
        """`latest` -> the newest tag; NotFound when the checkpoint does not exist."""
        if tag in ("", "latest"):
            marker = self.checkpoints / "latest"
            if not marker.exists():
                raise NotFound(f"no checkpoint saved yet in {self.checkpoints}")
            tag = marker.read_text().strip()
        if not self.checkpoint_dir(tag).is_dir():
            raise NotFound(f"checkpoint {tag!r} not found in {self.checkpoints}")
        return tag

    # -- journal -------------------------------------------------------------------------------
    def read_journal(self, keep: int) -> OrderedDict[str, dict]:
        """Applied step id -> record (global_step, metrics), oldest first, the last `keep` only."""
        ident, entries = _read_journal_file(self.journal_path)
        if ident is not None and self._journal is None:  # read once: the first append need not read it again
            self._journal = (ident, len(entries))
        return _last(entries, keep)

    def append_journal(self, step_id: str, record: dict) -> None:
        """Add one applied step (fsynced before it returns); the first append starts the journal's header."""
        ident, count = self._live()
        with self.journal_path.open("a") as f:
            f.write(json.dumps({"step_id": step_id, **record}) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self._journal = (ident, count + 1)

    def journal_mark(self) -> dict:
        """Where the journal stands now, {"journal": id, "entries": n}: what a checkpoint saves instead
        of the applied set itself (`journal_at` reads that set back)."""
        ident, count = self._live()
        return {"journal": ident, "entries": count}

    def journal_at(self, mark: dict, keep: int) -> OrderedDict[str, dict]:
        """The applied set a checkpoint's `mark` points at: the first `entries` records of journal
        `journal` (the live one or one a load replaced), the last `keep` of them. NotFound when that
        journal is gone."""
        ident, count = str(mark["journal"]), int(mark["entries"])
        for path in (self.journal_path, self.journals / f"{ident}.jsonl"):
            found, entries = _read_journal_file(path)
            if found == ident:
                if len(entries) < count:
                    raise NotFound(f"journal {ident} in {path} holds {len(entries)} entries; the checkpoint needs {count}")
                return _last(entries[:count], keep)
        raise NotFound(f"journal {ident!r} of this checkpoint is neither {self.journal_path} nor in {self.journals}: "
                       "a checkpoint moved to another store needs the store's journal.jsonl and journals/ beside it")

    def rewrite_journal(self, applied: OrderedDict[str, dict]) -> None:
        """Make `applied` the journal (a checkpoint was loaded). The journal it replaces is kept under
        journals/ (linked there before the new one is written), since checkpoints may point into it."""
        ident, _ = self._live()
        self.journals.mkdir(exist_ok=True)
        kept = self.journals / f"{ident}.jsonl"
        if self.journal_path.exists() and not kept.exists():
            try:
                os.link(self.journal_path, kept)
            except OSError:  # a file system without hard links: a whole copy, renamed into place
                partial = kept.with_name(f".tmp-{kept.name}")
                shutil.copyfile(self.journal_path, partial)
                os.replace(partial, kept)
        self._journal = _write_journal(self.journal_path, secrets.token_hex(8), list(applied.items()))

    def _live(self) -> tuple[str, int]:
        """(id, entries) of the live journal, read once; a journal without a header (written before
        headers, or none yet) is given one first, so every mark names a journal that can be found."""
        if self._journal is None:
            ident, entries = _read_journal_file(self.journal_path)
            self._journal = ((ident, len(entries)) if ident is not None
                             else _write_journal(self.journal_path, secrets.token_hex(8), entries))
        return self._journal


def _read_journal_file(path: Path) -> tuple[str | None, list[tuple[str, dict]]]:
    """(the header's journal id or None, [(step id, record), ...] in order) of a journal file; (None, [])
    when there is none."""
    ident, entries = None, []
    if path.exists():
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            rec = json.loads(line)
            if "step_id" in rec:
                entries.append((rec["step_id"], {"global_step": rec["global_step"], "metrics": rec["metrics"]}))
            elif "journal" in rec and ident is None:
                ident = str(rec["journal"])
    return ident, entries


def _write_journal(path: Path, ident: str, entries: list[tuple[str, dict]]) -> tuple[str, int]:
    """Write a whole journal atomically: the header naming it `ident`, then `entries`; (ident, entries)."""
    lines = [json.dumps({"journal": ident})] + [json.dumps({"step_id": k, **v}) for k, v in entries]
    _atomic_write(path, "".join(line + "\n" for line in lines))
    return ident, len(entries)


def _last(entries: list[tuple[str, dict]], keep: int) -> OrderedDict[str, dict]:
    out = OrderedDict(entries)
    while len(out) > keep:
        out.popitem(last=False)
    return out
