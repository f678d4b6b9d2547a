from services.common.pb import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ScoreTokensRequest(_message.Message):
    __slots__ = ("domain", "prompt_ids", "completion_ids", "prompt_index", "top_k", "temperature")
    DOMAIN_FIELD_NUMBER: _ClassVar[int]
    PROMPT_IDS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_IDS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_INDEX_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    domain: str
    prompt_ids: _common_pb2.Ragged
    completion_ids: _common_pb2.Ragged
    prompt_index: _containers.RepeatedScalarFieldContainer[int]
    top_k: int
    temperature: float
    def __init__(self, domain: _Optional[str] = ..., prompt_ids: _Optional[_Union[_common_pb2.Ragged, _Mapping]] = ..., completion_ids: _Optional[_Union[_common_pb2.Ragged, _Mapping]] = ..., prompt_index: _Optional[_Iterable[int]] = ..., top_k: _Optional[int] = ..., temperature: _Optional[float] = ...) -> None: ...

class ScoreTokensResponse(_message.Message):
    __slots__ = ("logprobs", "topk_ids", "topk_logprobs", "weight_version")
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    TOPK_IDS_FIELD_NUMBER: _ClassVar[int]
    TOPK_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_VERSION_FIELD_NUMBER: _ClassVar[int]
    logprobs: _common_pb2.Ragged
    topk_ids: _common_pb2.Ragged
    topk_logprobs: _common_pb2.Ragged
    weight_version: int
    def __init__(self, logprobs: _Optional[_Union[_common_pb2.Ragged, _Mapping]] = ..., topk_ids: _Optional[_Union[_common_pb2.Ragged, _Mapping]] = ..., topk_logprobs: _Optional[_Union[_common_pb2.Ragged, _Mapping]] = ..., weight_version: _Optional[int] = ...) -> None: ...

class LoadTeacherRequest(_message.Message):
    __slots__ = ("domain", "uri", "sha256")
    DOMAIN_FIELD_NUMBER: _ClassVar[int]
    URI_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    domain: str
    uri: str
    sha256: str
    def __init__(self, domain: _Optional[str] = ..., uri: _Optional[str] = ..., sha256: _Optional[str] = ...) -> None: ...

class LoadTeacherResponse(_message.Message):
    __slots__ = ("info", "load_seconds")
    INFO_FIELD_NUMBER: _ClassVar[int]
    LOAD_SECONDS_FIELD_NUMBER: _ClassVar[int]
    info: _common_pb2.ModelInfo
    load_seconds: float
    def __init__(self, info: _Optional[_Union[_common_pb2.ModelInfo, _Mapping]] = ..., load_seconds: _Optional[float] = ...) -> None: ...

class ListTeachersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TeacherEntry(_message.Message):
    __slots__ = ("domain", "info", "uri")
    DOMAIN_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    URI_FIELD_NUMBER: _ClassVar[int]
    domain: str
    info: _common_pb2.ModelInfo
    uri: str
    def __init__(self, domain: _Optional[str] = ..., info: _Optional[_Union[_common_pb2.ModelInfo, _Mapping]] = ..., uri: _Optional[str] = ...) -> None: ...

class ListTeachersResponse(_message.Message):
    __slots__ = ("teachers",)
    TEACHERS_FIELD_NUMBER: _ClassVar[int]
    teachers: _containers.RepeatedCompositeFieldContainer[TeacherEntry]
    def __init__(self, teachers: _Optional[_Iterable[_Union[TeacherEntry, _Mapping]]] = ...) -> None: ...
