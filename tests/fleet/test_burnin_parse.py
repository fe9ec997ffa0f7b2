"""The burn-in's readers on outputs in their programs' real formats: ``dcgmi diag -j``
(NVIDIA/DCGM v4.6.0 ``testing/python3/dcgm_diag_schema.json``, ``dcgmi/Diag.cpp``) and
nccl-tests' footer (NVIDIA/nccl-tests v2.19.6 ``src/util.cu`` ``writeResultFooter``); the
expected bandwidth refused unless a positive number; the Jobs valid against batch/v1."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured, ValidationError

from fleet import burnin
from fleet.models import BurnInRun
from gitops.checks.schema import SchemaRegistry

# Shaped as dcgmi writes it: categories, per-GPU results, warnings, entity groups, metadata.
DIAG = {
    "DCGM Diagnostic": {
        "test_categories": [
            {
                "category": "Deployment",
                "tests": [
                    {
                        "name": "software",
                        "results": [
                            {
                                "entity_group": "GPU",
                                "entity_group_id": 1,
                                "entity_id": 0,
                                "status": "Pass",
                            }
                        ],
                        "test_summary": {"status": "Pass"},
                    }
                ],
            },
            {
                "category": "Hardware",
                "tests": [
                    {
                        "name": "memory",
                        "results": [
                            {
                                "entity_group": "GPU",
                                "entity_group_id": 1,
                                "entity_id": 0,
                                "status": "Pass",
                            },
                            {
                                "entity_group": "GPU",
                                "entity_group_id": 1,
                                "entity_id": 3,
                                "status": "Fail",
                                "warnings": [
                                    {
                                        "error_category": 2,
                                        "error_id": 24,
                                        "error_severity": 2,
                                        "warning": "Pending page retirements detected on GPU 3",
                                    }
                                ],
                            },
                        ],
                        "test_summary": {"status": "Fail"},
                    }
                ],
            },
        ]
    },
    "entity_groups": [
        {
            "entity_group": "GPU",
            "entity_group_id": 1,
            "entities": [{"entity_id": 0, "device_id": "2335", "serial_num": "1652"}],
        }
    ],
    "metadata": {"version": "4.4.1"},
}

NCCL = """# nThread 1 nGpus 8 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5
#
#       size         count      type   redop    root     time   algbw   busbw #wrong     time
  8589934592    2147483648     float     sum      -1  32580.2  263.66  461.40      0  32531.1
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 215.366 {SPACE}
#
# Collective test concluded: all_reduce_perf
""".format(SPACE="")  # the footer's "%g %s": a space, then "" without -G


def test_a_failed_result_names_the_test_the_gpu_and_the_warning() -> None:
    text = "[diag] started\n" + json.dumps(DIAG, indent=4) + "\n[diag] exited with code 0\n"
    result = burnin.parse_diag(text)
    assert not result.passed
    assert result.failures == ["memory: GPU 3: Pending page retirements detected on GPU 3"]


def test_all_passing_passes_and_a_runtime_error_fails() -> None:
    passing = json.loads(json.dumps(DIAG))
    memory = passing["DCGM Diagnostic"]["test_categories"][1]["tests"][0]
    memory["results"] = memory["results"][:1]
    memory["test_summary"] = {"status": "Pass"}
    assert burnin.parse_diag(json.dumps(passing)) == burnin.DiagResult(True, [])
    broken = {"DCGM Diagnostic": {"runtime_error": "Unable to connect to the host engine"}}
    assert burnin.parse_diag(json.dumps(broken)).failures == [
        "runtime error: Unable to connect to the host engine"
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("no json here", "no JSON document"),
        ("{not json}", "does not parse"),
        ('{"other": 1}', 'no "DCGM Diagnostic"'),
        ('{"DCGM Diagnostic": {"test_categories": []}}', "ran no tests"),
    ],
)
def test_output_that_is_not_the_diagnostics_is_refused(text: str, message: str) -> None:
    with pytest.raises(burnin.BurnInParseError, match=message):
        burnin.parse_diag(text)


def test_the_average_bus_bandwidth_is_read_from_the_footer() -> None:
    assert burnin.parse_busbw(NCCL) == 215.366
    with pytest.raises(burnin.BurnInParseError, match="Avg bus bandwidth"):
        burnin.parse_busbw(NCCL.replace("# Avg bus bandwidth    : 215.366 \n", ""))


@pytest.mark.parametrize(
    "table",
    [
        {"NVIDIA-H200": 0},
        {"NVIDIA-H200": -5},
        {"NVIDIA-H200": "fast"},
        {"": 400},
        [400],
        {"x": True},
    ],
)
def test_an_expected_bandwidth_that_is_not_a_positive_number_is_refused(
    table: Any, settings: Any
) -> None:
    with pytest.raises(ValidationError):
        burnin.check_expected(table)
    settings.FLEET_BURN_IN_EXPECTED_BUSBW = table
    with pytest.raises(ImproperlyConfigured, match="FLEET_BURN_IN_EXPECTED_BUSBW"):
        burnin.expected_busbw("NVIDIA-H200")


def test_the_jobs_are_pinned_tolerant_and_valid_batch_v1() -> None:
    run = BurnInRun(pk=7, node_name="h200-09", product="NVIDIA-H200", gpus=8)
    registry = SchemaRegistry()
    for job in (burnin.diag_job(run, "h200-09"), burnin.nccl_job(run, "h200-09")):
        assert registry.validate(job) == []
        spec = job["spec"]["template"]["spec"]
        assert spec["nodeSelector"] == {"kubernetes.io/hostname": "h200-09"}
        assert {t["key"] for t in spec["tolerations"]} == {
            "node.kubernetes.io/unschedulable",
            "nvidia.com/gpu",
        }
        assert spec["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 8}
        assert job["spec"]["backoffLimit"] == 0
    assert burnin.nccl_job(run, "h200-09")["spec"]["template"]["spec"]["containers"][0]["command"][
        -2:
    ] == ["-g", "8"]
