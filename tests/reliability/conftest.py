"""The bounded services shared by the bad-input and load tests (one start per session)."""

from __future__ import annotations

import pytest

from tests.reliability.probes import start_services


@pytest.fixture(scope="session")
def services(tmp_path_factory, tiny_model_dir):
    """(supervisor, {name: ProcessSpec}) of policy, teacher, reward and trainer on loopback."""
    sup, specs = start_services(tmp_path_factory.mktemp("bounded"), tiny_model_dir)
    yield sup, specs
    sup.stop(grace=5)
