"""Kyverno (v1.19.0, kyverno/kyverno ``ee97ce09``) as the simulator's admission webhooks.

The ``kyverno.io/v1`` ``ClusterPolicy`` and ``Policy`` objects stored in the simulated API are
applied to what the simulator admits, as Kyverno's resource webhooks would: mutate rules in the
mutating phase (``mutate``, the last mutating webhook: the API server calls them in the order
of their configurations' names, and ``kyverno-resource-mutating-webhook-cfg`` sorts after
KServe's and Kueue's), validate rules in the validating phase (``validate``). Cluster-wide
policies come before the namespace's (pkg/policycache/cache.go ``GetPolicies``; within each,
Kyverno's cache is a set, here name order).

Modelled, each from the file named next to it (paths at the tag above):

- matching: ``match.any``/``match.all``/``match.resources`` with ``kinds`` (``Kind`` or
  ``group/version/Kind``, wildcards), ``operations`` and a ``selector`` of ``matchLabels``
  (pkg/engine/utils/match.go, pkg/utils/match/kind.go, pkg/utils/kube/kind.go,
  pkg/engine/wildcards/wildcards.go ``ReplaceInSelector``);
- ``preconditions`` and ``deny.conditions`` (``any``/``all``), with the operators Equals,
  NotEquals, AnyIn, AnyNotIn, AllIn, AllNotIn, GreaterThan(OrEquals), LessThan(OrEquals) and
  Kyverno's value semantics: durations, resource quantities, numbers, ``fmt.Sprint`` of
  non-strings, wildcards both ways in the In family (pkg/engine/variables/operator/);
- variables ``{{ ... }}`` (whole value or inside a string, nested) evaluated by Kyverno's
  JMESPath dialect: a missing key is an error (``Unknown key``) that ``||``, function
  arguments, projections and multi-selects swallow (kyverno/go-jmespath ``interpreter.go``),
  the standard functions and Kyverno's ``sum`` (pkg/engine/variables/vars.go,
  pkg/engine/jmespath/functions.go, arithmetic.go);
- ``validate.pattern`` with plain keys, the ``=(key)`` equality anchor, lists of maps and of
  scalars, string patterns with ``|``, ``&``, ``*``/``?`` wildcards, comparison operators and
  ranges, numbers, booleans and quantities (pkg/engine/validate/validate.go,
  pkg/engine/anchor/handlers.go, pkg/engine/pattern/pattern.go, ext/wildcard over
  IGLOU-EU/go-wildcard v1.0.3);
- ``validate.deny`` and ``validate.foreach`` (``list``, ``preconditions``, ``deny``,
  ``pattern``) with their messages (pkg/engine/handlers/validation/validate_resource.go);
  ``failureAction`` per rule, ``validationFailureAction`` of the spec as fallback;
  ``allowExistingViolations`` on updates (default true);
- ``mutate.patchStrategicMerge`` on maps, with the ``+(key)`` add-if-not-present anchor
  (pkg/engine/mutate/mutation.go, pkg/engine/mutate/patch/strategicPreprocessing.go
  ``handleAddIfNotPresentAnchor``);
- ``mutate.patchesJson6902`` (a YAML or JSON list of RFC 6902 operations), applied as
  pkg/engine/mutate/patch/patchJSON6902.go ``applyPatchesWithOptions`` does: evanphx/json-patch
  v5 with ``EnsurePathExistsOnAdd`` (an ``add`` creates the missing containers on its way, an
  array where the next part is an index or ``-``), ``AllowMissingPathOnRemove`` and negative
  indices (not modelled: refused as a bad index);
- the admission request (``request.object``, ``oldObject``, ``namespace``, ``operation``,
  ``userInfo``) with the object as the API server serializes it: resource quantities in their
  canonical form (k8s.io/apimachinery pkg/api/resource/quantity.go ``CanonicalizeBytes``: a
  limit written ``24000`` reaches Kyverno as ``"24k"``);
- the refusal, in Kyverno's words wrapped in the API server's (pkg/webhooks/utils/block.go
  ``GetBlockedMessages``, pkg/controllers/webhook/controller.go ``validate.kyverno.svc-fail``).

Not modelled, and refused with ``Unsupported`` naming the construct whenever a stored policy
uses it (never skipped): other anchors (conditional, global, existence, negation), ``anyPattern``,
``context`` entries, ``exclude``, user/role matching, namespace selectors, nested ``foreach``,
mutate ``foreach`` and ``targets``, CEL, Pod Security and image verification
rules, variables other than ``request`` and ``element``, Kyverno's JMESPath functions other than
``sum``, ``$(...)`` references. Autogen rules (for Deployments and other pod controllers) are not
generated: the simulator serves no pod controllers, so they would match nothing here.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import ROUND_UP, Decimal
from typing import Any

import jmespath
import yaml
from jmespath import exceptions as jmespath_errors
from jmespath import functions as jmespath_functions
from jmespath import visitor as jmespath_visitor

from simulator.store import (
    CLUSTER_POLICIES,
    POLICIES,
    JsonObject,
    PatchError,
    Resource,
    Store,
    as_dict,
    as_list,
    json_patch,
)

VALIDATING_WEBHOOK = "validate.kyverno.svc-fail"
MUTATING_WEBHOOK = "mutate.kyverno.svc-fail"
# Who kube-controller-manager's controllers are, with per-controller credentials (its
# --use-service-account-credentials, which every managed control plane sets).
CONTROLLER_ACCOUNTS = {
    "ReplicaSet": "replicaset-controller",
    "StatefulSet": "statefulset-controller",
    "Job": "job-controller",
    "DaemonSet": "daemon-set-controller",
}


class Unsupported(Exception):
    """A policy uses something of Kyverno this model does not implement."""


class _QueryError(Exception):
    """A variable or JMESPath expression failed (Kyverno: the rule ends in error)."""


class _NotFound(_QueryError):
    """kyverno/go-jmespath ``NotFoundError``: a key missing from an object."""

    def __init__(self, key: str) -> None:
        super().__init__(f'Unknown key "{key}" in path')


# --- Go's formatting and parsing of values ------------------------------------------------------


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _shortest(value: float) -> tuple[str, int]:
    """The shortest digits that round-trip ``value`` and the decimal point's position."""
    _, digits, exponent = Decimal(repr(abs(value))).normalize().as_tuple()
    text = "".join(str(d) for d in digits)
    return text, len(text) + int(exponent)


def _go_exponent(exponent: int, upper: bool = False) -> str:
    sign = "-" if exponent < 0 else "+"
    return f"{'E' if upper else 'e'}{sign}{abs(exponent):02d}"


def go_float(value: float, *, verb: str = "v") -> str:
    """A float64 as Go prints it: ``%v`` (``strconv`` 'g', shortest, exponent from 1e+06 up
    or below 1e-04), ``E`` (``FormatFloat(v, 'E', -1, 64)``) or ``json`` (encoding/json:
    'f' unless below 1e-6 or from 1e21 up, then 'e' with at least one exponent digit)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    negative = "-" if value < 0 or (value == 0 and math.copysign(1, value) < 0) else ""
    if value == 0:
        return negative + {"v": "0", "E": "0E+00", "json": "0"}[verb]
    digits, point = _shortest(value)
    exponent = point - 1
    scientific = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    if verb == "E":
        return negative + scientific + _go_exponent(exponent, upper=True)
    if verb == "json":
        if abs(value) < 1e-6 or abs(value) >= 1e21:
            sign = "-" if exponent < 0 else "+"
            return f"{negative}{scientific}e{sign}{abs(exponent)}"
    elif exponent < -4 or exponent >= 6:
        return negative + scientific + _go_exponent(exponent)
    if point <= 0:
        return f"{negative}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return negative + digits + "0" * (point - len(digits))
    return f"{negative}{digits[:point]}.{digits[point:]}"


def go_sprint(value: object) -> str:
    """``fmt.Sprint`` of a JSON value as Kyverno holds it (every number a float64)."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if _is_number(value):
        return go_float(float(value))  # type: ignore[arg-type]
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "[" + " ".join(go_sprint(v) for v in value) + "]"
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{go_sprint(value[k])}" for k in sorted(value)) + "]"
    return str(value)


