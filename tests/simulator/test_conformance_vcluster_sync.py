"""The simulator's vCluster syncer (``simulator/syncer.py``) against vCluster's own unit tests
at the pinned chart version (loft-sh/vcluster v0.35.3): each test names the upstream file, the
Go test and the case (``t.Run`` name), whose inputs and expected outcomes it repeats.

Upstream's translator is the single-namespace one with target namespace ``test``
(``pkg/util/testing/config.go``), and ``translate.VClusterName`` is ``suffix`` unless a test
sets it (``pkg/util/translate/types.go``).
"""

from __future__ import annotations

from typing import Any

import pytest

from simulator.syncer import (
    HOST_NAME_ANNOTATION,
    KIND_ANNOTATION,
    MANAGED_ANNOTATIONS,
    MARKER_LABEL,
    NAME_ANNOTATION,
    NAMESPACE_LABEL,
    UID_ANNOTATION,
    InvalidToleration,
    Names,
    annotations_bidirectional,
    copy_object_with_name,
    host_annotations,
    host_name,
    parse_toleration,
    sanitised,
    virtual_annotations,
)

SUFFIX = Names("suffix", "test")
RELEASE_KEY = "vcluster.loft.sh/label-suffix-x-a4d451ec23"  # HostLabel("release")


# --- pkg/util/translate/translate_test.go ----------------------------------------------------


def test_virtual_labels() -> None:
    """translate_test.go TestVirtualLabels."""
    assert SUFFIX.virtual_labels_map(None, None) is None
    assert SUFFIX.virtual_labels_map(
        {"test": "test", "test123": "test123", RELEASE_KEY: "vcluster"}, None
    ) == {"test": "test", "test123": "test123", "release": "vcluster"}


def test_not_rewriting_labels() -> None:
    """translate_test.go TestNotRewritingLabels: labels other than vCluster's own pass
    through both ways; metadata gets the marker and namespace labels."""
    labels = {"abc": "abc", "def": "def", "hij": "hij", "app": "my-app"}
    host = SUFFIX.host_labels_map(labels, labels, "test", False)
    assert host == labels
    back = SUFFIX.virtual_labels_map(host, host)
    assert back == labels
    assert SUFFIX.host_labels_map(back, back, "test", True) == {
        **labels,
        NAMESPACE_LABEL: "test",
        MARKER_LABEL: "suffix",
    }


def test_annotations() -> None:
    """translate_test.go TestAnnotations: the host keeps what the virtual object has, listed
    in managed-annotations, and the object-* annotations; back, only the user's."""
    virtual: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"annotations": {"test": "test"}},
    }
    host: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"annotations": {"test": "test"}},
    }
    host["metadata"]["annotations"] = host_annotations(virtual, host)
    assert host["metadata"]["annotations"] == {
        "test": "test",
        MANAGED_ANNOTATIONS: "test",
        KIND_ANNOTATION: "/v1, Kind=Secret",
        NAME_ANNOTATION: "",
        HOST_NAME_ANNOTATION: "",
        UID_ANNOTATION: "",
    }
    host["metadata"]["annotations"]["other"] = "other"
    virtual["metadata"]["annotations"] = virtual_annotations(host, virtual)
    assert virtual["metadata"]["annotations"] == {"other": "other", "test": "test"}
    host["metadata"]["annotations"] = host_annotations(virtual, host)
    assert host["metadata"]["annotations"] == {
        "test": "test",
        "other": "other",
        MANAGED_ANNOTATIONS: "other\ntest",
        KIND_ANNOTATION: "/v1, Kind=Secret",
        NAME_ANNOTATION: "",
        HOST_NAME_ANNOTATION: "",
        UID_ANNOTATION: "",
    }


def test_recursive_labels_map() -> None:
    """translate_test.go TestRecursiveLabelsMap: vCluster's own labels on a virtual object
    (a nested vCluster's) survive ten rounds there and back."""
    labels: dict[str, str] | None = {NAMESPACE_LABEL: "test"}
    rounds = []
    for i in range(11):
        rounds.append(dict(labels or {}))
        labels = SUFFIX.host_labels_map(labels, None, f"test-{i}", False)
    assert labels == {
        "vcluster.loft.sh/label-suffix-x-101dcd4e86": "test-9",
        "vcluster.loft.sh/label-suffix-x-e5f1b28ab2": "suffix",
        MARKER_LABEL: "suffix",
        NAMESPACE_LABEL: "test-10",
    }
    back: dict[str, str] | None = labels
    for i in range(10, -1, -1):
        back = SUFFIX.virtual_labels_map(back, rounds[i])
        assert back == rounds[i]


