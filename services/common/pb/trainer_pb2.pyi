from services.common.pb import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TrainBatch(_message.Message):
    __slots__ = ("input_ids", "loss_mask", "advantages", "inference_logprobs", "teacher_logprobs", "reference_logprobs", "preference_pairs")
    INPUT_IDS_FIELD_NUMBER: _ClassVar[int]
    LOSS_MASK_FIELD_NUMBER: _ClassVar[int]
    ADVANTAGES_FIELD_NUMBER: _ClassVar[int]
    INFERENCE_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    TEACHER_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    PREFERENCE_PAIRS_FIELD_NUMBER: _ClassVar[int]
    input_ids: _common_pb2.Ragged
    loss_mask: _common_pb2.Ragged
    advantages: _common_pb2.Ragged
    inference_logprobs: _common_pb2.Ragged
    teacher_logprobs: _common_pb2.Ragged
    reference_logprobs: _common_pb2.Ragged
    preference_pairs: _common_pb2.Ragged
    def __init__(self, input_ids: _Optional[_Union[_common_pb2.Ragged, _Mapping]] = ..., loss_mask: _Optional[_Union[_common_pb2.Ragged, _Mapping]] = ..., advantages: _Optional[_Union[_common_pb2.Ragged, _Mapping]] = ..., inference_logprobs: _Optional[_Union[_common_pb2.Ragged, _Mapping]] = ..., teacher_logprobs: _Optional[_Union[_common_pb2.Ragged, _Mapping]] = ..., reference_logprobs: _Optional[_Union[_common_pb2.Ragged, _Mapping]] = ..., preference_pairs: _Optional[_Union[_common_pb2.Ragged, _Mapping]] = ...) -> None: ...

class LossParams(_message.Message):
    __slots__ = ("kl_coef", "eps_low", "eps_high", "grpo_alpha", "temperature", "top_p", "top_k", "kl_estimator", "kl_clamp", "tis_cap")
    KL_COEF_FIELD_NUMBER: _ClassVar[int]
    EPS_LOW_FIELD_NUMBER: _ClassVar[int]
    EPS_HIGH_FIELD_NUMBER: _ClassVar[int]
    GRPO_ALPHA_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    KL_ESTIMATOR_FIELD_NUMBER: _ClassVar[int]
    KL_CLAMP_FIELD_NUMBER: _ClassVar[int]
    TIS_CAP_FIELD_NUMBER: _ClassVar[int]
    kl_coef: float
    eps_low: float
    eps_high: float
    grpo_alpha: float
    temperature: float
    top_p: float
    top_k: int
    kl_estimator: str
    kl_clamp: float
    tis_cap: float
    def __init__(self, kl_coef: _Optional[float] = ..., eps_low: _Optional[float] = ..., eps_high: _Optional[float] = ..., grpo_alpha: _Optional[float] = ..., temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., top_k: _Optional[int] = ..., kl_estimator: _Optional[str] = ..., kl_clamp: _Optional[float] = ..., tis_cap: _Optional[float] = ...) -> None: ...

class TrainStepRequest(_message.Message):
    __slots__ = ("step_id", "loss", "batch", "params", "data_cursor", "learning_rate", "reset_optimizer", "init", "weight_decay", "grad_clip", "packing", "share_prompts")
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    DATA_CURSOR_FIELD_NUMBER: _ClassVar[int]
    LEARNING_RATE_FIELD_NUMBER: _ClassVar[int]
    RESET_OPTIMIZER_FIELD_NUMBER: _ClassVar[int]
    INIT_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_DECAY_FIELD_NUMBER: _ClassVar[int]
    GRAD_CLIP_FIELD_NUMBER: _ClassVar[int]
    PACKING_FIELD_NUMBER: _ClassVar[int]
    SHARE_PROMPTS_FIELD_NUMBER: _ClassVar[int]
    step_id: str
    loss: str
    batch: TrainBatch
    params: LossParams
    data_cursor: str
    learning_rate: float
    reset_optimizer: bool
    init: InitWeights
    weight_decay: float
    grad_clip: float
    packing: bool
    share_prompts: bool
    def __init__(self, step_id: _Optional[str] = ..., loss: _Optional[str] = ..., batch: _Optional[_Union[TrainBatch, _Mapping]] = ..., params: _Optional[_Union[LossParams, _Mapping]] = ..., data_cursor: _Optional[str] = ..., learning_rate: _Optional[float] = ..., reset_optimizer: _Optional[bool] = ..., init: _Optional[_Union[InitWeights, _Mapping]] = ..., weight_decay: _Optional[float] = ..., grad_clip: _Optional[float] = ..., packing: _Optional[bool] = ..., share_prompts: _Optional[bool] = ...) -> None: ...

