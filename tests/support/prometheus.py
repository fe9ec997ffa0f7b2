"""Debian's ``prometheus`` (installed by ``make system-deps``) scraping what a test serves."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
import yaml

from tests.support.processes import started
from tests.support.skips import require_tool
from tests.support.waiting import free_port, wait_until

START_TIMEOUT = 60


@dataclass
class RunningPrometheus:
    url: str
    log_file: Path

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query's series (``metric`` and ``value``), as the HTTP API gives them."""
        response = requests.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=5)
        response.raise_for_status()
        body = response.json()
        assert body["status"] == "success", body
        return list(body["data"]["result"])

    def log(self) -> str:
        return self.log_file.read_text(errors="replace")[-5000:]


def every_job_scraped(scrape_configs: list[dict[str, Any]]) -> Callable[[RunningPrometheus], bool]:
    """Ready once each job has been scraped at least once (its ``up`` series exists)."""
    jobs = {config["job_name"] for config in scrape_configs}

    def ready(prometheus: RunningPrometheus) -> bool:
        return {series["metric"]["job"] for series in prometheus.query("up")} >= jobs

    return ready


@contextmanager
def run_prometheus(
    workdir: Path,
    scrape_configs: list[dict[str, Any]],
    *,
    ready: Callable[[RunningPrometheus], bool] | None = None,
) -> Iterator[RunningPrometheus]:
    """Prometheus on a free port, scraping every second with ``scrape_configs``, its data
    and log under ``workdir``; yields once ``ready`` (by default: every job scraped)."""
    binary = require_tool("prometheus", "Debian's package: make system-deps")
    config_file = workdir / "prometheus.yml"
    config_file.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
                "scrape_configs": scrape_configs,
            }
        )
    )
    port = free_port()
    args = [
        binary,
        f"--config.file={config_file}",
        f"--storage.tsdb.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    with started(args, log_file=workdir / "prometheus.log") as server:
        running = RunningPrometheus(f"http://127.0.0.1:{port}", server.log_file)
        is_ready = ready or every_job_scraped(scrape_configs)
        wait_until(
            lambda: is_ready(running),
            START_TIMEOUT,
            "prometheus to scrape its targets",
            process=server.proc,
            details=server.log,
            ignoring=(requests.RequestException,),
            interval=0.2,
        )
        yield running
