"""The simulator's vCluster syncer (``simulator/syncer.py``) against vCluster's own unit tests
at the pinned chart version (loft-sh/vcluster v0.35.3): each test names the upstream file, the
Go test and the case (``t.Run`` name), whose inputs and expected outcomes it repeats.

Upstream's syncer tests run against fake clients and compare objects after
``pkg/syncer/testing/testing.go`` ``stripObject`` (no resourceVersion, uid, ownerReferences or
``vcluster.loft.sh/managed-by`` label); ``strip`` does the same here. Their translator is the
single-namespace one with target namespace ``test`` (``pkg/util/testing/config.go``), and
``translate.VClusterName`` is ``suffix`` unless a test sets it (``pkg/util/translate/types.go``).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from simulator.admission import pod_security_problems
from simulator.store import ENDPOINT_SLICES, ENDPOINTS, Store
from simulator.syncer import (
    ENDPOINT_SLICE_KIND,
    ENDPOINTS_KIND,
    HOST_NAME_ANNOTATION,
    KIND_ANNOTATION,
    MANAGED_ANNOTATIONS,
    MARKER_LABEL,
    NAME_ANNOTATION,
    NAMESPACE_LABEL,
    UID_ANNOTATION,
    InvalidToleration,
    Names,
    Pair,
    SyncConfig,
    annotations_bidirectional,
    copy_object_with_name,
    desired_virtual_status,
    endpoint_slice_sync,
    endpoint_slice_to_host,
    endpoints_sync,
    endpoints_to_host,
    host_annotations,
    host_name,
    labels_annotation,
    normalized,
    parse_toleration,
    pod_diff,
    pod_to_host,
    rewrite_hosts,
    same,
    sanitised,
    service_sync,
    service_to_host,
    sync_config,
    translate_pod_affinity_term,
    virtual_annotations,
)
from simulator.virtual import VirtualCluster

SUFFIX = Names("suffix", "test")
RELEASE_KEY = "vcluster.loft.sh/label-suffix-x-a4d451ec23"  # HostLabel("release")


def strip(obj: dict[str, Any]) -> dict[str, Any]:
    """``pkg/syncer/testing/testing.go`` ``stripObject``."""
    out = copy.deepcopy(obj)
    metadata = out.setdefault("metadata", {})
    for key in ("resourceVersion", "ownerReferences", "generation", "uid", "selfLink"):
        metadata.pop(key, None)
    labels = metadata.get("labels") or {}
    labels.pop(MARKER_LABEL, None)
    if not labels:
        metadata.pop("labels", None)
    if not metadata.get("annotations"):
        metadata.pop("annotations", None)
    out.pop("apiVersion", None)
    out.pop("kind", None)
    return out


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


# --- pkg/controllers/resources/pods/translate/translator_test.go -----------------------------


def test_labels_annotation_is_go_json() -> None:
    """The ``vcluster.loft.sh/labels`` annotation quotes values as encoding/json does
    (translator.go LabelsAnnotation)."""
    pod = {"metadata": {"labels": {"b": "x", "a": "y"}}}
    assert labels_annotation(pod) == f"a={json.dumps('y')}\nb={json.dumps('x')}"


EQUESTRIA = {"metadata": {"name": "my-little-pody", "namespace": "equestria"}}
BASIC = {"matchLabels": {"random-key": "value"}}
BASIC_WITH_MARKER = {"matchLabels": {"random-key": "value", MARKER_LABEL: "suffix"}}
LONG_KEY = "pretty-loooooooooooong-test-key"


def with_namespaces(*namespaces: str) -> dict[str, Any]:
    """translator_test.go appendNamespacesToMatchExpressions."""
    return {
        **copy.deepcopy(BASIC_WITH_MARKER),
        "matchExpressions": [
            {"key": NAMESPACE_LABEL, "operator": "In", "values": list(namespaces)}
        ],
    }


WARNING = (
    "Warning SyncWarning Inter-pod affinity rule(s) that use both .namespaces and "
    ".namespaceSelector fields in the same term are not supported by vcluster yet. The "
    ".namespaceSelector fields of the unsupported affinity entries will be ignored."
)


@pytest.mark.parametrize(
    ("case", "term", "expected", "events"),
    [
        ("no selector", {"namespaces": ["blabla"]}, {}, []),
        (
            "empty namespaces array and null namespaceSelector",
            {"labelSelector": BASIC, "namespaces": []},
            {
                "labelSelector": {
                    "matchLabels": {
                        "random-key": "value",
                        MARKER_LABEL: "suffix",
                        NAMESPACE_LABEL: "equestria",
                    }
                }
            },
            [],
        ),
        (
            "null namespaceSelector and defined namespaces array",
            {"labelSelector": BASIC, "namespaces": ["equestria", "dummy namespace"]},
            {"labelSelector": with_namespaces("equestria", "dummy namespace")},
            [],
        ),
        (
            "empty namespaceSelector and defined namespaces array",
            {"labelSelector": BASIC, "namespaces": ["equestria"], "namespaceSelector": {}},
            {"labelSelector": BASIC_WITH_MARKER},
            [],
        ),
        (
            "namespaces array specified together with the namespaceSelector",
            {"labelSelector": BASIC, "namespaces": ["equestria"], "namespaceSelector": BASIC},
            {"labelSelector": with_namespaces("equestria")},
            [WARNING],
        ),
        (
            "defined namespaceSelector and no namespaces",
            {
                "labelSelector": BASIC,
                "namespaceSelector": {"matchLabels": {LONG_KEY: "good-value"}},
            },
            {
                "labelSelector": {
                    "matchLabels": {
                        "random-key": "value",
                        MARKER_LABEL: "suffix",
                        SUFFIX.host_label_namespace(LONG_KEY): "good-value",
                    }
                }
            },
            [],
        ),
        (
            "namespaceSelector with MatchExpressions",
            {
                "labelSelector": BASIC,
                "namespaceSelector": {
                    "matchExpressions": [
                        {"key": LONG_KEY, "operator": "NotIn", "values": ["bad-value"]}
                    ]
                },
            },
            {
                "labelSelector": {
                    "matchLabels": {"random-key": "value", MARKER_LABEL: "suffix"},
                    "matchExpressions": [
                        {
                            "key": SUFFIX.host_label_namespace(LONG_KEY),
                            "operator": "NotIn",
                            "values": ["bad-value"],
                        }
                    ],
                }
            },
            [],
        ),
    ],
)
def test_pod_affinity_terms_translation(
    case: str, term: dict[str, Any], expected: dict[str, Any], events: list[str]
) -> None:
    """translator_test.go TestPodAffinityTermsTranslation: an affinity term is limited to this
    cluster's pods (marker label) in the namespaces the term meant."""
    result, warnings = translate_pod_affinity_term(SUFFIX, EQUESTRIA, copy.deepcopy(term))
    assert result == expected, case
    assert warnings == events, case


