"""The trainer service over real gRPC on loopback: in-process for the contract, and two CPU ranks
in subprocesses (rank 0 serves, rank 1 follows) checked against a one-rank run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import grpc
import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from services.common import codec
from services.common.checksum import verify_dir
from services.common.cores import host_cores, rank_slots
from services.common.grpc_client import ClientOptions, ReplicaClient
from services.common.grpc_server import GrpcServer
from services.common.modelio import load_causal_lm
from services.common.pb import trainer_pb2, trainer_pb2_grpc
from services.common.supervisor import free_port
from services.trainer.config import TrainerConfig
from services.trainer.core import TrainerCore
from services.trainer.distributed import Coordinator
from services.trainer.schedules import ScheduleConfig
from services.trainer.server import TrainerServicer
from tests.loop_thread import LoopThread
from tests.trainer.builders import adam_steps, batch, prompt_masks, request_batch, token_rows

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]



@pytest.fixture(scope="module")
def served(tiny_model_dir, tmp_path_factory):
    """A TrainerService on a free loopback port (same bootstrap as __main__): a client for it and its servicer."""
    cfg = TrainerConfig(model=str(tiny_model_dir), store=tmp_path_factory.mktemp("store"), schedule=ScheduleConfig(lr=1e-3))
    loop = LoopThread()
    servicer = TrainerServicer()

    async def start():
        server = GrpcServer("trainer", cfg)
        server.add(trainer_pb2_grpc.add_TrainerServiceServicer_to_server, servicer, "cascade.v1.TrainerService")
        await server.start()
        return server

    server = loop.run(start())
    client = ReplicaClient(f"127.0.0.1:{server.port}", trainer_pb2_grpc.TrainerServiceStub, ClientOptions(timeout=60, attempts=1))
    with pytest.raises(grpc.RpcError) as err:  # health NOT_SERVING and calls refused until the model is loaded
        client.call("GetState", trainer_pb2.GetStateRequest())
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE  # transient: a task retries it
    servicer.attach(Coordinator(TrainerCore(cfg)))
    loop.run(server.set_serving(True))
    client.wait_ready(10)
    yield client, servicer
    client.close()
    loop.run(server.shutdown())
    loop.close()


@pytest.fixture
def service(served):
    return served[0]


def train(client, step_id, loss="grpo", msg=None, **params):
    req = trainer_pb2.TrainStepRequest(
        step_id=step_id, loss=loss, batch=msg or request_batch(loss), params=trainer_pb2.LossParams(**params), data_cursor=step_id
    )
    return client.call("TrainStep", req)


def test_train_step_metrics_and_exactly_once(service):
    first = train(service, "g/1")
    assert first.global_step == 1 and not first.replayed
    assert set(first.metrics) == {"loss", "grad_norm", "lr", "tokens", "entropy", "decoder_tokens"}
    assert first.metrics["tokens"] == sum(n - 3 for n in (8, 12, 5)) and first.metrics["lr"] == pytest.approx(1e-3)
    again = train(service, "g/1")
    assert again.replayed and again.global_step == 1 and dict(again.metrics) == dict(first.metrics)
    m = train(service, "g/2", "mopd", eps_low=0.5, eps_high=2.0).metrics
    assert {"advantage_mean", "truncated_fraction"} <= set(m) and 0.0 <= m["truncated_fraction"] <= 1.0
    kl = train(service, "g/3", "grpo", batch(token_rows(3), prompt_masks((8, 12, 5)), advantages=codec.encode([[1.0, 0.0, -1.0]], "float32"), reference_logprobs=-7.0), kl_coef=0.03).metrics
    assert kl["kl"] > 0
    req = trainer_pb2.TrainStepRequest(step_id="g/4", loss="sft", batch=request_batch("sft"), learning_rate=4e-4)
    assert service.call("TrainStep", req).metrics["lr"] == pytest.approx(4e-4)
    req.step_id, req.learning_rate = "g/5", -1.0
    with pytest.raises(grpc.RpcError) as err:
        service.call("TrainStep", req)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and err.value.details().startswith("learning_rate:")
    state = service.call("GetState", trainer_pb2.GetStateRequest())
    assert state.global_step == 4 and list(state.applied_step_ids)[-4:] == ["g/1", "g/2", "g/3", "g/4"] and state.world_size == 1


def test_step_options_travel_with_the_step(service):
    """weight_decay, grad_clip and packing reach the trainer: a bad value is refused naming its field."""
    for step_id, fields, field in [("o/1", {"weight_decay": -0.1}, "weight_decay"), ("o/2", {"grad_clip": float("nan")}, "grad_clip")]:
        req = trainer_pb2.TrainStepRequest(step_id=step_id, loss="sft", batch=request_batch("sft"), **fields)
        with pytest.raises(grpc.RpcError) as err:
            service.call("TrainStep", req)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and err.value.details().startswith(f"{field}:")
    with pytest.raises(grpc.RpcError) as err:
        service.call("TrainStep", trainer_pb2.TrainStepRequest(step_id="o/3", loss="grpo", batch=request_batch("grpo"), packing=True))
    assert err.value.details().startswith("packing:")
    plain = service.call("TrainStep", trainer_pb2.TrainStepRequest(step_id="o/4", loss="sft", batch=request_batch("sft"), learning_rate=0.0))
    packed = service.call("TrainStep", trainer_pb2.TrainStepRequest(step_id="o/5", loss="sft", batch=request_batch("sft"),
                                                                   learning_rate=0.0, packing=True, weight_decay=0.1, grad_clip=0.5))
    assert packed.metrics["loss"] == pytest.approx(plain.metrics["loss"], rel=1e-5)


def test_reset_optimizer_travels_with_the_step(served):
    client, servicer = served
    train(client, "z/1", "sft")
    assert adam_steps(servicer.coordinator) and min(adam_steps(servicer.coordinator)) >= 1
    req = trainer_pb2.TrainStepRequest(step_id="z/2", loss="sft", batch=request_batch("sft"), reset_optimizer=True)
    assert not client.call("TrainStep", req).replayed
    assert adam_steps(servicer.coordinator) == {1}
    train(client, "z/3", "sft")
    assert adam_steps(servicer.coordinator) == {2}


rows, masks = token_rows(0), prompt_masks((8, 12, 5))
BAD = [
    ("grpo", batch(rows, masks[:2], advantages=codec.encode([[1.0, 1.0, 1.0]], "float32")), "batch.loss_mask"),
    ("mopd", batch(rows, masks, inference_logprobs=float("nan"), teacher_logprobs=-1.0), "batch.inference_logprobs"),
    ("mopd", batch(rows, masks, inference_logprobs=-1.0, teacher_logprobs=float("-inf")), "batch.teacher_logprobs"),
    ("sft", batch([np.r_[rows[0], 10**6]], [np.r_[masks[0], 1]]), "batch.input_ids"),
    ("sft", trainer_pb2.TrainBatch(), "batch.loss_mask"),
    ("bt", request_batch("sft"), "loss"),
    ("ppo", request_batch("sft"), "loss"),
]


@pytest.mark.parametrize(("loss", "msg", "field"), BAD, ids=[f"{b[0]}-{b[2]}" for b in BAD])
def test_bad_input_is_invalid_argument_and_nothing_is_applied(service, loss, msg, field):
    before = service.call("GetState", trainer_pb2.GetStateRequest())
    with pytest.raises(grpc.RpcError) as err:
        train(service, f"bad/{field}/{loss}", loss, msg)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and err.value.details().startswith(field + ":")
    after = service.call("GetState", trainer_pb2.GetStateRequest())
    assert after.global_step == before.global_step and list(after.applied_step_ids) == list(before.applied_step_ids)


def test_checkpoint_save_and_load(service):
    info = service.call("SaveCheckpoint", trainer_pb2.SaveCheckpointRequest())
    assert info.tag == f"step-{info.global_step}" and Path(info.uri).is_dir()
    train(service, "after-save", "sft")
    state = service.call("LoadCheckpoint", trainer_pb2.LoadCheckpointRequest(tag=info.tag))
    assert state.global_step == info.global_step and "after-save" not in state.applied_step_ids
    for tag, code in (("no-such", grpc.StatusCode.NOT_FOUND), ("../x", grpc.StatusCode.INVALID_ARGUMENT)):
        with pytest.raises(grpc.RpcError) as err:
            service.call("LoadCheckpoint", trainer_pb2.LoadCheckpointRequest(tag=tag))
        assert err.value.code() == code
    with pytest.raises(grpc.RpcError) as err:
        service.call("SaveCheckpoint", trainer_pb2.SaveCheckpointRequest(tag=".hidden"))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "tag" in err.value.details()


def test_publish_and_stream_the_same_bytes(service, tmp_path):
    ref = service.call("PublishWeights", trainer_pb2.PublishWeightsRequest())
    assert ref.version >= 1 and ref.uri.endswith(f"v{ref.version}")
    out = tmp_path / "received"
    chunks = list(service.stream("StreamWeights", trainer_pb2.StreamWeightsRequest(version=ref.version, chunk_bytes=1 << 20)))
    for c in chunks:
        path = out / c.path
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("ab") as f:
            assert f.tell() == c.offset
            f.write(c.data)
    assert {c.version for c in chunks} == {ref.version} and chunks[-1].sha256 == ref.sha256
    verify_dir(out, ref.sha256)
    received, published = load_file(out / "model.safetensors"), load_file(Path(ref.uri) / "model.safetensors")
    assert received.keys() == published.keys() and all(torch.equal(received[k], published[k]) for k in received)
    assert load_causal_lm(out).config.architectures == ["Qwen3ForCausalLM"]
    with pytest.raises(grpc.RpcError) as err:
        list(service.stream("StreamWeights", trainer_pb2.StreamWeightsRequest(version=ref.version + 50)))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


# -- two ranks ---------------------------------------------------------------------------------
LINEAR = {"CASCADE_TRAINER_ADAM_EPS": "1.0", "CASCADE_TRAINER_SCHEDULE__LR": "0.01"}
STEPS = [("d/1", "grpo", request_batch("grpo", seed=1)), ("d/2", "sft", request_batch("sft", seed=2, lengths=(9,))),
         ("d/3", "mopd", request_batch("mopd", seed=3, lengths=(6, 7, 8, 9, 10)))]


def test_two_cpu_ranks_stay_in_sync_and_match_one_rank(tiny_model_dir, tmp_path):
    store, port, master = tmp_path / "store", free_port(), free_port()
    base = {**os.environ, **LINEAR, "CASCADE_TRAINER_MODEL": str(tiny_model_dir), "CASCADE_TRAINER_STORE": str(store),
            "CASCADE_TRAINER_ZERO_STAGE": "2", "CASCADE_TRAINER_PORT": str(port), "CASCADE_LOG_FORMAT": "text",
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(master), "WORLD_SIZE": "2", "PYTHONPATH": str(ROOT),
            "CASCADE_TRAINER_CORES_DIR": str(tmp_path / "cores")}  # one host's pool: each rank leases its own core
    procs = []
    for r in (0, 1):
        with (tmp_path / f"rank{r}.log").open("wb") as log:
            env = {**base, "RANK": str(r), "LOCAL_RANK": str(r)}
            procs.append(subprocess.Popen([sys.executable, "-m", "services.trainer"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log))
    try:
        with ReplicaClient(f"127.0.0.1:{port}", trainer_pb2_grpc.TrainerServiceStub, ClientOptions(timeout=120)) as client:
            client.wait_ready(120)
            assert client.call("GetState", trainer_pb2.GetStateRequest()).world_size == 2
            remote = [train(client, sid, loss, msg) for sid, loss, msg in STEPS]
            with pytest.raises(grpc.RpcError):  # refused on rank 0; rank 1 never sees it
                train(client, "d/bad", "sft", trainer_pb2.TrainBatch())
            assert train(client, "d/1").replayed
            ref = client.call("PublishWeights", trainer_pb2.PublishWeightsRequest())
        procs[0].send_signal(signal.SIGTERM)
        assert [p.wait(60) for p in procs] == [0, 0], (tmp_path / "rank1.log").read_text()[-3000:]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    cores = host_cores()  # rank r leased rank_slots(.., r, 2), disjoint: it never waited for the other's
    leased = sorted(f"slot-{i}.lock" for r in (0, 1) for i in rank_slots(cores, cores, r, 2))
    assert sorted(p.name for p in (tmp_path / "cores").iterdir()) == leased
    digests = [(store / "ranks" / f"rank-{r}.sha256").read_text() for r in (0, 1)]
    assert digests[0] == digests[1]

    single = Coordinator(TrainerCore(TrainerConfig(
        model=str(tiny_model_dir), store=tmp_path / "one", zero_stage=2, adam_eps=1.0, schedule=ScheduleConfig(lr=0.01))))
    local = [single.train_step(sid, loss, msg, trainer_pb2.LossParams(), "") for sid, loss, msg in STEPS]
    for got, want in zip(remote, local):
        mismatch = [k for k in ("mismatch_mean", "mismatch_p99", "mismatch_max", "window_dropped_fraction", "kl_inf_train")
                    if k in want.metrics]  # whole-batch figures gathered from both ranks
        for k in ("loss", "grad_norm", "tokens", "entropy", *mismatch):
            assert got.metrics[k] == pytest.approx(want.metrics[k], rel=1e-4, abs=1e-6), k
    published = load_causal_lm(ref.uri)
    with single.core.engine.full_parameters() as module:
        mine = dict(module.named_parameters())
        worst = max((p - mine[k]).abs().max().item() for k, p in published.named_parameters())
    assert worst < 1e-5, worst