def go_json(value: object) -> str:
    """``json.Marshal`` as Go writes it: sorted keys, no spaces, HTML characters escaped."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if _is_number(value):
        return go_float(float(value), verb="json")  # type: ignore[arg-type]
    if isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)
        for char, escaped in (
            ("<", "\\u003c"),
            (">", "\\u003e"),
            ("&", "\\u0026"),
            ("\u2028", "\\u2028"),
            ("\u2029", "\\u2029"),
        ):
            text = text.replace(char, escaped)
        return text
    if isinstance(value, list):
        return "[" + ",".join(go_json(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{go_json(str(k))}:{go_json(value[k])}" for k in sorted(value)) + "}"
    raise _QueryError(f"failed to marshal {type(value).__name__}")


@functools.lru_cache(maxsize=1024)
def _wildcard(pattern: str) -> re.Pattern[str]:
    return re.compile(
        "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern),
        re.DOTALL,
    )


def wildcard_match(pattern: str, name: str) -> bool:
    """IGLOU-EU/go-wildcard v1.0.3 ``Match``: ``*`` any run, ``?`` exactly one character;
    an empty pattern matches only the empty name."""
    if pattern == "":
        return name == ""
    return _wildcard(pattern).fullmatch(name) is not None


_DURATION = re.compile(r"([0-9]*(?:\.[0-9]*)?)(ns|us|µs|μs|ms|s|m|h)")
_DURATION_UNITS = {
    "ns": Decimal("1e-9"),
    "us": Decimal("1e-6"),
    "µs": Decimal("1e-6"),
    "μs": Decimal("1e-6"),
    "ms": Decimal("1e-3"),
    "s": Decimal(1),
    "m": Decimal(60),
    "h": Decimal(3600),
}


def go_duration(text: str) -> Decimal | None:
    """Seconds of Go's ``time.ParseDuration(text)``, or None where it fails."""
    rest = text
    negative = rest.startswith("-")
    if rest[:1] in "+-" and rest:
        rest = rest[1:]
    if rest == "0":
        return Decimal(0)
    if not rest:
        return None
    total = Decimal(0)
    while rest:
        found = _DURATION.match(rest)
        if found is None or found.group(1) in ("", "."):
            return None
        total += Decimal(found.group(1)) * _DURATION_UNITS[found.group(2)]
        rest = rest[found.end() :]
    return -total if negative else total


_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12}
_DECIMAL_SUFFIXES.update({"P": 15, "E": 18})
_BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_QUANTITY = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?([eEinumkKMGTP]*)([+-]?[0-9]*)")
_NANO = Decimal("1e-9")


@dataclass(frozen=True)
class Quantity:
    """A parsed ``resource.Quantity``: its value and format (``DecimalSI``, ``BinarySI``,
    ``DecimalExponent``)."""

    value: Decimal
    format: str

    def canonical(self) -> str:
        """quantity.go ``CanonicalizeBytes``: the largest suffix that keeps an integer
        mantissa; binary only for whole numbers from 1024 up."""
        if self.value == 0:
            return "0"
        form = self.format
        if form == "BinarySI" and (
            abs(self.value) < 1024 or self.value != self.value.to_integral_value()
        ):
            form = "DecimalSI"
        if form == "BinarySI":
            amount, power = int(self.value), 0
            while amount % 1024 == 0 and power < 60:
                amount //= 1024
                power += 10
            suffix = {v: k for k, v in _BINARY_SUFFIXES.items()}.get(power, "")
            return f"{amount}{suffix}"
        sign, digits, exponent = self.value.normalize().as_tuple()
        mantissa = int("".join(str(d) for d in digits)) * (-1 if sign else 1)
        exponent = int(exponent)
        shift = exponent % 3
        mantissa, exponent = mantissa * 10**shift, exponent - shift
        if form == "DecimalSI":
            named = next((k for k, v in _DECIMAL_SUFFIXES.items() if v == exponent), None)
            if named is not None:
                return f"{mantissa}{named}"
        return f"{mantissa}e{exponent}" if exponent else str(mantissa)


def parse_quantity(text: str) -> Quantity | None:
    """``resource.ParseQuantity`` (quantity.go ``parseQuantityString``): sign, digits, an
    optional fraction, a suffix or an exponent; rounded up to nano units; None where Go
    returns an error."""
    if not isinstance(text, str) or text == "":
        return None
    found = _QUANTITY.fullmatch(text)
    if found is None:
        return None
    sign, whole, fraction, letters, exponent = found.groups()
    suffix = letters + exponent
    number = Decimal(f"{whole or '0'}.{fraction or '0'}")
    if suffix in _DECIMAL_SUFFIXES:
        value, form = number.scaleb(_DECIMAL_SUFFIXES[suffix]), "DecimalSI"
    elif suffix in _BINARY_SUFFIXES:
        value, form = number * (2 ** _BINARY_SUFFIXES[suffix]), "BinarySI"
    elif re.fullmatch(r"[eE][+-]?[0-9]+", suffix):
        value, form = number.scaleb(int(suffix[1:])), "DecimalExponent"
    else:
        return None
    if value != value.quantize(_NANO, rounding=ROUND_UP):
        value = value.quantize(_NANO, rounding=ROUND_UP)
    return Quantity(-value if sign == "-" else value, form)


def canonical_resources(obj: JsonObject) -> JsonObject:
    """``obj`` with its containers' and pod's resource quantities as the API server serializes
    them (a Quantity field always marshals in canonical form)."""
    out = copy.deepcopy(obj)
    spec = as_dict(out.get("spec"))

    def canonical(values: object) -> None:
        for name, raw in as_dict(values).items():
            parsed = parse_quantity(go_sprint(raw) if _is_number(raw) else raw)
            if parsed is not None:
                values[name] = parsed.canonical()  # type: ignore[index]

    for kind in ("initContainers", "containers", "ephemeralContainers"):
        for container in as_list(spec.get(kind)):
            resources = as_dict(as_dict(container).get("resources"))
            canonical(resources.get("limits"))
            canonical(resources.get("requests"))
    canonical(spec.get("overhead"))
    canonical(as_dict(spec.get("resources")).get("limits"))
    canonical(as_dict(spec.get("resources")).get("requests"))
    return out


# --- Kyverno's JMESPath --------------------------------------------------------------------------


class _Functions(jmespath_functions.Functions):
    """The standard functions, with Go's ``to_number`` and Kyverno's ``sum``."""

    @jmespath_functions.signature({"types": ["array"]})
    def _func_sum(self, items: list[Any]) -> Any:
        # pkg/engine/jmespath/functions.go jpSum: the first item, then _jpAdd of each next.
        if not items:
            raise _QueryError(
                "JMESPath function 'sum': at least one element in the array is required"
            )
        if any(isinstance(item, str) for item in items):
            raise Unsupported("Kyverno's sum of quantities or durations (JMESPath 'sum')")
        if not all(_is_number(item) for item in items):
            raise _QueryError("JMESPath function 'sum': invalid operand")
        total = items[0]
        for item in items[1:]:
            total = float(total) + float(item)
        return total

    @jmespath_functions.signature({"types": []})
    def _func_to_number(self, arg: Any) -> Any:
        # go-jmespath functions.go jpfToNumber: strconv.ParseFloat of a string.
        if _is_number(arg):
            return arg
        if isinstance(arg, str) and re.fullmatch(
            r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?", arg
        ):
            return float(arg)
        return None


_KYVERNO_FUNCTIONS = _Functions()


class _Root(dict[str, Any]):
    """The JSON context: reading a variable this model does not provide is ``Unsupported``."""