def test_namespace_label_keys_are_hashed() -> None:
    """translator_test.go TestPodAffinityTermsTranslation's namespace selector keys, as
    single_namespace.go HostLabelNamespace writes them: ns-label, the vCluster, a hash."""
    assert SUFFIX.host_label_namespace(LONG_KEY).startswith("vcluster.loft.sh/ns-label-suffix-x-")


def hosts_config(**values: Any) -> Any:
    return sync_config(values, "test", "vcluster")


@pytest.mark.parametrize(
    ("case", "values", "image"),
    [
        ("Add init container that rewrites /etc/hosts", {}, "mirror.gcr.io/library/alpine:3.20"),
        (
            "Default registry has precedence over specified registry",
            {
                "controlPlane": {"advanced": {"defaultImageRegistry": "my-registry"}},
                "sync": {
                    "toHost": {
                        "pods": {
                            "rewriteHosts": {
                                "initContainer": {"image": {"registry": "mirror.gcr.io"}}
                            }
                        }
                    }
                },
            },
            "my-registry/library/alpine:3.20",
        ),
        (
            "Use image overrides if specified",
            {
                "sync": {
                    "toHost": {
                        "pods": {
                            "rewriteHosts": {
                                "initContainer": {
                                    "image": {
                                        "registry": "private",
                                        "repository": "minimal/sed",
                                        "tag": "very-specific-tag",
                                    }
                                }
                            }
                        }
                    }
                }
            },
            "private/minimal/sed:very-specific-tag",
        ),
    ],
)
def test_rewrite_hosts_translation(case: str, values: dict[str, Any], image: str) -> None:
    """translator_test.go TestRewriteHostsTranslation: a pod with a subdomain gets the
    init container that writes its FQDN into the /etc/hosts every container mounts."""
    pod: dict[str, Any] = {
        "metadata": {"name": "pod-name", "namespace": "test-ns"},
        "spec": {"subdomain": "subdomain", "containers": [{}]},
    }
    fqdn = "pod-name.subdomain.test-ns.cluster.local"
    rewrite_hosts(hosts_config(**values), pod, "pod-name", "pod-name", fqdn)
    [init] = pod["spec"]["initContainers"]
    assert init["image"] == image, case
    assert init["args"][1] == (
        r"sed -E -e 's/^(\d+.\d+.\d+.\d+\s+)pod-name$/\1 "
        r"pod-name.subdomain.test-ns.cluster.local pod-name/' /etc/hosts > /hosts/hosts"
    )
    [mount] = pod["spec"]["containers"][0]["volumeMounts"]
    assert mount["mountPath"] == "/etc/hosts"


# --- pkg/controllers/resources/pods/translate/diff_test.go -----------------------------------

ENFORCED = {"key": "vcluster-enforced", "operator": "Exists", "effect": "NoExecute"}
INITIAL = {"key": "initial", "operator": "Equal", "value": "v1", "effect": "NoSchedule"}
NEW = {"key": "new-key", "operator": "Exists"}
ADMISSION = {"key": "admission-injected", "operator": "Exists"}
LATE = {"key": "late-webhook", "operator": "Exists"}
TESTNS: dict[str, Any] = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "testns"}}


def diff_config(**fields: Any) -> Any:
    return SyncConfig(names=Names("suffix", "test"), **fields)


