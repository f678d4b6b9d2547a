"""Step kinds by stage type: the explicit registry the runner and the Celery tasks dispatch on."""

from services.orchestrator.steps.base import StepKind
from services.orchestrator.steps.grpo import GrpoStep
from services.orchestrator.steps.mopd import MopdStep
from services.orchestrator.steps.rm import RmStep
from services.orchestrator.steps.sft import SftStep

STEP_KINDS: dict[str, StepKind] = {"sft": SftStep(), "grpo": GrpoStep(), "mopd": MopdStep(), "rm": RmStep()}

__all__ = ["STEP_KINDS", "StepKind"]