class _Interpreter(jmespath_visitor.TreeInterpreter):
    """kyverno/go-jmespath's ``treeInterpreter.Execute``: a field missing from an object
    raises ``_NotFound``; the nodes below swallow it where the fork does."""

    def __init__(self) -> None:
        super().__init__(jmespath_visitor.Options(custom_functions=_KYVERNO_FUNCTIONS))

    def _soft(self, node: Any, value: Any) -> Any:
        try:
            return self.visit(node, value)
        except _NotFound:
            return None

    def _or_none(self, node: Any, value: Any) -> Any:
        try:
            return self.visit(node, value)
        except _QueryError:
            return None

    def visit_field(self, node: Any, value: Any) -> Any:
        key = node["value"]
        if isinstance(value, dict):
            if key in value:
                return value[key]
            if isinstance(value, _Root):
                raise Unsupported(f"the variable {key!r} (the model provides request, element)")
            raise _NotFound(key)
        return None

    def visit_comparator(self, node: Any, value: Any) -> Any:
        left = self._soft(node["children"][0], value)
        right = self._soft(node["children"][1], value)
        op = node["value"]
        if op in self._EQUALITY_OPS:
            return self.COMPARATOR_FUNC[op](left, right)
        if not (_is_number(left) and _is_number(right)):
            return None
        return self.COMPARATOR_FUNC[op](left, right)

    def visit_function_expression(self, node: Any, value: Any) -> Any:
        args = [self._soft(child, value) for child in node["children"]]
        try:
            return self._functions.call_function(node["value"], args)
        except jmespath_errors.UnknownFunctionError as exc:
            raise Unsupported(f"the JMESPath function {node['value']}()") from exc
        except jmespath_errors.JMESPathError as exc:
            raise _QueryError(str(exc)) from exc

    def visit_filter_projection(self, node: Any, value: Any) -> Any:
        base = self._or_none(node["children"][0], value)
        if not isinstance(base, list):
            return None
        collected = []
        for element in base:
            if self._is_true(self._soft(node["children"][2], element)):
                current = self._soft(node["children"][1], element)
                if current is not None:
                    collected.append(current)
        return collected

    def visit_flatten(self, node: Any, value: Any) -> Any:
        base = self._or_none(node["children"][0], value)
        if not isinstance(base, list):
            return None
        merged: list[Any] = []
        for element in base:
            merged.extend(element) if isinstance(element, list) else merged.append(element)
        return merged

    def visit_multi_select_dict(self, node: Any, value: Any) -> Any:
        if value is None:
            return None
        return {child["value"]: self._soft(child, value) for child in node["children"]}

    def visit_multi_select_list(self, node: Any, value: Any) -> Any:
        if value is None:
            return None
        return [self._soft(child, value) for child in node["children"]]

    def visit_or_expression(self, node: Any, value: Any) -> Any:
        matched = self._soft(node["children"][0], value)
        if self._is_false(matched):
            matched = self._soft(node["children"][1], value)
        return matched

    def visit_and_expression(self, node: Any, value: Any) -> Any:
        matched = self._soft(node["children"][0], value)
        if self._is_false(matched):
            return matched
        return self.visit(node["children"][1], value)

    def visit_not_expression(self, node: Any, value: Any) -> Any:
        return self._is_false(self._soft(node["children"][0], value))

    def visit_pipe(self, node: Any, value: Any) -> Any:
        result = value
        for child in node["children"]:
            result = self._soft(child, result)
        return result

    def visit_projection(self, node: Any, value: Any) -> Any:
        base = self._soft(node["children"][0], value)
        if not isinstance(base, list):
            return None
        collected = []
        for element in base:
            current = self._soft(node["children"][1], element)
            if current is not None:
                collected.append(current)
        return collected

    def visit_value_projection(self, node: Any, value: Any) -> Any:
        base = self._or_none(node["children"][0], value)
        if not isinstance(base, dict):
            return None
        collected = []
        for element in base.values():
            current = self._soft(node["children"][1], element)
            if current is not None:
                collected.append(current)
        return collected


@functools.lru_cache(maxsize=512)
def _compiled(expression: str) -> Any:
    try:
        return jmespath.compile(expression).parsed
    except jmespath_errors.JMESPathError as exc:
        raise _QueryError(f"incorrect query {expression}: {exc}") from exc


def query(expression: str, context: Mapping[str, Any]) -> Any:
    """pkg/engine/context/evaluate.go ``Query``: ``expression`` against the JSON context."""
    expression = expression.strip()
    if not expression:
        raise _QueryError("invalid query (nil)")
    root = context if isinstance(context, _Root) else _Root(context)
    return _Interpreter().visit(_compiled(expression), root)


# --- variables -----------------------------------------------------------------------------------

# pkg/engine/variables/regex/vars.go
_VARIABLES = re.compile(r"(^|[^\\])(\{\{(?:\{[^{}]*\}|[^{}])*\}\})")
_VARIABLE_AT_START = re.compile(r"^\{\{(\{[^{}]*\}|[^{}])*\}\}")
_REFERENCES = re.compile(r"^\$\(.[^\ ]*\)|[^\\]\$\(.[^\ ]*\)")


def _substitute_string(value: str, context: Mapping[str, Any]) -> Any:
    """vars.go ``substituteVariablesIfAny`` on one string."""
    if _REFERENCES.search(value):
        raise Unsupported(f"the $(...) reference in {value!r}")
    variables = [m.group(0) for m in _VARIABLES.finditer(value)]
    while variables:
        original = value
        shallow = False
        for found in variables:
            initial = _VARIABLE_AT_START.match(found) is not None
            old = found
            if not initial:
                found = found[1:]
            variable = found.replace("{{", "").replace("}}", "").strip()
            shallow = variable.startswith("-")
            if shallow:
                variable = variable[1:].strip()
            if variable == "@":
                raise Unsupported("the {{@}} variable")
            result = query(variable, context)
            if original == found:
                return result
            prefix = "" if initial else old[0]
            if shallow and result is not None:
                result = str(result).replace("{{", "\\{{")
            text = result if isinstance(result, str) else go_json(result)
            value = value.replace(prefix + found, prefix + text, 1)
        variables = [] if shallow else [m.group(0) for m in _VARIABLES.finditer(value)]
    return value.replace("\\{{", "{{")


def substitute(document: Any, context: Mapping[str, Any]) -> Any:
    """vars.go ``SubstituteAll``: every string leaf and key of ``document``."""
    if isinstance(document, str):
        return _substitute_string(document, context)
    if isinstance(document, list):
        return [substitute(item, context) for item in document]
    if isinstance(document, dict):
        out = {}
        for key, item in document.items():
            new_key = _substitute_string(key, context)
            if not isinstance(new_key, str):
                raise _QueryError(f'expected string after substituting variables in key "{key}"')
            out[new_key] = substitute(item, context)
        return out
    return document


# --- operators and conditions ----------------------------------------------------------------


def _in_range(key: str, value: str) -> bool:
    return validate_value(key, value)


def _key_in(key: str, value: Any) -> tuple[bool, bool]:
    """anyin.go ``anyKeyExistsInArray`` (allin.go's is the same): (invalid type, exists)."""
    if isinstance(value, list):
        return False, any(
            wildcard_match(go_sprint(v), key) or wildcard_match(key, go_sprint(v)) for v in value
        )
    if isinstance(value, str):
        if wildcard_match(value, key):
            return False, True
        if _string_operator(value) == "-":
            return False, _in_range(key, value)
        items = _json_strings(value)
        if items is None:
            return True, False
        return False, key in items
    return True, False


def _json_strings(value: str) -> list[str] | None:
    """A JSON array of strings in ``value``, ``[value]`` when it is no JSON, None when it is
    JSON of another shape (Go's json.Unmarshal into []string fails)."""
    try:
        parsed = json.loads(value)
    except ValueError:
        return [value]
    if parsed is None:
        return []
    if isinstance(parsed, list) and all(isinstance(v, str) for v in parsed):
        return parsed
    return None


def _set_in(keys: list[str], value: Any, *, mode: str) -> tuple[bool, bool]:
    """anyin.go ``anySetExistsInArray`` and allin.go ``allSetExistsInArray``."""
    if isinstance(value, list):
        values = [go_sprint(v) for v in value]
    elif _is_number(value) or isinstance(value, bool):
        if mode.startswith("all"):
            return True, False
        values = [go_sprint(value)]
    elif isinstance(value, str):
        if len(keys) == 1 and keys[0] == value:
            return False, mode in ("any_in", "all_in")
        if _string_operator(value) == "-":
            if mode == "any_in":
                return False, any(_in_range(k, value) for k in keys)
            if mode == "any_not_in":
                negated = value.replace("-", "!-", 1)
                return False, any(_in_range(k, negated) for k in keys)
            if mode == "all_in":
                return False, all(_in_range(k, value) for k in keys)
            return False, not any(_in_range(k, value) for k in keys)
        parsed = _json_strings(value)
        if parsed is None:
            return True, False
        values = parsed
    else:
        return True, False

    def hit(k: str) -> bool:
        return any(wildcard_match(k, v) or wildcard_match(v, k) for v in values)

    if mode == "any_in":
        return False, any(hit(k) for k in keys)
    if mode == "any_not_in":
        return False, any(not hit(k) for k in keys)
    if mode == "all_in":
        return False, all(hit(k) for k in keys)
    return False, not any(hit(k) for k in keys)


def _membership(key: Any, value: Any, mode: str) -> bool:
    """The AnyIn, AnyNotIn, AllIn and AllNotIn handlers' ``Evaluate``."""
    if isinstance(key, list):
        invalid, result = _set_in([go_sprint(k) for k in key], value, mode=mode)
        return False if invalid else result
    if isinstance(key, str) or _is_number(key) or isinstance(key, bool):
        invalid, exists = _key_in(key if isinstance(key, str) else go_sprint(key), value)
        if invalid:
            return False
        return exists if mode in ("any_in", "all_in") else not exists
    return False