def pod(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


@pytest.mark.parametrize(
    ("case", "virtual_old", "virtual", "host", "host_live", "expected"),
    [
        (
            "add toleration: new virtual toleration propagated and enforced toleration applied",
            [INITIAL],
            [INITIAL, NEW],
            [INITIAL, ENFORCED],
            None,
            [INITIAL, NEW, ENFORCED],
        ),
        (
            "remove toleration: virtual toleration removed but preserved on host "
            "(additive-only constraint)",
            [INITIAL, NEW],
            [INITIAL],
            [INITIAL, NEW, ENFORCED],
            None,
            [INITIAL, NEW, ENFORCED],
        ),
        (
            "enforced toleration re-applied even if missing from physical pod",
            [INITIAL],
            [INITIAL, NEW],
            [INITIAL],
            None,
            [INITIAL, NEW, ENFORCED],
        ),
        (
            "admission webhook toleration preserved when virtual tolerations change",
            [INITIAL],
            [INITIAL, NEW],
            [INITIAL, ENFORCED, ADMISSION],
            None,
            [INITIAL, NEW, ENFORCED, ADMISSION],
        ),
        (
            "drift recovery: enforced toleration missing from host is re-added even when "
            "virtual tolerations unchanged",
            [INITIAL],
            [INITIAL],
            [INITIAL],
            None,
            [INITIAL, ENFORCED],
        ),
        (
            "drift recovery: virtual toleration missing from host is re-added even when "
            "virtual tolerations unchanged",
            [INITIAL, NEW],
            [INITIAL, NEW],
            [INITIAL, ENFORCED],
            None,
            [INITIAL, NEW, ENFORCED],
        ),
        (
            "race: toleration added to host after HostOld snapshot is preserved",
            [INITIAL],
            [INITIAL, NEW],
            [INITIAL, ENFORCED],
            [INITIAL, ENFORCED, LATE],
            [INITIAL, NEW, ENFORCED, LATE],
        ),
    ],
)
def test_diff_toleration_sync(
    case: str,
    virtual_old: list[Any],
    virtual: list[Any],
    host: list[Any],
    host_live: list[Any] | None,
    expected: list[Any],
) -> None:
    """diff_test.go TestDiffTolerationSync (calcSpecDiff): the virtual pod's tolerations,
    then the host's own, then the enforced ones."""
    pair = Pair(
        pod("testpod", "testns", tolerations=virtual_old),
        pod("testpod", "testns", tolerations=virtual),
        pod("testpod-x-testns", "test", tolerations=host),
        pod("testpod-x-testns", "test", tolerations=host_live or host),
    )
    _, new_host = pod_diff(diff_config(enforced_tolerations=(ENFORCED,)), pair, TESTNS)
    assert new_host["spec"]["tolerations"] == expected, case


def test_diff_qos_class_preservation() -> None:
    """diff_test.go TestDiffQOSClassPreservation: the virtual pod keeps its QoS class, the
    host pod its own."""
    virtual = {**pod("testpod", "testns"), "status": {"qosClass": "BestEffort"}}
    host = {**pod("testpod-x-testns", "test"), "status": {"qosClass": "Burstable"}}
    new_virtual, new_host = pod_diff(
        diff_config(), Pair(pod("testpod", "testns"), virtual, host, host), TESTNS
    )
    assert new_virtual["status"]["qosClass"] == "BestEffort"
    assert new_host["status"]["qosClass"] == "Burstable"


@pytest.mark.parametrize(
    ("case", "strips", "generation", "condition_generation"),
    [
        (
            "v1.33: virtual apiserver strips ObservedGeneration, keep the virtual values",
            True,
            2,
            None,
        ),
        (
            "v1.34: virtual apiserver persists ObservedGeneration, take the host values",
            False,
            5,
            5,
        ),
    ],
)
def test_desired_virtual_status(
    case: str, strips: bool, generation: int, condition_generation: int | None
) -> None:
    """diff_test.go TestDesiredVirtualStatus."""
    host: dict[str, Any] = {
        "phase": "Running",
        "qosClass": "Burstable",
        "observedGeneration": 5,
        "conditions": [{"type": "Ready", "status": "True", "observedGeneration": 5}],
    }
    virtual = {"phase": "Pending", "qosClass": "Guaranteed", "observedGeneration": 2}
    desired = desired_virtual_status(host, virtual, strips_generation=strips)
    assert desired["phase"] == "Running", case
    [condition] = desired["conditions"]
    assert condition["type"] == "Ready"
    assert desired["qosClass"] == "Guaranteed"
    assert desired["observedGeneration"] == generation
    assert condition.get("observedGeneration") == condition_generation
    # TestDesiredVirtualStatusDoesNotMutateInputs
    condition["status"] = "False"
    assert host["conditions"][0]["status"] == "True"
    assert host["qosClass"] == "Burstable"


def test_the_virtual_version_decides_whether_generations_are_stripped() -> None:
    """translator.go virtualClusterStripsObservedGeneration: before 1.34, from the values'
    Kubernetes image (the chart's default, v1.36.0, keeps them)."""

    def image(tag: str) -> dict[str, Any]:
        return {"controlPlane": {"distro": {"k8s": {"image": {"tag": tag}}}}}

    assert sync_config(image("v1.33.4"), "t", "v").strips_observed_generation
    assert not sync_config(image("v1.34.0"), "t", "v").strips_observed_generation
    assert not sync_config({}, "t", "v").strips_observed_generation


# --- pkg/controllers/resources/pods/syncer_test.go -------------------------------------------

KUBE_IP, DNS_IP = "1.2.3.4", "2.2.2.2"  # pVclusterService, pDNSService
HOST_POD = host_name("testpod", "testns", "suffix")


def syncer_config(**fields: Any) -> Any:
    """pods syncer_test.go: NewFakeConfig (workload account vc-workload-vcluster)."""
    return diff_config(workload_service_account="vc-workload-vcluster", **fields)


def expected_host_pod(**spec: Any) -> dict[str, Any]:
    """syncer_test.go TestSyncTable pObjectMeta and pPodFinal."""
    return {
        "metadata": {
            "name": HOST_POD,
            "namespace": "test",
            "annotations": {
                "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
                "vcluster.loft.sh/labels": "",
                "vcluster.loft.sh/name": "testpod",
                "vcluster.loft.sh/namespace": "testns",
                NAME_ANNOTATION: "testpod",
                UID_ANNOTATION: "",
                "vcluster.loft.sh/object-namespace": "testns",
                KIND_ANNOTATION: "/v1, Kind=Pod",
                "vcluster.loft.sh/object-host-namespace": "test",
                HOST_NAME_ANNOTATION: HOST_POD,
                "vcluster.loft.sh/service-account-name": "",
                "vcluster.loft.sh/uid": "",
            },
            "labels": {NAMESPACE_LABEL: "testns", MARKER_LABEL: "suffix"},
        },
        "spec": {
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "hostAliases": [
                {
                    "ip": KUBE_IP,
                    "hostnames": [
                        "kubernetes.default.svc.cluster.local",
                        "kubernetes",
                        "kubernetes.default",
                        "kubernetes.default.svc",
                    ],
                }
            ],
            "serviceAccountName": "vc-workload-vcluster",
            "hostname": "testpod",
            **spec,
        },
    }


def comparable(obj: dict[str, Any]) -> Any:
    return normalized(strip(obj))


@pytest.mark.parametrize(
    ("case", "node_selector", "option", "expected_selector", "labels", "standard"),
    [
        (
            "SyncToHost and enforce NodeSelector",
            {"labelA": "valueA", "labelB": "valueB"},
            {"labelB": "enforcedB", "otherLabel": "abc"},
            {"labelA": "valueA", "labelB": "enforcedB", "otherLabel": "abc"},
            None,
            "",
        ),
        ("SyncToHost without security standard", None, {}, None, None, ""),
        ("SyncToHost with privileged security standard", None, {}, None, None, "privileged"),
        (
            "SyncToHost with labels wildcard",
            None,
            {},
            None,
            {"test.sh/abcd": "yes"},
            "",
        ),
    ],
)
def test_sync_to_host(
    case: str,
    node_selector: dict[str, str] | None,
    option: dict[str, str],
    expected_selector: dict[str, str] | None,
    labels: dict[str, str] | None,
    standard: str,
) -> None:
    """syncer_test.go TestSyncTable, the SyncToHost cases: the host pod's metadata, account,
    links, host aliases, hostname, and the node selector with
    ``sync.fromHost.nodes.selector.labels`` over it."""
    from simulator.syncer import labels_annotation, pod_to_host

    virtual = pod("testpod", "testns", **({"nodeSelector": node_selector} if node_selector else {}))
    if labels:
        virtual["metadata"]["labels"] = labels
    assert not standard or not pod_security_problems(virtual, standard)
    config = syncer_config(node_selector=option, pod_security_standard=standard)
    host = pod_to_host(config, virtual, TESTNS, [], KUBE_IP, DNS_IP)
    expected = expected_host_pod(
        **({"nodeSelector": expected_selector} if expected_selector else {})
    )
    if labels:
        expected["metadata"]["labels"].update(labels)
        expected["metadata"]["annotations"]["vcluster.loft.sh/labels"] = labels_annotation(virtual)
    assert comparable(host) == comparable(expected), case


def test_sync_to_host_with_restricted_security_standard() -> None:
    """syncer_test.go TestSyncTable "SyncToHost with restricted security standard": upstream
    checks only that the virtual pod stays as it was (no host expectation); a pod without
    containers passes the restricted checks (pod-security-admission policy
    check_runAsNonRoot.go, check_seccompProfile_restricted.go visit containers only)."""
    assert pod_security_problems(pod("testpod", "testns"), "restricted") == []


def test_check_injected_sidecar() -> None:
    """syncer_test.go TestSyncTable "Check injected sidecar": a container only the host pod
    has (a webhook's) stays there, and the virtual pod's spec is not touched."""
    containers = [{"name": "nginx-not-injected"}]
    virtual = pod("testpod", "testns", containers=containers, nodeName="test123")
    host = expected_host_pod(
        containers=[{"name": "nginx-not-injected"}, {"name": "nginx-injected"}], nodeName="test123"
    )
    host.update(apiVersion="v1", kind="Pod")
    new_virtual, new_host = pod_diff(syncer_config(), Pair(virtual, virtual, host, host), TESTNS)
    assert new_virtual["spec"] == virtual["spec"]
    assert comparable(new_host) == comparable(host)


@pytest.mark.parametrize(
    ("case", "values", "virtual_class", "host_class"),
    [
        (
            "From Host PriorityClasses sync enabled",
            {"sync": {"fromHost": {"priorityClasses": {"enabled": True}}}},
            "high-priority",
            "high-priority",
        ),
        (
            "To Host PriorityClasses sync enabled",
            {"sync": {"toHost": {"priorityClasses": {"enabled": True}}}},
            "high-priority",
            "vcluster-high-priority-x-test-x-vcluster",
        ),
        (
            "To Host Pods.PriorityClassName set",
            {"sync": {"toHost": {"pods": {"priorityClassName": "high-priority"}}}},
            None,
            "high-priority",
        ),
        ("(neither: the class is dropped)", {}, "high-priority", None),
    ],
)
def test_priority_classes(
    case: str, values: dict[str, Any], virtual_class: str | None, host_class: str | None
) -> None:
    """syncer_test.go TestSync, the PriorityClass cases (VClusterName ``vcluster``); and,
    with no priority class sync, translator.go resetting the class."""
    config = sync_config(values, "test", "vcluster")
    spec = {"priorityClassName": virtual_class} if virtual_class else {}
    host = pod_to_host(config, pod("testpod", "testns", **spec), TESTNS, [], KUBE_IP, DNS_IP)
    assert host["spec"].get("priorityClassName") == host_class, case


def test_map_hostpaths_container_env() -> None:
    """syncer_test.go TestSync "Map hostpaths", its ``pPodContainerEnv``: a container gets
    the ``kubernetes`` Service's variables at the vCluster's address (host path mapping
    itself is not modelled)."""
    virtual = pod("test", "testns", containers=[{"name": "nginx-placeholder", "image": "nginx"}])
    host = pod_to_host(syncer_config(), virtual, TESTNS, [], KUBE_IP, DNS_IP)
    assert host["spec"]["containers"][0]["env"] == [
        {"name": "KUBERNETES_PORT", "value": "tcp://1.2.3.4:443"},
        {"name": "KUBERNETES_PORT_443_TCP", "value": "tcp://1.2.3.4:443"},
        {"name": "KUBERNETES_PORT_443_TCP_ADDR", "value": "1.2.3.4"},
        {"name": "KUBERNETES_PORT_443_TCP_PORT", "value": "443"},
        {"name": "KUBERNETES_PORT_443_TCP_PROTO", "value": "tcp"},
        {"name": "KUBERNETES_SERVICE_HOST", "value": "1.2.3.4"},
        {"name": "KUBERNETES_SERVICE_PORT", "value": "443"},
        {"name": "KUBERNETES_SERVICE_PORT_HTTPS", "value": "443"},
    ]


# --- pkg/controllers/resources/services/syncer_test.go TestSync ------------------------------

V_SERVICE = {"name": "testservice", "namespace": "testns"}
HOST_SERVICE = host_name("testservice", "testns", "suffix")
P_SERVICE: dict[str, Any] = {
    "name": HOST_SERVICE,
    "namespace": "test",
    "annotations": {
        NAME_ANNOTATION: "testservice",
        "vcluster.loft.sh/object-namespace": "testns",
        UID_ANNOTATION: "",
        KIND_ANNOTATION: "/v1, Kind=Service",
        "vcluster.loft.sh/object-host-namespace": "test",
        HOST_NAME_ANNOTATION: HOST_SERVICE,
    },
    "labels": {NAMESPACE_LABEL: "testns", MARKER_LABEL: "suffix"},
}


def service(
    metadata: dict[str, Any], spec: dict[str, Any] | None = None, **rest: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": copy.deepcopy(metadata),
        **({"spec": copy.deepcopy(spec)} if spec else {}),
        **copy.deepcopy(rest),
    }


BASE = service(V_SERVICE)
CREATED = service(P_SERVICE)
SELECTED = {"test": "test-key", MARKER_LABEL: "suffix", NAMESPACE_LABEL: "testns"}
HTTP = [{"name": "http", "port": 80}]
HTTP_8080 = [{"name": "http", "port": 8080}]
PORTS_567 = [{"name": "test", "port": 123, "nodePort": 567, "targetPort": 10}]
PORTS_456 = [{"name": "test", "port": 123, "nodePort": 456, "targetPort": 10}]
FORWARD_SPEC = {
    "ports": [{"name": "somePort", "port": 123}],
    "publishNotReadyAddresses": True,
    "type": "NodePort",
    "externalTrafficPolicy": "Local",
    "sessionAffinity": "ClientIP",
    "sessionAffinityConfig": {"clientIP": {}},
    "healthCheckNodePort": 112,
}
BACKWARD_RECREATE = {
    "clusterIP": "123:123:123:123",
    "externalName": "backwardExternal",
    "externalIPs": ["123:221:123:221"],
    "loadBalancerIP": "123:213:123:213",
}
EXTERNAL_BEFORE = service(V_SERVICE, {"externalName": "test.com"})
LB_STATUS = {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}


def sync_services(
    stored_virtual: dict[str, Any],
    stored_host: dict[str, Any],
    host_old: dict[str, Any],
    host: dict[str, Any],
    virtual_old: dict[str, Any],
    virtual: dict[str, Any],
) -> tuple[dict[str, Any], dict[str, Any], bool]:
    """One ``serviceSyncer.Sync`` against fake clients holding ``stored_*``: a side is written
    when the syncer changed it (the patcher's before/after), the virtual one recreated when
    asked."""
    result = service_sync(SUFFIX, Pair(virtual_old, virtual, host_old, host))
    if result.recreate_virtual:
        return result.virtual, stored_host, True
    new_virtual = result.virtual if not same(result.virtual, virtual) else stored_virtual
    new_host = result.host if not same(result.host, host) else stored_host
    return new_virtual, new_host, False


def test_create_forward() -> None:
    """services syncer_test.go TestSync "Create Forward": a Service without a selector is a
    host Service without one."""
    assert comparable(service_to_host(SUFFIX, BASE)) == comparable(CREATED)


@pytest.mark.parametrize(
    ("case", "stored", "event", "expected"),
    [
        (
            "Sync node ports physical -> virtual",
            (service(V_SERVICE, {"ports": PORTS_567}), service(P_SERVICE, {"ports": PORTS_456})),
            (BASE, service(P_SERVICE, {"ports": PORTS_456}), "v", "v"),
            (service(V_SERVICE, {"ports": PORTS_456}), service(P_SERVICE, {"ports": PORTS_456})),
        ),
        (
            "Sync ports virtual -> physical",
            (
                service(V_SERVICE, {"ports": PORTS_567}),
                service(P_SERVICE, {"ports": [{**PORTS_456[0], "name": "test123"}]}),
            ),
            ("p", "p", BASE, service(V_SERVICE, {"ports": PORTS_567})),
            (service(V_SERVICE, {"ports": PORTS_567}), service(P_SERVICE, {"ports": PORTS_567})),
        ),
        (
            "Update forward",
            (
                service({**V_SERVICE, "annotations": {"a": "b"}}, FORWARD_SPEC),
                service(
                    {
                        **P_SERVICE,
                        "annotations": {
                            **P_SERVICE["annotations"],
                            "vcluster.loft.sh/block-deletion": "true",
                        },
                    }
                ),
            ),
            ("p", "p", CREATED, "v"),
            (
                service({**V_SERVICE, "annotations": {"a": "b"}}, FORWARD_SPEC),
                service(
                    {**P_SERVICE, "annotations": {**P_SERVICE["annotations"], "a": "b"}},
                    FORWARD_SPEC,
                ),
            ),
        ),
        ("Update forward not needed", (BASE, CREATED), ("p", "p", "v", "v"), (BASE, CREATED)),
        (
            "Update backward status",
            (
                BASE,
                service(
                    P_SERVICE,
                    status={
                        "loadBalancer": {
                            "ingress": [{"ip": "121:121:121:121", "hostname": "ingresshost"}]
                        }
                    },
                ),
            ),
            (
                service(P_SERVICE, {"type": "ExternalName", "externalName": "backwardExternal"}),
                "p",
                "v",
                "v",
            ),
            (
                service(V_SERVICE, status={"loadBalancer": {}}),
                service(P_SERVICE, status={"loadBalancer": {}}),
            ),
        ),
        ("Update backward not needed", (BASE, CREATED), ("p", "p", "v", "v"), (BASE, CREATED)),
        (
            "Sync kubernetes service change type ExternalName to ClusterIP",
            (
                service(V_SERVICE, {"type": "ClusterIP", "ports": HTTP}),
                service(P_SERVICE, {"externalName": "test.com", "type": "ExternalName"}),
            ),
            ("p", "p", EXTERNAL_BEFORE, "v"),
            (
                service(V_SERVICE, {"type": "ClusterIP", "ports": HTTP}),
                service(P_SERVICE, {"type": "ClusterIP", "ports": HTTP}),
            ),
        ),
        (
            "Sync kubernetes service change type ExternalName to NodePort",
            (
                service(
                    V_SERVICE, {"selector": {"test": "test-key"}, "type": "NodePort", "ports": HTTP}
                ),
                service(P_SERVICE, {"externalName": "test.com", "type": "ExternalName"}),
            ),
            ("p", "p", EXTERNAL_BEFORE, "v"),
            (
                service(
                    V_SERVICE, {"selector": {"test": "test-key"}, "type": "NodePort", "ports": HTTP}
                ),
                service(P_SERVICE, {"selector": SELECTED, "type": "NodePort", "ports": HTTP}),
            ),
        ),
        (
            "Sync kubernetes service change type LoadBalancer to NodePort",
            (
                service(
                    V_SERVICE,
                    {"selector": {"test": "test-key"}, "type": "NodePort", "ports": HTTP_8080},
                ),
                service(P_SERVICE, {"selector": SELECTED, "type": "ClusterIP", "ports": HTTP_8080}),
            ),
            (
                "p",
                "p",
                service(
                    V_SERVICE,
                    {"selector": {"test": "test-key"}, "type": "LoadBalancer", "ports": HTTP_8080},
                    status=LB_STATUS,
                ),
                "v",
            ),
            (
                service(
                    V_SERVICE,
                    {"selector": {"test": "test-key"}, "type": "NodePort", "ports": HTTP_8080},
                ),
                service(P_SERVICE, {"selector": SELECTED, "type": "NodePort", "ports": HTTP_8080}),
            ),
        ),
        (
            "Sync kubernetes service change type LoadBalancer to ClusterIP",
            (
                service(
                    V_SERVICE,
                    {"selector": {"test": "test-key"}, "type": "ClusterIP", "ports": HTTP_8080},
                ),
                service(P_SERVICE, {"selector": SELECTED, "type": "ClusterIP", "ports": HTTP_8080}),
            ),
            (
                "p",
                "p",
                service(
                    V_SERVICE,
                    {"selector": {"test": "test-key"}, "type": "LoadBalancer", "ports": HTTP_8080},
                    status=LB_STATUS,
                ),
                "v",
            ),
            (
                service(
                    V_SERVICE,
                    {"selector": {"test": "test-key"}, "type": "ClusterIP", "ports": HTTP_8080},
                ),
                service(P_SERVICE, {"selector": SELECTED, "type": "ClusterIP", "ports": HTTP_8080}),
            ),
        ),
    ],
)
def test_service_sync(
    case: str,
    stored: tuple[dict[str, Any], dict[str, Any]],
    event: tuple[Any, Any, Any, Any],
    expected: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    """services syncer_test.go TestSync: ``event`` is NewSyncEventWithOld's (hostOld, host,
    virtualOld, virtual), "p"/"v" standing for the stored host/virtual object."""
    virtual, host = stored
    objects = {"p": host, "v": virtual}
    host_old, host_now, virtual_old, virtual_now = (
        objects[e] if isinstance(e, str) else e for e in event
    )
    new_virtual, new_host, _ = sync_services(
        virtual, host, host_old, host_now, virtual_old, virtual_now
    )
    assert comparable(new_virtual) == comparable(expected[0]), case
    assert comparable(new_host) == comparable(expected[1]), case


def test_update_backward_spec_no_recreation() -> None:
    """services syncer_test.go TestSync "Update backward spec no recreation": the host's type
    and external name reach the virtual Service; a second pass with the virtual object as it
    was read before writes nothing."""
    host = service(P_SERVICE, {"type": "ExternalName", "externalName": "backwardExternal"})
    virtual, stored_host, _ = sync_services(BASE, host, BASE, host, BASE, BASE)
    virtual, stored_host, _ = sync_services(
        virtual, stored_host, stored_host, stored_host, BASE, BASE
    )
    assert comparable(virtual) == comparable(
        service(V_SERVICE, {"type": "ExternalName", "externalName": "backwardExternal"})
    )
    assert comparable(stored_host) == comparable(host)


def test_update_backward_spec_with_recreation() -> None:
    """services syncer_test.go TestSync "Update backward spec with recreation": a host cluster
    IP the virtual Service lacks recreates it (Requeue), then the host's fields come back; the
    host loses the load balancer IP a non-LoadBalancer Service may not keep."""
    host = service(P_SERVICE, BACKWARD_RECREATE)
    virtual, stored_host, recreated = sync_services(BASE, host, BASE, host, BASE, BASE)
    assert recreated
    assert virtual["spec"] == {"clusterIP": "123:123:123:123"}
    virtual, stored_host, recreated = sync_services(
        virtual, stored_host, BASE, stored_host, virtual, virtual
    )
    assert not recreated
    assert comparable(virtual) == comparable(service(V_SERVICE, BACKWARD_RECREATE))
    assert comparable(stored_host) == comparable(
        service(P_SERVICE, {k: v for k, v in BACKWARD_RECREATE.items() if k != "loadBalancerIP"})
    )


# --- pkg/controllers/resources/endpoints/syncer_test.go, endpointslices/syncer_test.go --------


def endpoints(name: str, namespace: str, **rest: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {"name": name, "namespace": namespace},
        **rest,
    }


def host_meta(name: str, kind: str, **labels: str) -> dict[str, Any]:
    host = host_name(name, "test", "suffix")
    return {
        "name": host,
        "namespace": "test",
        "annotations": {
            NAME_ANNOTATION: name,
            "vcluster.loft.sh/object-namespace": "test",
            UID_ANNOTATION: "",
            KIND_ANNOTATION: kind,
            "vcluster.loft.sh/object-host-namespace": "test",
            HOST_NAME_ANNOTATION: host,
        },
        "labels": {NAMESPACE_LABEL: "test", **labels},
    }


def test_endpoints_forward_create_and_update() -> None:
    """endpoints syncer_test.go TestSync "Forward create", "Forward update": the subsets go
    to the host verbatim."""
    base = endpoints("test-secret", "test")
    synced = {"metadata": host_meta("test-secret", "/v1, Kind=Endpoints")}
    assert comparable(endpoints_to_host(SUFFIX, base)) == comparable(synced)
    subsets = [{"addresses": [{"ip": "127.0.0.1"}]}]
    updated = endpoints("test-secret", "test", subsets=subsets)
    stored = {"apiVersion": "v1", "kind": "Endpoints", **synced}
    _, host = endpoints_sync(SUFFIX, Pair(base, updated, stored, stored))
    assert comparable(host) == comparable({**synced, "subsets": subsets})


def endpoint_slice(name: str, service_name: str, **rest: Any) -> dict[str, Any]:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": name,
            "namespace": "test",
            "labels": {"kubernetes.io/service-name": service_name},
        },
        **rest,
    }


