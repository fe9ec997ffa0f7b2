"""The Flux player: applies the portal's Git repository to the simulated cluster the way
kustomize-controller does, and plays helm-controller and KServe for what it applied.

It polls the heads its GitRepositories read, their specs and Secrets. ``flux_delay`` seconds
after one of them moved (or at once when a client sets ``reconcile.fluxcd.io/requestedAt`` on
a Kustomization or GitRepository, as the notification Receiver does) it reconciles:

- every GitRepository is fetched as source-controller does: its URL mapped to a local
  repository, its ``secretRef`` Secret read and the credentials checked; a missing Secret
  (``AuthenticationFailed``) or refused credentials (``GitOperationFailed``, "authentication
  required") make it Ready False, and its Kustomizations stay on the last artifact it stored
  (``ArtifactFailed`` when there is none);

- ``flux-system/flux-system`` builds ``clusters/<fleet>``; every Flux Kustomization in a
  successful build output exists from then on and is reconciled in the same pass, parents
  before children and after its ``dependsOn``, so the tenants' ``<slug>-workloads`` appear
  once the ``tenants`` Kustomization that defines them applied;
- every build is kustomize-controller's, in the simulator's own code (``kustomize``: Flux's
  generator and the real ``kubectl kustomize``); the Kustomizations a build outputs are
  built next, in parallel, before anything is applied (Flux finds them no other way: a
  Kustomization exists once its parent applied it);
- a successful build is applied (objects get the ``kustomize.toolkit.fluxcd.io/name`` labels)
  and what left the output is pruned; a failed build leaves the cluster as it was and marks
  the Kustomization ``Stalled``/``BuildFailed`` (a missing path: ``ArtifactFailed``);
- an update the API server refuses as immutable (a ResourceClaimTemplate's spec) fails the
  apply of its stage and of every later one (fluxcd/pkg ssa ``ApplyAllStaged``: Namespaces,
  CRDs and ClusterRoles, then ``*Class`` kinds, then the rest), and the Kustomization is Ready
  False ``ReconciliationFailed`` with the dry-run error, unless the object (new or live)
  carries ``kustomize.toolkit.fluxcd.io/force: enabled`` or the Kustomization sets
  ``spec.force``, when it is deleted and created again (``shouldForceApply``);
- a Kustomization with ``spec.kubeConfig`` applies to the vCluster the kubeconfig's server
  names, with the kubeconfig's credentials, acting as ``system:serviceaccount:<namespace>:
  <serviceAccountName>`` there (fluxcd/pkg ``runtime/client/impersonator.go``), through that
  cluster's RBAC (``virtual``); a missing Secret, a cluster not running or a refusal leaves it
  Ready False and is retried ``flux_delay`` later (its ``retryInterval``, scaled like the other
  delays); ``deletionPolicy`` decides whether deleting it deletes what it applied;
- kustomize- and helm-controller run with the flags of their Deployments as ``flux-system``
  applied them (``gotk-components.yaml`` with the flux2-multi-tenancy patches; without it,
  Flux's defaults, as ``flux bootstrap`` installed it; ``flux_install``):
  ``--no-cross-namespace-refs`` refuses a Kustomization's or HelmRelease's source in another
  namespace (``AccessDenied``), ``--default-service-account`` is the account a Kustomization
  that names none applies as (Kyverno sees that requester), and ``--no-remote-bases`` decides
  whether a build may fetch a remote base;
- HelmReleases become Ready ``ready_delay`` after each install or upgrade, and a vCluster
  release then exports its kubeconfig Secrets (``vcluster``), removed with the release, and
  answers on its API (``virtual``) until it is removed; its chart's ``<release>`` Service
  goes with it, and with that Service what its syncer made (their ownerReferences name it:
  the garbage collector); an
  InferenceService gets predictor pods at once (placed like any pod) and is Ready
  ``ready_delay`` later when they all run, not Ready while any is Pending.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import hashlib
import json
import logging
import math
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Literal

import yaml

from gitops.repo import GitRepository, GitRepositoryError
from simulator import flux_install, kserve
from simulator.admission import Rejected, admit_object, cluster_ip
from simulator.cluster import Cluster, derived_uuid
from simulator.config import SimConfig
from simulator.flux_install import ControllerFlags
from simulator.kustomize import Build, Workspace, build_dir
from simulator.store import (
    ENDPOINT_SLICES,
    ENDPOINTS,
    GIT_REPOSITORIES,
    HELM_RELEASES,
    HTTP_ROUTES,
    INFERENCE_SERVICES,
    JOBS,
    JOBSETS,
    KUSTOMIZATIONS,
    LIMIT_RANGES,
    NAMESPACES,
    PODS,
    RESOURCE_QUOTAS,
    RESOURCES,
    SECRETS,
    SERVICES,
    JsonObject,
    Store,
    as_dict,
    as_list,
    key_of,
    resource_of,
    timestamp,
)
from simulator.vcluster import (
    admin_certificate,
    control_plane_pod,
    control_plane_replicas,
    control_plane_service,
    exported_kubeconfigs,
    host_policies,
    is_vcluster,
)
from simulator.virtual import (
    ApiServerRefused,
    Forbidden,
    Unauthenticated,
    UserInfo,
    VirtualCluster,
    WriteRefused,
    api_server_flags,
)
from simulator.virtual import object_key as virtual_key

logger = logging.getLogger(__name__)

FLUX_GROUP = "kustomize.toolkit.fluxcd.io"
FLUX_FINALIZER = "finalizers.fluxcd.io"
REQUESTED_AT = "reconcile.fluxcd.io/requestedAt"
ISVC_LABEL = "serving.kserve.io/inferenceservice"
ROOT = ("flux-system", "flux-system")
KUSTOMIZE_CONTROLLER = "kustomize-controller"
HELM_CONTROLLER = "helm-controller"
# fluxcd/pkg apis/acl ``AccessDeniedReason``.
ACCESS_DENIED = "AccessDenied"
# The failures kustomize-controller marks Stalled: it does not retry them on its own.
STALLED_REASONS = frozenset({"BuildFailed", ACCESS_DENIED})
# A failed source is fetched again after this long (Flux: the source's interval, 30s+).
SOURCE_RETRY_SECONDS = 2.0
# Kinds without a namespace. kustomize's namespace transformer (``targetNamespace``) sets one
# on every kind it does not know as cluster-scoped, custom kinds included; the API server
# clears it on a cluster-scoped object (k8s.io/apiserver pkg/registry/rest/meta.go
# ``EnsureObjectNamespaceMatchesRequestNamespace``: "cluster-scoped, clear namespace").
CLUSTER_SCOPED = frozenset(
    {
        "Namespace",
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "PriorityClass",
        "StorageClass",
        "DeviceClass",
        "ClusterPolicy",
        "ClusterQueue",
        "ClusterStorageContainer",
        "Cohort",
        "ResourceFlavor",
        "Topology",
        "WorkloadPriorityClass",
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
)

KId = tuple[str, str]

# Kinds whose spec the API server refuses to change (kubernetes pkg/apis/resource/validation
# ``ValidateResourceClaimTemplateUpdate``: ``ValidateImmutableField`` on ``spec``).
IMMUTABLE_SPEC_KINDS = frozenset({("resource.k8s.io", "ResourceClaimTemplate")})
# kustomize-controller v1.9.4 ``apply``: ``ForceSelector`` is ``<group>/force: enabled``.
FORCE_SELECTOR = (f"{FLUX_GROUP}/force", "enabled")
# The Kustomization's fields fluxcd/pkg's generator writes into the kustomization file.
_GENERATOR_FIELDS = (
    "targetNamespace",
    "namePrefix",
    "nameSuffix",
    "patches",
    "components",
    "ignoreMissingComponents",
    "images",
    "buildMetadata",
)


def force_selected(obj: Mapping[str, Any]) -> bool:
    """Whether ``obj`` matches the force selector: fluxcd/pkg ssa v0.76.1 ``utils/meta.go``
    ``AnyInMetadata``, a label or an annotation with the key and a non-empty value equal to
    ``enabled`` ignoring case (``strings.EqualFold``)."""
    key, wanted = FORCE_SELECTOR
    metadata = as_dict(obj.get("metadata"))
    for part in ("labels", "annotations"):
        value = as_dict(metadata.get(part)).get(key)
        if isinstance(value, str) and value and value.casefold() == wanted.casefold():
            return True
    return False


def apply_stages(objects: Iterable[JsonObject]) -> list[list[JsonObject]]:
    """fluxcd/pkg ssa ``ApplyAllStaged``'s stages: CustomResourceDefinitions, Namespaces and
    ClusterRoles (``utils/is.go`` ``IsClusterDefinition``); kinds named ``*Class``
    (``IsClassDefinition``); the rest (this fleet sets no ``CustomStageKinds``)."""
    definitions: list[JsonObject] = []
    classes: list[JsonObject] = []
    rest: list[JsonObject] = []
    for obj in objects:
        kind, api_version = str(obj.get("kind", "")), str(obj.get("apiVersion", ""))
        if (
            (
                kind.lower() == "customresourcedefinition"
                and api_version.startswith("apiextensions.k8s.io/")
            )
            or (kind.lower() == "namespace" and api_version == "v1")
            or (
                kind.lower() == "clusterrole"
                and api_version.startswith("rbac.authorization.k8s.io/")
            )
        ):
            definitions.append(obj)
        elif kind.endswith("Class"):
            classes.append(obj)
        else:
            rest.append(obj)
    return [stage for stage in (definitions, classes, rest) if stage]


def inventory_id(obj: Mapping[str, Any]) -> tuple[str, str]:
    """(``<namespace>_<name>_<group>_<kind>``, version) as in a Kustomization's inventory."""
    namespace, name = key_of(obj)
    group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
    return f"{namespace}_{name}_{group}_{obj.get('kind', '')}", version