def _durations(key: Any, value: Any) -> tuple[Decimal, Decimal] | None:
    """operator.go ``parseDuration``: both as seconds when at least one is a duration string
    (``"0"`` excepted) and the other a duration or a number of seconds."""

    def parsed(v: Any) -> Decimal | None:
        if isinstance(v, str) and v != "0":
            return go_duration(v)
        return None

    left, right = parsed(key), parsed(value)
    if left is None and right is None:
        return None
    if left is None:
        if not _is_number(key):
            return None
        left = Decimal(repr(float(key)))
    if right is None:
        if not _is_number(value):
            return None
        right = Decimal(repr(float(value)))
    return left, right


def _go_parse_float(text: str) -> float | None:
    if re.fullmatch(
        r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|[+-]?(inf|infinity|nan)", text, re.I
    ):
        return float(text)
    return None


def _equals(key: Any, value: Any) -> bool:
    """equal.go ``EqualHandler.Evaluate``."""
    if isinstance(key, bool):
        return isinstance(value, bool) and key == value
    if _is_number(key):
        if _is_number(value):
            return float(key) == float(value)
        if isinstance(value, str):
            number = _go_parse_float(value)
            return number is not None and number == float(key)
        return False
    if isinstance(key, str):
        durations = _durations(key, value)
        if durations is not None:
            return durations[0] == durations[1]
        left = parse_quantity(key)
        if left is not None and isinstance(value, str):
            right = parse_quantity(value)
            return right is not None and left.value == right.value
        if isinstance(value, str):
            return wildcard_match(value, key)
        return False
    if isinstance(key, dict | list):
        return type(key) is type(value) and _deep_equal(key, value)
    return False


def _not_equals(key: Any, value: Any) -> bool:
    """notequal.go ``NotEqualHandler.Evaluate``: not always ``not _equals`` (a type mismatch
    is "not equal", and an empty string value compares as a wildcard)."""
    if isinstance(key, bool):
        return not isinstance(value, bool) or key != value
    if _is_number(key):
        if _is_number(value):
            return float(key) != float(value)
        if isinstance(value, str):
            number = _go_parse_float(value)
            return number is None or number != float(key)
        return True
    if isinstance(key, str):
        durations = _durations(key, value)
        if durations is not None:
            return durations[0] != durations[1]
        left = parse_quantity(key)
        if left is not None and isinstance(value, str):
            if value == "":
                return not wildcard_match(value, key)
            right = parse_quantity(value)
            return right is None or left.value != right.value
        if isinstance(value, str):
            return not wildcard_match(value, key)
        return True
    if isinstance(key, dict | list):
        return not (type(key) is type(value) and _deep_equal(key, value))
    return False


def _deep_equal(a: Any, b: Any) -> bool:
    if _is_number(a) and _is_number(b):
        return float(a) == float(b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_deep_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_deep_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


_SEMVER = re.compile(r"v?\d+\.\d+\.\d+([-+].*)?")


def _compare(key: Any, value: Any, op: str) -> bool:
    """numeric.go ``NumericOperatorHandler.Evaluate``."""
    ops: dict[str, Callable[[Any, Any], bool]] = {
        "greaterthan": lambda a, b: a > b,
        "greaterthanorequals": lambda a, b: a >= b,
        "lessthan": lambda a, b: a < b,
        "lessthanorequals": lambda a, b: a <= b,
    }
    compare = ops[op]

    def against_number(number: float, other: Any) -> bool:
        if _is_number(other):
            return compare(number, float(other))
        if isinstance(other, str):
            durations = _durations(number, other)
            if durations is not None:
                return compare(*durations)
            parsed = _go_parse_float(other)
            if parsed is not None:
                return compare(number, parsed)
        return False

    if _is_number(key):
        return against_number(float(key), value)
    if isinstance(key, str):
        durations = _durations(key, value)
        if durations is not None:
            return compare(*durations)
        left = parse_quantity(key)
        right = parse_quantity(value) if isinstance(value, str) else None
        if left is not None and right is not None:
            return compare(left.value, right.value)
        number = _go_parse_float(key)
        if number is not None:
            return against_number(number, value)
        if _SEMVER.fullmatch(key):
            raise Unsupported(f"a semantic version comparison ({key!r} {op} {value!r})")
        return False
    return False


_OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "equal": _equals,
    "equals": _equals,
    "notequal": _not_equals,
    "notequals": _not_equals,
    "anyin": lambda k, v: _membership(k, v, "any_in"),
    "anynotin": lambda k, v: _membership(k, v, "any_not_in"),
    "allin": lambda k, v: _membership(k, v, "all_in"),
    "allnotin": lambda k, v: _membership(k, v, "all_not_in"),
    **{
        name: functools.partial(lambda n, k, v: _compare(k, v, n), name)
        for name in ("greaterthan", "greaterthanorequals", "lessthan", "lessthanorequals")
    },
}


def evaluate_condition(condition: Mapping[str, Any], context: Mapping[str, Any]) -> bool:
    """evaluate.go ``Evaluate``: substitute key and value, then the operator (matched without
    regard to case, operator.go ``CreateOperatorHandler``)."""
    unknown = set(condition) - {"key", "operator", "value", "message"}
    if unknown:
        raise Unsupported(f"condition fields {sorted(unknown)}")
    operator = str(condition.get("operator", "")).lower()
    if operator not in _OPERATORS:
        raise Unsupported(f"the condition operator {condition.get('operator')!r}")
    try:
        key = substitute(condition.get("key"), context)
    except _QueryError as exc:
        raise _QueryError(f"failed to substitute variables in condition key: {exc}") from exc
    try:
        value = substitute(condition.get("value"), context)
    except _QueryError as exc:
        raise _QueryError(f"failed to substitute variables in condition value: {exc}") from exc
    return _OPERATORS[operator](key, value)


def evaluate_conditions(conditions: Any, context: Mapping[str, Any]) -> tuple[bool, str]:
    """evaluate.go ``evaluateAnyAllConditionsWithContext`` (and the list form before any/all):
    (result, the joined messages of the deciding conditions)."""
    if conditions is None:
        return True, ""
    if isinstance(conditions, list):
        messages = []
        for condition in conditions:
            if not evaluate_condition(as_dict(condition), context):
                return False, str(as_dict(condition).get("message") or "")
            messages.append(str(as_dict(condition).get("message") or ""))
        return True, ";".join(m for m in messages if m)
    if not isinstance(conditions, dict) or set(conditions) - {"any", "all"}:
        raise Unsupported(f"conditions {conditions!r}")
    true_messages: list[str] = []
    false_messages: list[str] = []
    any_result = True
    if conditions.get("any") is not None:
        any_result = False
        for condition in as_list(conditions.get("any")):
            message = str(as_dict(condition).get("message") or "")
            if evaluate_condition(as_dict(condition), context):
                any_result = True
                true_messages.append(message)
                break
            false_messages.append(message)
    all_result = True
    for condition in as_list(conditions.get("all")):
        message = str(as_dict(condition).get("message") or "")
        if not evaluate_condition(as_dict(condition), context):
            all_result = False
            false_messages.append(message)
            break
        true_messages.append(message)
    result = any_result and all_result
    chosen = true_messages if result else false_messages
    return result, "; ".join(m for m in chosen if m)


# --- validate.pattern ------------------------------------------------------------------------

_IN_RANGE = re.compile(r"^([-|\+]?\d+(?:\.\d+)?[A-Za-z]*)-([-|\+]?\d+(?:\.\d+)?[A-Za-z]*)$")
_NOT_IN_RANGE = re.compile(r"^([-|\+]?\d+(?:\.\d+)?[A-Za-z]*)!-([-|\+]?\d+(?:\.\d+)?[A-Za-z]*)$")


def _string_operator(pattern: str) -> str:
    """pkg/engine/operator/operator.go ``GetOperatorFromStringPattern``."""
    if len(pattern) < 2:
        return ""
    for op in (">=", "<=", ">", "<", "!"):
        if pattern.startswith(op):
            return op
    if _NOT_IN_RANGE.match(pattern):
        return "!-"
    if _IN_RANGE.match(pattern):
        return "-"
    return ""


def _number_text(value: Any) -> str | None:
    """pattern.go ``convertNumberToString``."""
    if value is None:
        return "0"
    if isinstance(value, str):
        return value
    if _is_number(value):
        return f"{float(value):f}"
    return None


