"""Commit latency of the GitOps engine against a working-tree and a clone-per-write baseline.

Run by hand from the project root (it takes a few minutes at 10,000 tenants):

    .venv/bin/python bench/commit_latency.py --tenants 1000 10000

For each fleet size it builds a bare repository of N tenants x 8 manifests (0.5-2 KB each,
written by the engine in one commit, then packed as ``git gc`` would), and times one tenant
change (modify 2 files, add 1) three ways, side by side in the same run:

(a) the engine: ``GitRepository.commit`` on main, and the portal's full path
    (``create_branch`` + ``commit`` + squash ``merge``);
(b) a working tree: a non-bare clone where each change writes the files and runs
    ``git add -A && git commit -q``;
(c) clone per write, as Kratix did before caching: ``git clone --depth=1`` of the bare repo
    (over file://, so through the pack protocol like a remote), write, add, commit, push.

Tenants and contents come from a seeded generator, so runs are repeatable. The first change
of each variant is a warm-up and not counted. Results print as a markdown table.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gitops.repo import GitRepository, Identity

AUTHOR = Identity("Bench Author", "bench@example.com")
GIT_ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": AUTHOR.name,
    "GIT_AUTHOR_EMAIL": AUTHOR.email,
    "GIT_COMMITTER_NAME": AUTHOR.name,
    "GIT_COMMITTER_EMAIL": AUTHOR.email,
}

Change = dict[str, bytes]


# --- the fixture -------------------------------------------------------------------------


def _manifests() -> dict[str, str]:
    """Eight manifest templates shaped like a tenant directory, each 0.5-2 KB when dumped."""
    labels = {
        "app.kubernetes.io/managed-by": "ai-factory-portal",
        "ai-factory.example.com/tenant": "__TENANT__",
        "ai-factory.example.com/cost-centre": "CC-__N__",
    }
    annotations = {
        "ai-factory.example.com/change-request": "https://portal.example.com/changes/__N__/",
        "ai-factory.example.com/requested-by": "__TENANT__-admins@example.com",
        "ai-factory.example.com/approved-by": "platform-team@example.com",
        "ai-factory.example.com/description": (
            "Rendered by the AI factory portal from the approved request of __TENANT__; "
            "edit the request in the portal, not this file."
        ),
    }
    meta = {
        "name": "__TENANT__",
        "namespace": "__TENANT__",
        "labels": labels,
        "annotations": annotations,
    }
    docs = {
        "kustomization.yaml": {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "namespace": "__TENANT__",
            "commonAnnotations": annotations,
            "commonLabels": labels,
            "resources": [
                "namespace.yaml",
                "rbac.yaml",
                "quota.yaml",
                "limits.yaml",
                "network-policy.yaml",
                "kyverno-policy.yaml",
                "queues.yaml",
            ],
        },
        "namespace.yaml": {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": "__TENANT__",
                "labels": {**labels, "pod-security.kubernetes.io/enforce": "restricted"},
                "annotations": annotations,
            },
        },
        "rbac.yaml": {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {**meta, "name": "flux-__TENANT__"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "admin",
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": "flux-__TENANT__", "namespace": "__TENANT__"},
                {
                    "kind": "Group",
                    "name": "__TENANT__-admins",
                    "apiGroup": "rbac.authorization.k8s.io",
                },
            ],
        },
        "quota.yaml": {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {**meta, "name": "compute"},
            "spec": {
                "hard": {
                    "requests.cpu": "__N__",
                    "requests.memory": "__N__Gi",
                    "requests.nvidia.com/gpu": "__N__",
                    "limits.cpu": "__N__",
                    "limits.memory": "__N__Gi",
                    "persistentvolumeclaims": "20",
                    "services.loadbalancers": "0",
                }
            },
        },
        "limits.yaml": {
            "apiVersion": "v1",
            "kind": "LimitRange",
            "metadata": {**meta, "name": "defaults"},
            "spec": {
                "limits": [
                    {
                        "type": "Container",
                        "default": {"cpu": "__N__", "memory": "__N__Gi"},
                        "defaultRequest": {"cpu": "500m", "memory": "1Gi"},
                        "max": {"cpu": "64", "memory": "512Gi"},
                    }
                ]
            },
        },
        "network-policy.yaml": {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {**meta, "name": "tenant-isolation"},
            "spec": {
                "podSelector": {},
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [
                    {
                        "from": [
                            {
                                "namespaceSelector": {
                                    "matchLabels": {"ai-factory.example.com/tenant": "__TENANT__"}
                                }
                            }
                        ]
                    },
                    {
                        "from": [
                            {
                                "namespaceSelector": {
                                    "matchLabels": {"kubernetes.io/metadata.name": "gateway-system"}
                                }
                            }
                        ]
                    },
                ],
                "egress": [
                    {
                        "to": [
                            {
                                "namespaceSelector": {
                                    "matchLabels": {"ai-factory.example.com/tenant": "__TENANT__"}
                                }
                            }
                        ]
                    },
                    {
                        "to": [
                            {
                                "namespaceSelector": {},
                                "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                            }
                        ],
                        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
                    },
                ],
            },
        },
        "kyverno-policy.yaml": {
            "apiVersion": "kyverno.io/v1",
            "kind": "Policy",
            "metadata": {**meta, "name": "gpu-guardrails"},
            "spec": {
                "validationFailureAction": "Enforce",
                "rules": [
                    {
                        "name": "require-queue-label",
                        "match": {"any": [{"resources": {"kinds": ["Pod", "batch/v1/Job"]}}]},
                        "validate": {
                            "message": "Workloads of __TENANT__ must name a Kueue LocalQueue.",
                            "pattern": {
                                "metadata": {"labels": {"kueue.x-k8s.io/queue-name": "?*"}}
                            },
                        },
                    },
                    {
                        "name": "restrict-gpu-requests",
                        "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                        "validate": {
                            "message": "__TENANT__ may request at most __N__ GPUs per pod.",
                            "deny": {
                                "conditions": {
                                    "any": [
                                        {
                                            "key": "{{ request.object.spec.containers[].resources"
                                            '.limits."nvidia.com/gpu" || `0` | sum(@) }}',
                                            "operator": "GreaterThan",
                                            "value": "__N__",
                                        }
                                    ]
                                }
                            },
                        },
                    },
                    {
                        "name": "deny-host-access",
                        "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                        "validate": {
                            "message": "Host namespaces and hostPath volumes are not allowed.",
                            "pattern": {"spec": {"=(hostNetwork)": False, "=(hostPID)": False}},
                        },
                    },
                ],
            },
        },
        "queues.yaml": {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "LocalQueue",
            "metadata": {**meta, "name": "default"},
            "spec": {"clusterQueue": "__TENANT__-cq"},
        },
    }
    return {name: yaml.safe_dump(doc, sort_keys=True) for name, doc in docs.items()}


def _render(template: str, tenant: str, number: int) -> bytes:
    # Only the benchmark fills templates textually: the values are generated, not user input.
    return template.replace("__TENANT__", tenant).replace("__N__", str(number)).encode()


def tenant_names(count: int) -> list[str]:
    return [f"team-{i:05d}" for i in range(count)]


def fleet_files(count: int, rng: random.Random) -> dict[str, bytes | None]:
    templates = _manifests()
    files: dict[str, bytes | None] = {
        "clusters/ai-factory/tenants.yaml": b"apiVersion: kustomize.toolkit.fluxcd.io/v1\n",
        "infrastructure/kueue/cohort.yaml": b"apiVersion: kueue.x-k8s.io/v1alpha1\n",
    }
    for tenant in tenant_names(count):
        for name, template in templates.items():
            files[f"tenants/{tenant}/{name}"] = _render(template, tenant, rng.randint(1, 64))
    return files


def changes(count: int, runs: int, seed: int) -> list[Change]:
    """One tenant change per run: two manifests modified, one endpoint added."""
    rng = random.Random(seed)  # noqa: S311 (seeded for repeatable runs)
    templates = _manifests()
    names = tenant_names(count)
    result = []
    for run in range(runs):
        tenant = rng.choice(names)
        result.append(
            {
                f"tenants/{tenant}/quota.yaml": _render(templates["quota.yaml"], tenant, 100 + run),
                f"tenants/{tenant}/limits.yaml": _render(
                    templates["limits.yaml"], tenant, 100 + run
                ),
                f"tenants/{tenant}/endpoints/llm-{run}.yaml": _render(
                    templates["queues.yaml"], tenant, run
                ),
            }
        )
    return result


# --- measuring ---------------------------------------------------------------------------


@dataclass
class Result:
    variant: str
    samples: list[float]
    note: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def p95(self) -> float:
        ordered = sorted(self.samples)
        return ordered[max(0, -(-95 * len(ordered) // 100) - 1)]  # nearest rank


def timed(step: Callable[[Change], object], work: list[Change]) -> list[float]:
    """Milliseconds per change; the first change is a warm-up and not counted.

    Variants run one after the other, not interleaved: a working-tree commit rewrites git's
    index (megabytes at 10,000 tenants), and its writeback would slow the next variant.
    """
    samples = []
    for run, change in enumerate(work):
        started = time.perf_counter()
        step(change)
        if run:
            samples.append((time.perf_counter() - started) * 1000)
    return samples


def git(*args: str, cwd: Path | None = None) -> None:
    subprocess.run(["git", *args], cwd=cwd, env=GIT_ENV, check=True, stdout=subprocess.DEVNULL)


def write_files(root: Path, change: Change) -> None:
    for path, data in change.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def bench_size(
    count: int, args: argparse.Namespace, root: Path
) -> tuple[list[Result], dict[str, str]]:
    rng = random.Random(args.seed)  # noqa: S311 (seeded for repeatable runs)
    facts: dict[str, str] = {}
    work = changes(count, args.runs + 1, args.seed + count)

    started = time.perf_counter()
    repo = GitRepository.open_or_init(root / "fleet.git")
    files = fleet_files(count, rng)
    repo.commit(
        files, message="Fleet fixture\n", author=AUTHOR, branch="main", expected_parent=None
    )
    facts["build"] = f"{time.perf_counter() - started:.1f} s for {len(files):,} files"
    started = time.perf_counter()
    git("--git-dir", str(repo.path), "repack", "-a", "-d", "-q")
    git("--git-dir", str(repo.path), "prune-packed")
    facts["pack"] = f"{time.perf_counter() - started:.1f} s"
    # Copies for the baselines, taken before the engine writes (same starting tree).
    for name in ("wt.git", "cpw.git"):
        git("clone", "-q", "--bare", str(repo.path), str(root / name))
    os.sync()
    worktree = root / "worktree"

    # (a) the engine, straight on main
    def engine_commit(change: Change) -> object:
        return repo.commit(
            dict(change),
            message="Tenant change\n",
            author=AUTHOR,
            branch="main",
            expected_parent=repo.head("main"),
        )

    # (a) the portal's path for one change request
    counter = iter(range(10**6))

    def engine_change_request(change: Change) -> object:
        number = next(counter)
        base = repo.head("main")
        assert base is not None
        branch = f"change/{number}"
        repo.create_branch(branch, at=base)
        repo.commit(
            {path: data + b"# cr\n" for path, data in change.items()},
            message="Tenant change\n",
            author=AUTHOR,
            branch=branch,
            expected_parent=base,
        )
        return repo.merge(branch, message="Change-Request: 1\n", author=AUTHOR)

    # (b) a working tree with git add/commit
    def worktree_commit(change: Change) -> None:
        write_files(worktree, change)
        git("add", "-A", cwd=worktree)
        git("commit", "-q", "-m", "Tenant change", cwd=worktree)

    # The engine runs first, on a machine holding only the bare repository, as the portal's
    # host does. Checking out the working tree afterwards keeps its writeback (100 MB at
    # 10,000 tenants, still settling after sync) out of the engine's numbers.
    load: dict[str, str] = {}
    samples: dict[str, list[float]] = {}
    rss_before = rss_mib()
    for name, step in (("commit", engine_commit), ("request", engine_change_request)):
        samples[name] = timed(step, work)
        load[name] = f"load {os.getloadavg()[0]:.2f}"
    rss_after = rss_mib()
    tracemalloc.start()
    peaks = []
    for change in work[1:11]:
        tracemalloc.reset_peak()
        engine_commit({path: data + b"# again\n" for path, data in change.items()})
        peaks.append(tracemalloc.get_traced_memory()[1])
    tracemalloc.stop()

    started = time.perf_counter()
    git("clone", "-q", str(root / "wt.git"), str(worktree))
    facts["worktree clone"] = f"{time.perf_counter() - started:.1f} s"
    os.sync()
    samples["worktree"] = timed(worktree_commit, work)
    load["worktree"] = f"load {os.getloadavg()[0]:.2f}"
    results = [
        Result(
            "(a) engine: commit on main",
            samples["commit"],
            f"{load['commit']}; Python peak {max(peaks) / 1024:.0f} KiB/commit; "
            f"RSS {rss_after:.0f} MiB (+{rss_after - rss_before:.1f} over the runs)",
        ),
        Result("(a) engine: branch + commit + squash merge", samples["request"], load["request"]),
        Result(
            "(b) working tree: write, git add -A, git commit",
            samples["worktree"],
            load["worktree"],
        ),
    ]

    # (c) clone per write (fewer runs: each one checks out the whole fleet)
    remote = f"file://{root / 'cpw.git'}"

    def clone_per_write(change: Change) -> None:
        with tempfile.TemporaryDirectory(dir=root) as scratch:
            clone = Path(scratch) / "clone"
            git(
                "clone",
                "-q",
                "--depth=1",
                "--single-branch",
                "--branch",
                "main",
                remote,
                str(clone),
            )
            write_files(clone, change)
            git("add", "-A", cwd=clone)
            git("commit", "-q", "-m", "Tenant change", cwd=clone)
            git("push", "-q", "origin", "HEAD:main", cwd=clone)

    results.append(
        Result(
            "(c) clone per write: clone --depth=1, write, add, commit, push",
            timed(clone_per_write, work[: args.clone_runs + 1]),
            f"load {os.getloadavg()[0]:.2f}",
        )
    )
    facts["objects"] = _disk_usage(repo.path)
    return results, facts


def _disk_usage(path: Path) -> str:
    total = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return f"{total / 2**20:.0f} MiB on disk after the runs"


def table(rows: Iterator[tuple[int, Result, float]]) -> str:
    lines = [
        "| tenants | variant | runs | median ms | p95 ms | vs engine commit | notes |",
        "| ---: | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for count, result, engine in rows:
        factor = result.median / engine
        lines.append(
            f"| {count:,} | {result.variant} | {len(result.samples)} | {result.median:.1f} | "
            f"{result.p95:.1f} | {factor:.1f}x | {result.note} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tenants", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--runs", type=int, default=50, help="timed changes for (a) and (b)")
    parser.add_argument("--clone-runs", type=int, default=5, help="timed changes for (c)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--keep", action="store_true", help="keep the repositories")
    args = parser.parse_args()

    git_version = subprocess.run(["git", "--version"], capture_output=True, text=True).stdout
    git_version = git_version.strip().removeprefix("git version ")
    pygit2_version = importlib.metadata.version("pygit2")
    print(
        f"Machine: {os.cpu_count()} CPUs ({platform.machine()}), Python "
        f"{platform.python_version()}, git {git_version}, pygit2 {pygit2_version}"
    )
    rows: list[tuple[int, Result, float]] = []
    for count in args.tenants:
        root = Path(tempfile.mkdtemp(prefix=f"commit-latency-{count}-"))
        try:
            results, facts = bench_size(count, args, root)
        finally:
            if not args.keep:
                shutil.rmtree(root, ignore_errors=True)
        print(f"{count:,} tenants: " + "; ".join(f"{k} {v}" for k, v in facts.items()))
        engine = results[0].median
        rows.extend((count, result, engine) for result in results)
    print()
    print(table(iter(rows)))


if __name__ == "__main__":
    main()