def _is_kustomization(obj: Mapping[str, Any]) -> bool:
    return obj.get("kind") == "Kustomization" and str(obj.get("apiVersion", "")).startswith(
        f"{FLUX_GROUP}/"
    )


def _condition(
    kind: str,
    status: str,
    reason: str,
    message: str,
    now: float,
    previous: list[Any],
    generation: int | None = None,
) -> JsonObject:
    """A status condition that keeps its transition time while status and reason stay."""
    old = next((as_dict(c) for c in previous if as_dict(c).get("type") == kind), {})
    same = old.get("status") == status and old.get("reason", "") == reason
    condition: JsonObject = {"type": kind, "status": status}
    if generation is not None:
        condition["observedGeneration"] = generation
    condition["lastTransitionTime"] = old.get("lastTransitionTime") if same else timestamp(now)
    condition["reason"] = reason
    condition["message"] = message
    return condition


def _decoded(value: object) -> str:
    """A Secret data value as text; empty when absent or not base64 (as a missing key)."""
    if not isinstance(value, str):
        return ""
    try:
        return base64.b64decode(value, validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return ""


def _generation(obj: Mapping[str, Any]) -> int:
    return int(as_dict(obj.get("metadata")).get("generation") or 1)


def _release_names(obj: Mapping[str, Any]) -> tuple[str, str]:
    """(target namespace, Helm release name) of a HelmRelease, with helm-controller's defaults."""
    namespace, name = key_of(obj)
    spec = as_dict(obj.get("spec"))
    target = str(spec.get("targetNamespace") or namespace)
    release = str(
        spec.get("releaseName") or (f"{target}-{name}" if spec.get("targetNamespace") else name)
    )
    return target, release


@dataclass
class _Release:
    due: float | None
    action: Literal["install", "upgrade"]
    version: int
    # The kubeconfig Secrets the installed chart exported (vCluster), to remove with it.
    kubeconfigs: tuple[KId, ...] = ()
    # vCluster: what the chart put into the host namespace (resource plural, namespace, name),
    # to remove with it, and why its control plane is not running.
    host_objects: tuple[tuple[str, str, str], ...] = ()
    problem: str = ""
    # helm-controller installs after Flux applied the whole revision, not while it applies.
    installed: bool = False


@dataclass
class _Endpoint:
    ready_at: float
    replicas: int
    pod: JsonObject  # the ReplicaSet's pod template
    replica_set: str
    # The API server's last refusal of a pod (ReplicaFailure FailedCreate), if any.
    error: str = ""


Verifier = Callable[[str, str, str], bool]
Resolver = Callable[[str], "Path | None"]


def accept_any_credentials(url: str, username: str, password: str) -> bool:
    """The default check: a user name and a password are there (any values)."""
    return bool(username and password)


@dataclass(frozen=True, eq=False)
class _Artifact:
    """What source-controller stored for a GitRepository: one revision's files."""

    revision: str
    sha: str
    files: Mapping[str, bytes]


@dataclass(frozen=True)
class _Fetch:
    """One fetch of a source in a pass: the new artifact, or why there is none."""

    artifact: _Artifact | None
    message: str = ""


def _heads_moved(before: tuple[Any, ...], after: tuple[Any, ...]) -> bool:
    """Whether a branch read by ``before`` has another head in ``after`` (sources a pass
    created itself are new in ``after`` and do not count)."""
    if before[0] != after[0]:
        return True
    heads = {part[0]: part[2] for part in before[1:]}
    return any(part[0] in heads and heads[part[0]] != part[2] for part in after[1:])


class FluxPlayer:
    """Reconciles the repository at ``repo_path`` (branch ``branch``) into ``store``.

    Each Kustomization reads the artifact of its own ``sourceRef``, as in Flux. A
    GitRepository is fetched like source-controller does it: from the local repository that
    ``resolve`` maps its URL to (default: ``repo_path``), with the ``username``/``password``
    of the Secret its ``secretRef`` names, which ``verifier(url, username, password)`` accepts
    or not (default: any non-empty pair; the portal passes its own token check). A source whose
    Secret is missing or whose credentials are refused is Ready False, and its Kustomizations
    keep applying the last artifact it stored, or none.
    """

    def __init__(
        self,
        config: SimConfig,
        store: Store,
        cluster: Cluster,
        repo_path: str | Path | None,
        branch: str,
        *,
        verifier: Verifier | None = None,
        resolve: Resolver | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.cluster = cluster
        self.repo_path = Path(repo_path) if repo_path else None
        self.branch = branch
        self.verifier = verifier or accept_any_credentials
        self.resolve: Resolver = resolve or (lambda _url: self.repo_path)
        self._repos: dict[Path, GitRepository] = {}
        self._trees: dict[Path, tuple[str, Mapping[str, bytes]]] = {}
        self._seen: Any = None
        self._due: float | None = None
        # When a failed source is fetched again (source-controller requeues a failed source,
        # "retrying in 30s"; the simulator's clock is faster).
        self._retry_at: float | None = None
        # Per GitRepository: the last artifact it stored; per pass: what each fetch gave.
        self._artifacts: dict[KId, _Artifact] = {}
        self._fetched: dict[KId, _Fetch] = {}
        # Per pass: the builds by (artifact, path, the spec fields the generator reads, whether
        # remote bases may be fetched), and where they run.
        self._builds: dict[tuple[str, str, str, bool], Build] = {}
        self._workspace: Workspace | None = None
        # Per Kustomization: the object as its parent applied it, and what it applied.
        self._specs: dict[KId, JsonObject] = {}
        self._inventory: dict[KId, dict[str, JsonObject]] = {}
        self._releases: dict[KId, _Release] = {}
        self._endpoints: dict[KId, _Endpoint] = {}
        # Per vCluster (target namespace, release): its API; per remote Kustomization: the
        # vCluster it applied to.
        self.virtual: dict[KId, VirtualCluster] = {}
        self._remote: dict[KId, KId] = {}

    # --- polling -----------------------------------------------------------------------------

    def _open(self, path: Path | None) -> GitRepository | None:
        if path is None or not (path / "HEAD").exists():
            return None
        if path not in self._repos:
            try:
                self._repos[path] = GitRepository(path)
            except GitRepositoryError as exc:
                logger.warning("cannot open %s: %s", path, exc)
                return None
        return self._repos[path]

    def _head(self) -> str | None:
        repo = self._open(self.repo_path)
        return repo.head(self.branch) if repo is not None else None

    def _fingerprint(self) -> tuple[Any, ...]:
        """Everything a reconcile reads: the heads of the sources' repositories, their specs
        and their Secrets. A change of any starts a reconcile."""
        parts: list[Any] = [self._head()]
        for obj in self.store.list(GIT_REPOSITORIES):
            spec = as_dict(obj.get("spec"))
            repo = self._open(self.resolve(str(spec.get("url", ""))))
            branch = str(as_dict(spec.get("ref")).get("branch") or "master")
            head = repo.head(branch) if repo is not None else None
            secret_name = as_dict(spec.get("secretRef")).get("name")
            secret = (
                self.store.get(SECRETS, key_of(obj)[0], str(secret_name)) if secret_name else None
            )
            data = json.dumps(secret.get("data"), sort_keys=True) if secret else None
            digest = hashlib.sha256(data.encode()).hexdigest() if data else None
            parts.append((key_of(obj), json.dumps(spec, sort_keys=True), head, digest))
        return tuple(parts)

    def request_reconcile(self, now: float) -> None:
        """Reconcile the current head at the next tick, even if it was applied already."""
        self._due = now

    def tick(self, now: float) -> None:
        """Notice a new head (or source, or Secret); reconcile once ``flux_delay`` has passed."""
        if self._head() is None:
            return
        fingerprint = self._fingerprint()
        if fingerprint != self._seen:
            self._seen = fingerprint
            self._due = now + self.config.flux_delay
        if self._due is None and self._retry_at is not None and now >= self._retry_at:
            self._due = now
        if self._due is not None and now >= self._due:
            self._due = None
            self._retry_at = None
            self.reconcile(now)
            # What this pass created itself (sources, Secrets) needs no second pass; but a
            # branch that moved while it ran (a merge landing mid-reconcile) was not applied,
            # so it must still look new. Flux never loses a revision that way: the
            # kustomize-controller is queued by every artifact revision change of its source
            # (fluxcd/kustomize-controller internal/controller/kustomization_controller.go,
            # SetupWithManager: SourceRevisionChangePredicate) and on every interval.
            after = self._fingerprint()
            self._seen = None if _heads_moved(fingerprint, after) else after

    def advance(self, now: float) -> None:
        """Move HelmReleases and InferenceServices whose delay has passed to Ready."""
        with self.store.lock:
            self._advance_releases(now)
            self._advance_endpoints(now)

    # --- source-controller -------------------------------------------------------------------

    def _files(self, path: Path, repo: GitRepository, sha: str) -> Mapping[str, bytes]:
        cached = self._trees.get(path)
        if cached is None or cached[0] != sha:
            cached = (sha, repo.read_tree(sha))
            self._trees[path] = cached
        return cached[1]

    def _bootstrap(self) -> _Fetch:
        """Before ``flux-system`` exists, ``flux bootstrap`` applies the branch head itself."""
        sha = self._head()
        repo = self._open(self.repo_path)
        if sha is None or repo is None or self.repo_path is None:
            return _Fetch(None, "Source artifact not found, retrying in 30s")
        revision = f"{self.branch}@sha1:{sha}"
        return _Fetch(_Artifact(revision, sha, self._files(self.repo_path, repo, sha)))

    def _fetch(self, obj: JsonObject, now: float) -> _Fetch:
        """Fetch one GitRepository as source-controller does; record its status."""
        key = key_of(obj)
        spec = as_dict(obj.get("spec"))
        url = str(spec.get("url", ""))
        branch = str(as_dict(spec.get("ref")).get("branch") or "master")
        username = password = ""
        secret_name = as_dict(spec.get("secretRef")).get("name")
        failure: tuple[str, str] | None = None
        if secret_name:
            secret = self.store.get(SECRETS, key[0], str(secret_name))
            if secret is None:
                # source-controller's getAuthOpts, when the Secret cannot be read.
                failure = (
                    "AuthenticationFailed",
                    f"failed to get secret '{key[0]}/{secret_name}': "
                    f'secrets "{secret_name}" not found',
                )
            else:
                data = as_dict(secret.get("data"))
                username, password = _decoded(data.get("username")), _decoded(data.get("password"))
        path = self.resolve(url)
        repo = self._open(path)
        if failure is None and (repo is None or path is None):
            failure = (
                "GitOperationFailed",
                f"failed to checkout and determine revision: unable to clone '{url}': "
                "repository not found",
            )
        if failure is None and not self.verifier(url, username, password):
            # What go-git reports when the server answers 401 to the credentials (or none).
            failure = (
                "GitOperationFailed",
                f"failed to checkout and determine revision: unable to clone '{url}': "
                "authentication required",
            )
        sha = repo.head(branch) if failure is None and repo is not None else None
        if failure is None and sha is None:
            failure = (
                "GitOperationFailed",
                f"failed to checkout and determine revision: unable to clone '{url}': "
                f'couldn\'t find remote ref "refs/heads/{branch}"',
            )
        if failure is not None:
            logger.info("%s/%s: %s", *key, failure[1])
            self._source_failed(key, *failure, now)
            self._retry_at = now + SOURCE_RETRY_SECONDS
            return _Fetch(None, "Source artifact not found, retrying in 30s")
        assert repo is not None and path is not None and sha is not None
        artifact = _Artifact(f"{branch}@sha1:{sha}", sha, self._files(path, repo, sha))
        self._artifacts[key] = artifact
        self._store_artifact(key, artifact.revision, now)
        return _Fetch(artifact)

    def _source(self, kid: KId, now: float) -> tuple[_Artifact | None, str]:
        """The artifact a Kustomization applies (the last one its source stored), or why none."""
        ref = as_dict(as_dict(self._specs[kid].get("spec")).get("sourceRef"))
        kind, name = str(ref.get("kind", "")), str(ref.get("name", ""))
        key = (str(ref.get("namespace") or kid[0]), name)
        if kind != "GitRepository":
            return None, f"Source '{kind}/{key[0]}/{name}' is not simulated"
        if key not in self._fetched:
            obj = self.store.get(GIT_REPOSITORIES, *key)
            if obj is not None:
                self._fetched[key] = self._fetch(obj, now)
            elif key == ROOT:
                self._fetched[key] = self._bootstrap()
            else:
                self._fetched[key] = _Fetch(
                    None, f"Source 'GitRepository/{key[0]}/{name}' not found"
                )
        fetched = self._fetched[key]
        artifact = fetched.artifact or self._artifacts.get(key)
        return artifact, fetched.message

    def _known_artifact(self, obj: Mapping[str, Any]) -> _Artifact | None:
        """The artifact a Kustomization ``obj`` would read now, without fetching anything."""
        ref = as_dict(as_dict(obj.get("spec")).get("sourceRef"))
        if ref.get("kind", "GitRepository") != "GitRepository":
            return None
        key = (str(ref.get("namespace") or key_of(obj)[0]), str(ref.get("name", "")))
        fetched = self._fetched.get(key)
        return (fetched.artifact if fetched else None) or self._artifacts.get(key)

    def _remote_bases(self) -> bool:
        """Whether a build may fetch remote bases: kustomize-controller without
        ``--no-remote-bases`` (``kustomization_controller.go`` ``build``)."""
        return not self.controller_flags(KUSTOMIZE_CONTROLLER).no_remote_bases

    def _build_key(self, artifact: _Artifact, obj: Mapping[str, Any]) -> tuple[str, str, str, bool]:
        spec = as_dict(obj.get("spec"))
        read = {k: spec.get(k) for k in _GENERATOR_FIELDS if k in spec}
        return (
            artifact.sha,
            build_dir(spec.get("path")),
            json.dumps(read, sort_keys=True),
            self._remote_bases(),
        )

    def _run_build(self, artifact: _Artifact, obj: Mapping[str, Any]) -> Build:
        workspace = self._workspace
        assert workspace is not None, "builds run inside reconcile"
        spec = as_dict(obj.get("spec"))
        return workspace.build(
            artifact.sha,
            artifact.files,
            spec.get("path"),
            spec,
            remote_bases=self._remote_bases(),
        )

    def _build(self, artifact: _Artifact, obj: Mapping[str, Any]) -> Build:
        key = self._build_key(artifact, obj)
        if key not in self._builds:
            self._builds[key] = self._run_build(artifact, obj)
        return self._builds[key]

    def _build_ahead(self, now: float) -> None:
        """Build what this pass will apply, kubectl in parallel and outside the store's lock
        (the API keeps answering meanwhile): the Kustomizations known, then those their
        builds output (reading sources fetched already), and so on."""
        wanted: list[tuple[_Artifact, Mapping[str, Any]]] = []
        for kid, obj in self._specs.items():
            if self._access_denied(kid, as_dict(obj.get("spec"))):
                continue
            artifact, _ = self._source(kid, now)
            if artifact is not None:
                wanted.append((artifact, obj))
        with ThreadPoolExecutor(max_workers=8) as pool:
            while wanted:
                jobs = {self._build_key(a, o): (a, o) for a, o in wanted}
                jobs = {k: job for k, job in jobs.items() if k not in self._builds}
                results = pool.map(lambda job: self._run_build(*job), jobs.values())
                self._builds.update(zip(jobs, results, strict=True))
                wanted = []
                for key in jobs:
                    for obj in self._builds[key].objects:
                        spec = as_dict(obj.get("spec"))
                        if _is_kustomization(obj) and not self._access_denied(key_of(obj), spec):
                            artifact = self._known_artifact(obj)
                            if artifact is not None:
                                wanted.append((artifact, obj))

    # --- kustomize-controller ----------------------------------------------------------------

    def controller_flags(self, controller: str) -> ControllerFlags:
        """The flags a Flux controller runs with: its Deployment's, as the root Kustomization
        last applied it (``gotk-components.yaml`` and the lockdown patches on it), else Flux's
        defaults, as ``flux bootstrap`` installed it outside the repository. A changed
        Deployment counts at once, as if its pod had restarted with it."""
        return flux_install.controller_flags(self._inventory.get(ROOT, {}).values(), controller)

    def _access_denied(self, kid: KId, spec: Mapping[str, Any]) -> str:
        """kustomize-controller v1.9.4 ``getSource`` (``kustomization_controller.go``): with
        ``--no-cross-namespace-refs`` a source in another namespace is refused with fluxcd/pkg
        runtime ``acl.AccessDeniedError``, before the dependencies are checked; ``reconcile``
        then marks it Ready False and Stalled, ``AccessDenied``, and does not retry it (a
        terminal error). "" when it may read its source."""
        ref = as_dict(spec.get("sourceRef"))
        namespace = str(ref.get("namespace") or kid[0])
        if namespace == kid[0]:
            return ""
        if not self.controller_flags(KUSTOMIZE_CONTROLLER).no_cross_namespace_refs:
            return ""
        return (
            f"can't access '{ref.get('kind', '')}/{namespace}/{ref.get('name', '')}', "
            "cross-namespace references have been blocked"
        )

    def _impersonated(self, spec: Mapping[str, Any]) -> str:
        """The service account a Kustomization applies as, in its namespace: its
        ``serviceAccountName``, else kustomize-controller's ``--default-service-account``
        (fluxcd/pkg runtime/client ``impersonator.go`` ``setImpersonationConfig``, for the
        cluster and for a ``kubeConfig`` alike); "" when neither is set (no impersonation)."""
        account = spec.get("serviceAccountName")
        if isinstance(account, str) and account:
            return account
        return self.controller_flags(KUSTOMIZE_CONTROLLER).default_service_account

    def reconcile(self, now: float) -> None:
        """Fetch every source and apply every Kustomization, parents first."""
        if self._head() is None:
            return
        self._fetched = {}
        self._builds = {}
        for obj in self.store.list(GIT_REPOSITORIES):
            self._fetched[key_of(obj)] = self._fetch(obj, now)
        root_path = f"clusters/{self.config.fleet_name}"
        self._specs.setdefault(ROOT, self._root_object(root_path))
        with Workspace() as workspace:
            self._workspace = workspace
            try:
                self._build_ahead(now)
                logger.info("reconciling (%d builds)", len(self._builds))
                self._reconcile_all(now)
            finally:
                self._workspace = None

    def _reconcile_all(self, now: float) -> None:
        with self.store.lock:
            ready: dict[KId, bool] = {}
            queue: list[KId] = [ROOT]
            while queue:
                kid = next((k for k in queue if self._settled(k, ready, queue)), queue[0])
                queue.remove(kid)
                if kid in ready or kid not in self._specs:
                    continue
                children = self._reconcile_one(kid, ready, now)
                queue += [child for child in children if child not in ready]
            for obj in self.store.list(GIT_REPOSITORIES):
                if key_of(obj) not in self._fetched:
                    self._fetched[key_of(obj)] = self._fetch(obj, now)

    def _root_object(self, path: str) -> JsonObject:
        """What ``flux bootstrap`` creates before the repository has been read."""
        return {
            "apiVersion": KUSTOMIZATIONS.api_version,
            "kind": "Kustomization",
            "metadata": {"name": ROOT[1], "namespace": ROOT[0]},
            "spec": {
                "interval": "10m0s",
                "path": f"./{path}",
                "prune": True,
                "sourceRef": {"kind": "GitRepository", "name": "flux-system"},
            },
        }

    def _dependencies(self, kid: KId) -> list[KId]:
        spec = as_dict(self._specs[kid].get("spec"))
        out = []
        for dependency in as_list(spec.get("dependsOn")):
            dependency = as_dict(dependency)
            out.append((str(dependency.get("namespace") or kid[0]), str(dependency.get("name"))))
        return out

    def _settled(self, kid: KId, ready: Mapping[KId, bool], queue: list[KId]) -> bool:
        """True when none of ``kid``'s dependencies is still waiting to be reconciled."""
        if kid not in self._specs:
            return True
        return all(dep in ready or dep not in queue for dep in self._dependencies(kid))

    def _reconcile_one(self, kid: KId, ready: dict[KId, bool], now: float) -> list[KId]:
        """Reconcile one Kustomization; returns the Kustomizations it (still) applies."""
        obj = self._specs[kid]
        spec = as_dict(obj.get("spec"))
        previous_children = [
            key_of(child)
            for child in self._inventory.get(kid, {}).values()
            if _is_kustomization(child)
        ]
        if spec.get("suspend") is True:
            ready[kid] = False
            return previous_children
        denied = self._access_denied(kid, spec)
        if denied:
            self._set_status(kid, now, ready=False, reason=ACCESS_DENIED, message=denied)
            ready[kid] = False
            return previous_children
        waiting = [dep for dep in self._dependencies(kid) if not ready.get(dep)]
        if waiting:
            message = f"dependency '{waiting[0][0]}/{waiting[0][1]}' is not ready"
            self._set_status(kid, now, ready=False, reason="DependencyNotReady", message=message)
            ready[kid] = False
            return previous_children
        artifact, problem = self._source(kid, now)
        if artifact is None:
            # kustomize-controller waits for the source; nothing is applied or pruned.
            self._set_status(kid, now, ready=False, reason="ArtifactFailed", message=problem)
            ready[kid] = False
            return previous_children
        revision = artifact.revision
        result = self._build(artifact, obj)
        if result.reason == "ArtifactFailed":
            # The path is checked before the revision counts as attempted (reconcile).
            self._set_status(kid, now, ready=False, reason=result.reason, message=result.message)
            ready[kid] = False
            return previous_children
        # kustomize-controller builds its client (for spec.kubeConfig: the remote cluster's)
        # before it builds the manifests.
        remote = spec.get("kubeConfig") is not None
        target, identity, problem = self._remote_client(kid, spec) if remote else (ROOT, None, "")
        if not problem and not result.ok:
            logger.info("%s/%s: build failed: %s", *kid, result.message)
            self._set_status(
                kid,
                now,
                ready=False,
                reason="BuildFailed",
                message=result.message,
                attempted=revision,
            )
            ready[kid] = False
            return previous_children
        objects = self._prepare(kid, result.objects) if result.ok else {}
        if remote:
            if not problem:
                assert identity is not None
                problem = self._apply_remote(kid, target, identity, spec, objects, now)
            if problem:
                self._set_status(
                    kid,
                    now,
                    ready=False,
                    reason="ReconciliationFailed",
                    message=problem,
                    attempted=revision,
                    retrying=True,
                )
                self._retry_later(now)
                ready[kid] = False
                return previous_children
        else:
            # Kyverno's webhooks answer the dry run of every object before anything applies.
            refused = self._admission(kid, spec, objects)
            applied: list[JsonObject] = []
            if not refused:
                refused, recreate, applied = self._dry_run(objects, force=spec.get("force") is True)
                for live in recreate:
                    self._delete(live, now)
            if refused:
                # What the stages before the refused one applied stays; the inventory and
                # what it would prune do not change.
                for staged in applied:
                    self._upsert(kid, staged, now)
                self._set_status(
                    kid,
                    now,
                    ready=False,
                    reason="ReconciliationFailed",
                    message=refused,
                    attempted=revision,
                )
                ready[kid] = False
                return previous_children
            self._apply(kid, objects, spec.get("prune") is True, now)
        self._set_status(
            kid,
            now,
            ready=True,
            reason="ReconciliationSucceeded",
            message=f"Applied revision: {revision}",
            attempted=revision,
            applied=revision,
        )
        ready[kid] = True
        if remote:  # what it applied lives in another cluster: no Kustomization to follow here
            return []
        return [key_of(o) for o in objects.values() if _is_kustomization(o) and key_of(o) != kid]

    def _prepare(self, kid: KId, outputs: list[JsonObject]) -> dict[str, JsonObject]:
        """The build output as the API server takes it, keyed by inventory id."""
        objects: dict[str, JsonObject] = {}
        for obj in copy.deepcopy(outputs):
            metadata = obj["metadata"] = as_dict(obj.get("metadata"))
            if obj.get("kind") in CLUSTER_SCOPED:
                metadata.pop("namespace", None)
            labels = metadata["labels"] = as_dict(metadata.get("labels"))
            labels[f"{FLUX_GROUP}/name"] = kid[1]
            labels[f"{FLUX_GROUP}/namespace"] = kid[0]
            objects[inventory_id(obj)[0]] = obj
        return objects

    def _dry_run(
        self, objects: Mapping[str, JsonObject], *, force: bool
    ) -> tuple[str, list[JsonObject], list[JsonObject]]:
        """kustomize-controller's server-side apply, stage by stage (fluxcd/pkg ssa v0.76.1
        ``manager_apply.go`` ``ApplyAllStaged``): (the dry-run error of the first refused
        object or "", the live objects of the stages that passed to delete and create again,
        the objects of the stages before the refused one: [] when none is refused, and the
        caller applies everything).

        The API server refuses an update of an immutable field (``IMMUTABLE_SPEC_KINDS``);
        ``shouldForceApply`` then recreates the live object when the Kustomization sets
        ``spec.force`` or the new or the live object carries the force selector, else the
        apply fails with ``DryRunErr`` (ssa ``errors/errors.go``: "<Kind>/<namespace>/<name>
        dry-run failed (Invalid): ..."), which ends the stage and the ones after it.
        """
        recreate: list[JsonObject] = []
        applied: list[JsonObject] = []
        for stage in apply_stages(objects.values()):
            stage_recreate: list[JsonObject] = []
            for obj in stage:
                group = str(obj.get("apiVersion", "")).rpartition("/")[0]
                kind = str(obj.get("kind", ""))
                if (group, kind) not in IMMUTABLE_SPEC_KINDS:
                    continue
                resource = resource_of(str(obj.get("apiVersion", "")), kind)
                live = self.store.get(resource, *key_of(obj)) if resource is not None else None
                if live is None or live.get("spec") == obj.get("spec"):
                    continue
                if force or force_selected(obj) or force_selected(live):
                    stage_recreate.append(live)
                    continue
                namespace, name = key_of(obj)
                return (
                    f"{kind}/{namespace}/{name} dry-run failed (Invalid): {kind}.{group} "
                    f'"{name}" is invalid: spec: Invalid value: "object": field is immutable',
                    recreate,
                    applied,
                )
            recreate += stage_recreate
            applied += stage
        return "", recreate, []

    def _admission(self, kid: KId, spec: Mapping[str, Any], objects: dict[str, JsonObject]) -> str:
        """The admission webhooks (Kueue's for Jobs and JobSets, Kyverno's: ``admit_object``)
        on the apply's dry run, as the identity Flux applies with (the
        account ``_impersonated`` names in the Kustomization's namespace, else
        kustomize-controller's own account): the objects as mutated, or the first refusal in
        ``DryRunErr``'s words (fluxcd/pkg ssa/errors/errors.go: no reason in parentheses, a
        webhook's refusal has none)."""
        account = self._impersonated(spec)
        user = (
            f"system:serviceaccount:{kid[0]}:{account}"
            if account
            else f"system:serviceaccount:flux-system:{KUSTOMIZE_CONTROLLER}"
        )
        for object_id, obj in objects.items():
            resource = resource_of(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
            if resource is None:
                continue
            live = self.store.get(resource, *key_of(obj))
            operation = "CREATE" if live is None else "UPDATE"
            try:
                mutated = admit_object(
                    self.store, obj, resource, requester=user, operation=operation, old=live
                )
            except Rejected as exc:
                namespace, name = key_of(obj)
                where = f"{namespace}/{name}" if namespace else name
                return f"{obj.get('kind')}/{where} dry-run failed: {exc}"
            objects[object_id] = mutated
        return ""

    def _retry_later(self, now: float) -> None:
        """A failed Kustomization is reconciled again after its retryInterval (here the
        simulator's ``flux_delay``), whether or not anything changed."""
        due = now + self.config.flux_delay
        self._retry_at = min(self._retry_at if self._retry_at is not None else math.inf, due)

    def _remote_client(self, kid: KId, spec: Mapping[str, Any]) -> tuple[KId, UserInfo | None, str]:
        """(vCluster, the identity Flux acts as there, "") for a Kustomization's
        ``spec.kubeConfig``, or (("", ""), None, why not) in kustomize-controller's words
        (fluxcd/pkg ``getRESTConfigFromSecret``)."""
        namespace = kid[0]
        ref = as_dict(as_dict(spec.get("kubeConfig")).get("secretRef"))
        name = str(ref.get("name") or "")
        failed = "failed to build kube client: "
        secret = self.store.get(SECRETS, namespace, name) if name else None
        if secret is None:
            return (
                ("", ""),
                None,
                f"{failed}unable to read KubeConfig secret '{namespace}/{name}' error: "
                f'secrets "{name}" not found',
            )
        data = as_dict(secret.get("data"))
        wanted = str(ref.get("key") or "")
        # fluxcd/pkg getRESTConfigFromSecret: the key given, else value, else value.yaml.
        keys = [wanted] if wanted else ["value", "value.yaml"]
        text = next((_decoded(data.get(key)) for key in keys if _decoded(data.get(key))), "")
        if not text:
            return (
                ("", ""),
                None,
                f"{failed}KubeConfig secret '{namespace}/{name}' does not contain a "
                f"'{wanted or 'value'}' key with a kubeconfig",
            )
        try:
            config = as_dict(yaml.safe_load(text))
            context_name = config.get("current-context")
            context = next(
                as_dict(c.get("context"))
                for c in as_list(config.get("contexts"))
                if as_dict(c).get("name") == context_name
            )
            server = next(
                str(as_dict(c.get("cluster")).get("server", ""))
                for c in as_list(config.get("clusters"))
                if as_dict(c).get("name") == context.get("cluster")
            )
            user = next(
                as_dict(u.get("user"))
                for u in as_list(config.get("users"))
                if as_dict(u).get("name") == context.get("user")
            )
            certificate = base64.b64decode(str(user.get("client-certificate-data", "")))
        except (yaml.YAMLError, StopIteration, ValueError):
            return (
                ("", ""),
                None,
                f"{failed}the KubeConfig secret '{namespace}/{name}' is invalid",
            )
        found = next((k for k, c in self.virtual.items() if c.answers(server)), None)
        if found is None or not self._control_plane_running(*found):
            host = server.split("://", 1)[-1].split("/", 1)[0]
            return (
                ("", ""),
                None,
                f'Get "{server}/api": dial tcp {host}: connect: connection refused',
            )
        cluster = self.virtual[found]
        try:
            identity = cluster.authenticate_certificate(certificate)
            account = self._impersonated(spec)
            if account:
                identity = cluster.impersonate(
                    identity, f"system:serviceaccount:{namespace}:{account}"
                )
        except (Unauthenticated, Forbidden) as exc:
            return (("", ""), None, f"{failed}{exc}")
        return found, identity, ""

    def _apply_remote(
        self,
        kid: KId,
        target: KId,
        identity: UserInfo,
        spec: Mapping[str, Any],
        objects: dict[str, JsonObject],
        now: float,
    ) -> str:
        """Apply a remote Kustomization's build into its vCluster ``target`` as ``identity``;
        "" or why it failed."""
        cluster = self.virtual[target]
        old = self._inventory.get(kid, {}) if self._remote.get(kid) == target else {}
        prune = [o for i, o in old.items() if i not in objects] if spec.get("prune") is True else []
        try:
            cluster.apply(identity, list(objects.values()), prune, now)
        except WriteRefused as exc:
            # fluxcd/pkg ssa DryRunErr: "<Kind>/[<namespace>/]<name> dry-run failed (<reason>)".
            namespace, name = key_of(exc.obj)
            where = f"{namespace}/{name}" if namespace else name
            return f"{exc.obj.get('kind')}/{where} dry-run failed ({exc.reason}): {exc.message}"
        self._inventory[kid] = objects
        self._remote[kid] = target
        return ""

    def _control_plane_running(self, namespace: str, release: str) -> bool:
        pod = self.store.get(PODS, namespace, f"{release}-0")
        return pod is not None and as_dict(pod.get("status")).get("phase") == "Running"

    def virtual_cluster(self, namespace: str, release: str) -> VirtualCluster | None:
        """The API of a vCluster, while its control plane runs."""
        cluster = self.virtual.get((namespace, release))
        if cluster is None or not self._control_plane_running(namespace, release):
            return None
        return cluster

    def _apply(self, kid: KId, objects: dict[str, JsonObject], prune: bool, now: float) -> None:
        old = self._inventory.get(kid, {})
        self._inventory[kid] = objects
        if prune:
            for object_id in sorted(set(old) - set(objects)):
                self._delete(old[object_id], now)
        for obj in objects.values():
            if key_of(obj) == kid and _is_kustomization(obj):
                self._specs[kid] = obj  # a Kustomization that applies itself (flux-system)
            self._upsert(kid, obj, now)

    def _upsert(self, owner: KId, obj: JsonObject, now: float) -> None:
        resource = resource_of(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
        if resource is None:
            return  # not served: it exists only in the inventory
        key = key_of(obj)
        if _is_kustomization(obj) and key != owner:
            self._specs[key] = obj
        before = self.store.get(resource, *key)
        desired = dict(obj)
        metadata = desired["metadata"] = dict(as_dict(obj.get("metadata")))
        if before is not None:
            # Server-side apply keeps the labels and annotations other managers set, such as
            # reconcile.fluxcd.io/requestedAt.
            old_meta = as_dict(before.get("metadata"))
            for field in ("labels", "annotations"):
                merged = {**as_dict(old_meta.get(field)), **as_dict(metadata.get(field))}
                if merged:
                    metadata[field] = merged
        if resource in (KUSTOMIZATIONS, HELM_RELEASES, GIT_REPOSITORIES):
            metadata["finalizers"] = [FLUX_FINALIZER]
        if resource in (JOBS, JOBSETS) and before is not None:
            # A Job's pod template is immutable and ``spec.suspend`` belongs to Kueue once it
            # runs the job (its field manager); re-applying the manifest changes neither.
            desired["spec"] = before.get("spec", {})
        if resource is NAMESPACES:
            desired["status"] = {"phase": "Active"}
        after = self.store.apply(resource, desired, now)
        changed = before is None or before.get("spec") != after.get("spec")
        if resource is HELM_RELEASES and changed:
            self._start_release(key, after, now)
        elif resource is INFERENCE_SERVICES and changed:
            self._start_endpoint(key, after, now)

    def _delete(self, obj: Mapping[str, Any], now: float) -> None:
        """Prune one object (a Kustomization takes what it applied with it)."""
        resource = resource_of(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
        key = key_of(obj)
        logger.info("pruning %s %s/%s", obj.get("kind"), *key)
        if _is_kustomization(obj):
            spec = as_dict(self._specs.pop(key, {}).get("spec"))
            children = list(self._inventory.pop(key, {}).values())
            remote = self.virtual.get(self._remote.pop(key, ("", "")))
            # kustomize-controller's finalizer (finalizerShouldDeleteResources): MirrorPrune,
            # the default, follows spec.prune; Delete and WaitForTermination delete; Orphan not.
            policy = spec.get("deletionPolicy") or "MirrorPrune"
            if policy in ("Delete", "WaitForTermination") or (
                policy == "MirrorPrune" and spec.get("prune") is True
            ):
                if "kubeConfig" in spec:
                    if remote is not None:
                        with remote.lock:
                            for child in children:
                                remote.objects.pop(virtual_key(child), None)
                else:
                    for child in children:
                        self._delete(child, now)
        if resource is None:
            return
        self.store.delete(resource, *key)
        if resource is INFERENCE_SERVICES:
            self._endpoints.pop(key, None)
            self.cluster.delete_pods(key[0], {ISVC_LABEL: key[1]}, now)
        elif resource is HELM_RELEASES:
            state = self._releases.pop(key, None)
            if state is not None:
                for exported in state.kubeconfigs:
                    self.store.delete(SECRETS, *exported)
                for plural, ns, name in state.host_objects:
                    gone = self.store.delete(RESOURCES[plural], ns, name)
                    if gone is not None and plural == SERVICES.plural:
                        self._collect_dependents(gone, now)
            if is_vcluster(obj):
                target, release = _release_names(obj)
                self.virtual.pop((target, release), None)
                with contextlib.suppress(LookupError):
                    self.cluster.delete_pod(target, f"{release}-0", now, recreate=False)
        elif resource is NAMESPACES:
            self.cluster.delete_pods(key[1], {}, now)
            for secret in self.store.list(SECRETS, key[1]):
                self.store.delete(SECRETS, *key_of(secret))

    def _collect_dependents(self, owner: Mapping[str, Any], now: float) -> None:
        """The garbage collector: what names ``owner`` in its ownerReferences goes with it
        (the objects a tenant cluster's syncer created name the chart's Service)."""
        uid = as_dict(owner.get("metadata")).get("uid")
        namespace = key_of(owner)[0]
        for resource in (SERVICES, ENDPOINTS, ENDPOINT_SLICES, PODS):
            for obj in self.store.list(resource, namespace):
                owners = as_list(as_dict(obj.get("metadata")).get("ownerReferences"))
                if not any(as_dict(o).get("uid") == uid for o in owners):
                    continue
                if resource is PODS:
                    with contextlib.suppress(LookupError):
                        self.cluster.delete_pod(namespace, key_of(obj)[1], now, recreate=False)
                else:
                    self.store.delete(resource, *key_of(obj))

    def running_virtual_clusters(self) -> list[VirtualCluster]:
        """The tenant clusters whose control plane runs (their syncers run with it)."""
        return [
            cluster
            for (namespace, release), cluster in sorted(self.virtual.items())
            if self._control_plane_running(namespace, release)
        ]

    def _set_status(
        self,
        kid: KId,
        now: float,
        *,
        ready: bool,
        reason: str,
        message: str,
        attempted: str | None = None,
        applied: str | None = None,
        retrying: bool = False,
    ) -> None:
        """``retrying``: the failure is one kustomize-controller retries at retryInterval; it
        keeps the Reconciling condition with reason ProgressingWithRetry (``finalizeStatus``)."""
        inventory = sorted(inventory_id(o) for o in self._inventory.get(kid, {}).values())
        if self.store.get(KUSTOMIZATIONS, *kid) is None:
            # flux-system before its first successful build: bootstrap created it.
            self._upsert(kid, self._specs[kid], now)

        def change(obj: JsonObject) -> None:
            status = obj["status"] = as_dict(obj.get("status"))
            generation = _generation(obj)
            previous = as_list(status.get("conditions"))
            conditions = []
            if reason in STALLED_REASONS:
                conditions.append(
                    _condition("Stalled", "True", reason, message, now, previous, generation)
                )
            if retrying:
                conditions.append(
                    _condition(
                        "Reconciling",
                        "True",
                        "ProgressingWithRetry",
                        f"Building manifests for revision {attempted}",
                        now,
                        previous,
                        generation,
                    )
                )
            conditions.append(
                _condition(
                    "Ready",
                    "True" if ready else "False",
                    reason,
                    message,
                    now,
                    previous,
                    generation,
                )
            )
            status["conditions"] = conditions
            status["observedGeneration"] = generation
            if attempted:
                status["lastAttemptedRevision"] = attempted
            if applied:
                status["lastAppliedRevision"] = applied
                status["inventory"] = {"entries": [{"id": i, "v": v} for i, v in inventory]}
            requested = as_dict(as_dict(obj.get("metadata")).get("annotations")).get(REQUESTED_AT)
            if requested:
                status["lastHandledReconcileAt"] = requested

        self.store.mutate(KUSTOMIZATIONS, *kid, change)

    def _store_artifact(self, key: KId, revision: str, now: float) -> None:
        """source-controller's view: the branch's revision is stored as an artifact."""
        namespace, name = key
        sha = revision.rpartition(":")[2]
        message = f"stored artifact for revision '{revision}'"

        def change(obj: JsonObject) -> None:
            status = obj["status"] = as_dict(obj.get("status"))
            previous = as_list(status.get("conditions"))
            generation = _generation(obj)
            status["artifact"] = {
                "digest": "sha256:" + hashlib.sha256(sha.encode()).hexdigest(),
                "lastUpdateTime": timestamp(now),
                "path": f"gitrepository/{namespace}/{name}/{sha}.tar.gz",
                "revision": revision,
                "url": f"http://source-controller.flux-system.svc.cluster.local./"
                f"gitrepository/{namespace}/{name}/{sha}.tar.gz",
            }
            status["conditions"] = [
                _condition("Ready", "True", "Succeeded", message, now, previous, generation),
                _condition(
                    "ArtifactInStorage", "True", "Succeeded", message, now, previous, generation
                ),
            ]
            status["observedGeneration"] = generation

        self.store.mutate(GIT_REPOSITORIES, namespace, name, change)

    def _source_failed(self, key: KId, reason: str, message: str, now: float) -> None:
        """A fetch failed: FetchFailed and Ready False with the reason; an artifact stored
        before stays (and ArtifactInStorage with it), as source-controller keeps it."""

        def change(obj: JsonObject) -> None:
            status = obj["status"] = as_dict(obj.get("status"))
            previous = as_list(status.get("conditions"))
            generation = _generation(obj)
            conditions = [
                _condition("FetchFailed", "True", reason, message, now, previous, generation),
                _condition("Ready", "False", reason, message, now, previous, generation),
            ]
            stored = next(
                (as_dict(c) for c in previous if as_dict(c).get("type") == "ArtifactInStorage"),
                None,
            )
            if stored is not None and status.get("artifact"):
                conditions.append(stored)
            status["conditions"] = conditions
            status["observedGeneration"] = generation

        self.store.mutate(GIT_REPOSITORIES, *key, change)

    # --- helm-controller ---------------------------------------------------------------------

    def _release_denied(self, key: KId, obj: JsonObject, now: float) -> bool:
        """helm-controller v1.6.3 with ``--no-cross-namespace-refs`` refuses a chart in another
        namespace (``internal/acl/acl.go`` ``AllowsAccessTo``); nothing is installed or
        upgraded. A ``chartRef`` is Stalled and Ready False, ``AccessDenied``
        (``helmrelease_controller.go`` ``reconcileRelease``). A chart template's HelmChart
        lives in its ``sourceRef``'s namespace (``api/v2`` ``HelmChartTemplate.GetNamespace``)
        and is refused before any condition is written (``internal/reconcile/
        helmchart_template.go`` returns the error, which is retried): its status stays."""
        if not self.controller_flags(HELM_CONTROLLER).no_cross_namespace_refs:
            return False
        namespace, name = key
        spec = as_dict(obj.get("spec"))
        chart_ref = as_dict(spec.get("chartRef"))
        if chart_ref:
            kind = str(chart_ref.get("kind", ""))
            if kind not in ("OCIRepository", "ExternalArtifact"):
                kind = "HelmChart"
            source = (str(chart_ref.get("namespace") or namespace), str(chart_ref.get("name")))
        else:
            template = as_dict(as_dict(spec.get("chart")).get("spec"))
            ref = as_dict(template.get("sourceRef"))
            kind, source = (
                "HelmChart",
                (str(ref.get("namespace") or namespace), f"{namespace}-{name}"),
            )
        if source[0] == namespace:
            return False
        message = (
            "cross-namespace references are not allowed: "
            f"cannot access {kind} {source[0]}/{source[1]}"
        )
        logger.info("%s/%s: %s", *key, message)
        if not chart_ref:
            return True

        def change(current: JsonObject) -> None:
            status = current["status"] = as_dict(current.get("status"))
            previous = as_list(status.get("conditions"))
            generation = _generation(current)
            status["conditions"] = [
                _condition("Stalled", "True", ACCESS_DENIED, message, now, previous, generation),
                _condition("Ready", "False", ACCESS_DENIED, message, now, previous, generation),
            ]
            status["observedGeneration"] = generation

        self.store.mutate(HELM_RELEASES, *key, change)
        return True

    def _start_release(self, key: KId, obj: JsonObject, now: float) -> None:
        if self._release_denied(key, obj, now):
            return
        state = self._releases.get(key)
        action: Literal["install", "upgrade"] = "install" if state is None else "upgrade"
        version = 1 if state is None else state.version + 1
        self._releases[key] = _Release(
            now + self.config.ready_delay,
            action,
            version,
            kubeconfigs=state.kubeconfigs if state is not None else (),
            host_objects=state.host_objects if state is not None else (),
        )
        message = f"Running '{action}' action with timeout of 5m0s"

        def change(current: JsonObject) -> None:
            status = current["status"] = as_dict(current.get("status"))
            previous = as_list(status.get("conditions"))
            generation = _generation(current)
            status["conditions"] = [
                _condition(
                    "Reconciling", "True", "Progressing", message, now, previous, generation
                ),
                _condition("Ready", "Unknown", "Progressing", message, now, previous, generation),
            ]

        self.store.mutate(HELM_RELEASES, *key, change)

    def _install_vcluster(self, state: _Release, obj: JsonObject, now: float) -> None:
        """What ``helm install`` of the vCluster chart puts into the host namespace: the quota
        and limit range its policies ask for, and the StatefulSet whose pod the StatefulSet
        controller creates through admission (``vcluster.py``)."""
        namespace, release = _release_names(obj)
        values = as_dict(as_dict(obj.get("spec")).get("values"))
        for plural, ns, name in state.host_objects:
            if plural != SERVICES.plural:  # helm upgrades the Service in place
                self.store.delete(RESOURCES[plural], ns, name)
        written = []
        for policy in host_policies(values, namespace, release):
            kind = RESOURCE_QUOTAS if policy["kind"] == "ResourceQuota" else LIMIT_RANGES
            self.store.apply(kind, policy, now)
            written.append((kind.plural, namespace, str(policy["metadata"]["name"])))
        chart_version = str(
            as_dict(as_dict(obj.get("spec")).get("chart")).get("spec", {}).get("version", "")
        )
        service = control_plane_service(namespace, release, chart_version)
        live = self.store.get(SERVICES, namespace, release)
        address = as_dict(as_dict(live).get("spec")).get("clusterIP") or cluster_ip(
            namespace, release
        )
        service["spec"].update(clusterIP=address, clusterIPs=[address])
        self.store.apply(SERVICES, service, now)
        written.append((SERVICES.plural, namespace, release))
        state.host_objects = tuple(written)
        # A changed StatefulSet template rolls its pod.
        if self.store.get(PODS, namespace, f"{release}-0") is not None:
            self.cluster.delete_pod(namespace, f"{release}-0", now, recreate=False)
        self._create_control_plane(state, obj, now)

    def _create_control_plane(self, state: _Release, obj: JsonObject, now: float) -> None:
        namespace, release = _release_names(obj)
        values = as_dict(as_dict(obj.get("spec")).get("values"))
        chart_version = str(
            as_dict(as_dict(obj.get("spec")).get("chart")).get("spec", {}).get("version", "")
        )
        if control_plane_replicas(values) == 0:
            state.problem = ""  # asleep: the StatefulSet wants no pod
            return
        pod = control_plane_pod(values, namespace, release, chart_version)
        self.cluster.ensure_namespace(namespace, now)
        try:
            self.cluster.create_pod(pod, release, now, name=f"{release}-0")
            state.problem = ""
        except Rejected as exc:
            # The StatefulSet controller's FailedCreate; it retries, and so do we.
            state.problem = str(exc)

    def _control_plane_problem(self, state: _Release, obj: JsonObject, now: float) -> str:
        """Why the vCluster's control plane is not running yet, or "" when it runs."""
        namespace, release = _release_names(obj)
        try:
            api_server_flags(as_dict(as_dict(obj.get("spec")).get("values")))
        except ApiServerRefused as exc:
            # kube-apiserver exits at once; the syncer container restarts and never gets ready.
            return f"pod {release}-0: container syncer: the API server exited: {exc}"
        if control_plane_replicas(as_dict(as_dict(obj.get("spec")).get("values"))) == 0:
            return ""  # a StatefulSet scaled to zero is ready: helm --wait passes
        pod = self.store.get(PODS, namespace, f"{release}-0")
        if pod is None:
            self._create_control_plane(state, obj, now)
            pod = self.store.get(PODS, namespace, f"{release}-0")
        if pod is None:
            return state.problem or "the StatefulSet has no pod"
        if as_dict(pod.get("status")).get("phase") == "Running":
            return ""
        key = key_of(pod)
        queued = self.cluster.pod_pending(pod)
        if queued is not None:
            return f"pod {key[1]} is queued by Kueue: {queued}"
        for condition in as_list(as_dict(pod.get("status")).get("conditions")):
            condition = as_dict(condition)
            if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                return f"pod {key[1]}: {condition.get('message', '')}"
        return f"pod {key[1]} is not running"

    def _advance_releases(self, now: float) -> None:
        for key, state in self._releases.items():
            current = self.store.get(HELM_RELEASES, *key)
            if not state.installed and current is not None:
                state.installed = True
                if is_vcluster(current):
                    self._install_vcluster(state, current, now)
            if state.due is None or now < state.due:
                continue
            if current is not None and is_vcluster(current):
                # helm --wait: the release is installed once its StatefulSet's pod runs.
                problem = self._control_plane_problem(state, current, now)
                if problem:
                    self.store.mutate(
                        HELM_RELEASES,
                        *key,
                        partial(self._release_failed, state=state, problem=problem, now=now),
                    )
                    continue  # still due: checked again on the next tick
            state.due = None
            released = self.store.mutate(
                HELM_RELEASES, *key, partial(self._released, state=state, now=now)
            )
            if released is not None:
                self._export_kubeconfig(state, released, now)

    @staticmethod
    def _release_failed(obj: JsonObject, state: _Release, problem: str, now: float) -> None:
        """What helm-controller reports when ``helm install --wait`` times out."""
        target, release = _release_names(obj)
        action = state.action.capitalize()
        message = (
            f"Helm {state.action} failed for release {target}/{release} with chart "
            f"vcluster: resource StatefulSet/{target}/{release} not ready: {problem}"
        )
        status = obj["status"] = as_dict(obj.get("status"))
        previous = as_list(status.get("conditions"))
        generation = _generation(obj)
        status["conditions"] = [
            _condition("Ready", "False", f"{action}Failed", message, now, previous, generation),
            _condition("Released", "False", f"{action}Failed", message, now, previous, generation),
        ]
        status["observedGeneration"] = generation

    def _export_kubeconfig(self, state: _Release, release: JsonObject, now: float) -> None:
        """What the vCluster syncer does once it runs: (re)write the kubeconfig Secrets, and
        the control plane answers with the flags and init manifests of these values."""
        namespace, name = _release_names(release)
        secrets = exported_kubeconfigs(release, namespace, name)
        written = tuple(key_of(secret) for secret in secrets)
        for old in state.kubeconfigs:
            if old not in written:
                self.store.delete(SECRETS, *old)
        for secret in secrets:
            self.store.apply(SECRETS, secret, now)
        state.kubeconfigs = written
        if is_vcluster(release):
            cluster = self.virtual.get((namespace, name))
            if cluster is None:
                cluster = VirtualCluster(namespace, name, ca_file=self.config.oidc_ca_file)
                self.virtual[(namespace, name)] = cluster
            values = as_dict(as_dict(release.get("spec")).get("values"))
            cluster.start(values, admin_certificate(namespace, name), now)

    @staticmethod
    def _released(obj: JsonObject, state: _Release, now: float) -> None:
        namespace, name = key_of(obj)
        spec = as_dict(obj.get("spec"))
        chart = as_dict(as_dict(spec.get("chart")).get("spec"))
        chart_name = str(chart.get("chart", name))
        chart_version = str(chart.get("version", "0.0.0"))
        target, release = _release_names(obj)
        storage = str(spec.get("storageNamespace") or target)
        reason = "InstallSucceeded" if state.action == "install" else "UpgradeSucceeded"
        message = (
            f"Helm {state.action} succeeded for release {target}/{release}.v{state.version} "
            f"with chart {chart_name}@{chart_version}"
        )
        status = obj["status"] = as_dict(obj.get("status"))
        previous = as_list(status.get("conditions"))
        generation = _generation(obj)
        config_digest = (
            "sha256:"
            + hashlib.sha256(
                json.dumps(spec.get("values", {}), sort_keys=True).encode()
            ).hexdigest()
        )
        deployed = timestamp(now)
        history = [
            {**as_dict(entry), "status": "superseded"} for entry in as_list(status.get("history"))
        ]
        first = history[-1].get("firstDeployed", deployed) if history else deployed
        entry = {
            "chartName": chart_name,
            "chartVersion": chart_version,
            "configDigest": config_digest,
            "digest": "sha256:"
            + hashlib.sha256(f"{release}.v{state.version}".encode()).hexdigest(),
            "firstDeployed": first,
            "lastDeployed": deployed,
            "name": release,
            "namespace": target,
            "status": "deployed",
            "version": state.version,
        }
        status.update(
            {
                "conditions": [
                    _condition("Ready", "True", reason, message, now, previous, generation),
                    _condition("Released", "True", reason, message, now, previous, generation),
                ],
                "helmChart": f"{namespace}/{namespace}-{name}",
                "history": [entry, *history][:5],
                "lastAppliedRevision": chart_version,
                "lastAttemptedConfigDigest": config_digest,
                "lastAttemptedGeneration": generation,
                "lastAttemptedReleaseAction": state.action,
                "lastAttemptedRevision": chart_version,
                "observedGeneration": generation,
                "storageNamespace": storage,
            }
        )

    # --- KServe ------------------------------------------------------------------------------

    def _start_endpoint(self, key: KId, obj: JsonObject, now: float) -> None:
        """(Re)create the predictor's pods for the InferenceService's current spec, as
        KServe's Deployment and its ReplicaSet would (``kserve.py``)."""
        namespace, name = key
        predictor = as_dict(as_dict(obj.get("spec")).get("predictor"))
        # KServe's default is 1 (pkg/constants DefaultMinReplicas). At 0 the Deployment runs
        # no pod: class "none" sets its replicas to minReplicas (kserve v0.20.0 reconcilers/
        # deployment/deployment_reconciler.go createRawDefaultDeployment); with KEDA the
        # ScaledObject's minReplicaCount is 0 (reconcilers/keda/keda_reconciler.go
        # createKedaScaledObject) and KEDA keeps it there while its trigger reads 0, which a
        # vLLM metric of no pods always does: the simulator plays that idle state. A Deployment
        # of 0 replicas is Available, so the InferenceService stays Ready with no pod
        # (pkg/apis/serving/v1beta1/inference_service_status.go PropagateRawStatus).
        min_replicas = predictor.get("minReplicas", 1)
        replicas = min_replicas if isinstance(min_replicas, int) and min_replicas >= 0 else 1
        self.cluster.delete_pods(namespace, {ISVC_LABEL: name}, now)
        self.cluster.ensure_namespace(namespace, now)
        replica_set, template_hash = kserve.predictor_replica_set(name, predictor)
        labels = {
            **{str(k): str(v) for k, v in as_dict(predictor.get("labels")).items()},
            ISVC_LABEL: name,
            "component": "predictor",
            "app": f"isvc.{name}-predictor",
            "pod-template-hash": template_hash,
        }
        metadata: JsonObject = {
            "namespace": namespace,
            "labels": labels,
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": replica_set,
                    "uid": derived_uuid(namespace, "ReplicaSet", replica_set),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        }
        # The predictor's annotations go on its pods (kserve v0.20.0 pkg/controller/v1beta1/
        # inferenceservice/components/predictor.go buildObjectMeta).
        annotations = {str(k): str(v) for k, v in as_dict(predictor.get("annotations")).items()}
        uri = kserve.storage_uri(predictor)
        if uri:
            annotations[kserve.SOURCE_URI_ANNOTATION] = uri
        if annotations:
            metadata["annotations"] = annotations
        pod = {"metadata": metadata, "spec": kserve.pod_spec(predictor)}
        # The ReplicaSet creates the pods once Flux has applied the whole revision (advance).
        self._endpoints[key] = _Endpoint(now + self.config.ready_delay, replicas, pod, replica_set)

        def pending(current: JsonObject) -> None:
            status = current["status"] = as_dict(current.get("status"))
            previous = as_list(status.get("conditions"))
            status["conditions"] = [
                _condition(kind, "Unknown", "", "", now, previous)
                for kind in ("IngressReady", "PredictorReady", "Ready")
            ]

        self.store.mutate(INFERENCE_SERVICES, *key, pending)

    def _create_replicas(self, key: KId, state: _Endpoint, now: float) -> None:
        """The ReplicaSet controller: create the missing pods; a refused pod is retried on
        the next tick and its message kept for the InferenceService's status."""
        existing = [
            pod
            for pod in self.store.list(PODS, key[0])
            if as_dict(as_dict(pod.get("metadata")).get("labels")).get(ISVC_LABEL) == key[1]
        ]
        state.error = ""
        for _ in range(state.replicas - len(existing)):
            try:
                self.cluster.create_pod(state.pod, state.replica_set, now)
            except Rejected as exc:
                state.error = str(exc)
                logger.info("%s/%s: %s", *key, exc)
                return

    def _advance_endpoints(self, now: float) -> None:
        for key, state in self._endpoints.items():
            self._create_replicas(key, state, now)
            if now < state.ready_at:
                continue
            pods = [
                pod
                for pod in self.store.list(PODS, key[0])
                if as_dict(as_dict(pod.get("metadata")).get("labels")).get(ISVC_LABEL) == key[1]
            ]
            running = sum(1 for pod in pods if as_dict(pod.get("status")).get("phase") == "Running")
            url = self._endpoint_url(*key)
            problem = ("FailedCreate", state.error) if state.error else self._pod_problem(pods)
            self.store.mutate(
                INFERENCE_SERVICES,
                *key,
                partial(
                    self._endpoint_status,
                    ready=running >= state.replicas and not state.error,
                    url=url,
                    now=now,
                    problem=problem,
                ),
            )

    def _pod_problem(self, pods: list[JsonObject]) -> tuple[str, str] | None:
        """Why a predictor pod is not running: Kueue's pending reason or the scheduler's."""
        for pod in pods:
            if as_dict(pod.get("status")).get("phase") == "Running":
                continue
            queued = self.cluster.pod_pending(pod)
            if queued is not None:
                return "QueuedByKueue", queued
            for condition in as_list(as_dict(pod.get("status")).get("conditions")):
                condition = as_dict(condition)
                if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                    return str(condition.get("reason", "")), str(condition.get("message", ""))
        return None

    def _endpoint_url(self, namespace: str, name: str) -> str:
        """The public URL: the HTTPRoute's host and path prefix for the predictor, if any."""
        for route in self.store.list(HTTP_ROUTES, namespace):
            spec = as_dict(route.get("spec"))
            hostnames = [h for h in as_list(spec.get("hostnames")) if isinstance(h, str)]
            for rule in as_list(spec.get("rules")):
                rule = as_dict(rule)
                backends = {as_dict(b).get("name") for b in as_list(rule.get("backendRefs"))}
                if f"{name}-predictor" not in backends or not hostnames:
                    continue
                prefix = next(
                    (
                        str(as_dict(as_dict(m).get("path")).get("value", ""))
                        for m in as_list(rule.get("matches"))
                        if as_dict(as_dict(m).get("path")).get("type") == "PathPrefix"
                    ),
                    "",
                )
                return f"https://{hostnames[0]}{prefix.rstrip('/')}"
        return f"http://{name}-{namespace}.example.com"

    @staticmethod
    def _endpoint_status(
        obj: JsonObject,
        ready: bool,
        url: str,
        now: float,
        problem: tuple[str, str] | None = None,
    ) -> None:
        namespace, name = key_of(obj)
        status = obj["status"] = as_dict(obj.get("status"))
        previous = as_list(status.get("conditions"))
        if ready:
            status["conditions"] = [
                _condition("IngressReady", "True", "", "", now, previous),
                _condition("PredictorReady", "True", "", "", now, previous),
                _condition("Ready", "True", "", "", now, previous),
            ]
            internal = f"http://{name}-predictor.{namespace}.svc.cluster.local"
            status["url"] = url
            status["address"] = {"url": internal}
            status["components"] = {"predictor": {"url": internal, "address": {"url": internal}}}
        else:
            reason = "MinimumReplicasUnavailable"
            message = "Deployment does not have minimum availability."
            if problem is not None:
                # What a ReplicaFailure or a pending pod's condition would tell.
                reason, message = problem[0] or reason, f"{message} {problem[1]}".strip()
            status["conditions"] = [
                _condition("IngressReady", "True", "", "", now, previous),
                _condition("PredictorReady", "False", reason, message, now, previous),
                _condition("Ready", "False", reason, message, now, previous),
            ]
        status["observedGeneration"] = _generation(obj)
        for condition in status["conditions"]:
            # KServe omits empty reasons and messages.
            for field in ("reason", "message"):
                if not condition[field]:
                    del condition[field]