def _ordered(result: int, op: str) -> bool:
    return {
        "": result == 0,
        "!": result != 0,
        ">": result > 0,
        "<": result < 0,
        ">=": result >= 0,
        "<=": result <= 0,
    }[op]


def _validate_string(value: Any, pattern: str, op: str) -> bool:
    """pattern.go ``validateString``: as durations, else quantities, else strings."""
    text = _number_text(value)
    wanted = go_duration(pattern)
    if wanted is not None and text is not None:
        actual = go_duration(text)
        if actual is not None:
            return _ordered((actual > wanted) - (actual < wanted), op)
    wanted_quantity = parse_quantity(pattern)
    if wanted_quantity is not None and text is not None:
        actual_quantity = parse_quantity(text)
        if actual_quantity is not None:
            a, b = actual_quantity.value, wanted_quantity.value
            return _ordered((a > b) - (a < b), op)
    if op not in ("", "!"):
        return False
    if isinstance(value, bool):
        shown = "true" if value else "false"
    elif _is_number(value):
        shown = go_float(float(value), verb="E")
    elif isinstance(value, str):
        shown = value
    else:
        return False
    matched = wildcard_match(pattern, shown)
    return not matched if op == "!" else matched


def _validate_string_pattern(value: Any, pattern: str) -> bool:
    op = _string_operator(pattern)
    if op == "-":
        left, right = _IN_RANGE.match(pattern).groups()  # type: ignore[union-attr]
        return _validate_string_pattern(value, f">= {left}") and _validate_string_pattern(
            value, f"<= {right}"
        )
    if op == "!-":
        left, right = _NOT_IN_RANGE.match(pattern).groups()  # type: ignore[union-attr]
        return _validate_string_pattern(value, f"< {left}") or _validate_string_pattern(
            value, f"> {right}"
        )
    return _validate_string(value, pattern[len(op) :].strip(), op)


def validate_value(value: Any, pattern: Any) -> bool:
    """pattern.go ``Validate``: one resource value against one pattern value (numbers are
    float64 on both sides, as JSON gives them to Kyverno)."""
    if isinstance(pattern, bool):
        return isinstance(value, bool) and value == pattern
    if _is_number(pattern):
        if _is_number(value):
            return float(value) == float(pattern)
        if isinstance(value, str):
            number = _go_parse_float(value)
            return number is not None and number == float(pattern)
        return False
    if pattern is None:
        if value is None:
            return True
        if isinstance(value, bool):
            return not value
        if _is_number(value):
            return float(value) == 0
        if isinstance(value, str):
            return value == ""
        return False
    if isinstance(pattern, dict):
        return isinstance(value, dict)
    if isinstance(pattern, str):
        if isinstance(value, str) and value == pattern:
            return True
        return any(
            all(_validate_string_pattern(value, part.strip(" ")) for part in alternative.split("&"))
            for alternative in (a.strip(" ") for a in pattern.split("|"))
        )
    return False


_ANCHOR = re.compile(r"^(?P<modifier>[+<=X^])?\((?P<key>.+)\)$")


def _anchor(key: str) -> tuple[str, str] | None:
    """anchor.go ``Parse``: (modifier, key) of ``=(key)``, ``(key)``, ``+(key)``, ...."""
    found = _ANCHOR.match(key.strip())
    return (found.group("modifier") or "", found.group("key")) if found else None


_ANCHOR_NAMES = {
    "": "conditional anchor",
    "<": "global anchor",
    "^": "existence anchor",
    "X": "negation anchor",
    "+": "add-if-not-present anchor",
    "=": "equality anchor",
}


class _Mismatch(Exception):
    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path


def _has_nested_anchors(pattern: Any) -> bool:
    if isinstance(pattern, dict):
        return any(_anchor(k) is not None for k in pattern) or any(
            _has_nested_anchors(v) for v in pattern.values()
        )
    if isinstance(pattern, list):
        return any(_has_nested_anchors(v) for v in pattern)
    return False


def _check_metadata(pattern: Mapping[str, Any]) -> None:
    """wildcards.go ``ExpandInMetadata`` rewrites label and annotation patterns whose keys
    have wildcards (and drops non-string values): not modelled."""
    metadata = next(
        (v for k, v in pattern.items() if (_anchor(k) or ("", k))[1] == "metadata"), None
    )
    if not isinstance(metadata, dict):
        return
    for tag in ("labels", "annotations"):
        values = next((v for k, v in metadata.items() if (_anchor(k) or ("", k))[1] == tag), None)
        for key, item in as_dict(values).items():
            if "*" in key or "?" in key or not isinstance(item, str | type(None)):
                raise Unsupported(f"wildcard keys or non-string values in metadata.{tag} patterns")


def _validate_element(resource: Any, pattern: Any, path: str) -> None:
    """validate.go ``validateResourceElement``: raises ``_Mismatch`` at the first failure."""
    if isinstance(pattern, dict):
        if not isinstance(resource, dict):
            raise _Mismatch(path, f"pattern and resource have different structures. Path: {path}")
        _validate_map(resource, pattern, path)
    elif isinstance(pattern, list):
        if not isinstance(resource, list):
            raise _Mismatch(
                path,
                f"validation rule failed at path {path}, resource does not satisfy the expected "
                "overlay pattern",
            )
        _validate_array(resource, pattern, path)
    elif isinstance(pattern, str | bool | int | float) or pattern is None:
        items = resource if isinstance(resource, list) else [resource]
        for item in items:
            if not validate_value(item, pattern):
                raise _Mismatch(
                    path,
                    f"resource value '{go_sprint(resource)}' does not match "
                    f"'{go_sprint(pattern)}' at path {path}",
                )
    else:
        raise _Mismatch(path, f"failed at '{path}', pattern contains unknown type")


def _validate_map(resource: Mapping[str, Any], pattern: Mapping[str, Any], path: str) -> None:
    """validate.go ``validateMap``: anchors first (sorted), then keys with nested anchors
    (each pushed to the front), then the rest in sorted order."""
    _check_metadata(pattern)
    anchors, plain = {}, {}
    for key, value in pattern.items():
        parsed = _anchor(key)
        if parsed is None:
            plain[key] = value
        elif parsed[0] == "=":
            anchors[key] = (parsed[1], value)
        else:
            raise Unsupported(f"the {_ANCHOR_NAMES[parsed[0]]} {key!r}")
    for key in sorted(anchors):
        name, value = anchors[key]
        if name in resource:  # anchor/handlers.go equalityHandler: only if present
            _validate_element(resource[name], value, f"{path}{name}/")
    ordered: list[str] = []
    for key in sorted(plain):
        if _has_nested_anchors(plain[key]):
            ordered.insert(0, key)
        else:
            ordered.append(key)
    for key in ordered:
        value = plain[key]
        if value == "*":  # anchor/handlers.go defaultHandler
            if resource.get(key) is None:
                raise _Mismatch(path, f"{path}/{key} not found")
            continue
        _validate_element(resource.get(key), value, f"{path}{key}/")


def _validate_array(resource: list[Any], pattern: list[Any], path: str) -> None:
    """validate.go ``validateArray``."""
    if not pattern:
        raise _Mismatch(path, "pattern Array empty")
    first = pattern[0]
    if isinstance(first, dict):
        for index, item in enumerate(resource):
            _validate_element(item, first, f"{path}{index}/")
    elif isinstance(first, str | bool | int | float) or first is None:
        _validate_element(resource, first, path)
    else:
        if len(resource) < len(pattern):
            raise _Mismatch(
                "",
                f"validate Array failed, array length mismatch, resource Array len is "
                f"{len(resource)} and pattern Array len is {len(pattern)}",
            )
        for index, item in enumerate(pattern):
            _validate_element(resource[index], item, f"{path}{index}/")


def match_pattern(resource: Any, pattern: Any) -> tuple[str, str] | None:
    """validate.go ``MatchPattern`` from the root: None, or (failing path, error)."""
    try:
        _validate_element(resource, pattern, "/")
    except _Mismatch as exc:
        return exc.path, str(exc)
    return None


# --- mutate.patchStrategicMerge ----------------------------------------------------------------


def _preprocess(patch: Any, resource: Any) -> Any:
    """strategicPreprocessing.go ``walkMap`` for the anchors modelled: a ``+(key)`` is dropped
    where the resource has ``key`` and becomes ``key`` where it has not."""
    if isinstance(patch, list):
        raise Unsupported("lists in patchStrategicMerge (merge keys)")
    if not isinstance(patch, dict):
        return patch
    out: dict[str, Any] = {}
    current = resource if isinstance(resource, dict) else None
    for key, value in patch.items():
        parsed = _anchor(key)
        if key.startswith("$"):
            raise Unsupported(f"the strategic merge directive {key!r}")
        if parsed is None:
            out[key] = _preprocess(value, current.get(key) if current is not None else None)
        elif parsed[0] == "+":
            if current is None or parsed[1] not in current:
                out[parsed[1]] = _preprocess(value, None)
        else:
            raise Unsupported(f"the {_ANCHOR_NAMES.get(parsed[0], 'anchor')} {key!r} in a patch")
    return out


