"""Schemas from the cluster: the simulator serves the CRDs of its directory through the
apiextensions API, the sync caches them in the database, and the checks validate against them."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.utils import timezone
from kubernetes import client

from fleet import schemas, services
from fleet.kube import Kube
from fleet.models import SyncState
from gitops import schemas as gitops_schemas
from gitops.checks import run_checks
from gitops.models import ServedCrd
from simulator import Simulator
from simulator.config import ConfigError
from tests.gitops import checks_samples as samples
from tests.gitops.checks_support import require_crds

CLUSTER_QUEUES = "clusterqueues.kueue.x-k8s.io"


@pytest.fixture
def shared_crds(settings: Any) -> Path:
    """../shared/crds as GITOPS_SCHEMA_DIR (skipped without it, failed in CI)."""
    path = require_crds()
    settings.GITOPS_SCHEMA_DIR = str(path)
    return path


@pytest.fixture
def kueue_without_stop_policy(tmp_path: Path, shared_crds: Path) -> Path:
    """Kueue's CRDs, but the cluster's ClusterQueue has no ``spec.stopPolicy`` in any version
    (as an older Kueue release would serve)."""
    target = tmp_path / "crds"
    shutil.copytree(shared_crds / "kueue", target / "kueue")
    path = target / "kueue" / "kueue.x-k8s.io_clusterqueues.yaml"
    crd = yaml.safe_load(path.read_text())
    for version in crd["spec"]["versions"]:
        spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
        del spec["properties"]["stopPolicy"]
    path.write_text(yaml.safe_dump(crd))
    return target


def _kube(sim: Simulator) -> Kube:
    configuration = client.Configuration()
    configuration.host = sim.url
    return Kube(client.ApiClient(configuration), timeout=5)


def test_the_simulator_serves_its_crds_as_an_api_server_does(
    start_fleet: Callable[..., Simulator], shared_crds: Path
) -> None:
    sim = start_fleet(crd_dir=str(shared_crds))
    configuration = client.Configuration()
    configuration.host = sim.url
    with client.ApiClient(configuration) as api:
        extensions = client.ApiextensionsV1Api(api)
        listed = extensions.list_custom_resource_definition()
        names = {crd.metadata.name for crd in listed.items}
        assert CLUSTER_QUEUES in names
        assert "helmreleases.helm.toolkit.fluxcd.io" in names
        assert listed.metadata.resource_version
        # The typed client parses it, status and all.
        queue = extensions.read_custom_resource_definition(CLUSTER_QUEUES)
        assert queue.spec.names.kind == "ClusterQueue"
        assert {v.name for v in queue.spec.versions if v.served} == {"v1beta1", "v1beta2"}
        established = {c.type: c.status for c in queue.status.conditions}
        assert established == {"NamesAccepted": "True", "Established": "True"}
        assert queue.status.stored_versions == ["v1beta2"]
        with pytest.raises(client.ApiException) as missing:
            extensions.read_custom_resource_definition("widgets.example.com")
        assert missing.value.status == 404


@pytest.mark.django_db
def test_the_sync_caches_crds_and_rewrites_only_what_changed(
    start_fleet: Callable[..., Simulator], shared_crds: Path
) -> None:
    sim = start_fleet(crd_dir=str(shared_crds))
    with _kube(sim) as kube:
        first = schemas.sync_crds(kube)
        assert first.kept == first.changed == ServedCrd.objects.count() > 20
        row = ServedCrd.objects.get(name=CLUSTER_QUEUES)
        assert (row.group, row.kind) == ("kueue.x-k8s.io", "ClusterQueue")
        assert row.served_versions == ["v1beta1", "v1beta2"]
        assert [v["name"] for v in row.versions if v["storage"]] == ["v1beta2"]
        assert "openAPIV3Schema" in row.spec["versions"][0]["schema"]

        again = schemas.sync_crds(kube)
        assert (again.changed, again.removed) == (0, 0)

        # An operator upgrade changes one CRD; another is uninstalled.
        kube.extensions.patch_custom_resource_definition(
            CLUSTER_QUEUES, {"metadata": {"labels": {"upgraded": "yes"}}}
        )
        kube.extensions.delete_custom_resource_definition("cohorts.kueue.x-k8s.io")
        moved = schemas.sync_crds(kube)
    assert (moved.changed, moved.removed) == (1, 1)
    assert ServedCrd.objects.get(name=CLUSTER_QUEUES).resource_version != row.resource_version
    assert not ServedCrd.objects.filter(name="cohorts.kueue.x-k8s.io").exists()


@pytest.mark.django_db
def test_sync_all_reads_crds_on_their_own_schedule(
    start_fleet: Callable[..., Simulator], shared_crds: Path, settings: Any
) -> None:
    start_fleet(crd_dir=str(shared_crds))
    settings.FLEET_CRD_REFRESH_SECONDS = 300
    report = services.sync_all()
    assert report.counts["crds"] == ServedCrd.objects.count() > 20
    state = SyncState.objects.get(source="crds")
    assert state.last_success is not None and not state.error

    ServedCrd.objects.filter(name=CLUSTER_QUEUES).delete()
    report = services.sync_all()
    assert "crds" not in report.counts  # read 0 s ago: not due
    assert not ServedCrd.objects.filter(name=CLUSTER_QUEUES).exists()

    SyncState.objects.filter(source="crds").update(
        last_success=timezone.now() - timedelta(seconds=301)
    )
    report = services.sync_all()
    assert "crds" in report.counts
    assert ServedCrd.objects.filter(name=CLUSTER_QUEUES).exists()


def _stopped_queue_tree() -> tuple[dict[str, bytes], set[str]]:
    queue = samples.cluster_queue("alpha")
    queue["spec"]["stopPolicy"] = "Hold"
    path = "tenants/alpha/queues.yaml"
    return {path: samples.dump(queue, samples.local_queue("alpha"))}, {path}


@pytest.mark.django_db
def test_in_cluster_mode_the_clusters_crd_wins_over_the_directory(
    start_fleet: Callable[..., Simulator],
    shared_crds: Path,
    kueue_without_stop_policy: Path,
    settings: Any,
) -> None:
    start_fleet(crd_dir=str(kueue_without_stop_policy))
    services.sync_all()
    files, changed = _stopped_queue_tree()

    settings.GITOPS_SCHEMA_SOURCE = "directory"
    [by_dir, *_] = run_checks(
        files, fleet=samples.FLEET, changed=changed, schema_source=gitops_schemas.schema_source()
    )
    assert by_dir.status == "passed", by_dir.details
    assert by_dir.summary.endswith("; schemas: directory crds")

    settings.GITOPS_SCHEMA_SOURCE = "cluster"
    source = gitops_schemas.schema_source()
    assert source is not None and source.origin == "cluster"
    [by_cluster, *_] = run_checks(files, fleet=samples.FLEET, changed=changed, schema_source=source)
    assert by_cluster.status == "failed"
    assert "; schemas: cluster ai-factory CRDs as of " in by_cluster.summary
    label, *problems = by_cluster.details
    assert label.startswith("schemas: cluster ai-factory CRDs as of ")
    assert "(kueue.x-k8s.io/v1beta2 ClusterQueue, kueue.x-k8s.io/v1beta2 LocalQueue)" in label
    assert "built-in kinds of Kubernetes 1.34 from kubernetes-validate 1.37.0" in label
    # A chart's values schema is not served by a cluster: it still comes from the directory.
    assert "vCluster chart 0.35.3 values from directory crds" in label
    assert problems == [
        "tenants/alpha/queues.yaml: ClusterQueue/alpha spec.stopPolicy: unknown field 'stopPolicy'"
        " (allowed here: admissionChecksStrategy, admissionScope, cohortName, "
        "concurrentAdmissionPolicy, fairSharing, flavorFungibility, namespaceSelector, "
        "preemption, queueingStrategy, resourceGroups)"
    ]


@pytest.mark.django_db
def test_auto_uses_fresh_cluster_crds_else_the_directory_and_says_why(
    start_fleet: Callable[..., Simulator], shared_crds: Path, settings: Any
) -> None:
    settings.GITOPS_SCHEMA_SOURCE = "auto"
    settings.GITOPS_SCHEMA_MAX_AGE_SECONDS = 3600
    fallback = gitops_schemas.schema_source()
    assert fallback is not None and fallback.origin == "directory"
    assert fallback.note == "auto: no CRDs read from the cluster yet"

    start_fleet(crd_dir=str(shared_crds))
    services.sync_all()
    fresh = gitops_schemas.schema_source()
    assert fresh is not None and fresh.origin == "cluster"

    ServedCrd.objects.update(fetched_at=timezone.now() - timedelta(hours=2))
    stale = gitops_schemas.schema_source()
    assert stale is not None and stale.origin == "directory"
    assert stale.note == "auto: the cluster's CRDs were last read 120 min ago"
    [result, *_] = run_checks(*_stopped_queue_tree()[:1], fleet=samples.FLEET, schema_source=stale)
    assert result.details[0].endswith("(auto: the cluster's CRDs were last read 120 min ago)")


@pytest.mark.django_db
def test_cluster_mode_without_cached_crds_validates_the_built_in_kinds_only(
    shared_crds: Path, settings: Any
) -> None:
    settings.GITOPS_SCHEMA_SOURCE = "cluster"
    files, changed = _stopped_queue_tree()
    [result, *_] = run_checks(
        files, fleet=samples.FLEET, changed=changed, schema_source=gitops_schemas.schema_source()
    )
    assert result.status == "partial"
    assert result.summary == (
        "0 objects validated, 2 custom resources without a schema: ClusterQueue, LocalQueue; "
        "schemas: built-in kinds only, no CRDs"
    )
    assert result.details[0].endswith(
        "(no CRDs have been read from the cluster yet (see the fleet sync))"
    )


@pytest.mark.django_db
def test_a_malformed_crd_is_skipped_and_the_rest_kept(
    start_fleet: Callable[..., Simulator], kueue_without_stop_policy: Path
) -> None:
    sim = start_fleet(crd_dir=str(kueue_without_stop_policy))
    sim.put_object(
        "customresourcedefinitions",
        {"metadata": {"name": "broken.example.com"}, "spec": {"group": "example.com"}},
    )
    with _kube(sim) as kube:
        result = schemas.sync_crds(kube)
    assert (result.kept, result.skipped) == (8, 1)
    assert not ServedCrd.objects.filter(name="broken.example.com").exists()


def test_a_missing_crd_dir_is_a_configuration_error(
    start_fleet: Callable[..., Simulator], tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match=r"crd_dir: .* is not a directory"):
        start_fleet(crd_dir=str(tmp_path / "nope"))


@pytest.mark.django_db
def test_with_no_crds_anywhere_the_source_is_the_built_in_kinds_and_says_why(
    settings: Any, tmp_path: Path
) -> None:
    settings.GITOPS_SCHEMA_DIR = str(tmp_path / "schemas")  # nothing fetched yet
    settings.GITOPS_SCHEMA_SOURCE = "auto"
    source = gitops_schemas.schema_source()
    assert source.origin == "builtin"
    assert source.note == (
        "auto: no CRDs read from the cluster yet; GITOPS_SCHEMA_DIR (schemas) holds no CRDs "
        "yet: run manage.py fetch_schemas, or point it at a folder of CRD files"
    )
    settings.GITOPS_SCHEMA_SOURCE = "cluster"
    assert gitops_schemas.schema_source().note == (
        "no CRDs have been read from the cluster yet (see the fleet sync)"
    )
    settings.GITOPS_SCHEMA_SOURCE = "directory"
    settings.GITOPS_SCHEMA_DIR = ""
    assert gitops_schemas.schema_source().note == "no GITOPS_SCHEMA_DIR is set"
    files, changed = _stopped_queue_tree()
    [schemas_result, *_] = run_checks(
        files, fleet=samples.FLEET, changed=changed, schema_source=gitops_schemas.schema_source()
    )
    assert schemas_result.status == "partial"
    assert schemas_result.summary == (
        "0 objects validated, 2 custom resources without a schema: ClusterQueue, LocalQueue; "
        "schemas: built-in kinds only, no CRDs"
    )
    assert schemas_result.details[0].endswith("(no GITOPS_SCHEMA_DIR is set)")
