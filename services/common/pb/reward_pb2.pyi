from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Verdict(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    VERDICT_UNSPECIFIED: _ClassVar[Verdict]
    VERDICT_CORRECT: _ClassVar[Verdict]
    VERDICT_INCORRECT: _ClassVar[Verdict]
    VERDICT_INVALID: _ClassVar[Verdict]
    VERDICT_TIMEOUT: _ClassVar[Verdict]
    VERDICT_ERROR: _ClassVar[Verdict]
VERDICT_UNSPECIFIED: Verdict
VERDICT_CORRECT: Verdict
VERDICT_INCORRECT: Verdict
VERDICT_INVALID: Verdict
VERDICT_TIMEOUT: Verdict
VERDICT_ERROR: Verdict

class ScoreItem(_message.Message):
    __slots__ = ("task_json", "response")
    TASK_JSON_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    task_json: str
    response: str
    def __init__(self, task_json: _Optional[str] = ..., response: _Optional[str] = ...) -> None: ...

class ScoreRequest(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[ScoreItem]
    def __init__(self, items: _Optional[_Iterable[_Union[ScoreItem, _Mapping]]] = ...) -> None: ...

class Check(_message.Message):
    __slots__ = ("name", "passed", "detail")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PASSED_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    name: str
    passed: bool
    detail: str
    def __init__(self, name: _Optional[str] = ..., passed: _Optional[bool] = ..., detail: _Optional[str] = ...) -> None: ...

class ScoreResult(_message.Message):
    __slots__ = ("reward", "verdict", "reason", "checks", "seconds")
    REWARD_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CHECKS_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    reward: float
    verdict: Verdict
    reason: str
    checks: _containers.RepeatedCompositeFieldContainer[Check]
    seconds: float
    def __init__(self, reward: _Optional[float] = ..., verdict: _Optional[_Union[Verdict, str]] = ..., reason: _Optional[str] = ..., checks: _Optional[_Iterable[_Union[Check, _Mapping]]] = ..., seconds: _Optional[float] = ...) -> None: ...

class ScoreResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ScoreResult]
    def __init__(self, results: _Optional[_Iterable[_Union[ScoreResult, _Mapping]]] = ...) -> None: ...

class LoadRewardModelRequest(_message.Message):
    __slots__ = ("uri", "sha256")
    URI_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    uri: str
    sha256: str
    def __init__(self, uri: _Optional[str] = ..., sha256: _Optional[str] = ...) -> None: ...

class LoadRewardModelResponse(_message.Message):
    __slots__ = ("uri", "load_seconds")
    URI_FIELD_NUMBER: _ClassVar[int]
    LOAD_SECONDS_FIELD_NUMBER: _ClassVar[int]
    uri: str
    load_seconds: float
    def __init__(self, uri: _Optional[str] = ..., load_seconds: _Optional[float] = ...) -> None: ...
