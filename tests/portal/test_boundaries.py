"""The import rules of DESIGN.md ("Boundaries"), checked by reading every module's imports.

An AST walk rather than import-linter: the rules are few, and this way a broken rule names the
file and line. Imports inside functions count too (a lazy import is still a dependency).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
APPS = ("portal", "tenants", "catalog", "gitops", "fleet", "billing", "api")

# Which apps each app may import, besides itself and portal (DESIGN.md: "catalog -> gitops,
# fleet, tenants; tenants -> gitops; fleet -> gitops; billing -> fleet, tenants, catalog;
# every app -> portal"; the API is another door to the same services: api -> every app).
MAY_IMPORT: dict[str, frozenset[str]] = {
    "portal": frozenset(),
    "tenants": frozenset({"gitops"}),
    "catalog": frozenset({"gitops", "fleet", "tenants"}),
    "gitops": frozenset(),
    "fleet": frozenset({"gitops"}),
    "billing": frozenset({"fleet", "tenants", "catalog"}),
    "api": frozenset({"tenants", "catalog", "gitops", "fleet", "billing"}),
}
# Shared by design, so any app may import them (and not the rest of their app): the access
# rules module every page and service asks; the specs (plain dataclasses: the vocabulary of
# tenants, shares, flavors) and the configured fleet they are read against.
SHARED = ("tenants.access", "gitops.specs", "gitops.fleet")
# The composition root: management commands that seed and serve the whole portal.
ROOTS = ("portal/management/",)
# Code that imports no Django and no Django app: the renderers, the checks, the Git engine and
# the specs they read.
PURE = ("gitops/render/", "gitops/checks/", "gitops/repo.py", "gitops/specs.py")
PURE_MODULES = ("gitops.render", "gitops.checks", "gitops.repo", "gitops.specs")
# The simulator stands in for a cluster and must not share the portal's mistakes: it reads Git
# through the Git engine and nothing else of the project, and imports no Django. Only the
# composition roots that start it (management commands: ``serve``, ``simulator``,
# ``seed_demo``) import it; tests and bench may.
SIMULATOR = "simulator"
SIMULATOR_MAY_IMPORT = ("gitops.repo",)
PROJECT = (*APPS, "portalctl", SIMULATOR)
SIMULATOR_ROOTS = "/management/commands/"
DJANGO = ("django", "rest_framework", "allauth", "drf_spectacular", "template_partials", "csp")
# The only module that talks to libgit2.
PYGIT2_HOME = "gitops/repo.py"


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, absolute module) of every import in ``path``; a relative one resolved against
    the file's package."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = _module_of(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            yield node.lineno, module
            # "from gitops import services" imports gitops.services.
            for alias in node.names:
                yield node.lineno, f"{module}.{alias.name}"


def _sources(folders: tuple[str, ...] = APPS) -> list[Path]:
    return sorted(
        p for app in folders for p in (ROOT / app).rglob("*.py") if "migrations" not in p.parts
    )


def _is(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_the_walk_finds_every_app_and_their_imports() -> None:
    sources = _sources()
    assert {_rel(p).split("/")[0] for p in sources} == set(APPS)
    found = {module for _, module in _imports(ROOT / "billing" / "costing.py")}
    assert {"billing.models", "billing.models.GpuPrice", "django.db.models"} <= found
    found = {module for _, module in _imports(ROOT / SIMULATOR / "flux.py")}
    assert {"gitops.repo", "gitops.repo.GitRepository", "simulator.kustomize"} <= found


def test_apps_import_only_what_the_design_allows() -> None:
    broken = []
    for path in _sources():
        rel = _rel(path)
        if rel.startswith(ROOTS):
            continue
        app = rel.split("/")[0]
        allowed = {app, "portal", *MAY_IMPORT[app]}
        for line, module in _imports(path):
            target = module.split(".")[0]
            if target not in APPS or target in allowed:
                continue
            if any(_is(module, shared) or _is(shared, module) for shared in SHARED):
                continue
            broken.append(f"{rel}:{line} imports {module}")
    assert broken == []


def test_the_pure_code_imports_no_django() -> None:
    broken = []
    for path in _sources():
        rel = _rel(path)
        if not rel.startswith(PURE):
            continue
        for line, module in _imports(path):
            top = module.split(".")[0]
            foreign_app = top in APPS and not any(_is(module, pure) for pure in PURE_MODULES)
            if top == "django" or foreign_app:
                broken.append(f"{rel}:{line} imports {module}")
    assert broken == []


@pytest.mark.parametrize("folder", ["portal", "tenants", "catalog", "gitops", "fleet", "billing"])
def test_only_the_git_engine_imports_pygit2(folder: str) -> None:
    users = [
        f"{_rel(path)}:{line}"
        for path in (ROOT / folder).rglob("*.py")
        for line, module in _imports(path)
        if _is(module.split(".")[0], "pygit2")
    ]
    assert all(user.startswith(PYGIT2_HOME + ":") for user in users), users


def test_the_command_line_client_is_a_client_only() -> None:
    """portalctl runs where the portal does not (a CI job, a laptop): it speaks HTTP and
    imports neither Django nor any app."""
    broken = [
        f"{_rel(path)}:{line} imports {module}"
        for path in sorted((ROOT / "portalctl").rglob("*.py"))
        for line, module in _imports(path)
        if module.split(".")[0] in ("django", "rest_framework", *APPS)
    ]
    assert list((ROOT / "portalctl").rglob("*.py"))
    assert broken == []


def _is_django(module: str) -> bool:
    top = module.split(".")[0]
    return top in DJANGO or top.startswith("django")


def test_the_simulator_imports_nothing_of_the_portal_but_the_git_engine() -> None:
    """No Django, no app, no renderer or check: what it models comes from upstream."""
    broken = []
    for path in _sources((SIMULATOR,)):
        for line, module in _imports(path):
            top = module.split(".")[0]
            if top == SIMULATOR:
                continue
            # "from gitops.repo import X" also names "gitops.repo.X"; "gitops" is the package.
            allowed = module == "gitops" or any(_is(module, m) for m in SIMULATOR_MAY_IMPORT)
            if _is_django(module) or (top in PROJECT and not allowed):
                broken.append(f"{_rel(path)}:{line} imports {module}")
    assert _sources((SIMULATOR,))
    assert broken == []


def test_only_the_composition_roots_import_the_simulator() -> None:
    broken = [
        f"{_rel(path)}:{line} imports {module}"
        for path in _sources()
        if SIMULATOR_ROOTS not in f"/{_rel(path)}"
        for line, module in _imports(path)
        if module.split(".")[0] == SIMULATOR
    ]
    assert broken == []


def test_importing_the_simulator_loads_no_django_and_only_the_git_engine() -> None:
    """What the interpreter actually loads, lazy and indirect imports included."""
    script = (
        "import json, pkgutil, sys, importlib, simulator\n"
        "for m in pkgutil.walk_packages(simulator.__path__, 'simulator.'):\n"
        "    importlib.import_module(m.name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    loaded = json.loads(out)
    project = {m for m in loaded if m.split(".")[0] in PROJECT and m.split(".")[0] != SIMULATOR}
    assert project == {"gitops", "gitops.repo"}
    assert [m for m in loaded if _is_django(m)] == []
