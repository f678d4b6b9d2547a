"""No silent settings: every field of every service's settings model is read by that service's code.

An AST walk over each service package (its config.py excepted: a validator reading a field does
not make the field do anything) collects every attribute read `x.<name>` and every
`getattr(x, "<name>")`; a field of the model that no code reads fails, naming the field. Fields of
the shared `ServerSettings` / `CommonSettings` may be read by any service or by services/common.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from services.api.config import ApiSettings
from services.common.cores import CoreSettings
from services.common.settings import CommonSettings, ServerSettings
from services.env.config import EnvConfig
from services.policy.config import PolicyConfig
from services.reward.config import RewardConfig
from services.teacher.config import TeacherConfig
from services.trainer.config import TrainerConfig
from services.trainer.schedules import ScheduleConfig

ROOT = Path(__file__).resolve().parents[2] / "services"
SHARED = ("common", "trainer", "policy", "teacher", "reward", "api", "cli", "env")

MODELS = [
    # (model, packages whose code must read each of its own fields)
    (TrainerConfig, ("trainer",)),
    (ScheduleConfig, ("trainer",)),
    (PolicyConfig, ("policy",)),
    (TeacherConfig, ("teacher",)),
    (RewardConfig, ("reward",)),
    (EnvConfig, ("env",)),
    (ApiSettings, ("api",)),
    (ServerSettings, SHARED),
    (CommonSettings, SHARED),
    (CoreSettings, SHARED),
]

ALLOWED_UNREAD: dict[str, str] = {
    # "Model.field": "why nothing reads it (and why that is right)",
}


def reads(packages: tuple[str, ...]) -> set[str]:
    """Attribute names read (`x.name`, `getattr(x, "name")`) in the packages' code, config.py excepted."""
    names: set[str] = set()
    for package in packages:
        for path in (ROOT / package).rglob("*.py"):
            if path.name == "config.py" or "pb" in path.relative_to(ROOT).parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                    names.add(node.attr)
                elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
                      and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
                    names.add(node.args[1].value)
    return names


def own_fields(model) -> list[str]:
    inherited = set().union(*(getattr(b, "model_fields", {}) for b in model.__mro__[1:]))
    return [f for f in model.model_fields if f not in inherited]


@pytest.mark.parametrize("model, packages", MODELS, ids=[m.__name__ for m, _ in MODELS])
def test_every_field_is_read(model, packages):
    read = reads(packages)
    unread = [f for f in own_fields(model) if f not in read and f"{model.__name__}.{f}" not in ALLOWED_UNREAD]
    assert not unread, f"{model.__name__}: no code in services/{{{','.join(packages)}}} reads {unread}; wire each or remove it"


def test_the_walk_can_fail():
    """A field named like nothing in the code is reported (the walk is not vacuous)."""
    assert "surely_no_code_reads_this_field" not in reads(("trainer",))
    assert {"micro_batch_tokens", "journal_keep"} <= reads(("trainer",))
