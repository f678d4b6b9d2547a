from services.common.pb import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EpisodeVerdict(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EPISODE_VERDICT_UNSPECIFIED: _ClassVar[EpisodeVerdict]
    EPISODE_VERDICT_RUNNING: _ClassVar[EpisodeVerdict]
    EPISODE_VERDICT_OK: _ClassVar[EpisodeVerdict]
    EPISODE_VERDICT_ERROR: _ClassVar[EpisodeVerdict]
    EPISODE_VERDICT_LIMIT_TURNS: _ClassVar[EpisodeVerdict]
    EPISODE_VERDICT_LIMIT_DEADLINE: _ClassVar[EpisodeVerdict]
    EPISODE_VERDICT_LIMIT_ENV_SECONDS: _ClassVar[EpisodeVerdict]
    EPISODE_VERDICT_CLOSED: _ClassVar[EpisodeVerdict]
EPISODE_VERDICT_UNSPECIFIED: EpisodeVerdict
EPISODE_VERDICT_RUNNING: EpisodeVerdict
EPISODE_VERDICT_OK: EpisodeVerdict
EPISODE_VERDICT_ERROR: EpisodeVerdict
EPISODE_VERDICT_LIMIT_TURNS: EpisodeVerdict
EPISODE_VERDICT_LIMIT_DEADLINE: EpisodeVerdict
EPISODE_VERDICT_LIMIT_ENV_SECONDS: EpisodeVerdict
EPISODE_VERDICT_CLOSED: EpisodeVerdict

class ListEnvironmentsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class EnvironmentInfo(_message.Message):
    __slots__ = ("name", "description", "tools")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    tools: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., tools: _Optional[_Iterable[str]] = ...) -> None: ...

class ListEnvironmentsResponse(_message.Message):
    __slots__ = ("environments",)
    ENVIRONMENTS_FIELD_NUMBER: _ClassVar[int]
    environments: _containers.RepeatedCompositeFieldContainer[EnvironmentInfo]
    def __init__(self, environments: _Optional[_Iterable[_Union[EnvironmentInfo, _Mapping]]] = ...) -> None: ...

class OpenEpisodeRequest(_message.Message):
    __slots__ = ("environment", "task_json", "deadline_s", "max_turns")
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    TASK_JSON_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_S_FIELD_NUMBER: _ClassVar[int]
    MAX_TURNS_FIELD_NUMBER: _ClassVar[int]
    environment: str
    task_json: str
    deadline_s: float
    max_turns: int
    def __init__(self, environment: _Optional[str] = ..., task_json: _Optional[str] = ..., deadline_s: _Optional[float] = ..., max_turns: _Optional[int] = ...) -> None: ...

class OpenEpisodeResponse(_message.Message):
    __slots__ = ("episode_id", "messages", "tools_json", "deadline_s", "max_turns")
    EPISODE_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TOOLS_JSON_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_S_FIELD_NUMBER: _ClassVar[int]
    MAX_TURNS_FIELD_NUMBER: _ClassVar[int]
    episode_id: str
    messages: _containers.RepeatedCompositeFieldContainer[_common_pb2.ChatMessage]
    tools_json: str
    deadline_s: float
    max_turns: int
    def __init__(self, episode_id: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[_common_pb2.ChatMessage, _Mapping]]] = ..., tools_json: _Optional[str] = ..., deadline_s: _Optional[float] = ..., max_turns: _Optional[int] = ...) -> None: ...

class StepRequest(_message.Message):
    __slots__ = ("episode_id", "assistant_text")
    EPISODE_ID_FIELD_NUMBER: _ClassVar[int]
    ASSISTANT_TEXT_FIELD_NUMBER: _ClassVar[int]
    episode_id: str
    assistant_text: str
    def __init__(self, episode_id: _Optional[str] = ..., assistant_text: _Optional[str] = ...) -> None: ...

class StepResponse(_message.Message):
    __slots__ = ("messages", "done", "reward", "verdict", "reason", "tool_errors", "env_seconds", "turns")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    TOOL_ERRORS_FIELD_NUMBER: _ClassVar[int]
    ENV_SECONDS_FIELD_NUMBER: _ClassVar[int]
    TURNS_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[_common_pb2.ChatMessage]
    done: bool
    reward: float
    verdict: EpisodeVerdict
    reason: str
    tool_errors: int
    env_seconds: float
    turns: int
    def __init__(self, messages: _Optional[_Iterable[_Union[_common_pb2.ChatMessage, _Mapping]]] = ..., done: _Optional[bool] = ..., reward: _Optional[float] = ..., verdict: _Optional[_Union[EpisodeVerdict, str]] = ..., reason: _Optional[str] = ..., tool_errors: _Optional[int] = ..., env_seconds: _Optional[float] = ..., turns: _Optional[int] = ...) -> None: ...

class CloseEpisodeRequest(_message.Message):
    __slots__ = ("episode_id",)
    EPISODE_ID_FIELD_NUMBER: _ClassVar[int]
    episode_id: str
    def __init__(self, episode_id: _Optional[str] = ...) -> None: ...

class CloseEpisodeResponse(_message.Message):
    __slots__ = ("reward", "verdict", "reason", "turns", "env_seconds")
    REWARD_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    TURNS_FIELD_NUMBER: _ClassVar[int]
    ENV_SECONDS_FIELD_NUMBER: _ClassVar[int]
    reward: float
    verdict: EpisodeVerdict
    reason: str
    turns: int
    env_seconds: float
    def __init__(self, reward: _Optional[float] = ..., verdict: _Optional[_Union[EpisodeVerdict, str]] = ..., reason: _Optional[str] = ..., turns: _Optional[int] = ..., env_seconds: _Optional[float] = ...) -> None: ...
