"""Hosts as network namespaces (tests/hosts/netns.py): skipped, with the reason, where the machine cannot make them."""

from __future__ import annotations

import os

import pytest

from tests.hosts import netns

PREFIX = "cxh"
"""Every namespace these tests make is named `cxh<n>-...`; a session starts by deleting stale ones."""


def pytest_configure(config):
    config.addinivalue_line("markers", "hosts: runs processes on several hosts made of network namespaces (root)")


@pytest.fixture(scope="session")
def can_make_hosts() -> None:
    reason = netns.unavailable()
    if reason:  # CI runs as root on a machine that has them: there their absence is a failure
        (pytest.fail if os.environ.get("CI") else pytest.skip)(f"no network namespaces: {reason}")
    for n in range(10):
        netns.cleanup_stale(f"{PREFIX}{n}")


@pytest.fixture
def network(can_make_hosts, request):
    """A fresh switch (prefix cxh0) for one test; torn down even when the test fails."""
    net = netns.Network(f"{PREFIX}0", subnet=77)
    request.addfinalizer(net.close)
    return net
