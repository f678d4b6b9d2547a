"""services.common.weightfetch.WeightSource, wired into the policy and the teacher: a published version
whose uri is not on this host is fetched from the trainer named by CASCADE_<SERVICE>_WEIGHTS_FROM
(checksum equal to the published one, cached by version), a local uri is used as it is, and a copy
whose checksum is not the published one is never loaded.

The trainer end is a gRPC server serving the trainer's own Store (services/trainer/store.py) through
StreamWeights over a real socket; the policy and teacher cores are the real ones on the tiny model.
"""

from __future__ import annotations

import shutil
from concurrent import futures

import grpc
import pytest

from services.common.errors import ChecksumMismatch, InvalidArgument
from services.common.pb import trainer_pb2, trainer_pb2_grpc
from services.common.weightfetch import WeightsFromSettings, WeightSource, version_in_uri
from services.trainer.store import Store


class StoreStreamer(trainer_pb2_grpc.TrainerServiceServicer):
    def __init__(self, store: Store):
        self.store = store

    def StreamWeights(self, request, context):
        version, chunks = self.store.chunks(request.version, request.chunk_bytes, request.from_path, request.from_offset)
        for c in chunks:
            yield trainer_pb2.WeightChunk(version=version, path=c.path, offset=c.offset, data=c.data,
                                          file_size=c.file_size, sha256=c.sha256)


@pytest.fixture(scope="module")
def trainer(tiny_model_dir, tmp_path_factory):
    """(address, store, published version, its sha256): the tiny model published as v1 of a trainer store."""
    store = Store(tmp_path_factory.mktemp("trainer-store"))
    version, path, sha = store.publish(lambda tmp: shutil.copytree(tiny_model_dir, tmp, dirs_exist_ok=True) and None)
    server = grpc.server(futures.ThreadPoolExecutor(4))
    trainer_pb2_grpc.add_TrainerServiceServicer_to_server(StoreStreamer(store), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}", store, version, sha, path
    server.stop(0)


def test_version_in_uri():
    assert version_in_uri("/srv/store/weights/v12") == 12
    assert version_in_uri("file:///srv/store/weights/v3/") == 3
    assert version_in_uri("/srv/models/tiny") == 0
    assert version_in_uri("/srv/v2x") == 0


def test_a_local_uri_is_used_as_it_is_and_a_missing_one_without_a_trainer_names_the_field(tiny_model_dir, tmp_path):
    assert WeightSource(WeightsFromSettings(weights_from="127.0.0.1:1")).locate(str(tiny_model_dir), "uri") == tiny_model_dir
    with pytest.raises(InvalidArgument, match="weights.uri.*does not exist"):
        WeightSource(WeightsFromSettings()).locate(str(tmp_path / "weights/v1"), "weights.uri", 1, "ab")
    with pytest.raises(InvalidArgument, match="uri.*names no published version"):
        WeightSource(WeightsFromSettings(weights_from="127.0.0.1:1")).locate(str(tmp_path / "nowhere"), "uri")


def test_a_missing_version_is_fetched_verified_cached_and_a_wrong_checksum_is_refused(trainer, tmp_path):
    address, _store, version, sha, _path = trainer
    source = WeightSource(WeightsFromSettings(weights_from=address, weights_cache=tmp_path / "cache"))
    gone = f"/elsewhere/store/weights/v{version}"
    got = source.locate(gone, "weights.uri", version, sha)
    assert got.is_dir() and got.is_relative_to(tmp_path / "cache") and (got / ".sha256").read_text() == sha
    assert source.locate(gone, "uri") == got  # the version the uri names; from the cache
    (got / "model.safetensors").write_bytes(b"stale")  # a cached copy that is not the published one
    (got / ".sha256").write_text("0" * 64)
    assert source.locate(gone, "weights.uri", version, sha) == got  # fetched again
    assert (got / ".sha256").read_text() == sha
    with pytest.raises(ChecksumMismatch, match="weights.uri: version"):
        WeightSource(WeightsFromSettings(weights_from=address, weights_cache=tmp_path / "c2")).locate(
            gone, "weights.uri", version, "f" * 64)


def test_the_policy_and_the_teacher_load_a_version_that_is_not_on_their_host(trainer, tiny_model_dir, tmp_path):
    from services.policy.config import PolicyConfig
    from services.policy.core import PolicyCore
    from services.teacher.config import TeacherConfig
    from services.teacher.core import TeacherCore

    address, _store, version, sha, path = trainer
    gone = str(tmp_path / "not-here" / "weights" / f"v{version}")
    policy = PolicyCore.build(PolicyConfig(model=str(tiny_model_dir), weights_from=address,
                                           weights_cache=tmp_path / "policy-cache"))
    with pytest.raises(ChecksumMismatch):
        policy.load_weights(version, gone, "f" * 64)
    assert policy.weight_version == 0  # nothing half-loaded
    policy.load_weights(version, gone, sha)
    assert policy.weight_version == version
    teacher = TeacherCore(TeacherConfig(weights_from=address, weights_cache=tmp_path / "teacher-cache"))
    t, _s = teacher.load_teacher("math", gone)
    assert t.uri == gone and (tmp_path / "teacher-cache").is_dir()
    with pytest.raises(InvalidArgument, match="uri.*does not exist"):
        TeacherCore(TeacherConfig()).load_teacher("math", gone)
