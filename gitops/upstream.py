"""The upstream schemas the renderers target, pinned, and ``fetch_schemas`` that downloads them.

Every custom resource the portal writes is validated against its upstream CRD at the version
the renderers target (the versions named beside the rules in ``gitops/render``). This module
lists them: per component, the repository, the commit of that release, and each file's path,
SHA-256 and size. ``fetch`` downloads them from ``raw.githubusercontent.com`` (or a mirror laid
out the same way: ``<base>/<owner>/<repo>/<commit>/<path>``) into a schema directory, the
portal's ``GITOPS_SCHEMA_DIR`` (``var/schemas`` by default), as ``<folder>/<file name>``,
which ``gitops.checks.schema.SchemaRegistry.from_dir`` reads and the simulator serves.

A file is installed only whole and verified: a wrong checksum, a short or long file, a file
that is not CRDs (or JSON, for a chart's values schema), a network error: that file's previous
copy stays in place (or none, the first time) and the reason is reported. Files are written
into a new folder that replaces the previous one in a rename, so a reader never sees half a
set. Nothing is downloaded when there is no network: the first error of the network itself
stops the run, and everything already there stays.

The pins were taken from the releases' own files (``git show <commit>:<path>``); a release
bump changes the commit and every checksum together. This module imports no Django.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

DEFAULT_BASE_URL = "https://raw.githubusercontent.com"
# The record of what a schema directory holds, written last.
SOURCES_FILE = "SOURCES.json"
TIMEOUT_SECONDS = 20.0
# Larger than any pinned file (the KServe LLMInferenceService CRD is 2.25 MB).
MAX_BYTES = 16 * 1024 * 1024
# libyaml when present: the pinned CRDs are 16 MB of YAML.
_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class UpstreamFile:
    path: str  # in the repository
    sha256: str
    size: int

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Component:
    name: str
    version: str
    repo: str  # owner/name on GitHub
    commit: str
    folder: str  # where its files go in the schema directory
    files: tuple[UpstreamFile, ...] = field(default=())

    def url(self, file: UpstreamFile, base_url: str = DEFAULT_BASE_URL) -> str:
        return f"{base_url.rstrip('/')}/{self.repo}/{self.commit}/{file.path}"


COMPONENTS: tuple[Component, ...] = (
    Component(
        "kueue",
        "v0.19.2",
        "kubernetes-sigs/kueue",
        "8eab68778fc1b52affe165fdf5af29d1e9b4f3cb",
        folder="kueue",
        files=(
            UpstreamFile(
                "config/components/crd/bases/kueue.x-k8s.io_admissionchecks.yaml",
                "2bf4003c0a3ea3d6ceab940c7a271ad211372dab59d2739acfa8b2bdb0724acb",
                13746,
            ),
            UpstreamFile(
                "config/components/crd/bases/kueue.x-k8s.io_clusterqueues.yaml",
                "e0a5fc9b370c70f3d993d4f599865817338ecf94187b30b15b12ff33c579bd55",
                85909,
            ),
            UpstreamFile(
                "config/components/crd/bases/kueue.x-k8s.io_cohorts.yaml",
                "61fbe5ec55d45e7fae2d65321fb32517b197257ab78ad55316673183aac911c2",
                30575,
            ),
            UpstreamFile(
                "config/components/crd/bases/kueue.x-k8s.io_localqueues.yaml",
                "dd10ef8d3578e7212fa52763549e7b6be0949793a5b924495fcd293330109fed",
                34771,
            ),
            UpstreamFile(
                "config/components/crd/bases/kueue.x-k8s.io_resourceflavors.yaml",
                "19e339c47e9ca3fa2c9eeddd27715a512f765c4794ed859733408a9715720173",
                20182,
            ),
            UpstreamFile(
                "config/components/crd/bases/kueue.x-k8s.io_topologies.yaml",
                "f703575d3bb64d26f6e839f831e01646367ed41a89b3abf163f8e842ca1c4d2b",
                6247,
            ),
            UpstreamFile(
                "config/components/crd/bases/kueue.x-k8s.io_workloadpriorityclasses.yaml",
                "0b755726aab05b8def9a53ee15b201eed3846bcffd1ff5528fed123f4ae03519",
                4629,
            ),
            UpstreamFile(
                "config/components/crd/bases/kueue.x-k8s.io_workloads.yaml",
                "1970ff6fcc5dc1a29e3f290ed736032c5d4509c94efe2c642d64a244ad1b8aa5",
                1413671,
            ),
        ),
    ),
    Component(
        "kserve",
        "v0.20.0",
        "kserve/kserve",
        "1fb781055dd1567164358233e1125142ca6ef1fe",
        folder="kserve",
        files=(
            UpstreamFile(
                "config/crd/full/serving.kserve.io_inferenceservices.yaml",
                "57c3bf13f77de94678bf2ae3748056ec071ad2b9e88d6a28f44fb4710758fcff",
                1959187,
            ),
            UpstreamFile(
                "config/crd/full/serving.kserve.io_servingruntimes.yaml",
                "380a3e1e1444cef9b8b88819596692728868205a2147dc66423be469a4a7bbb1",
                196301,
            ),
            UpstreamFile(
                "config/crd/full/serving.kserve.io_clusterservingruntimes.yaml",
                "c6f6bbb1b4b11afd1e38bd6d7255a8795b86efa2b7d14946ccff9d23592e6846",
                196333,
            ),
            UpstreamFile(
                "config/crd/full/llmisvc/serving.kserve.io_llminferenceservices.yaml",
                "4377745d253c5c6407ccd46aecdfadcea160ba77a0976dd2d112f0ca9a1ac53f",
                2246097,
            ),
            UpstreamFile(
                "config/crd/full/clusterstoragecontainer/serving.kserve.io_clusterstoragecontainers.yaml",
                "47ec2b6caeeb0c210d8be3138ed7d391f74043e3ed779177d36ceb4aa2a5d288",
                29800,
            ),
            UpstreamFile(
                "config/crd/full/localmodel/serving.kserve.io_localmodelcaches.yaml",
                "51d10e565a118af7da31250e99d6e8ff59bdc9f0e9fb4e4d1c1c3e2eb591bdef",
                3037,
            ),
            UpstreamFile(
                "config/crd/full/localmodel/serving.kserve.io_localmodelnodegroups.yaml",
                "189a262754e7f07e1ce34ef44352aaf75e755cacdf45e710a4dcab29e0751b45",
                25233,
            ),
        ),
    ),
    Component(
        "flux/kustomize-controller",
        "v1.9.4 (Flux v2.9.4)",
        "fluxcd/kustomize-controller",
        "1324b615da01038e2859cbcde604bd5434f21933",
        folder="flux",
        files=(
            UpstreamFile(
                "config/crd/bases/kustomize.toolkit.fluxcd.io_kustomizations.yaml",
                "da23ca0e6b4c80d3d26a91583137491e147ef4ef1e2208aece0d0af4ef851974",
                40516,
            ),
        ),
    ),
    Component(
        "flux/helm-controller",
        "v1.6.3 (Flux v2.9.4)",
        "fluxcd/helm-controller",
        "372c34e2b4a455d24ef6cbb8321c82c4533dbbd8",
        folder="flux",
        files=(
            UpstreamFile(
                "config/crd/bases/helm.toolkit.fluxcd.io_helmreleases.yaml",
                "aa8638ac68465ceac1f93a617baf5be833c589c51fd78a7384a4a274c252becc",
                76239,
            ),
        ),
    ),
    Component(
        "flux/source-controller",
        "release/v1.9.x (Flux v2.9.4)",
        "fluxcd/source-controller",
        "c4adb7f9a2feeb9dccf6150bae4be291e846c130",
        folder="flux",
        files=(
            UpstreamFile(
                "config/crd/bases/source.toolkit.fluxcd.io_gitrepositories.yaml",
                "bd0c08183287b2eea0d885751fc686bc4b2b583e919de6bd57859170b8d1727f",
                22260,
            ),
            UpstreamFile(
                "config/crd/bases/source.toolkit.fluxcd.io_helmrepositories.yaml",
                "0f3c34df4a25c88c7ad7825ada26d696aa53d92ec2c0ca540e1f9a05db247fa9",
                14908,
            ),
            UpstreamFile(
                "config/crd/bases/source.toolkit.fluxcd.io_ocirepositories.yaml",
                "80c7c6e5c8de0764cc83acd4de5c74bea8e51186085304d22cecc5f2eb35500e",
                19574,
            ),
            UpstreamFile(
                "config/crd/bases/source.toolkit.fluxcd.io_helmcharts.yaml",
                "3e319fc2b5c4aeaf8fa3ca161c253037e2f78177b986a0df3e85ba4853615b05",
                15965,
            ),
        ),
    ),
    Component(
        "kyverno",
        "v1.19.0",
        "kyverno/kyverno",
        "ee97ce09538b09b6f1b03853cc41a62654d6a58f",
        folder="kyverno",
        files=(
            UpstreamFile(
                "config/crds/kyverno/kyverno.io_clusterpolicies.yaml",
                "fb041ee35f8e89b5bca566bb6e00cd67fccc30be8859998757333f2a40d79655",
                1423961,
            ),
            UpstreamFile(
                "config/crds/kyverno/kyverno.io_policies.yaml",
                "e6475e41d8ae4640913e92958ddfa03a61fbcbf857170f3c9783ae06f8c52a08",
                1424181,
            ),
            UpstreamFile(
                "config/crds/kyverno/kyverno.io_policyexceptions.yaml",
                "83d0478d61e88890c0dbf1e8360f5e5b7bb7d5708d0cc2d52c7dab8cfc833dbc",
                75214,
            ),
            UpstreamFile(
                "config/crds/policies.kyverno.io/policies.kyverno.io_validatingpolicies.yaml",
                "87d8700778623b26ae2c9b2f512713e478714ddd0fbcb4e44574c76ae015f10f",
                300554,
            ),
        ),
    ),
    Component(
        "cilium/network-policies",
        "main c5425193 (1.20.0-dev)",
        "cilium/cilium",
        "c5425193f696f9f97da937213faf73b003b69ab5",
        folder="cilium",
        files=(
            UpstreamFile(
                "pkg/k8s/apis/cilium.io/client/crds/v2/ciliumnetworkpolicies.yaml",
                "5ffd72b1c8cd57c1acbed5cfe4fdc68ae056d88c391e7be86890d71c0427d45b",
                398166,
            ),
            UpstreamFile(
                "pkg/k8s/apis/cilium.io/client/crds/v2/ciliumclusterwidenetworkpolicies.yaml",
                "2f39a914f4d4022d46c0aefda2541d5a311d79d7ac69a0cffec89ecbd6b0c7c0",
                398449,
            ),
        ),
    ),
    Component(
        "cilium/cidr-groups",
        "main 80e3a6e1 (1.20.0-dev)",
        "cilium/cilium",
        "80e3a6e1fb53bea41856eabfe0b0676892452334",
        folder="cilium",
        files=(
            UpstreamFile(
                "pkg/k8s/apis/cilium.io/client/crds/v2/ciliumcidrgroups.yaml",
                "8060269a3ef63271578a090bbe5be135d0dad2932f7ccc7204b37820c990e535",
                4067,
            ),
        ),
    ),
    Component(
        "gateway-api",
        "v1.6.1 (standard channel)",
        "kubernetes-sigs/gateway-api",
        "8bb74df00e56ec8f944d48c25e6c1c9c2f6848e3",
        folder="gateway-api",
        files=(
            UpstreamFile(
                "config/crd/standard/gateway.networking.k8s.io_gatewayclasses.yaml",
                "53710048ba26f8620eed59d5e51b157ecf040daf5c6eef31a4b991e0808c4be5",
                23255,
            ),
            UpstreamFile(
                "config/crd/standard/gateway.networking.k8s.io_gateways.yaml",
                "25b885f5870b8fff1ae82efa2628b2761cef3745900c2aecf8fb76629a01255a",
                188714,
            ),
            UpstreamFile(
                "config/crd/standard/gateway.networking.k8s.io_grpcroutes.yaml",
                "53a8d029da8f07e55d3fa58a5cf6de5950dab19fbb8d6a8082fb5e51ca5ef6fc",
                122702,
            ),
            UpstreamFile(
                "config/crd/standard/gateway.networking.k8s.io_httproutes.yaml",
                "a424a0d6c953b162e71d1d97bb7e75012d8f1ac264e7274f2763d1b96ab39852",
                429088,
            ),
            UpstreamFile(
                "config/crd/standard/gateway.networking.k8s.io_referencegrants.yaml",
                "8c645e9333cfa67790cc2a53e0c00076f88b2bd4230d2b49688c78bc34f9b2c3",
                14848,
            ),
        ),
    ),
    Component(
        "external-secrets",
        "v2.9.0",
        "external-secrets/external-secrets",
        "378bdb622ed9712ef4a58370f6a17af033b7d343",
        folder="external-secrets",
        files=(
            UpstreamFile(
                "config/crds/bases/external-secrets.io_clustersecretstores.yaml",
                "f847c69ae317a76527fc37c163ddfe15d9026e14eb47dd325319e914e0433c2a",
                689877,
            ),
            UpstreamFile(
                "config/crds/bases/external-secrets.io_externalsecrets.yaml",
                "5044be5a610ca90a075f34f03ed20b462695c43387ba9410db7f4250e47b1e2f",
                71681,
            ),
            UpstreamFile(
                "config/crds/bases/external-secrets.io_secretstores.yaml",
                "7f750858d393913915a2f15daff9e1d2f56ca207c09920c055d7a68cceacb641",
                689830,
            ),
        ),
    ),
    Component(
        "prometheus-operator",
        "v0.93.0",
        "prometheus-operator/prometheus-operator",
        "f8fafd475f3d132e239432ae6172de60a6cb6516",
        folder="prometheus-operator",
        files=(
            UpstreamFile(
                "example/prometheus-operator-crd/monitoring.coreos.com_podmonitors.yaml",
                "45a93443daa687d3654f7e9631909ff7edcdf3ec09c5e60251b74aa2722aee5d",
                73786,
            ),
            UpstreamFile(
                "example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml",
                "78be98554b9c8506ab2b4f4feb91c5f3a56e536a0a510f3a8e876a459970d56d",
                13110,
            ),
            UpstreamFile(
                "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml",
                "a99047972c9dd7679ce2050b9968e8a08773492e671b3e17abd476d42aa78a32",
                74781,
            ),
        ),
    ),
    Component(
        "keda",
        "v2.20.2",
        "kedacore/keda",
        "68a5b5028f35b22d50597c69819ab32c4e92f21a",
        folder="keda",
        files=(
            UpstreamFile(
                "config/crd/bases/keda.sh_scaledobjects.yaml",
                "af35555862a83933b074af14ad439c4b4ceabaf4daa3e9338e9b23e36d308d80",
                22397,
            ),
            UpstreamFile(
                "config/crd/bases/keda.sh_triggerauthentications.yaml",
                "275307b4cb19ca8f0f506a879282aa4c67587ac16ec757f494d6585c5c185d65",
                25683,
            ),
        ),
    ),
    Component(
        "gpu-operator",
        "v26.7.0",
        "NVIDIA/gpu-operator",
        "10ee5b3638b89e11e949412aafa5ba99279c3721",
        folder="gpu-operator",
        files=(
            UpstreamFile(
                "deployments/gpu-operator/crds/nvidia.com_clusterpolicies.yaml",
                "fcece7d07504e57fd5815525b3baa1eccc659a2f3b48895578be731dcde4042a",
                152311,
            ),
            UpstreamFile(
                "deployments/gpu-operator/crds/nvidia.com_nvidiadrivers.yaml",
                "8a067afa77b7650f603b2bbeb272a3e8c8824256d33f1dce0c96dcf5e9efb16e",
                61929,
            ),
        ),
    ),
    Component(
        "envoy-gateway",
        "v1.9.0",
        "envoyproxy/gateway",
        "39763b1c07ec30a5526fe70434a2cfe4181de642",
        folder="envoy-gateway",
        files=(
            UpstreamFile(
                "charts/gateway-helm/charts/crds/crds/generated/gateway.envoyproxy.io_backendtrafficpolicies.yaml",
                "cd75a4c222df5487aa9ca8957b48bcc3255eb25de02ed9153faf620bc160f786",
                223986,
            ),
            UpstreamFile(
                "charts/gateway-helm/charts/crds/crds/generated/gateway.envoyproxy.io_clienttrafficpolicies.yaml",
                "2c7eaa1ce30de626e9c362b8d9002281c2f435f970020fa81902ad7f30b38d5b",
                123719,
            ),
            UpstreamFile(
                "charts/gateway-helm/charts/crds/crds/generated/gateway.envoyproxy.io_envoyproxies.yaml",
                "3e9ea2f348445e3798b02daf02bf024b0d944227cf5ef8a18da7f675a1afd223",
                1412988,
            ),
            UpstreamFile(
                "charts/gateway-helm/charts/crds/crds/generated/gateway.envoyproxy.io_securitypolicies.yaml",
                "6412914ec5b7c48f58b85f60a80767ba15a50c8d374480cf5f2d872e4a764466",
                538313,
            ),
        ),
    ),
    Component(
        "vcluster",
        "chart 0.35.3",
        "loft-sh/vcluster",
        "57da739f08d3e122a8b9fb8fd091972876ffb65e",
        folder="vcluster",
        files=(
            UpstreamFile(
                "chart/values.schema.json",
                "9d0af09c69fa21d678dadba3c420141282a3f34c931d3b2687d0f8d18c383464",
                228278,
            ),
        ),
    ),
    # Multi-node batch jobs (gitops/render/jobs.py): the release Kueue v0.19.2 builds against
    # (its go.mod requires sigs.k8s.io/jobset v0.12.0).
    Component(
        "jobset",
        "v0.12.0",
        "kubernetes-sigs/jobset",
        "f22e565ac3cc3265c7c45ef67ecffdc689af5d77",
        folder="jobset",
        files=(
            UpstreamFile(
                "config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml",
                "d022b87624512cf0b6741b31b24a2bea9945b5a838b50713af29332c878bb6fe",
                823762,
            ),
        ),
    ),
    # The one chart of gitops/render/stack.py with a values schema at its pinned version.
    Component(
        "cert-manager",
        "chart v1.21.1",
        "cert-manager/cert-manager",
        "24e33194fb39488eff2bbf10c6dc640f407cad44",
        folder="cert-manager",
        files=(
            UpstreamFile(
                "deploy/charts/cert-manager/values.schema.json",
                "47730ad9154f6cde7a081de7541f88e085ff92a5e5fd65a41a3d0223ff735bea",
                114144,
            ),
        ),
    ),
)


@dataclass
class FileOutcome:
    component: str
    file: str  # <folder>/<name>
    installed: bool
    message: str


@dataclass
class FetchReport:
    directory: str
    outcomes: list[FileOutcome] = field(default_factory=list)
    offline: str = ""  # the network error that stopped the run, if one did

    @property
    def installed(self) -> list[FileOutcome]:
        return [o for o in self.outcomes if o.installed]

    @property
    def problems(self) -> list[FileOutcome]:
        return [o for o in self.outcomes if not o.installed]


class NetworkUnavailable(OSError):
    """The network itself failed (no route, no DNS): no later file would arrive either."""


Opener = Callable[[str], bytes]


def http_get(url: str, *, timeout: float = TIMEOUT_SECONDS) -> bytes:
    """The body of ``url``; ``NetworkUnavailable`` when the network fails, ``OSError`` for an
    answer that is no file (404, a server error)."""
    request = urllib.request.Request(url, headers={"User-Agent": "ai-factory-portal"})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            data: bytes = response.read(MAX_BYTES + 1)
            return data
    except urllib.error.HTTPError as exc:
        raise OSError(f"HTTP {exc.code} {exc.reason}") from exc
    except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
        reason = getattr(exc, "reason", exc)
        raise NetworkUnavailable(f"no network: {reason}") from exc


def verify(file: UpstreamFile, data: bytes) -> str:
    """Why ``data`` is not ``file`` (or "" when it is)."""
    if len(data) != file.size:
        what = "truncated" if len(data) < file.size else "too long"
        return f"{what}: {len(data)} bytes, expected {file.size}"
    digest = hashlib.sha256(data).hexdigest()
    if digest != file.sha256:
        return f"checksum mismatch: sha256 {digest[:16]}..., expected {file.sha256[:16]}..."
    return ""


def content_problem(name: str, data: bytes) -> str:
    """Why a verified file still cannot be used ("" when it can): not JSON for a values
    schema, not YAML made only of CustomResourceDefinitions for the others."""
    try:
        if name.endswith(".json"):
            json.loads(data)
            return ""
        docs = [d for d in yaml.load_all(data, Loader=_LOADER) if d is not None]
    except (ValueError, yaml.YAMLError) as exc:
        return f"malformed: {str(exc).splitlines()[0]}"
    if not docs:
        return "malformed: no document"
    for doc in docs:
        spec = doc.get("spec") if isinstance(doc, dict) else None
        if (
            not isinstance(doc, dict)
            or doc.get("kind") != "CustomResourceDefinition"
            or not isinstance(spec, dict)
            or not isinstance(spec.get("group"), str)
            or not isinstance((spec.get("names") or {}).get("kind"), str)
        ):
            return "malformed: not a CustomResourceDefinition"
    return ""


def fetch(
    directory: str | Path,
    *,
    components: Iterable[Component] = COMPONENTS,
    base_url: str = DEFAULT_BASE_URL,
    opener: Opener | None = None,
    progress: Callable[[str], None] = lambda line: None,
) -> FetchReport:
    """Download ``components`` into ``directory`` (see the module docstring)."""
    target = Path(directory)
    get = opener or http_get
    chosen = list(components)
    total = sum(len(c.files) for c in chosen)
    report = FetchReport(str(target))
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        if target.is_dir():
            # What is there stays unless a verified file replaces it.
            shutil.copytree(target, staging, dirs_exist_ok=True)
        done = 0
        for component in chosen:
            for file in component.files:
                done += 1
                where = f"{component.folder}/{file.name}"
                outcome = _one(get, component, file, base_url, staging / where, report)
                report.outcomes.append(outcome)
                progress(
                    f"[{done}/{total}] {component.name} {component.version} {file.name}: "
                    f"{outcome.message}"
                )
                if report.offline:
                    break
            if report.offline:
                break
        if report.installed:
            _write_sources(staging, chosen, report, base_url)
            _swap(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return report


def _one(
    get: Opener,
    component: Component,
    file: UpstreamFile,
    base_url: str,
    destination: Path,
    report: FetchReport,
) -> FileOutcome:
    where = f"{component.folder}/{file.name}"
    kept = "previous copy kept" if destination.exists() else "none installed"
    try:
        data = get(component.url(file, base_url))
    except NetworkUnavailable as exc:
        report.offline = str(exc)
        return FileOutcome(component.name, where, False, f"{exc}; {kept}")
    except OSError as exc:
        return FileOutcome(component.name, where, False, f"download failed: {exc}; {kept}")
    problem = verify(file, data) or content_problem(file.name, data)
    if problem:
        return FileOutcome(component.name, where, False, f"{problem}; {kept}")
    destination.parent.mkdir(parents=True, exist_ok=True)
    destination.write_bytes(data)
    return FileOutcome(component.name, where, True, f"ok, {len(data) / 1000:.2f} kB")


def _write_sources(
    staging: Path, components: list[Component], report: FetchReport, base_url: str
) -> None:
    previous: dict[str, Any] = {}
    path = staging / SOURCES_FILE
    if path.exists():
        try:
            previous = json.loads(path.read_text(encoding="utf-8")).get("files", {})
        except (ValueError, AttributeError):
            previous = {}
    files = dict(previous)
    now = datetime.now(UTC).isoformat(timespec="seconds")
    by_file = {o.file: o for o in report.installed}
    for component in components:
        for file in component.files:
            where = f"{component.folder}/{file.name}"
            if where in by_file:
                files[where] = {
                    "component": component.name,
                    "version": component.version,
                    "url": component.url(file, base_url),
                    "sha256": file.sha256,
                    "fetched_at": now,
                }
    path.write_text(json.dumps({"files": files}, indent=2, sort_keys=True), encoding="utf-8")


def _swap(staging: Path, target: Path) -> None:
    """Put ``staging`` where ``target`` is, in renames (the old one removed after)."""
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}-old-{os.getpid()}")
        os.replace(target, old)
    os.replace(staging, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def installed_versions(directory: str | Path) -> dict[str, str]:
    """``{component: version}`` of what ``fetch`` installed in ``directory`` (empty if none)."""
    try:
        data = json.loads((Path(directory) / SOURCES_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, dict):
        return {}
    return {
        str(entry.get("component")): str(entry.get("version"))
        for entry in files.values()
        if isinstance(entry, dict)
    }


__all__ = ["COMPONENTS", "Component", "FetchReport", "UpstreamFile", "fetch", "verify"]