class InitWeights(_message.Message):
    __slots__ = ("uri", "sha256")
    URI_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    uri: str
    sha256: str
    def __init__(self, uri: _Optional[str] = ..., sha256: _Optional[str] = ...) -> None: ...

class TrainStepResponse(_message.Message):
    __slots__ = ("metrics", "global_step", "replayed")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    METRICS_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_STEP_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    metrics: _containers.ScalarMap[str, float]
    global_step: int
    replayed: bool
    def __init__(self, metrics: _Optional[_Mapping[str, float]] = ..., global_step: _Optional[int] = ..., replayed: _Optional[bool] = ...) -> None: ...

class SaveCheckpointRequest(_message.Message):
    __slots__ = ("tag",)
    TAG_FIELD_NUMBER: _ClassVar[int]
    tag: str
    def __init__(self, tag: _Optional[str] = ...) -> None: ...

class CheckpointInfo(_message.Message):
    __slots__ = ("tag", "uri", "global_step")
    TAG_FIELD_NUMBER: _ClassVar[int]
    URI_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_STEP_FIELD_NUMBER: _ClassVar[int]
    tag: str
    uri: str
    global_step: int
    def __init__(self, tag: _Optional[str] = ..., uri: _Optional[str] = ..., global_step: _Optional[int] = ...) -> None: ...

class LoadCheckpointRequest(_message.Message):
    __slots__ = ("tag",)
    TAG_FIELD_NUMBER: _ClassVar[int]
    tag: str
    def __init__(self, tag: _Optional[str] = ...) -> None: ...

class PublishWeightsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StreamWeightsRequest(_message.Message):
    __slots__ = ("version", "chunk_bytes", "from_path", "from_offset")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CHUNK_BYTES_FIELD_NUMBER: _ClassVar[int]
    FROM_PATH_FIELD_NUMBER: _ClassVar[int]
    FROM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    version: int
    chunk_bytes: int
    from_path: str
    from_offset: int
    def __init__(self, version: _Optional[int] = ..., chunk_bytes: _Optional[int] = ..., from_path: _Optional[str] = ..., from_offset: _Optional[int] = ...) -> None: ...

class WeightChunk(_message.Message):
    __slots__ = ("version", "path", "offset", "data", "file_size", "sha256")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    FILE_SIZE_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    version: int
    path: str
    offset: int
    data: bytes
    file_size: int
    sha256: str
    def __init__(self, version: _Optional[int] = ..., path: _Optional[str] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ..., file_size: _Optional[int] = ..., sha256: _Optional[str] = ...) -> None: ...

class GetStateRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TrainerState(_message.Message):
    __slots__ = ("global_step", "weight_version", "data_cursor", "applied_step_ids", "learning_rate", "model", "world_size")
    GLOBAL_STEP_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_VERSION_FIELD_NUMBER: _ClassVar[int]
    DATA_CURSOR_FIELD_NUMBER: _ClassVar[int]
    APPLIED_STEP_IDS_FIELD_NUMBER: _ClassVar[int]
    LEARNING_RATE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    global_step: int
    weight_version: int
    data_cursor: str
    applied_step_ids: _containers.RepeatedScalarFieldContainer[str]
    learning_rate: float
    model: str
    world_size: int
    def __init__(self, global_step: _Optional[int] = ..., weight_version: _Optional[int] = ..., data_cursor: _Optional[str] = ..., applied_step_ids: _Optional[_Iterable[str]] = ..., learning_rate: _Optional[float] = ..., model: _Optional[str] = ..., world_size: _Optional[int] = ...) -> None: ...