def test_endpoint_slices_forward_create_and_update() -> None:
    """endpointslices syncer_test.go TestSync "Forward create", "Forward update": the
    endpoints verbatim, the service-name label naming the host Service."""
    base = endpoint_slice("test-eps", "test-svc")
    synced = {
        "metadata": host_meta(
            "test-eps",
            "discovery.k8s.io/v1, Kind=EndpointSlice",
            **{"kubernetes.io/service-name": host_name("test-svc", "test", "suffix")},
        )
    }
    assert comparable(endpoint_slice_to_host(SUFFIX, base)) == comparable(synced)
    stored = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", **synced}
    updated = endpoint_slice("test-eps", "test-svc", endpoints=[{"addresses": ["127.0.0.1,"]}])
    _, host = endpoint_slice_sync(SUFFIX, Pair(base, updated, stored, stored))
    assert comparable(host) == comparable({**synced, "endpoints": updated["endpoints"]})


def test_endpoints_are_synced_by_default() -> None:
    """The chart's values.yaml at v0.35.3: ``sync.toHost.endpoints`` and ``endpointSlices``
    enabled (controllers/resources/register.go registers their syncers then)."""
    config = sync_config({}, "test", "suffix")
    assert config.endpoints and config.endpoint_slices and config.services and config.pods
    off = {
        "sync": {"toHost": {"endpoints": {"enabled": False}, "endpointSlices": {"enabled": False}}}
    }
    config = sync_config(off, "test", "suffix")
    assert not config.endpoints and not config.endpoint_slices


