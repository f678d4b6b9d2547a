"""What every step kind shares: declared phases on known queues, and what every TrainStep carries."""

from __future__ import annotations

from services.orchestrator.celery_app import queue_names
from services.orchestrator.steps import STEP_KINDS


def test_every_kind_declares_its_phases_on_known_queues_and_ends_with_update():
    queues = set(queue_names())
    for name, kind in STEP_KINDS.items():
        assert kind.phases and kind.phases[-1].name == "update", name
        assert {p.queue for p in kind.phases} <= queues, name
        assert len({p.name for p in kind.phases}) == len(kind.phases), name


def test_every_cascade_stage_type_has_a_step_kind():
    from services.orchestrator.cascade_config import STAGE_TYPES

    assert set(STEP_KINDS) == set(STAGE_TYPES)
