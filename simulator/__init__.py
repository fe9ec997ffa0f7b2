"""The simulator: a GPU fleet that speaks the Kubernetes REST API over real HTTP.

The portal's client code runs against it unchanged, for ``make demo`` and for the tests. It
simulates nodes with GPUs (``cluster``), plays Flux, helm-controller and KServe against the
portal's Git repository (``flux``), serves the API, DCGM metrics and OpenCost's allocation
API (``server``, ``opencost``) and each tenant cluster's own API (``virtual``), whose pods and
Services vCluster's syncer takes into the host (``syncer``), and takes faults. It imports no
Django models: it runs in a thread of ``manage.py serve`` or alone through ``manage.py
simulator``.

Usage::

    sim = Simulator(SimConfig.demo(), repo_path="var/git/fleet.git")
    url = sim.start()            # http://127.0.0.1:<port>, API and tick thread running
    sim.inject_xid("h200-03", gpu=3, xid=79)
    sim.tick()                   # one controller step now (tests), instead of waiting
    sim.stop()

Times are wall-clock seconds (``time.time()``); ``tick(now)`` takes one explicitly.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from simulator import burnin, kueue_webhooks
from simulator.cluster import Cluster, NotFound
from simulator.config import SimConfig, load_config, validate_config
from simulator.crds import install_crds, load_crds
from simulator.dcgm import GpuSample
from simulator.flux import FluxPlayer, Resolver, Verifier
from simulator.gc import GarbageCollector
from simulator.notify import Notifier
from simulator.rbac import bootstrap_objects, split_service_account
from simulator.server import Api, ApiServer
from simulator.store import (
    PODS,
    RESOURCES,
    SECRETS,
    JsonObject,
    Store,
    as_dict,
    as_list,
    resource_of,
)
from simulator.syncer import Syncer

__all__ = ["SimConfig", "Simulator", "load_config"]

logger = logging.getLogger(__name__)

TICK_SECONDS = 0.5


class Simulator:
    """One simulated fleet: its store, hardware, Flux player and (once started) HTTP API."""

    def __init__(
        self,
        config: SimConfig,
        *,
        repo_path: str | Path | None = None,
        branch: str = "main",
        token: str = "",
        service_account_tokens: Mapping[str, str] | None = None,
        git_credentials: tuple[str, str] = ("git", "flux-bootstrap"),
        verify_git: Verifier | None = None,
        resolve_git: Resolver | None = None,
        clock: Callable[[], float] = time.time,
        flux_events_secret: bytes = b"",
    ) -> None:
        """``git_credentials`` go into the ``flux-system`` Secret, as ``flux bootstrap`` writes
        it. ``verify_git(url, username, password)`` decides whether the Git server would serve
        a source (default: any non-empty pair); ``resolve_git(url)`` maps a source URL to the
        local bare repository it reads (default: ``repo_path``). ``clock`` is the time the
        DCGM exporter reports at (a test sets it, so usage and energy are known exactly).
        ``flux_events_secret`` is the generic-hmac Provider's key for the events posted to
        ``config.flux_events_address``. ``token`` authenticates an administrator (in
        ``system:masters``); ``service_account_tokens`` maps further tokens to the service
        accounts they authenticate (``system:serviceaccount:<ns>:<name>``), whose requests
        RBAC authorises, impersonation included."""
        validate_config(config)
        self.config = config
        self.token = token
        self.service_account_tokens = dict(service_account_tokens or {})
        for account in self.service_account_tokens.values():
            if split_service_account(account) is None:
                raise ValueError(f"{account!r} is not system:serviceaccount:<namespace>:<name>")
        self.clock = clock
        now = time.time()
        self.store = Store(config.seed, config.watch_window)
        self.notifier: Notifier | None = None
        if config.flux_events_address:
            self.notifier = Notifier(config.flux_events_address, flux_events_secret)
            self.store.listen(self.notifier.observe)
        self.cluster = Cluster(config, self.store, now)
        # The API server's bootstrap RBAC, which impersonated requests are authorised against
        # beside what Flux applies (``rbac``).
        for obj in bootstrap_objects():
            resource = resource_of(obj["apiVersion"], obj["kind"])
            assert resource is not None
            self.store.apply(resource, obj, now)
        self.gc = GarbageCollector(self.store, self.cluster)
        self.burn_in_faults = burnin.BurnInFaults()
        if config.crd_dir:
            install_crds(self.store, load_crds(config.crd_dir), now)
        self.flux = FluxPlayer(
            config,
            self.store,
            self.cluster,
            repo_path,
            branch,
            verifier=verify_git,
            resolve=resolve_git,
        )
        # Each running tenant cluster's vCluster syncer (pods, Services, Endpoints to the host).
        self.syncer = Syncer(self.store, self.cluster, self.flux.running_virtual_clusters)
        username, password = git_credentials
        self.store.apply(
            SECRETS,
            {
                "metadata": {"name": "flux-system", "namespace": "flux-system"},
                "type": "Opaque",
                "data": {
                    "username": base64.b64encode(username.encode()).decode(),
                    "password": base64.b64encode(password.encode()).decode(),
                },
            },
            now,
        )
        self._tick_lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: ApiServer | None = None
        self._threads: list[threading.Thread] = []

    @property
    def url(self) -> str:
        """The base URL of the API; empty until ``start``."""
        if self._server is None:
            return ""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(
        self, host: str = "127.0.0.1", port: int = 0, *, tick_seconds: float | None = TICK_SECONDS
    ) -> str:
        """Serve the API (port 0 picks a free one) and tick every ``tick_seconds`` (None: only
        when ``tick`` is called, for deterministic tests), in daemon threads; returns the base
        URL."""
        if self._server is not None:
            return self.url
        self._stopping.clear()
        self._server = ApiServer((host, port), Api(self))
        self._threads = [
            threading.Thread(
                target=self._server.serve_forever,
                kwargs={"poll_interval": 0.2},
                name="simulator-api",
                daemon=True,
            )
        ]
        if tick_seconds is not None:
            self._threads.append(
                threading.Thread(
                    target=self._tick_forever,
                    args=(tick_seconds,),
                    name="simulator-tick",
                    daemon=True,
                )
            )
        for thread in self._threads:
            thread.start()
        if self.notifier is not None:
            self.notifier.start()
        logger.info("simulator serving at %s", self.url)
        return self.url

    @property
    def stopping(self) -> bool:
        """Whether ``stop`` was called: open watches end."""
        return self._stopping.is_set()

    def stop(self) -> None:
        self._stopping.set()
        if self.notifier is not None:
            self.notifier.stop()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        for thread in self._threads:
            thread.join(timeout=10)
        self._threads = []

    def __enter__(self) -> Simulator:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def _tick_forever(self, seconds: float) -> None:
        while not self._stopping.wait(seconds):
            try:
                self.tick()
            except Exception:
                # A bad commit or a failing kubectl must not stop the fleet from ticking.
                logger.exception("simulator tick failed")

    def tick(self, now: float | None = None) -> None:
        """One step of every controller: Flux, the scheduler, helm-controller and KServe, the
        tenant clusters' syncers and the garbage collector."""
        moment = time.time() if now is None else now
        with self._tick_lock:
            self.flux.tick(moment)
            self.cluster.tick(moment)
            self.flux.advance(moment)
            self.syncer.tick(moment)
            self.gc.tick(moment)

    def inject_xid(self, node: str, gpu: int, xid: int) -> None:
        self.cluster.inject_xid(node, gpu, xid, time.time())

    def set_gpu_idle(self, node: str, gpu: int | None, idle: bool = True) -> None:
        self.cluster.set_gpu_idle(node, gpu, idle, time.time())

    def set_node_ready(self, node: str, ready: bool) -> None:
        self.cluster.set_node_ready(node, ready, time.time())

    def set_condition(
        self, node: str, kind: str, status: str = "True", reason: str = "", message: str = ""
    ) -> None:
        """A node agent (NVSentinel, Node Problem Detector) sets a node condition."""
        self.cluster.set_agent_condition(
            node, kind, status, reason or kind, message or kind, time.time()
        )

    def fail_diag(self, node: str, test: str) -> None:
        """``dcgmi diag`` on ``node`` fails ``test`` from now on (``simulator.burnin``)."""
        self._known_node(node)
        self.burn_in_faults.fail_diag(node, test)

    def slow_nccl(self, node: str, share: float) -> None:
        """NCCL's bus bandwidth on ``node`` is ``share`` of nominal from now on."""
        self._known_node(node)
        self.burn_in_faults.slow_nccl(node, share)

    def _known_node(self, node: str) -> None:
        if node not in self.cluster.nodes:
            raise NotFound(f'nodes "{node}" not found')

    def program_output(self, pod: Mapping[str, Any], container: str) -> list[str]:
        """What a burn-in program in ``container`` printed on its node (``simulator.burnin``)."""
        node = self.cluster.nodes.get(str(as_dict(pod.get("spec")).get("nodeName") or ""))
        if node is None:
            return []
        return burnin.output_lines(
            pod,
            container,
            node.group.product,
            len(node.gpus),
            self.burn_in_faults,
            self._job_members(pod),
        )

    def _job_members(self, pod: Mapping[str, Any]) -> list[tuple[str, str]]:
        """(node, GPU product) of each bound pod of ``pod``'s indexed Job."""
        metadata = as_dict(pod.get("metadata"))
        labels = as_dict(metadata.get("labels"))
        job = labels.get("batch.kubernetes.io/job-name")
        if not job or burnin.COMPLETION_INDEX not in labels:
            return []
        members = []
        for other in self.cluster.store.list(PODS, str(metadata.get("namespace", ""))):
            other_labels = as_dict(as_dict(other.get("metadata")).get("labels"))
            node = self.cluster.nodes.get(str(as_dict(other.get("spec")).get("nodeName") or ""))
            if other_labels.get("batch.kubernetes.io/job-name") == job and node is not None:
                members.append((node.name, node.group.product))
        return members

    def set_kueue_webhook_reachable(self, reachable: bool) -> None:
        """Kueue's webhook Service answers again, or not (a fault): while it does not, the
        API server refuses to create (or dry-run) a Job or JobSet outside ``kube-system`` and
        ``kueue-system`` with 500 InternalError, as its webhooks fail closed
        (``kueue_webhooks.called_webhook``), and stores nothing."""
        with self.store.lock:
            if reachable:
                self.store.unreachable_services.discard(kueue_webhooks.SERVICE)
            else:
                self.store.unreachable_services.add(kueue_webhooks.SERVICE)

    def clear_faults(self) -> None:
        """Every node ready and every GPU healthy again, and every webhook reachable."""
        self.cluster.clear_faults(time.time())
        self.burn_in_faults.clear()
        with self.store.lock:
            self.store.unreachable_services.clear()

    def put_object(self, resource: str, obj: Mapping[str, Any]) -> JsonObject:
        """Store ``obj`` under ``resource`` (a plural such as ``nodes``) exactly as given."""
        if resource not in RESOURCES:
            raise ValueError(f"unknown resource {resource!r}; known: {', '.join(RESOURCES)}")
        return self.store.put_raw(RESOURCES[resource], obj)

    def get_object(self, resource: str, namespace: str, name: str) -> JsonObject:
        """A stored object (``namespace`` "" for nodes); ``LookupError`` when absent."""
        if resource not in RESOURCES:
            raise ValueError(f"unknown resource {resource!r}; known: {', '.join(RESOURCES)}")
        obj = self.store.get(RESOURCES[resource], namespace, name)
        if obj is None:
            raise LookupError(f"{resource} {namespace}/{name} not found")
        return obj

    def gpu_samples(self) -> list[GpuSample]:
        return self.cluster.gpu_samples()

    def create(self, resource: str, obj: Mapping[str, Any], *, requester: str = "") -> JsonObject:
        """Create ``obj`` (a Job, a JobSet or another served kind, ``resource`` its plural)
        through the admission chain, as a client's POST would (``Rejected`` with the API
        server's message); ``requester`` is the user creating it."""
        if resource not in RESOURCES:
            raise ValueError(f"unknown resource {resource!r}; known: {', '.join(RESOURCES)}")
        with self._tick_lock:
            return self.cluster.create_object(RESOURCES[resource], obj, time.time(), requester)

    def finish_job(self, namespace: str, name: str, outcome: str = "Succeeded") -> int:
        """End the running pods of a Job now (``Succeeded`` or ``Failed``), as if they had
        run their time; the next tick updates the Job and its Workload. Returns how many
        pods ended; ``LookupError`` when there is no such Job."""
        with self._tick_lock:
            return self.cluster.batch.finish(namespace, name, outcome, time.time())

    def job_state(self, namespace: str, name: str) -> str:
        """Where Kueue has a Job: "" (no Workload yet), ``pending``, ``admitted`` or
        ``finished``, from the conditions of the Workload the Job owns."""
        job = self.store.get(RESOURCES["jobs"], namespace, name)
        uid = as_dict(as_dict(job).get("metadata")).get("uid")
        for workload in self.store.list(RESOURCES["workloads"], namespace):
            owners = as_list(as_dict(workload.get("metadata")).get("ownerReferences"))
            if not uid or not any(as_dict(o).get("uid") == uid for o in owners):
                continue
            true = {
                as_dict(c).get("type")
                for c in as_list(as_dict(workload.get("status")).get("conditions"))
                if as_dict(c).get("status") == "True"
            }
            if "Finished" in true:
                return "finished"
            return "admitted" if "Admitted" in true else "pending"
        return ""
