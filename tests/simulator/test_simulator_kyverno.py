"""The simulator's Kyverno (simulator/kyverno.py) against cases transcribed from Kyverno's
own unit tests at v1.19.0 (each names its file and test), and the constructs the portal's
rendered policies use, on hand-written policies."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from simulator import kyverno
from simulator.admission import Rejected, admit_pod
from simulator.store import CLUSTER_POLICIES, HTTP_ROUTES, PODS, POLICIES, Store

# --- ext/wildcard/match_test.go TestMatch -------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "text", "matched"),
    [
        ("*", "s3:GetObject", True),
        ("", "s3:GetObject", False),
        ("", "", True),
        ("s3:*", "s3:ListMultipartUploadParts", True),
        ("s3:ListBucketMultipartUploads", "s3:ListBucket", False),
        ("my-bucket/oo*", "my-bucket/oo", True),
        ("my-bucket/In*", "my-bucket/Karnataka/India/", False),
        ("my-bucket/In*/Ka*/Ban", "my-bucket/India/Karnataka/Ban", True),
        ("my-bucket/oo*", "my-bucket/odo", False),
        ("my-bucket?/abc*", "mybucket/abc", False),
        ("my-bucket?/abc*", "my-bucket1/abc", True),
        ("my-?-bucket/abc*", "my--bucket/abc", False),
        ("my??bucket/abc*", "my4abucket/abc", True),
        ("my-bucket/abc?efg", "my-bucket/abc/efg", True),
        ("my-bucket/abc????", "my-bucket/abc", False),
    ],
)
def test_wildcards_match_as_kyverno_matches_them(pattern: str, text: str, matched: bool) -> None:
    assert kyverno.wildcard_match(pattern, text) is matched


# --- pkg/engine/pattern/pattern_test.go --------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "pattern", "want"),
    [
        # TestValidate
        (True, True, True),
        (True, False, False),
        (False, None, True),
        ("value", None, False),
        ("", None, True),
        (0, None, True),
        ("10.100.11.54", "192.168.88.1 | 10.100.11.*", True),
        ("10", ">1 & <20", True),
        ("32", ">1 & <20 | >31 & <33", True),
        ("21", ">1 & <20 | >31 & <33", False),
        (7.0, 7.000, True),
        (8, 10, False),
        (None, False, False),
        ("8", 8, True),
        ("8.1", 8, False),
        (False, 8, False),
        (8, 8.1, False),
        ("abc", 8.1, False),
        ({"a": 1}, {"b": 2}, True),
        # TestValidateValueWithStringPattern_WithSpace and _Ranges
        (4, ">= 3", True),
        (2, "0-2", True),
        (3, "0-2", False),
        (15, "10!-20", False),
        (25, "10!-20", True),
        ("256Mi", "128Mi-512Mi", True),
        ("1024Mi", "128Mi-512Mi", False),
        ("1024Mi", "128Mi!-512Mi", True),
        (9, "-10--8", False),
        ("9Mi", "-10Mi!--8Mi", True),
        ("1025Mi", "+0Mi!-+1024Mi", True),
        # the string patterns of the rendered policies: privileged false, "?*", registries
        (False, "false", True),
        (True, "false", False),
        ("x", "?*", True),
        ("", "?*", False),
        (None, "?*", False),
        ("kserve/sklearnserver:v1", "docker.io/vllm/* | kserve/*", True),
        ("evil.example/kserve/x", "docker.io/vllm/* | kserve/*", False),
    ],
)
def test_values_match_patterns_as_in_pattern_test(value: Any, pattern: Any, want: bool) -> None:
    assert kyverno.validate_value(value, pattern) is want


@pytest.mark.parametrize(
    ("value", "pattern", "want"),
    [
        # TestValidateDuration
        ("12s", "<15s", True),
        ("15s", "<=12s", False),
        ("15s", ">=12s", True),
        # TestValidateQuantity_Equal and _Operation
        ("1024Mi", "1Gi", True),
        ("0.2", "200m", True),
        ("2048", "1024", False),
        (1024, "1024", True),
        ("1Gi", ">1000Mi", True),
        ("1G", "<1Gi", True),
        ("500m", ">=0.5", True),
        ("0.2", "!.5", True),
        # TestValidateQuantity_Operation_No_String_Check
        ("500m", ">=0.6", False),
        # TestValidateNumberWithStr_LessFloatAndInt
        (7.00001, ">7.000001", True),
        (7.0, "7", True),
        (6.000000001, "<6", False),
    ],
)
def test_durations_and_quantities_compare_as_in_pattern_test(
    value: Any, pattern: str, want: bool
) -> None:
    assert kyverno.validate_value(value, pattern) is want


# --- pkg/engine/validate/validate_test.go -----------------------------------------------------


def test_an_asterisk_needs_the_field_and_fails_at_its_parent() -> None:
    # TestValidateMap_AsteriskFieldIsMissing: "livenessProbe": "*" against null.
    pattern = {"spec": {"containers": [{"name": "*", "livenessProbe": "*"}]}}
    resource = {"spec": {"containers": [{"name": "nginxo", "livenessProbe": None}]}}
    assert kyverno.match_pattern(resource, pattern)[0] == "/spec/containers/0/"  # type: ignore[index]


def test_a_list_of_maps_fails_at_the_first_offending_element() -> None:
    # TestValidateMapElement_OneElementInArrayNotPass, without its conditional anchors.
    pattern = [{"name": "nirmata-*", "object": [{"key1": "value*", "key2": "value*"}]}]
    resource = [{"name": "nirmata-1", "object": [{"key1": "value5", "key2": "1value1"}]}]
    assert kyverno.match_pattern(resource, pattern)[0] == "/0/object/0/key2/"  # type: ignore[index]


def test_equality_anchors_check_only_what_is_there() -> None:
    # anchor/handlers.go equalityHandler; the rendered disallow-privileged pattern.
    pattern = {
        "spec": {
            "=(initContainers)": [{"=(securityContext)": {"=(privileged)": "false"}}],
            "containers": [{"=(securityContext)": {"=(privileged)": "false"}}],
        }
    }
    assert kyverno.match_pattern({"spec": {"containers": [{"name": "a"}]}}, pattern) is None
    privileged_init = {
        "spec": {
            "initContainers": [{"securityContext": {"privileged": True}}],
            "containers": [{"securityContext": {"privileged": True}}],
        }
    }
    # Anchors before plain keys (validate.go validateMap): the init container is reported.
    assert kyverno.match_pattern(privileged_init, pattern)[0] == (  # type: ignore[index]
        "/spec/initContainers/0/securityContext/privileged/"
    )


def test_missing_labels_fail_where_the_structure_differs() -> None:
    pattern = {"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "?*"}}}
    assert kyverno.match_pattern({"metadata": {}}, pattern)[0] == "/metadata/labels/"  # type: ignore[index]
    assert kyverno.match_pattern({"metadata": {"labels": {"a": "b"}}}, pattern)[0] == (  # type: ignore[index]
        "/metadata/labels/kueue.x-k8s.io/queue-name/"
    )


# --- pkg/engine/variables/operator/*_test.go and pkg/engine/variables/evaluate_test.go ----------


@pytest.mark.parametrize(
    ("key", "operator", "value", "want"),
    [
        # evaluate_test.go Test_Eval (the In family)
        (["1.1.1.1", "5.5.5.5"], "AnyIn", ["1.1.1.1", "2.2.2.2", "3.3.3.3"], True),
        (["1.1.1.1", "5.5.5.5"], "AnyIn", "1.1.1.1", True),
        (["4.4.4.4", "5.5.5.5"], "AnyIn", ["1.1.1.1", "2.2.2.2", "3.3.3.3"], False),
        ([1, 5], "AnyIn", [1, 2, 3, 4], True),
        ([5], "AnyIn", [1, 2, 3, 4], False),
        (["1*"], "AnyIn", ["1.1.1.1", "2.2.2.2", "3.3.3.3"], True),
        (["5*"], "AnyIn", ["1.1.1.1", "2.2.2.2", "3.3.3.3"], False),
        (["1.1.1.1", "2.2.2.2", "5.5.5.5"], "AnyIn", ["2*"], True),
        (["5"], "AnyIn", "1-3", False),
        ("1.1.1.1", "AnyIn", ["1*"], True),
        ("5", "AnyIn", "1-10", True),
        (5, "AnyIn", "1-10", True),
        ([1, 5], "AnyIn", "7-10", False),
        ([1.002, 1.222], "AnyIn", "1.001-10", True),
        (["1.1.1.1", "2.2.2.2"], "AllIn", ["1.1.1.1", "2.2.2.2", "3.3.3.3"], True),
        (["1.1.1.1", "5.5.5.5"], "AllIn", ["1.1.1.1"], False),
        ([1, 5], "AllIn", [1, 2, 3, 4], False),
        (["2.1.1.1", "2.2.2.2", "2.5.5.5"], "AllIn", ["2*"], True),
        (["1.1.1.1", "5.5.5.5"], "AllIn", "5.5.5.5", False),
        ([3, 2], "AllIn", "1-10", True),
        ([3, 2], "AllIn", "5-10", False),
        (1, "AnyNotIn", [1, 2, 3], False),
        (1.5, "AnyNotIn", [1, 1.5, 2, 3], False),
        (["1.1.1.1", "2.2.2.2"], "AnyNotIn", ["1.1.1.1", "2.2.2.2", "3.3.3.3"], False),
        (5, "AnyNotIn", [1, 2, 3], True),
        (5.5, "AnyNotIn", [1, 1.5, 2, 3], True),
        # anynotin_test.go TestAnyNotInHandler_Evaluate
        ("kyverno", "AnyNotIn", "kyverno", False),
        ("kube-system", "AnyNotIn", ["default", "kube-*"], False),
        ("kyverno", "AnyNotIn", "default", True),
        (64, "AnyNotIn", "64", False),
        (3.14, "AnyNotIn", "3.14", False),
        # numeric_test.go Test_NumericOperatorHandler_Evaluate
        (10, "GreaterThan", 5, True),
        (5, "GreaterThan", 5, False),
        (10, "GreaterThanOrEquals", 10, True),
        (5, "LessThanOrEquals", 5, True),
        (10.5, "GreaterThan", 10.4, True),
        ("100", "GreaterThan", 50, True),
        ("50", "LessThan", "100", True),
        ("200Mi", "GreaterThan", "100Mi", True),
        ("500m", "GreaterThanOrEquals", "0.5", True),
        (True, "GreaterThan", 5, False),
        ("not-a-number", "GreaterThan", 5, False),
        (None, "GreaterThan", 5, False),
        # equal_test.go / notequal_test.go: quantities, durations, wildcards, types
        ("1Gi", "Equals", "1024Mi", True),
        ("1h", "Equals", 3600, True),
        ("beta", "Equals", "be*", True),
        (0, "Equals", 0, True),
        ("", "NotEquals", "", False),
        ("hami", "NotEquals", "", True),
        (1, "NotEquals", "x", True),
    ],
)
def test_operators_as_in_kyvernos_tests(key: Any, operator: str, value: Any, want: bool) -> None:
    condition = {"key": key, "operator": operator, "value": value}
    assert kyverno.evaluate_condition(condition, {}) is want


def test_a_semantic_version_comparison_is_refused_not_guessed() -> None:
    # numeric_test.go "semver gt": not modelled, so it must not pass for false.
    with pytest.raises(kyverno.Unsupported, match="semantic version"):
        kyverno.evaluate_condition(
            {"key": "1.2.3", "operator": "GreaterThan", "value": "1.2.2"}, {}
        )


def test_an_unknown_operator_is_refused() -> None:
    with pytest.raises(kyverno.Unsupported, match="'In'"):
        kyverno.evaluate_condition({"key": "a", "operator": "In", "value": ["a"]}, {})


# --- Kyverno's JMESPath (kyverno/go-jmespath interpreter.go, pkg/engine/jmespath) ----------------

POD = {
    "metadata": {"name": "p", "namespace": "t", "labels": {"app": "x"}},
    "spec": {
        "containers": [
            {"name": "a", "resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "1"}}},
            {"name": "b", "resources": {"requests": {"cpu": "1"}}},
            {"name": "c"},
        ]
    },
}
CONTEXT = {"request": {"object": POD, "namespace": "t"}}


def test_a_missing_key_is_an_error_that_a_default_absorbs() -> None:
    with pytest.raises(Exception, match='Unknown key "tier" in path'):
        kyverno.substitute("{{ request.object.metadata.labels.tier }}", CONTEXT)
    assert kyverno.substitute("{{ request.object.metadata.labels.tier || '' }}", CONTEXT) == ""
    # a field of null is null, not an error (fieldFromStruct)
    assert kyverno.query("request.object.spec.nothing || `1`", CONTEXT) == 1


def test_projections_skip_containers_without_the_key() -> None:
    expression = (
        'sum(request.object.spec.containers[].resources.limits."nvidia.com/gpu"'
        ".to_number(@) || `[0]`)"
    )
    assert kyverno.query(expression, CONTEXT) == 2
    empty = {"request": {"object": {"spec": {"containers": [{"name": "a"}]}}}}
    assert kyverno.query(expression, empty) == 0


def test_kyvernos_sum_needs_an_element() -> None:
    # pkg/engine/jmespath/functions.go jpSum
    with pytest.raises(Exception, match="at least one element"):
        kyverno.query("sum(`[]`)", {})


def test_a_flatten_swallows_an_error_of_what_it_flattens() -> None:
    # go-jmespath interpreter.go ASTFlatten: an error of its left side becomes null. With no
    # initContainers the multi-select holds a null, keys(@) fails on it, and the whole
    # expression the rendered preconditions use (gitops/render/kyverno.py _limits_any_in)
    # falls back to its default: the pod's GPU limits are not seen.
    expression = (
        "request.object.spec.[initContainers, containers][].resources.limits.keys(@)[] || `[]`"
    )
    assert kyverno.query(expression, CONTEXT) == []
    with_init = {
        "request": {"object": {"spec": {**POD["spec"], "initContainers": [{"name": "i"}]}}}
    }
    assert sorted(kyverno.query(expression, with_init)) == ["cpu", "nvidia.com/gpu"]


def test_kyvernos_other_functions_are_refused_by_name() -> None:
    with pytest.raises(kyverno.Unsupported, match="to_upper"):
        kyverno.query("to_upper('a')", {})


def test_variables_inside_strings_and_nested() -> None:
    context = {"request": {"namespace": "beta", "object": {"n": 2, "list": ["a"]}}}
    assert kyverno.substitute(["system:serviceaccount:{{ request.namespace }}:*"], context) == [
        "system:serviceaccount:beta:*"
    ]
    # a non-string inside a string is JSON (vars.go substituteVarInPattern, json.Marshal)
    assert kyverno.substitute("n={{ request.object.n }} l={{ request.object.list }}", context) == (
        'n=2 l=["a"]'
    )
    # a whole-value variable keeps its type
    assert kyverno.substitute("{{ request.object.list }}", context) == ["a"]
    with pytest.raises(kyverno.Unsupported, match="serviceAccountName"):
        kyverno.substitute("{{ serviceAccountName }}", context)


# --- quantities as the API server serializes them (apimachinery quantity.go) ------------------


@pytest.mark.parametrize(
    ("written", "canonical"),
    [
        ("24000", "24k"),
        (24000, "24k"),
        ("24576", "24576"),
        ("1500", "1500"),
        ("0.5", "500m"),
        ("1.5Gi", "1536Mi"),
        ("64Gi", "64Gi"),
        ("1024", "1024"),
        ("1Ki", "1Ki"),
        ("2048Ki", "2Mi"),
        ("1e3", "1e3"),
        ("100m", "100m"),
        ("0", "0"),
    ],
)
def test_quantities_are_canonical_in_the_request(written: Any, canonical: str) -> None:
    obj = {"spec": {"containers": [{"resources": {"limits": {"x": written}}}]}}
    served = kyverno.canonical_resources(obj)
    assert served["spec"]["containers"][0]["resources"]["limits"]["x"] == canonical


# --- mutate: pkg/engine/mutate/patch/strategicPreprocessing_test.go ---------------------------


def test_add_if_not_present_adds_only_missing_keys() -> None:
    # Test_preProcessStrategicMergePatch (the "+(annotation1)"/"+(label1)" case, its
    # metadata): annotation1 and label1 exist and stay; annotation2 is added.
    resource = {
        "metadata": {
            "annotations": {"annotation1": "atest2"},
            "labels": {"label1": "test2", "label2": "test2"},
        }
    }
    patch = {
        "metadata": {
            "annotations": {"+(annotation1)": "atest1", "+(annotation2)": "atest2"},
            "labels": {"+(label1)": "test1"},
        }
    }
    patched = kyverno.strategic_merge(resource, patch)
    assert patched["metadata"]["annotations"] == {"annotation1": "atest2", "annotation2": "atest2"}
    assert patched["metadata"]["labels"] == {"label1": "test2", "label2": "test2"}
    # ... and where the map itself is missing it is created (the TAS rule on a bare pod).
    added = kyverno.strategic_merge({"metadata": {"name": "p"}}, patch)
    assert added["metadata"]["annotations"] == {"annotation1": "atest1", "annotation2": "atest2"}


def test_a_conditional_anchor_in_a_patch_is_refused() -> None:
    with pytest.raises(kyverno.Unsupported, match="conditional anchor"):
        kyverno.strategic_merge({}, {"spec": {"(volumes)": {"a": 1}}})


# --- the refusal (pkg/webhooks/utils/block_test.go TestGetBlockedMessages) ----------------------


def test_blocked_messages_list_failing_rules_by_policy() -> None:
    obj = {"metadata": {"namespace": "bar", "name": "baz"}}
    assert kyverno._blocked_message(obj, "foo", {"test": {"rule-fail": "message fail"}}) == (
        "\n\nresource foo/bar/baz was blocked due to the following policies \n\ntest:\n"
        "  rule-fail: message fail\n"
    )
    both = {"test": {"rule-fail": "message fail", "rule-error": "message error"}}
    assert kyverno._blocked_message(obj, "foo", both).endswith(
        "test:\n  rule-error: message error\n  rule-fail: message fail\n"
    )


def test_long_reasons_fold_at_eighty_columns_like_go_yaml() -> None:
    # test/conformance/chainsaw/validate/clusterpolicy/cornercases/
    # check-message-upon-resource-failure/chainsaw-test.yaml (the expected stderr).
    reason = (
        "validation error: The label `uw.systems/owner` is required. Check policy at "
        "https://github.com/utilitywarehouse/system-manifests/tree/master/kyverno/policies/"
        "namespaces/require-ns-owner-label.yaml for allowed label values. rule "
        "check-for-namespace-owner-label failed at path /metadata/labels/uw.systems/owner/"
    )
    text = kyverno._blocked_message(
        {"metadata": {"name": "asdfhl"}},
        "Namespace",
        {"require-ns-owner-label": {"check-for-namespace-owner-label": reason}},
    )
    assert text == (
        "\n\nresource Namespace//asdfhl was blocked due to the following policies \n\n"
        "require-ns-owner-label:\n"
        "  check-for-namespace-owner-label: 'validation error: The label `uw.systems/owner`\n"
        "    is required. Check policy at https://github.com/utilitywarehouse/system-manifests/"
        "tree/master/kyverno/policies/namespaces/require-ns-owner-label.yaml\n"
        "    for allowed label values. rule check-for-namespace-owner-label failed at path\n"
        "    /metadata/labels/uw.systems/owner/'\n"
    )


# --- hand-written policies through the admission chain -------------------------------------------


def _policy(*rules: dict[str, Any], kind: str = "Policy") -> dict[str, Any]:
    metadata = {"name": "hand", **({"namespace": "t"} if kind == "Policy" else {})}
    return {
        "apiVersion": "kyverno.io/v1",
        "kind": kind,
        "metadata": metadata,
        "spec": {"rules": list(rules)},
    }


def _store(*policies: dict[str, Any]) -> Store:
    store = Store()
    for policy in policies:
        store.apply(POLICIES if policy["kind"] == "Policy" else CLUSTER_POLICIES, policy, 0)
    return store


def _pod(*containers: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "t", **metadata},
        "spec": {
            "containers": [{"name": f"c{i}", "image": "x", **c} for i, c in enumerate(containers)]
        },
    }


# The rule the main author is adding (cap-hami-slot-size): a foreach over HAMi containers with
# a GreaterThan on each container's gpumem/gpucores limit, defaulting to '0'.
SLOT_CAP = {
    "name": "cap-hami-slot-size",
    "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
    "validate": {
        "failureAction": "Enforce",
        "message": "per vGPU at most 24000 MiB and 30 %",
        "foreach": [
            {
                "list": "request.object.spec.[initContainers, containers][]",
                "preconditions": {
                    "any": [
                        {
                            "key": "{{ keys(element.resources.limits || `{}`) }}",
                            "operator": "AnyIn",
                            "value": [
                                "nvidia.com/vgpu",
                                "nvidia.com/gpumem",
                                "nvidia.com/gpucores",
                            ],
                        }
                    ]
                },
                "deny": {
                    "conditions": {
                        "any": [
                            {
                                "key": f"{{{{ element.resources.limits.\"{name}\" || '0' }}}}",
                                "operator": "GreaterThan",
                                "value": cap,
                            }
                            for name, cap in (
                                ("nvidia.com/gpumem", 24000),
                                ("nvidia.com/gpucores", 30),
                            )
                        ]
                    }
                },
            }
        ],
    },
}


def _hami(**limits: Any) -> dict[str, Any]:
    return {"resources": {"limits": {"nvidia.com/vgpu": 1, **limits}}}


def test_the_slot_cap_refuses_a_container_above_it() -> None:
    store = _store(_policy(SLOT_CAP))
    with pytest.raises(Rejected) as caught:
        admit_pod(store, _pod({"name": "plain"}, _hami(**{"nvidia.com/gpumem": 24576})))
    message = str(caught.value)
    assert message.startswith('admission webhook "validate.kyverno.svc-fail" denied the request:')
    assert "resource Pod/t/p was blocked due to the following policies" in message
    assert yaml.safe_load(message.split("policies \n\n", 1)[1]) == {
        "hand": {"cap-hami-slot-size": "validation failure: per vGPU at most 24000 MiB and 30 %"}
    }
    with pytest.raises(Rejected, match="cap-hami-slot-size"):
        admit_pod(store, _pod(_hami(**{"nvidia.com/gpucores": "31"})))


def test_the_slot_cap_admits_slots_within_it_and_missing_limits() -> None:
    store = _store(_policy(SLOT_CAP))
    admit_pod(store, _pod(_hami(**{"nvidia.com/gpumem": 24000, "nvidia.com/gpucores": 30})))
    admit_pod(store, _pod(_hami()))  # both default to '0'
    admit_pod(store, _pod({"resources": {"limits": {"cpu": "64"}}}))  # no HAMi: no element


def test_the_slot_cap_cannot_read_a_limit_the_api_server_writes_with_a_suffix() -> None:
    # The API server serializes 96000 as "96k" (a canonical Quantity). Against a number the
    # numeric operator tries a duration, a quantity (only when both sides are strings), a
    # float, an int and a semver, and "96k" is none of them: GreaterThan is false, so the
    # container is admitted with four times the slot (numeric.go
    # validateValueWithStringPattern).
    store = _store(_policy(SLOT_CAP))
    admitted = admit_pod(store, _pod(_hami(**{"nvidia.com/gpumem": 96000})))
    assert admitted["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] == 96000
    # With the cap written as a string both sides are quantities, and it is refused.
    as_quantity = yaml.safe_load(yaml.safe_dump(SLOT_CAP))
    for condition in as_quantity["validate"]["foreach"][0]["deny"]["conditions"]["any"]:
        condition["value"] = str(condition["value"])
    with pytest.raises(Rejected, match="cap-hami-slot-size"):
        admit_pod(_store(_policy(as_quantity)), _pod(_hami(**{"nvidia.com/gpumem": 96000})))


def test_match_kinds_operations_and_selectors() -> None:
    rule = {
        "name": "deny-all",
        "match": {
            "any": [
                {
                    "resources": {
                        "kinds": ["gateway.networking.k8s.io/v1/HTTPRoute"],
                        "operations": ["CREATE"],
                        "selector": {"matchLabels": {"team": "?*"}},
                    }
                }
            ]
        },
        "validate": {"failureAction": "Enforce", "deny": {}},
    }
    store = _store(_policy(rule))
    route = {"metadata": {"name": "r", "namespace": "t", "labels": {"team": "a"}}}
    refused = kyverno.validate(store, route, HTTP_ROUTES, username="u")
    assert "resource HTTPRoute/t/r was blocked" in refused
    assert "deny-all: 'validation error: rule deny-all failed'" in refused
    assert (
        kyverno.validate(store, route, HTTP_ROUTES, username="u", operation="UPDATE", old=route)
        == ""
    )
    unlabelled = {"metadata": {"name": "r", "namespace": "t"}}
    assert kyverno.validate(store, unlabelled, HTTP_ROUTES, username="u") == ""
    assert kyverno.validate(store, route, PODS, username="u") == ""


def test_an_update_keeps_a_violation_the_object_already_had() -> None:
    # validate_resource.go validate: allowExistingViolations (default true) on UPDATE.
    rule = {
        "name": "needs-label",
        "match": {"any": [{"resources": {"kinds": ["HTTPRoute"]}}]},
        "validate": {
            "failureAction": "Enforce",
            "message": "label it",
            "pattern": {"metadata": {"labels": {"team": "?*"}}},
        },
    }
    store = _store(_policy(rule))
    bare = {"metadata": {"name": "r", "namespace": "t"}}
    assert "needs-label" in kyverno.validate(store, bare, HTTP_ROUTES, username="u")
    assert (
        kyverno.validate(store, bare, HTTP_ROUTES, username="u", operation="UPDATE", old=bare) == ""
    )
    labelled = {"metadata": {"name": "r", "namespace": "t", "labels": {"team": "a"}}}
    assert "needs-label" in kyverno.validate(
        store, bare, HTTP_ROUTES, username="u", operation="UPDATE", old=labelled
    )


def test_audit_rules_do_not_block() -> None:
    rule = {
        "name": "audit",
        "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
        "validate": {"failureAction": "Audit", "deny": {}},
    }
    admit_pod(_store(_policy(rule)), _pod({}))


def test_a_precondition_on_the_requester() -> None:
    # The rendered _FROM_OWN_NAMESPACE precondition: a wildcard built from request.namespace.
    rule = {
        "name": "own-namespace",
        "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
        "preconditions": {
            "all": [
                {
                    "key": "{{ request.userInfo.username }}",
                    "operator": "AnyIn",
                    "value": ["system:serviceaccount:{{ request.namespace }}:*"],
                }
            ]
        },
        "validate": {"failureAction": "Enforce", "message": "not from here", "deny": {}},
    }
    store = _store(_policy(rule))
    with pytest.raises(Rejected, match="not from here"):
        admit_pod(store, _pod({}), requester="system:serviceaccount:t:flux")
    admit_pod(store, _pod({}), requester="system:serviceaccount:kube-system:replicaset-controller")
    # Without a requester the pod's controller is the one (kube-controller-manager's accounts).
    owned = _pod({}, ownerReferences=[{"kind": "ReplicaSet", "name": "r", "controller": True}])
    assert kyverno.pod_creator(owned) == "system:serviceaccount:kube-system:replicaset-controller"
    admit_pod(store, owned)
    with pytest.raises(Rejected, match="not from here"):
        admit_pod(store, _pod({}))  # no controller: the namespace's default account


def test_a_mutation_adds_an_annotation_and_keeps_one_set() -> None:
    rule = {
        "name": "annotate",
        "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
        "mutate": {"patchStrategicMerge": {"metadata": {"annotations": {"+(a)": "true"}}}},
    }
    store = _store(_policy(rule, kind="ClusterPolicy"))
    assert admit_pod(store, _pod({}))["metadata"]["annotations"] == {"a": "true"}
    kept = admit_pod(store, _pod({}, annotations={"a": "false"}))
    assert kept["metadata"]["annotations"] == {"a": "false"}


@pytest.mark.parametrize(
    ("rule", "construct"),
    [
        ({"validate": {"pattern": {"spec": {"(name)": "x"}}}}, "conditional anchor"),
        ({"validate": {"pattern": {"spec": {"X(hostPID)": "null"}}}}, "negation anchor"),
        ({"validate": {"anyPattern": [{}]}}, "anyPattern"),
        ({"validate": {"deny": {}}, "exclude": {"any": []}}, "exclude"),
        ({"validate": {"deny": {}}, "context": []}, "context"),
        ({"mutate": {"foreach": []}}, "foreach"),
    ],
)
def test_what_is_not_modelled_is_refused_by_name(rule: dict[str, Any], construct: str) -> None:
    full = {"name": "r", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]}, **rule}
    with pytest.raises(kyverno.Unsupported, match=construct):
        admit_pod(_store(_policy(full)), _pod({"securityContext": {}}))