def _merge(resource: Any, patch: Any) -> Any:
    """A strategic merge of maps (kustomize patchstrategicmerge): nested maps merge, null
    deletes, anything else replaces."""
    if not isinstance(patch, dict) or not isinstance(resource, dict):
        return copy.deepcopy(patch)
    out = dict(resource)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = _merge(None, value)
    return out


def strategic_merge(resource: JsonObject, patch: Any) -> JsonObject:
    return _merge(resource, _preprocess(patch, resource))  # type: ignore[no-any-return]


# --- rules -------------------------------------------------------------------------------------

PASS, FAIL, ERROR, SKIP = "pass", "fail", "error", "skip"


@dataclass
class RuleResult:
    """engineapi.RuleResponse: the rule, its status and message."""

    rule: str
    status: str
    message: str = ""
    enforce: bool = False


@dataclass
class Request:
    """The admission request as Kyverno's JSON context holds it."""

    obj: JsonObject
    resource: Resource
    operation: str = "CREATE"
    username: str = ""
    old: JsonObject | None = None
    # The requester's groups as the API server authenticated them (an impersonated user's);
    # empty: derived from ``username``, as a service account's or a plain user's.
    groups: tuple[str, ...] = ()

    def context(self) -> _Root:
        namespace = str(as_dict(self.obj.get("metadata")).get("namespace") or "")
        name = str(as_dict(self.obj.get("metadata")).get("name") or "")
        groups = ["system:authenticated"]
        if self.groups:
            groups = list(self.groups)
        elif self.username.startswith("system:serviceaccount:"):
            account_namespace = self.username.split(":")[2]
            groups = [
                "system:serviceaccounts",
                f"system:serviceaccounts:{account_namespace}",
                "system:authenticated",
            ]
        resource = self.resource
        return _Root(
            request={
                "uid": "",
                "kind": {
                    "group": resource.group,
                    "version": resource.version,
                    "kind": resource.kind,
                },
                "resource": {
                    "group": resource.group,
                    "version": resource.version,
                    "resource": resource.plural,
                },
                "name": name,
                "namespace": namespace if resource.namespaced else "",
                "operation": self.operation,
                "userInfo": {"username": self.username, "groups": groups},
                "object": self.obj,
                "oldObject": self.old,
                "dryRun": False,
                "options": None,
            }
        )


_RULE_KEYS = {"name", "match", "preconditions", "validate", "mutate", "skipBackgroundRequests"}
_SPEC_KEYS = {
    "rules",
    "background",
    "validationFailureAction",
    "failurePolicy",
    "admission",
    "webhookTimeoutSeconds",
}
_VALIDATE_KEYS = {
    "failureAction",
    "message",
    "pattern",
    "deny",
    "foreach",
    "allowExistingViolations",
}
_FOREACH_KEYS = {"list", "preconditions", "deny", "pattern"}
_FILTER_KEYS = {"kinds", "operations", "selector"}


def _unsupported_keys(where: str, found: Iterable[str], allowed: set[str]) -> None:
    extra = sorted(set(found) - allowed)
    if extra:
        raise Unsupported(f"{where}: {', '.join(extra)}")


def _check_anchors(where: str, document: Any, allowed: tuple[str, ...]) -> None:
    """Every anchor in a pattern or patch must be one modelled (``allowed`` modifiers)."""
    if isinstance(document, list):
        for item in document:
            _check_anchors(where, item, allowed)
    elif isinstance(document, dict):
        for key, value in document.items():
            parsed = _anchor(str(key))
            if parsed is not None and parsed[0] not in allowed:
                name = _ANCHOR_NAMES.get(parsed[0], "anchor")
                raise Unsupported(f"{where}: the {name} {key!r}")
            _check_anchors(where, value, allowed)


def _check_rule(policy: str, rule: Mapping[str, Any]) -> None:
    """Everything a rule uses must be modelled, or the policy is refused as a whole."""
    where = f"{policy} rule {rule.get('name')!r}"
    _unsupported_keys(where, rule, _RULE_KEYS)
    match = as_dict(rule.get("match"))
    _unsupported_keys(f"{where} match", match, {"any", "all", "resources"})
    filters = [*as_list(match.get("any")), *as_list(match.get("all"))]
    if "resources" in match:
        filters.append({"resources": match["resources"]})
    if not filters:
        raise Unsupported(f"{where}: a rule without match resources")
    for item in filters:
        _unsupported_keys(f"{where} match filter", as_dict(item), {"resources"})
        resources = as_dict(as_dict(item).get("resources"))
        _unsupported_keys(f"{where} match resources", resources, _FILTER_KEYS)
        _unsupported_keys(f"{where} selector", as_dict(resources.get("selector")), {"matchLabels"})
    if ("validate" in rule) == ("mutate" in rule):
        raise Unsupported(f"{where}: exactly one of validate and mutate")
    if "validate" in rule:
        validate = as_dict(rule.get("validate"))
        _unsupported_keys(f"{where} validate", validate, _VALIDATE_KEYS)
        if not {"pattern", "deny", "foreach"} & set(validate):
            raise Unsupported(f"{where}: a validate rule without pattern, deny or foreach")
        _unsupported_keys(f"{where} deny", as_dict(validate.get("deny")), {"conditions"})
        _check_anchors(f"{where} pattern", validate.get("pattern"), ("=",))
        for foreach in as_list(validate.get("foreach")):
            _unsupported_keys(f"{where} foreach", as_dict(foreach), _FOREACH_KEYS)
            _check_anchors(f"{where} foreach pattern", as_dict(foreach).get("pattern"), ("=",))
            _unsupported_keys(
                f"{where} foreach deny", as_dict(as_dict(foreach).get("deny")), {"conditions"}
            )
        if validate.get("failureAction", "Enforce") not in ("Enforce", "Audit"):
            raise Unsupported(f"{where}: failureAction {validate.get('failureAction')!r}")
    else:
        mutation = as_dict(rule.get("mutate"))
        _unsupported_keys(f"{where} mutate", mutation, {"patchStrategicMerge", "patchesJson6902"})
        if len(mutation) != 1:
            raise Unsupported(f"{where}: exactly one of patchStrategicMerge and patchesJson6902")
        _check_anchors(
            f"{where} patchStrategicMerge",
            as_dict(rule.get("mutate")).get("patchStrategicMerge"),
            ("+",),
        )


def _kind_selector(selector: str) -> tuple[str, str, str, str]:
    """pkg/utils/kube/kind.go ``ParseKindSelector``: (group, version, kind, subresource)."""
    parts = selector.split("/")
    parts = [*parts[:-1], *parts[-1].split(".")]
    version = re.compile(r"^(v\d((alpha|beta)\d)?|\*)$")
    if len(parts) == 1:
        return "*", "*", parts[0], ""
    if len(parts) == 2:
        if parts == ["*", "*"]:
            return "*", "*", "*", "*"
        if parts[0] == "*" and parts[1].lower() == parts[1]:
            return "*", "*", parts[0], parts[1]
        if version.match(parts[0]):
            return "*", parts[0], parts[1], ""
        return "*", "*", parts[0], parts[1]
    if len(parts) == 3:
        if version.match(parts[0]):
            return "*", parts[0], parts[1], parts[2]
        return parts[0], parts[1], parts[2], ""
    if len(parts) == 4:
        return parts[0], parts[1], parts[2], parts[3]
    return "", "", "", ""


def _selector_matches(selector: Mapping[str, Any], labels: Mapping[str, Any]) -> bool:
    """match/labels.go ``CheckSelector`` after wildcards.go ``ReplaceInSelector``."""
    for key, value in as_dict(selector.get("matchLabels")).items():
        key, value = str(key), str(value)
        if any(c in key + value for c in "*?"):
            found = next(
                (
                    (k, v)
                    for k, v in labels.items()
                    if wildcard_match(key, str(k)) and wildcard_match(value, str(v))
                ),
                None,
            )
            if found is None:
                key, value = (s.replace("*", "0").replace("?", "0") for s in (key, value))
            else:
                key, value = str(found[0]), str(found[1])
        if str(labels.get(key, "\0")) != value:
            return False
    return True


