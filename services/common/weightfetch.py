"""Fetch a published weight version from a trainer over gRPC into a local cache, without a shared folder.

`fetch_version(client, version, cache)` streams `StreamWeights` into `<cache>/.v<N>.partial/`,
writing each chunk at its offset and recording after each one, beside it, the file and
byte up to which the copy is written (flushed). A stream cut off (host unreachable, deadline,
trainer restarted) is asked for again from that point (`from_path` / `from_offset`), up to
`attempts` times. When the last chunk arrives, the copy's checksum (services.common.checksum) is
recomputed and compared with the one the trainer sent: only then is the folder renamed to
`<cache>/v<N>`; a mismatch deletes the copy and raises ChecksumMismatch, so a model is never loaded
from a half or wrong copy. A version already in the cache is not fetched again (`cached`).

`WeightSource` is what a policy or teacher holds (settings `CASCADE_<SERVICE>_WEIGHTS_FROM`, ...,
mixed into its config by `WeightsFromSettings`): `locate(uri, field, version, sha256)` is the local
folder when the uri is on this host (a shared folder stays an option), else the version fetched from
the trainer at `weights_from` into `weights_cache`, its checksum equal to the published one.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import grpc
from pydantic_settings import BaseSettings

from services.common.checksum import verify_dir
from services.common.errors import ChecksumMismatch, InvalidArgument
from services.common.modelio import resolve_uri

log = logging.getLogger(__name__)
PROGRESS = "progress.json"
"""Beside the partial folder (`.v<N>.partial.progress.json`), so it is never part of the copy."""
RESUMABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED,
                       grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL})


@dataclass(frozen=True)
class Fetched:
    version: int
    path: Path
    sha256: str
    cached: bool
    """True when the version was already in the cache (nothing crossed the network)."""
    bytes_received: int
    resumes: int
    """Streams asked again from the last written byte after a cut."""
    seconds: float


def _progress_file(partial: Path) -> Path:
    return partial.parent / f"{partial.name}.{PROGRESS}"


def _read_progress(partial: Path) -> dict:
    f = _progress_file(partial)
    return json.loads(f.read_text()) if f.exists() and partial.is_dir() else {}


def _write_progress(partial: Path, state: dict) -> None:
    f = _progress_file(partial)
    tmp = f.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    os.replace(tmp, f)


def fetch_version(client, version: int, cache: Path, chunk_bytes: int = 0, attempts: int = 5,
                  timeout: float = 120.0) -> Fetched:
    """Version `version` (must be > 0: a fixed version, so the cache key is stable) of the trainer behind
    `client` (a ReplicaClient of TrainerServiceStub) as a verified local folder (see the module docstring)."""
    from services.common.pb import trainer_pb2

    if version <= 0:
        raise InvalidArgument("version", f"is {version}; fetch a published version (>= 1)")
    cache = Path(cache)
    final, partial = cache / f"v{version}", cache / f".v{version}.partial"
    start = time.perf_counter()
    if (final / ".sha256").is_file():
        return Fetched(version, final, (final / ".sha256").read_text().strip(), True, 0, 0, 0.0)
    cache.mkdir(parents=True, exist_ok=True)
    state = _read_progress(partial)  # a copy an earlier process left: continue it
    if not state:
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        state = {"path": "", "offset": 0}
    received, resumes, digest = 0, 0, ""
    for attempt in range(attempts):
        request = trainer_pb2.StreamWeightsRequest(version=version, chunk_bytes=chunk_bytes,
                                                   from_path=state["path"], from_offset=state["offset"])
        try:
            for chunk in client.stream("StreamWeights", request, timeout=timeout):
                target = partial / chunk.path
                if not target.resolve().is_relative_to(partial.resolve()):
                    raise InvalidArgument("path", f"{chunk.path!r} leaves the version folder")
                target.parent.mkdir(parents=True, exist_ok=True)
                with open(target, "r+b" if target.exists() else "wb") as f:
                    f.seek(chunk.offset)
                    f.write(chunk.data)
                received += len(chunk.data)
                state = {"path": chunk.path, "offset": chunk.offset + len(chunk.data)}
                _write_progress(partial, state)
                if chunk.sha256:
                    digest = chunk.sha256
            break
        except grpc.RpcError as err:
            if err.code() not in RESUMABLE or attempt + 1 == attempts:
                raise
            resumes += 1
            log.warning(f"weight fetch of version {version} cut off at {state['path'] or 'the start'}:{state['offset']} "
                        f"({err.code().name}); resuming from there", extra={"version": version, **state})
            time.sleep(min(0.2 * 2 ** attempt, 2.0))
    if not digest:
        raise ChecksumMismatch(f"version {version}: the stream ended without its checksum")
    try:
        verify_dir(partial, digest)
    except ChecksumMismatch:
        shutil.rmtree(partial, ignore_errors=True)
        _progress_file(partial).unlink(missing_ok=True)
        raise
    (partial / ".sha256").write_text(digest)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(partial, final)
    _progress_file(partial).unlink(missing_ok=True)
    return Fetched(version, final, digest, False, received, resumes, time.perf_counter() - start)


class WeightsFromSettings(BaseSettings):
    """Where a service gets a published version that is not on its own filesystem (mixed into its config,
    so the variables carry the service's prefix, e.g. CASCADE_POLICY_WEIGHTS_FROM)."""

    weights_from: str = ""
    """Trainer address(es) (host:port, comma-separated) to fetch a published version from when its uri is
    not a folder on this host. Unset: such a uri is an error (the folder must be shared)."""
    weights_cache: Path | None = None
    """Folder fetched versions are kept in (one `v<N>` folder per version, per trainer address).
    Unset: ~/.cache/cascade/weights."""
    weights_from_token: str | None = None
    """Bearer token for the trainer (its CASCADE_TRAINER_AUTH_TOKEN)."""
    weights_from_tls_ca: Path | None = None
    """PEM CA that signed the trainer's certificate; setting it makes the fetch use TLS."""
    weights_from_tls_cert: Path | None = None
    """PEM client certificate for a trainer that requires mutual TLS."""
    weights_from_tls_key: Path | None = None
    """PEM key of weights_from_tls_cert."""
    weights_from_timeout_s: float = 120.0
    """Deadline of one StreamWeights call (a cut stream is resumed from its last written byte)."""


_VERSION_IN_URI = re.compile(r"(?:^|/)v(\d+)/?$")


def version_in_uri(uri: str) -> int:
    """The published version a trainer-store uri names (`.../weights/v<N>`), else 0."""
    m = _VERSION_IN_URI.search(str(uri).removeprefix("file://"))
    return int(m.group(1)) if m else 0


class WeightSource:
    """A published version as a local folder: the uri itself when it is here, else fetched (see the module docstring)."""

    def __init__(self, settings: WeightsFromSettings):
        self.settings = settings
        self._client = None

    def client(self):
        if self._client is None:
            from services.common.grpc_client import ClientOptions, ReplicaClient
            from services.common.pb import trainer_pb2_grpc

            s = self.settings
            self._client = ReplicaClient(s.weights_from, trainer_pb2_grpc.TrainerServiceStub, ClientOptions(
                timeout=s.weights_from_timeout_s, token=s.weights_from_token, tls_ca=s.weights_from_tls_ca,
                tls_cert=s.weights_from_tls_cert, tls_key=s.weights_from_tls_key))
        return self._client

    def cache(self) -> Path:
        root = self.settings.weights_cache or Path.home() / ".cache" / "cascade" / "weights"
        return Path(root) / re.sub(r"[^A-Za-z0-9.-]+", "_", self.settings.weights_from)

    def locate(self, uri: str, field: str, version: int = 0, sha256: str = "") -> Path:
        """The folder of `uri`: local when it exists here, else version `version` (or the one the uri names)
        fetched from `weights_from`; when `sha256` is given the fetched copy's checksum must equal it
        (a stale cached copy is fetched again; a fresh one that differs is ChecksumMismatch)."""
        try:
            return resolve_uri(uri, field)
        except InvalidArgument:
            if not self.settings.weights_from:
                raise
        version = version or version_in_uri(uri)
        if version <= 0:
            raise InvalidArgument(field, f"{uri} is not on this host and names no published version (.../v<N>) "
                                         f"to fetch from {self.settings.weights_from}")
        got = fetch_version(self.client(), version, self.cache(), timeout=self.settings.weights_from_timeout_s)
        if sha256 and got.sha256 != sha256 and got.cached:
            log.warning(f"cached version {version} has sha256 {got.sha256[:12]}, not the published {sha256[:12]}; "
                        "fetching it again", extra={"version": version})
            shutil.rmtree(got.path, ignore_errors=True)
            got = fetch_version(self.client(), version, self.cache(), timeout=self.settings.weights_from_timeout_s)
        if sha256 and got.sha256 != sha256:
            raise ChecksumMismatch(f"{field}: version {version} from {self.settings.weights_from} has sha256 "
                                   f"{got.sha256}, not the published {sha256}")
        if not got.cached:
            log.info(f"fetched weight version {version} from {self.settings.weights_from}: {got.bytes_received} bytes "
                     f"in {got.seconds:.2f} s ({got.resumes} resumes)", extra={"version": version})
        return got.path
