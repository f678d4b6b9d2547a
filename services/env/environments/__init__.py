"""The environment registry: name -> Environment class (one signature, `base.Environment`).

Adding an environment is one module (or package) and one line here.
"""

from __future__ import annotations

from services.env.environments.base import Environment
from services.env.environments.python import PythonEnvironment
from services.env.environments.swe import SweEnvironment
from services.env.environments.workbench import WorkbenchEnvironment

ENVIRONMENTS: dict[str, type[Environment]] = {
    "workbench": WorkbenchEnvironment,
    "swe": SweEnvironment,
    "python": PythonEnvironment,
}

__all__ = ["ENVIRONMENTS", "Environment"]