def controller_scene() -> tuple[Any, Any, Any]:
    """A syncer over an empty host store and a virtual cluster ``suffix`` syncing into
    ``test``: upstream's fake clients."""
    from simulator.syncer import Syncer, sync_config

    store = Store()
    vcluster = VirtualCluster("test", "suffix")
    vcluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "test"}}, 0)
    syncer = Syncer(store, None, lambda: [vcluster])  # type: ignore[arg-type]
    return store, vcluster, (syncer, sync_config({}, "test", "suffix"))


@pytest.mark.parametrize(
    ("case", "kind"),
    [
        ("Override endpoints even if they are not managed", "Endpoints"),
        ("Override endpointSlices even if they are not managed", "EndpointSlice"),
    ],
)
def test_existing_endpoints(case: str, kind: str) -> None:
    """endpoints syncer_test.go TestExistingEndpoints, endpointslices syncer_test.go
    TestExistingEndpointSlices: a host object of the translated name that the syncer did not
    write is replaced by the virtual one's copy, address and all."""
    from simulator.syncer import ENDPOINT_SLICE_KIND, ENDPOINTS_KIND

    store, vcluster, (syncer, config) = controller_scene()
    name = "test-endpoints" if kind == "Endpoints" else "test-endpoint-slices"
    resource, controller = (
        (ENDPOINTS, ENDPOINTS_KIND)
        if kind == "Endpoints"
        else (ENDPOINT_SLICES, ENDPOINT_SLICE_KIND)
    )
    if kind == "Endpoints":
        virtual = endpoints(name, "test", subsets=[{"addresses": [{"ip": "1.1.1.1"}]}])
    else:
        virtual = endpoint_slice(
            name, name, addressType="IPv4", endpoints=[{"addresses": ["1.1.1.1"]}]
        )
    vcluster.create(virtual, 0)
    vcluster.create(service({"name": name, "namespace": "test"}), 0)
    store.apply(
        resource, {"metadata": {"name": host_name(name, "test", "suffix"), "namespace": "test"}}, 0
    )
    syncer.reconcile(vcluster, config, controller, None, 0)
    [host] = store.list(resource, "test")
    gvk = (
        "/v1, Kind=Endpoints" if kind == "Endpoints" else "discovery.k8s.io/v1, Kind=EndpointSlice"
    )
    meta = host_meta(name, gvk)
    if kind == "EndpointSlice":
        meta["labels"]["kubernetes.io/service-name"] = host_name(name, "test", "suffix")
    expected = {
        "metadata": meta,
        **{k: v for k, v in virtual.items() if k not in ("apiVersion", "kind", "metadata")},
    }
    host["metadata"]["annotations"][UID_ANNOTATION] = ""  # upstream's objects have no uid
    for key in ("creationTimestamp",):
        host["metadata"].pop(key, None)
    assert comparable(host) == comparable(expected), case


@pytest.mark.parametrize("kind", ["Endpoints", "EndpointSlice"])
def test_dont_sync_default_kubernetes(kind: str) -> None:
    """endpoints and endpointslices syncer_test.go TestSync "Don't sync default/kubernetes
    endpoint(Slice)": ReconcileStart skips it."""
    _, vcluster, (syncer, config) = controller_scene()
    vcluster.create(service({"name": "kubernetes", "namespace": "default"}), 0)
    if kind == "Endpoints":
        vobj = endpoints("kubernetes", "default")
        assert not syncer.endpoints_start(
            vcluster, config, ENDPOINTS_KIND, "default", "kubernetes", vobj
        )
    else:
        vobj = endpoint_slice("kubernetes", "kubernetes")
        vobj["metadata"]["namespace"] = "default"
        assert not syncer.endpoints_start(
            vcluster, config, ENDPOINT_SLICE_KIND, "default", "kubernetes", vobj
        )