def test_labels_map() -> None:
    """translate_test.go TestLabelsMap: ``release`` is rewritten, a host label added later
    comes back, a removed one goes."""
    virtual = {
        "test": "test",
        "test123": "test123",
        "release": "vcluster",
        RELEASE_KEY: "vcluster123",
    }
    host = SUFFIX.host_labels_map(virtual, None, "test", False)
    assert host == {
        "test": "test",
        "test123": "test123",
        RELEASE_KEY: "vcluster",
        MARKER_LABEL: "suffix",
        NAMESPACE_LABEL: "test",
    }
    host["other"] = "other"
    virtual = SUFFIX.virtual_labels_map(host, virtual) or {}
    assert virtual == {
        "test": "test",
        "test123": "test123",
        "other": "other",
        "release": "vcluster",
        RELEASE_KEY: "vcluster123",
    }
    host = SUFFIX.host_labels_map(virtual, host, "test", False) or {}
    assert host == {
        RELEASE_KEY: "vcluster",
        MARKER_LABEL: "suffix",
        NAMESPACE_LABEL: "test",
        "test": "test",
        "test123": "test123",
        "other": "other",
    }
    del virtual["other"]
    assert SUFFIX.host_labels_map(virtual, host, "test", False) == {
        RELEASE_KEY: "vcluster",
        MARKER_LABEL: "suffix",
        NAMESPACE_LABEL: "test",
        "test": "test",
        "test123": "test123",
    }


def test_label_selector() -> None:
    """translate_test.go TestLabelSelector."""
    selector = {"matchLabels": {"test": "test", "test123": "test123", "release": "vcluster"}}
    host = SUFFIX.host_label_selector(selector)
    translated = {"matchLabels": {"test": "test", "test123": "test123", RELEASE_KEY: "vcluster"}}
    assert host == translated
    back = SUFFIX.virtual_label_selector(host)
    assert back == selector
    assert SUFFIX.host_label_selector(back) == translated


# --- pkg/util/translate/labels_test.go -------------------------------------------------------

DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"


def storage_class(**annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"annotations": dict(annotations)},
    }


@pytest.mark.parametrize(
    ("case", "excluded", "virtual"),
    [
        ("exclude the default class", (DEFAULT_CLASS,), {DEFAULT_CLASS: "my-default"}),
        ("not exclude the default class", (), {DEFAULT_CLASS: "my-other"}),
    ],
)
def test_annotations_sync(case: str, excluded: tuple[str, ...], virtual: dict[str, str]) -> None:
    """labels_test.go TestAnnotationsSync: the host changed (my-default to my-other), so the
    change goes to the virtual object unless the key is excluded."""
    new_virtual, new_host = annotations_bidirectional(
        storage_class(**{DEFAULT_CLASS: "my-default"}),
        storage_class(**{DEFAULT_CLASS: "my-default"}),
        storage_class(**{DEFAULT_CLASS: "my-default"}),
        storage_class(**{DEFAULT_CLASS: "my-other"}),
        *excluded,
    )
    assert new_virtual == virtual, case
    assert new_host == {
        DEFAULT_CLASS: "my-other",
        NAME_ANNOTATION: "",
        UID_ANNOTATION: "",
        KIND_ANNOTATION: "storage.k8s.io/v1, Kind=StorageClass",
        HOST_NAME_ANNOTATION: "",
    }, case


def test_annotations_sync_on_creation() -> None:
    """labels_test.go TestAnnotationsSync, "check on creation with exclude" both ways."""
    host = storage_class(**{DEFAULT_CLASS: "my-default", "not-excluded": "true"})
    virtual = copy_object_with_name(host, "", "", None, DEFAULT_CLASS)
    assert virtual_annotations(host, virtual, DEFAULT_CLASS) == {"not-excluded": "true"}
    virtual = storage_class(**{DEFAULT_CLASS: "my-default", "not-excluded": "true"})
    host = copy_object_with_name(virtual, "", "", None, DEFAULT_CLASS)
    assert host_annotations(virtual, host, DEFAULT_CLASS) == {
        "not-excluded": "true",
        MANAGED_ANNOTATIONS: "not-excluded",
        NAME_ANNOTATION: "",
        UID_ANNOTATION: "",
        KIND_ANNOTATION: "storage.k8s.io/v1, Kind=StorageClass",
        HOST_NAME_ANNOTATION: "",
    }


# --- host names: pkg/controllers/resources/pods/syncer_test.go, ---------------------------
# --- pkg/syncer/translator/sanitising_event_recorder_test.go ----------------------------------


def test_host_names() -> None:
    """The host names upstream tests spell out: ``test-pod-x-default-x-suffix`` (pods
    syncer_test.go TestSyncTerminatingHostPodStatus) and, for a cluster-scoped object,
    ``vcluster-high-priority-x-test-x-vcluster`` (pods syncer_test.go TestSync "To Host
    PriorityClasses sync enabled", where VClusterName is ``vcluster``)."""
    assert host_name("test-pod", "default", "suffix") == "test-pod-x-default-x-suffix"
    assert Names("vcluster", "test").host_name_cluster("high-priority") == (
        "vcluster-high-priority-x-test-x-vcluster"
    )


