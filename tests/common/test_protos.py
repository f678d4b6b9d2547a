"""The committed stubs are exactly what protoc makes of proto/cascade/v1 (no drift), and the
contracts carry every RPC of DESIGN.md section 1."""

from pathlib import Path

from services.common import protogen
from services.common.pb import env_pb2, policy_pb2, reward_pb2, teacher_pb2, trainer_pb2


def test_committed_stubs_match_the_protos(tmp_path: Path):
    generated = protogen.generate(tmp_path)
    committed = sorted(p.name for p in protogen.PB_DIR.iterdir() if p.is_file())
    assert sorted(p.name for p in generated) == committed
    for path in generated:
        assert path.read_text() == (protogen.PB_DIR / path.name).read_text(), (
            f"{path.name} drifted from proto/: run `make proto` and commit the result"
        )


def _methods(module, service):
    return set(module.DESCRIPTOR.services_by_name[service].methods_by_name)


def test_every_rpc_of_the_design_exists():
    assert _methods(policy_pb2, "PolicyService") == {"Generate", "LoadWeights", "GetInfo"}
    assert _methods(teacher_pb2, "TeacherService") == {"ScoreTokens", "LoadTeacher", "ListTeachers"}
    assert _methods(reward_pb2, "RewardService") >= {"Score"}
    assert _methods(trainer_pb2, "TrainerService") == {
        "TrainStep", "SaveCheckpoint", "LoadCheckpoint", "PublishWeights", "StreamWeights", "GetState",
    }
    assert _methods(env_pb2, "EnvService") == {"ListEnvironments", "OpenEpisode", "Step", "CloseEpisode"}


def test_arrays_travel_as_bytes_never_repeated_float():
    from google.protobuf.descriptor import FieldDescriptor

    for module in (policy_pb2, teacher_pb2, reward_pb2, trainer_pb2, env_pb2):
        for message in module.DESCRIPTOR.message_types_by_name.values():
            for field in message.fields:
                is_repeated = getattr(field, "is_repeated", None)
                repeated = is_repeated if is_repeated is not None else field.label == FieldDescriptor.LABEL_REPEATED
                assert not (repeated and field.type in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE)), (
                    f"{message.full_name}.{field.name} is a repeated float: use cascade.v1.Ragged"
                )
