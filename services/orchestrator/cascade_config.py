"""Reading a cascade file: YAML or JSON -> a validated CascadeConfig, or every problem at once.

`load_cascade(path)` reads the file; every error names the file and the field
(`demo.yaml: stages[2].sampling.temperature: ...`), an unknown key gets a `did you mean` hint, and
all of them are reported together (CascadeConfigError.problems). The schema itself is
cascade_schema's (re-exported here, where callers have always imported it from).
"""

from __future__ import annotations

import difflib
import json
import re
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from services.common.errors import CascadeError
from services.orchestrator.cascade_schedules import (  # noqa: F401  (re-exported)
    SCHEDULE_TYPES,
    ConstantSchedule,
    CosineSchedule,
    LinearWarmupSchedule,
)
from services.orchestrator.cascade_schema import (  # noqa: F401  (re-exported: the config's public names)
    POLICY_STAGES,
    STAGE_TYPES,
    CascadeConfig,
    EvalConfig,
    GrpoStage,
    MopdStage,
    OptimizerConfig,
    RmStage,
    RolloutStage,
    SamplingConfig,
    SftStage,
    StageBase,
    eval_sampling,
)


class CascadeConfigError(CascadeError):
    """A cascade file is unreadable or invalid; `problems` holds one line per bad field."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


def load_cascade(path: str | Path) -> CascadeConfig:
    """Read and validate a cascade file (.yaml / .yml / .json); raise CascadeConfigError listing every problem."""
    path = Path(path)
    source = path.name
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CascadeConfigError([f"{path}: cannot read the cascade file: {exc.strerror or exc}"]) from exc
    try:
        raw = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        raise CascadeConfigError([f"{source}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {exc}"]) from exc
    if not isinstance(raw, dict):
        shape = f"the top level must be a mapping with name, model and stages (got {type(raw).__name__})"
        raise CascadeConfigError([f"{source}: {shape}"])
    try:
        return CascadeConfig.model_validate(raw)
    except ValidationError as exc:
        raise CascadeConfigError(format_problems(exc, source)) from exc


def format_problems(exc: ValidationError, source: str) -> list[str]:
    """One line per problem: `SOURCE: stages[2].sampling.temperature: message (got -1)`."""
    lines: list[str] = []
    for err in exc.errors(include_url=False):
        loc = err["loc"]
        if not loc and err["type"] == "value_error":  # cross-stage checks already name their fields
            msg = err["msg"].removeprefix("Value error, ")
            lines.extend(f"{source}: {line}" for line in msg.splitlines())
            continue
        where = _loc_to_path(loc) or "<root>"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key" + _hint(loc)
        got = err.get("input")
        shown = "" if isinstance(got, (dict, list)) or err["type"] == "missing" else f" (got {got!r})"
        lines.append(f"{source}: {where}: {msg}{shown}")
    return lines


_TAGS = set(STAGE_TYPES) | set(SCHEDULE_TYPES)


def _loc_to_path(loc: tuple) -> str:
    """('stages', 2, 'grpo', 'sampling', 'top_p') -> 'stages[2].sampling.top_p' (union tags dropped)."""
    out = ""
    prev: Any = None
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in _TAGS and (isinstance(prev, int) or prev == "schedule"):
            pass
        elif not _PLAIN_KEY.match(str(part)):  # a key with spaces, dots or newlines: quoted, on one line
            out += f"[{str(part)!r}]"
        else:
            out += f".{part}" if out else str(part)
        prev = part
    return out


_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


def _hint(loc: tuple) -> str:
    """`; did you mean 'x'? valid keys: ...` for an unknown key at `loc`."""
    model = _model_at(loc[:-1])
    if model is None:
        return ""
    valid = sorted(model.model_fields)
    close = difflib.get_close_matches(str(loc[-1]), valid, n=1)
    guess = f"; did you mean {close[0]!r}?" if close else ""
    return f"{guess} (valid keys here: {', '.join(valid)})"


def _model_at(loc: tuple) -> type[BaseModel] | None:
    """The pydantic model that validates the mapping at `loc` (following union tags)."""
    model: type[BaseModel] | None = CascadeConfig
    for part in loc:
        if isinstance(part, int):
            continue
        if part in STAGE_TYPES and model is StageBase:
            model = STAGE_TYPES[part]
            continue
        if part in SCHEDULE_TYPES and model is ConstantSchedule:
            model = SCHEDULE_TYPES[part]
            continue
        field = model.model_fields.get(part) if model is not None else None
        if field is None:
            return None
        model = _first_model(field.annotation)
    return model


def _first_model(annotation: Any) -> type[BaseModel] | None:
    """The first BaseModel class inside an annotation such as `list[Stage]` or `SamplingConfig | None`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _first_model(arg)
        if found is not None:
            return StageBase if found in STAGE_TYPES.values() else found
    return None