VC = "my-vc"


@pytest.mark.parametrize(
    ("case", "name", "namespace", "note", "want"),
    [
        (
            "plain host name replaced with virtual name",
            "cuda-vector-add",
            "default",
            "Error syncing: update object: Operation cannot be fulfilled on pods "
            f'"{host_name("cuda-vector-add", "default", VC)}": the object has been modified',
            "Error syncing: update object: Operation cannot be fulfilled on pods "
            '"cuda-vector-add": the object has been modified',
        ),
        (
            "hashed host name replaced with virtual name",
            "very-long-pod-name-that-definitely-exceeds-63-chars",
            "default",
            'Error syncing: pods "'
            + host_name("very-long-pod-name-that-definitely-exceeds-63-chars", "default", VC)
            + '" failed',
            'Error syncing: pods "very-long-pod-name-that-definitely-exceeds-63-chars" failed',
        ),
        (
            "host name not present in message passes through unchanged",
            "my-pod",
            "default",
            "Error syncing: some unrelated error occurred",
            "Error syncing: some unrelated error occurred",
        ),
        (
            "multiple occurrences of host name all replaced",
            "my-pod",
            "ns1",
            f"object {host_name('my-pod', 'ns1', VC)} conflicts with "
            f"{host_name('my-pod', 'ns1', VC)}",
            "object my-pod conflicts with my-pod",
        ),
        (
            "empty namespace host name replaced",
            "my-pod",
            "",
            f'Error syncing: pods "{host_name("my-pod", "", VC)}" failed',
            'Error syncing: pods "my-pod" failed',
        ),
        (
            "secondary resource host name replaced",
            "my-pod",
            "default",
            f'Error syncing: configmap "{host_name("app-config", "default", VC)}" not found',
            'Error syncing: configmap "app-config" not found',
        ),
        (
            "resource name containing -x- replaced correctly",
            "my-x-pod",
            "default",
            f'Error syncing: pods "{host_name("my-x-pod", "default", VC)}" conflict',
            'Error syncing: pods "my-x-pod" conflict',
        ),
        (
            "secondary resource in namespace containing -x- is replaced correctly",
            "my-pod",
            "team-x-blue",
            f'Error syncing: configmap "{host_name("app-config", "team-x-blue", VC)}" not found',
            'Error syncing: configmap "app-config" not found',
        ),
        (
            "regarding name ending with suffix is not corrupted by Pass 2",
            "api-x-default-x-my-vc",
            "default",
            f'Error syncing: pods "{host_name("api-x-default-x-my-vc", "default", VC)}" conflict',
            'Error syncing: pods "api-x-default-x-my-vc" conflict',
        ),
        (
            "bare vcluster name suffix without separator passes through unchanged",
            "my-pod",
            "default",
            "error: unknown cluster my-vc encountered",
            "error: unknown cluster my-vc encountered",
        ),
    ],
)
def test_sanitising_event_recorder(
    case: str, name: str, namespace: str, note: str, want: str
) -> None:
    """sanitising_event_recorder_test.go TestSanitisingEventRecorder (the namespaced cases):
    what a SyncError event on the virtual object says."""
    assert sanitised(note, VC, name, namespace, host_name(name, namespace, VC)) == want, case


# --- pkg/util/toleration/toleration_test.go (sync.toHost.pods.enforceTolerations) ------------


@pytest.mark.parametrize(
    ("case", "spec", "want"),
    [
        ("Should get toleration with Operator exists", "*", {"operator": "Exists"}),
        ("Should get toleration with key", "key", {"key": "key"}),
        ("Should get toleration with key and value", "key=value", {"key": "key", "value": "value"}),
        (
            "Should get toleration with key value and effect",
            "key=value:NoSchedule",
            {"key": "key", "value": "value", "effect": "NoSchedule", "operator": "Equal"},
        ),
        (
            "Should get toleration with key and effect",
            "key:NoSchedule",
            {"key": "key", "effect": "NoSchedule", "operator": "Exists"},
        ),
        ("Should get bad label error", "key=value,wrong:NoSchedule", None),
        ("Should get invalid toleration", "key=value:Effec:Effect", None),
        ("Should get invalid toleration", "key=value=value", None),
    ],
)
def test_parse_toleration(case: str, spec: str, want: dict[str, str] | None) -> None:
    """toleration_test.go TestParseToleration."""
    if want is None:
        with pytest.raises(InvalidToleration):
            parse_toleration(spec)
    else:
        assert parse_toleration(spec) == want, case