def _filter_matches(resources: Mapping[str, Any], request: Request) -> bool:
    """match.go ``doesResourceMatchConditionBlock`` for kinds, operations and selector."""
    operations = as_list(resources.get("operations"))
    if operations and request.operation not in operations:
        return False
    kinds = [str(k) for k in as_list(resources.get("kinds"))]
    r = request.resource
    if kinds and not any(
        wildcard_match(g, r.group)
        and wildcard_match(v, r.version)
        and wildcard_match(k, r.kind)
        and wildcard_match(sub, "")
        for g, v, k, sub in map(_kind_selector, kinds)
    ):
        return False
    if "selector" in resources:
        labels = as_dict(as_dict(request.obj.get("metadata")).get("labels"))
        return _selector_matches(as_dict(resources.get("selector")), labels)
    return True


def rule_matches(rule: Mapping[str, Any], request: Request) -> bool:
    """match.go ``MatchesResourceDescription``: ``any`` (one filter), ``all`` (every one) or
    the rule's single ``resources``."""
    match = as_dict(rule.get("match"))
    if match.get("any"):
        return any(
            _filter_matches(as_dict(as_dict(f).get("resources")), request)
            for f in as_list(match.get("any"))
        )
    if match.get("all"):
        return all(
            _filter_matches(as_dict(as_dict(f).get("resources")), request)
            for f in as_list(match.get("all"))
        )
    return _filter_matches(as_dict(match.get("resources")), request)


def _message(template: str, context: Mapping[str, Any]) -> str:
    value = substitute(template, context)
    if not isinstance(value, str):
        return "the produced message didn't resolve to a string, check your policy definition."
    return value


def _pattern_failure(
    rule: Mapping[str, Any], path: str, error: str, context: Mapping[str, Any]
) -> RuleResult:
    """validate_resource.go ``buildErrorMessage``: "validation error: <message>. rule <name>
    failed at path <path>" (an error, not a failure, without a path)."""
    name = str(rule.get("name"))
    message = str(as_dict(rule.get("validate")).get("message") or "")
    status = FAIL if path else ERROR
    if not message:
        text = (
            f"validation error: rule {name} failed at path {path}"
            if path
            else f"validation error: rule {name} execution error: {error}"
        )
        return RuleResult(name, status, text)
    try:
        message = _message(message, context)
    except _QueryError:
        return RuleResult(
            name,
            status,
            f"validation error: variables substitution error in rule {name} execution error: "
            f"{error}",
        )
    if not message.endswith("."):
        message += "."
    if path:
        return RuleResult(
            name, status, f"validation error: {message} rule {name} failed at path {path}"
        )
    return RuleResult(
        name, status, f"validation error: {message} rule {name} execution error: {error}"
    )


def _deny(
    rule: Mapping[str, Any], deny: Mapping[str, Any], context: Mapping[str, Any]
) -> RuleResult:
    """validate_resource.go ``validateDeny`` and ``getDenyMessage``: an empty deny denies."""
    name = str(rule.get("name"))
    try:
        denied, detail = evaluate_conditions(deny.get("conditions") or {}, context)
    except _QueryError as exc:
        return RuleResult(name, ERROR, f"failed to check deny conditions: {exc}")
    if not denied:
        return RuleResult(name, PASS, f"validation rule '{name}' passed.")
    message = str(as_dict(rule.get("validate")).get("message") or "")
    if not message and not detail:
        return RuleResult(name, FAIL, f"validation error: rule {name} failed")
    try:
        text = _message("; ".join(m for m in (message, detail) if m), context)
    except _QueryError:
        text = detail
    return RuleResult(name, FAIL, text)


def _validate_body(
    rule: Mapping[str, Any], body: Mapping[str, Any], context: _Root, target: Any
) -> RuleResult | None:
    """validate_resource.go ``validator.validate`` after the preconditions: deny, else
    pattern, else foreach."""
    name = str(rule.get("name"))
    if "deny" in body:
        return _deny(rule, as_dict(body.get("deny")), context)
    if "pattern" in body:
        try:
            pattern = substitute(body.get("pattern"), context)
        except _QueryError as exc:
            return RuleResult(name, ERROR, f"variable substitution failed: {exc}")
        failed = match_pattern(target, pattern)
        if failed is None:
            return RuleResult(name, PASS, f"validation rule '{name}' passed.")
        return _pattern_failure(rule, failed[0], failed[1], context)
    if "foreach" in body:
        return _foreach(rule, as_list(body.get("foreach")), context)
    return None


def _foreach(rule: Mapping[str, Any], loops: list[Any], context: _Root) -> RuleResult | None:
    """validate_resource.go ``validateForEach``/``validateElements``: each element of each
    list (skipping null ones) with its own preconditions; the first failure stops."""
    name = str(rule.get("name"))
    applied = 0
    list_error: str = ""
    for loop in loops:
        loop = as_dict(loop)
        try:
            found = query(str(loop.get("list", "")), context)
        except _NotFound:
            continue
        except _QueryError as exc:
            list_error = str(exc)
            continue
        elements = found if isinstance(found, list) else [found]
        for index, element in enumerate(elements):
            if element is None:
                continue
            scoped = _Root(context, element=element, elementIndex=index)
            scoped["element0"], scoped["elementIndex0"] = element, index
            try:
                passed, _ = evaluate_conditions(loop.get("preconditions"), scoped)
            except _QueryError:
                continue  # "failed to evaluate preconditions": the element is skipped
            if not passed:
                continue
            target = element if isinstance(element, dict) else as_dict(context["request"])["object"]
            result = _validate_body(rule, loop, scoped, target)
            if result is None or result.status == SKIP:
                continue
            if result.status != PASS:
                return RuleResult(name, result.status, f"validation failure: {result.message}")
            applied += 1
    if applied == 0:
        if list_error:
            return RuleResult(name, ERROR, f"failed to evaluate list: {list_error}")
        return None
    return RuleResult(name, PASS, "rule passed")


def _enforced(rule: Mapping[str, Any], spec: Mapping[str, Any]) -> bool:
    action = as_dict(rule.get("validate")).get("failureAction") or spec.get(
        "validationFailureAction", "Audit"
    )
    return str(action).lower() == "enforce"


def validate_rule(
    rule: Mapping[str, Any], spec: Mapping[str, Any], request: Request, *, nested: bool = False
) -> RuleResult | None:
    """engine.go ``invokeRuleHandler`` with the validate handler: match, preconditions, the
    body; on an enforced update the old object is validated too, and a violation it already
    had is allowed (``allowExistingViolations``, default true)."""
    if not rule_matches(rule, request):
        return None
    name = str(rule.get("name"))
    context = request.context()
    try:
        passed, detail = evaluate_conditions(rule.get("preconditions"), context)
    except _QueryError as exc:
        return RuleResult(name, ERROR, f"failed to evaluate preconditions: {exc}")
    if not passed:
        return RuleResult(name, SKIP, "; ".join(m for m in ("preconditions not met", detail) if m))
    validate = as_dict(rule.get("validate"))
    result = _validate_body(rule, validate, context, request.obj)
    if result is None:
        return None
    result.enforce = _enforced(rule, spec)
    if (
        result.enforce
        and not nested
        and request.operation == "UPDATE"
        and request.old is not None
        and validate.get("allowExistingViolations", True) is not False
        and result.status == FAIL
    ):
        before = Request(
            request.old, request.resource, "CREATE", request.username, groups=request.groups
        )
        prior = validate_rule(rule, spec, before, nested=True)
        if prior is not None and prior.status == FAIL:
            return RuleResult(
                name, SKIP, "skipping the rule evaluation as pre-existing violations are allowed"
            )
    return result


def mutate_rule(
    rule: Mapping[str, Any], request: Request, raw: JsonObject
) -> tuple[JsonObject, RuleResult | None]:
    """mutation.go ``Mutate``: variables in the whole rule, then the strategic merge patch on
    ``raw`` (the object as stored; ``request`` holds it as Kyverno sees it); an unchanged
    object is a skip ("no patches applied")."""
    if not rule_matches(rule, request):
        return raw, None
    name = str(rule.get("name"))
    context = request.context()
    try:
        passed, detail = evaluate_conditions(rule.get("preconditions"), context)
    except _QueryError as exc:
        return raw, RuleResult(name, ERROR, f"failed to evaluate preconditions: {exc}")
    if not passed:
        message = "; ".join(m for m in ("preconditions not met", detail) if m)
        return raw, RuleResult(name, SKIP, message)
    try:
        substituted = substitute(dict(rule), context)
    except _QueryError as exc:
        return raw, RuleResult(name, ERROR, f"variable substitution failed: {exc}")
    mutation = as_dict(substituted.get("mutate"))
    if "patchesJson6902" in mutation:
        try:
            patched = json6902(raw, mutation["patchesJson6902"])
        except (PatchError, yaml.YAMLError, ValueError) as exc:
            return raw, RuleResult(name, ERROR, f"failed to apply JSON Patch: {exc}")
    else:
        patched = strategic_merge(raw, mutation.get("patchStrategicMerge"))
    if patched == raw:
        return raw, RuleResult(name, SKIP, "no patches applied")
    return patched, RuleResult(name, PASS, "resource patched")


