"""Step kinds by stage type: the one registry the runner and the Celery tasks read.

Each kind declares its phases in run order (steps.base.Phase: name, queue, function);
services.orchestrator.tasks builds every step's Celery chain from that declaration, and the runner
calls the kind's hooks at the stage's edges (start_stage, after_evaluation). Read a step in its
kind's module, top to bottom: grpo.py, mopd.py (both start with rollouts.py's `generate`), sft.py,
rm.py.
"""

from services.orchestrator.steps.base import Phase, StepKind
from services.orchestrator.steps.grpo import GrpoStep
from services.orchestrator.steps.mopd import MopdStep
from services.orchestrator.steps.rm import RmStep
from services.orchestrator.steps.sft import SftStep

STEP_KINDS: dict[str, StepKind] = {"sft": SftStep(), "grpo": GrpoStep(), "mopd": MopdStep(), "rm": RmStep()}

__all__ = ["STEP_KINDS", "Phase", "StepKind"]
