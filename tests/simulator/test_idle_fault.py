"""The ``idle`` fault: a workload keeps its GPUs but does no work, so the exporter's
DCGM_FI_PROF_GR_ENGINE_ACTIVE for them reads as an empty GPU's (under 3%) while the pod
label stays; ``busy`` (or clearing the faults) ends it; bad input is a 400. A workload the
configuration names idle (``idle_pods``) reads the same way on whatever GPU it holds."""

from __future__ import annotations

import dataclasses
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import requests
from django.core.management import CommandError, call_command
from prometheus_client.parser import text_string_to_metric_families

from simulator import Simulator
from simulator.config import ConfigError, SimConfig, load_config


def activity(simulator: Simulator, node: str) -> dict[str, tuple[str, float]]:
    """GR_ENGINE_ACTIVE per GPU UUID of ``node``, with the pod the exporter maps to it."""
    text = requests.get(f"{simulator.url}/metrics", timeout=5).text
    out = {}
    for family in text_string_to_metric_families(text):
        if family.name != "DCGM_FI_PROF_GR_ENGINE_ACTIVE":
            continue
        for sample in family.samples:
            if sample.labels.get("Hostname") == node:
                out[sample.labels["UUID"]] = (sample.labels.get("pod", ""), sample.value)
    return out


def busy_node(simulator: Simulator) -> str:
    return next(s.hostname for s in simulator.gpu_samples() if s.busy and not s.is_mig)


def test_an_idle_workload_holds_its_gpus_and_reads_as_idle(simulator: Simulator) -> None:
    node = busy_node(simulator)
    before = {uuid: v for uuid, v in activity(simulator, node).items() if v[0]}
    assert before and all(value > 0.5 for _, value in before.values())
    answer = requests.post(
        f"{simulator.url}/sim/faults", json={"kind": "idle", "node": node}, timeout=5
    )
    assert answer.status_code == 200
    during = activity(simulator, node)
    for uuid, (pod, _) in before.items():
        assert during[uuid][0] == pod  # still allocated to the same pod
        assert during[uuid][1] <= 0.03
    assert requests.post(
        f"{simulator.url}/sim/faults", json={"kind": "busy", "node": node}, timeout=5
    ).ok
    assert all(activity(simulator, node)[uuid][1] > 0.5 for uuid in before)
    simulator.set_gpu_idle(node, 0)
    assert requests.delete(f"{simulator.url}/sim/faults", timeout=5).ok
    assert all(activity(simulator, node)[uuid][1] > 0.5 for uuid in before)


def test_a_bad_idle_fault_is_refused(simulator: Simulator) -> None:
    url = f"{simulator.url}/sim/faults"
    node = busy_node(simulator)
    assert (
        requests.post(url, json={"kind": "idle", "node": node, "gpu": "2"}, timeout=5).status_code
        == 400
    )
    assert (
        requests.post(url, json={"kind": "idle", "node": node, "gpu": 99}, timeout=5).status_code
        == 404
    )
    assert requests.post(url, json={"kind": "idle", "node": "nope"}, timeout=5).status_code == 404


def test_fleet_fault_idle_and_busy(simulator: Simulator, settings: Any) -> None:
    settings.FLEET_SIMULATOR = True
    settings.FLEET_API_URL = simulator.url
    node = busy_node(simulator)
    out = StringIO()
    call_command("fleet_fault", "idle", node, "--gpu", "0", stdout=out)
    assert "idle" in out.getvalue()
    gpus = simulator.cluster.node(node).gpus
    assert [gpu.idle for gpu in gpus[:2]] == [True, False]
    call_command("fleet_fault", "busy", node, stdout=StringIO())
    assert not any(gpu.idle for gpu in gpus)
    with pytest.raises(CommandError, match="no GPU 99"):
        call_command("fleet_fault", "idle", node, "--gpu", "99", stdout=StringIO())


def test_a_workload_the_config_names_idle_reads_idle_wherever_it_runs(settings: Any) -> None:
    """``idle_pods``: what the demo says of vision's endpoint ``caption``; here a seed
    workload's pods, which hold their GPUs and read as idle, while the others stay busy."""
    config = dataclasses.replace(
        SimConfig.demo(),
        flux_delay=0,
        ready_delay=0,
        recreate_delay=0,
        idle_pods=("vision/eval-vit-small-",),
    )
    sim = Simulator(config, repo_path=settings.GITOPS_REPO_PATH, branch="main")
    sim.start("127.0.0.1", 0, tick_seconds=None)
    try:
        held = [s for s in sim.gpu_samples() if s.pod]
        named = [s for s in held if s.pod.startswith("eval-vit-small-")]
        assert len(named) == 3 and all(s.idle and s.busy for s in named)
        assert all(not s.idle for s in held if s not in named)
        text = requests.get(f"{sim.url}/metrics", timeout=5).text
        values = [
            (s.labels["pod"], s.value)
            for family in text_string_to_metric_families(text)
            if family.name == "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
            for s in family.samples
            if s.labels.get("pod")
        ]
        small = [v for pod, v in values if pod.startswith("eval-vit-small-")]
        large = [v for pod, v in values if pod.startswith("eval-vit-large-")]
        assert len(small) == 3 and max(small) <= 0.03 and min(large) > 0.5
    finally:
        sim.stop()


def test_an_idle_pods_entry_names_a_namespace_and_a_prefix(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text("node_groups:\n  - pool: x\n    nodes: 1\nidle_pods: [caption-predictor-]\n")
    with pytest.raises(ConfigError, match=r"idle_pods\[0\]: write it as <namespace>/<pod"):
        load_config(path)
    path.write_text("node_groups:\n  - pool: x\n    nodes: 1\nidle_pods: [lab/chat-]\n")
    assert load_config(path).idle_pods == ("lab/chat-",)