def json6902(resource: JsonObject, text: Any) -> JsonObject:
    """``patchesJson6902`` on ``resource`` (see the module docstring)."""
    operations = yaml.safe_load(text) if isinstance(text, str) else text
    if not isinstance(operations, list):
        raise ValueError("failed to decode patches: not a list of operations")
    doc = copy.deepcopy(resource)
    for operation in operations:
        if isinstance(operation, dict) and operation.get("op") == "add":
            _ensure_path(doc, str(operation.get("path", "")))
        if (
            isinstance(operation, dict)
            and operation.get("op") == "remove"
            and not _exists(doc, str(operation.get("path", "")))
        ):
            continue  # AllowMissingPathOnRemove
        doc = json_patch(doc, [operation])
    return as_dict(doc)


def _parts(path: str) -> list[str]:
    if not path.startswith("/"):
        return []
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _ensure_path(doc: Any, path: str) -> None:
    """evanphx/json-patch v5 ``ensurePathExists``: every missing container before the last
    part is created, an array when the part after it is an index or ``-``, else an object."""
    parts = _parts(path)
    node = doc
    for index, part in enumerate(parts[:-1]):
        after = parts[index + 1]
        if isinstance(node, dict):
            if node.get(part) is None:
                node[part] = [] if after == "-" or after.isdigit() else {}
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return


def _exists(doc: Any, path: str) -> bool:
    node = doc
    for part in _parts(path):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False
    return True


# --- admission -----------------------------------------------------------------------------------


@dataclass
class Policy:
    name: str
    namespace: str
    spec: JsonObject

    @property
    def rules(self) -> list[JsonObject]:
        return [as_dict(r) for r in as_list(self.spec.get("rules"))]

    @property
    def fails_closed(self) -> bool:
        return str(self.spec.get("failurePolicy") or "Fail") == "Fail"


def policies(store: Store, namespace: str) -> list[Policy]:
    """The ClusterPolicies, then the namespace's Policies, each checked to use nothing this
    model lacks; ``admission: false`` ones do not act on admission."""
    found = []
    sources = [(CLUSTER_POLICIES, None)] + ([(POLICIES, namespace)] if namespace else [])
    for resource, ns in sources:
        for obj in store.list(resource, ns):
            metadata = as_dict(obj.get("metadata"))
            spec = as_dict(obj.get("spec"))
            label = f"{resource.kind} {metadata.get('namespace', '')}/{metadata.get('name')}"
            _unsupported_keys(label, spec, _SPEC_KEYS)
            if spec.get("admission") is False:
                continue
            policy = Policy(str(metadata.get("name")), str(metadata.get("namespace") or ""), spec)
            for rule in policy.rules:
                _check_rule(label, rule)
            found.append(policy)
    return found


def _blocked_message(obj: Mapping[str, Any], kind: str, failures: Mapping[str, Any]) -> str:
    """block.go ``GetBlockedMessages``: the failing rules by policy name, as YAML (go-yaml v3,
    two-space indent, sorted keys, lines folded at 80 columns)."""
    metadata = as_dict(obj.get("metadata"))
    resource = f"{kind}/{metadata.get('namespace', '')}/{metadata.get('name', '')}"
    text = yaml.safe_dump(
        dict(failures),
        default_flow_style=False,
        sort_keys=True,
        width=80,
        indent=2,
        allow_unicode=True,
    )
    return f"\n\nresource {resource} was blocked due to the following policies \n\n{text}"


def denial(webhook: str, message: str) -> str:
    """The API server's message for a webhook's refusal (apiserver
    pkg/admission/plugin/webhook/errors/statuserror.go ``ToStatusErr``)."""
    return f'admission webhook "{webhook}" denied the request: {message}'


def mutate(
    store: Store,
    obj: JsonObject,
    resource: Resource,
    *,
    username: str,
    operation: str = "CREATE",
    old: JsonObject | None = None,
    groups: tuple[str, ...] = (),
) -> tuple[JsonObject, str]:
    """The mutating webhook: (the object with every matching mutate rule applied in order, "")
    or (``obj``, the API server's refusal when a rule errs under ``failurePolicy: Fail``)."""
    namespace = str(as_dict(obj.get("metadata")).get("namespace") or "")
    found = [p for p in policies(store, namespace) if any("mutate" in r for r in p.rules)]
    if not found:
        return obj, ""
    current = copy.deepcopy(obj)
    old_obj = _as_served(old, resource) if old is not None else None
    fails_closed = False
    for policy in found:
        fails_closed = fails_closed or policy.fails_closed
        errors = []
        for rule in policy.rules:
            if "mutate" not in rule:
                continue
            request = Request(
                _as_served(current, resource), resource, operation, username, old_obj, groups
            )
            current, result = mutate_rule(rule, request, current)
            if result is not None and result.status == ERROR:
                errors.append(f"{result.rule}: {result.message}")
        if errors and fails_closed:
            # pkg/webhooks/resource/mutation/mutation.go applyMutation / applyMutations
            message = (
                f"mutation policy {policy.name} error: failed to apply policy {policy.name} "
                f"rules [{' '.join(errors)}]"
            )
            return obj, denial(MUTATING_WEBHOOK, message)
    return current, ""


def _as_served(obj: JsonObject, resource: Resource) -> JsonObject:
    """The object as the API server sends it to a webhook: with its apiVersion and kind, and
    its quantities canonical."""
    return canonical_resources({**obj, "apiVersion": resource.api_version, "kind": resource.kind})


def validate(
    store: Store,
    obj: JsonObject,
    resource: Resource,
    *,
    username: str,
    operation: str = "CREATE",
    old: JsonObject | None = None,
    groups: tuple[str, ...] = (),
) -> str:
    """The validating webhook: "" when admitted, else the API server's refusal listing every
    failing or erring rule of the enforcing policies (pkg/webhooks/resource/validation/
    validation.go ``HandleValidationEnforce``, pkg/utils/engine/response.go ``BlockRequest``)."""
    namespace = str(as_dict(obj.get("metadata")).get("namespace") or "")
    found = [
        p
        for p in policies(store, namespace)
        if any("validate" in r and _enforced(r, p.spec) for r in p.rules)
    ]
    if not found:
        return ""
    request_obj = _as_served(obj, resource)
    old_obj = _as_served(old, resource) if old is not None else None
    request = Request(request_obj, resource, operation, username, old_obj, groups)
    failures: dict[str, dict[str, str]] = {}
    blocked = False
    fails_closed = False
    for policy in found:
        fails_closed = fails_closed or policy.fails_closed
        results = [
            result
            for rule in policy.rules
            if "validate" in rule
            for result in [validate_rule(rule, policy.spec, request)]
            if result is not None
        ]
        reasons = {r.rule: r.message for r in results if r.status in (FAIL, ERROR)}
        if reasons:
            failures[policy.name] = reasons
        if any(r.status == FAIL and r.enforce for r in results):
            blocked = True
        if any(r.status == ERROR for r in results) and fails_closed:
            blocked = True
    if not blocked:
        return ""
    return denial(VALIDATING_WEBHOOK, _blocked_message(obj, resource.kind, failures))


def pod_creator(pod: Mapping[str, Any]) -> str:
    """Who asks the API server to create ``pod``: its controller's service account
    (``system:serviceaccount:kube-system:replicaset-controller`` for a ReplicaSet's), or, for
    a pod without a controller the simulator knows, the namespace's ``default`` account (a
    workload of the namespace creating it)."""
    metadata = as_dict(pod.get("metadata"))
    for owner in as_list(metadata.get("ownerReferences")):
        owner = as_dict(owner)
        if owner.get("controller") is True and owner.get("kind") in CONTROLLER_ACCOUNTS:
            return f"system:serviceaccount:kube-system:{CONTROLLER_ACCOUNTS[owner['kind']]}"
    return f"system:serviceaccount:{metadata.get('namespace') or 'default'}:default"
