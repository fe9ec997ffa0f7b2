from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from simulator import Simulator
from simulator.config import SimConfig


@pytest.fixture
def simulator(settings: Any) -> Iterator[Simulator]:
    """The demo fleet on a free port, playing Flux on this test's ``GITOPS_REPO_PATH``.

    No delays and no background ticking: a test moves the fleet on with ``simulator.tick()``,
    so what it sees never depends on timing.
    """
    config = dataclasses.replace(SimConfig.demo(), flux_delay=0, ready_delay=0, recreate_delay=0)
    sim = Simulator(config, repo_path=settings.GITOPS_REPO_PATH, branch="main")
    sim.start("127.0.0.1", 0, tick_seconds=None)
    try:
        yield sim
    finally:
        sim.stop()


@pytest.fixture
def kube(simulator: Simulator) -> Iterator[client.ApiClient]:
    """The official Kubernetes client, pointed at ``simulator``."""
    configuration = client.Configuration()
    configuration.host = simulator.url
    with client.ApiClient(configuration) as api:
        yield api
