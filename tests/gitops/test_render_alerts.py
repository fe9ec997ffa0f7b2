"""The platform's alerts: valid PromQL and templates (``promtool check rules``), and each fires
on the samples it is meant for and not on the others (``promtool test rules``).

promtool comes with Debian's ``prometheus`` (``make system-deps``); without it these tests are
skipped on a developer's machine and fail in CI.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gitops.fleet import demo_fleet
from gitops.render import alerts
from gitops.render.tree import render_infrastructure
from gitops.render.yamlio import load_documents
from tests.support.skips import require_tool

FLEET = demo_fleet()


@pytest.fixture
def promtool() -> str:
    return require_tool("promtool", "Debian's prometheus package: make system-deps")


def _rendered_groups() -> list[dict[str, Any]]:
    [rule] = load_documents(render_infrastructure(FLEET)["infrastructure/configs/alerts.yaml"])
    assert rule["kind"] == "PrometheusRule"
    assert rule["metadata"]["namespace"] == FLEET.monitoring_namespace
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


def _promtool(promtool: str, *args: str, cwd: Path) -> str:
    result = subprocess.run(
        [promtool, *args], capture_output=True, text=True, check=False, timeout=60, cwd=cwd
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_promtool_accepts_every_rendered_rule(promtool: str, tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": _rendered_groups()}))
    out = _promtool(promtool, "check", "rules", "rules.yaml", cwd=tmp_path)
    count = sum(len(group["rules"]) for group in _rendered_groups())
    assert f"SUCCESS: {count} rules found" in out


def _gpu(xid: str, uuid: str = "GPU-1") -> dict[str, str]:
    labels = f'gpu="0",UUID="{uuid}",modelName="NVIDIA H200",Hostname="node-1"'
    return {"series": f'DCGM_FI_DEV_XID_ERRORS{{{labels},pod="train-0"}}', "values": xid}


def _alert(name: str, at: str, *fired: dict[str, str]) -> dict[str, Any]:
    return {
        "eval_time": at,
        "alertname": name,
        "exp_alerts": [{"exp_labels": labels} for labels in fired],
    }


GPU_1 = {"gpu": "0", "UUID": "GPU-1", "modelName": "NVIDIA H200", "Hostname": "node-1"}

# (input series, expected alerts), evaluated every minute.
CASES: list[tuple[list[dict[str, str]], list[dict[str, Any]]]] = [
    (
        # XID 79 (fallen off the bus) is fatal at once; the pod label is not the alert's.
        [_gpu("0 0 79 79")],
        [
            _alert("GpuFatalXid", "1m"),
            _alert("GpuFatalXid", "2m", {**GPU_1, "severity": "critical"}),
            _alert("GpuXidError", "2m"),
        ],
    ),
    (
        # 13 is the application's error (the device plugin ignores it); 92 is a warning.
        [_gpu("13 13 13"), _gpu("92 92 92", uuid="GPU-2")],
        [
            _alert("GpuFatalXid", "2m"),
            _alert("GpuXidError", "2m", {**GPU_1, "UUID": "GPU-2", "severity": "warning"}),
        ],
    ),
    (
        [
            {
                "series": 'DCGM_FI_DEV_ROW_REMAP_FAILURE{gpu="0",UUID="GPU-1",'
                'modelName="NVIDIA H200",Hostname="node-1"}',
                "values": "0 1",
            },
            {"series": 'up{job="nvidia-dcgm-exporter",pod="dcgm-1"}', "values": "0x12"},
        ],
        [
            _alert("GpuRowRemapFailure", "1m", {**GPU_1, "severity": "critical"}),
            _alert("DcgmExporterDown", "5m"),
            _alert(
                "DcgmExporterDown",
                "11m",
                {"job": "nvidia-dcgm-exporter", "pod": "dcgm-1", "severity": "warning"},
            ),
        ],
    ),
    (
        # Inadmissible for 30 minutes fires; active (merely waiting) workloads do not.
        [
            {
                "series": 'kueue_pending_workloads{cluster_queue="alpha",status="inadmissible"}',
                "values": "2x40",
            },
            {
                "series": 'kueue_pending_workloads{cluster_queue="bravo",status="active"}',
                "values": "5x40",
            },
        ],
        [
            _alert("KueueInadmissibleWorkloads", "20m"),
            _alert(
                "KueueInadmissibleWorkloads",
                "35m",
                {"cluster_queue": "alpha", "severity": "warning"},
            ),
        ],
    ),
    (
        # Every admission of the last hour waited an hour: the bucket le=3600 took them all.
        [
            {
                "series": "kueue_admission_wait_time_seconds_bucket"
                f'{{cluster_queue="alpha",le="{le}"}}',
                "values": f"0+{per_minute}x90",
            }
            for le, per_minute in (("1800", "0"), ("3600", "1"), ("+Inf", "1"))
        ],
        [_alert("KueueSlowAdmission", "80m", {"cluster_queue": "alpha", "severity": "warning"})],
    ),
    (
        # Not ready for 15 minutes fires; a suspended object does not.
        [
            {
                "series": 'gotk_resource_info{customresource_kind="HelmRelease",'
                'exported_namespace="flux-system",name="kueue",ready="False",suspended="false"}',
                "values": "1x20",
            },
            {
                "series": 'gotk_resource_info{customresource_kind="Kustomization",'
                'exported_namespace="alpha",name="alpha-workloads",ready="False",'
                'suspended="true"}',
                "values": "1x20",
            },
        ],
        [
            _alert("FluxReconciliationFailure", "10m"),
            _alert(
                "FluxReconciliationFailure",
                "16m",
                {
                    "customresource_kind": "HelmRelease",
                    "exported_namespace": "flux-system",
                    "name": "kueue",
                    "severity": "warning",
                },
            ),
        ],
    ),
]


@pytest.mark.parametrize(("series", "expected"), CASES)
def test_each_alert_fires_on_what_it_is_for(
    promtool: str, tmp_path: Path, series: list[dict[str, str]], expected: list[dict[str, Any]]
) -> None:
    # Annotations are prose (promtool compares them whole): left out here, their templates
    # are checked by `promtool check rules` above.
    groups = [
        {
            **group,
            "rules": [{k: v for k, v in r.items() if k != "annotations"} for r in group["rules"]],
        }
        for group in _rendered_groups()
    ]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    test = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": expected}],
    }
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(test))
    _promtool(promtool, "test", "rules", "test.yaml", cwd=tmp_path)


def test_fatal_and_application_xids_are_the_documented_sets() -> None:
    assert alerts.FATAL_XIDS == (48, 63, 64, 74, 79, 94, 95)
    assert not set(alerts.FATAL_XIDS) & set(alerts.APPLICATION_XIDS)
