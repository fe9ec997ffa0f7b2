"""Container logs, as the API server's ``pods/log`` subresource returns them from the kubelet.

The simulated containers run nothing, so their log is written from what the pod's status
says, deterministically: a line when the container started, a progress line every
``PROGRESS_SECONDS`` of its run up to ``now`` (or to its end), and, once it terminated, a line
with its exit code and reason. The same pod asked at the same time reads the same log.

Which container, and what a pod not running yet answers, follow the API server and the
kubelet: kubernetes ``pkg/registry/core/pod/strategy.go`` ``LogLocation`` (the container named,
or the only one; 400 BadRequest otherwise; a pod without a node has no log yet and answers an
empty one) and ``pkg/kubelet/kubelet_pods.go`` ``validateContainerLogStatus`` (a container not
started is "waiting to start"). Timestamps are the kubelet's ``timeFormatOut``
(``pkg/kubelet/kuberuntime/logs/logs.go``: RFC 3339 with nine fractional digits).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from simulator.store import as_dict, as_list

PROGRESS_SECONDS = 10


class LogUnavailable(Exception):
    """The log cannot be read (HTTP 400); the message is the API server's."""


def _seconds(value: object) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def log_timestamp(moment: float) -> str:
    """The kubelet's ``timeFormatOut``: ``2006-01-02T15:04:05.000000000Z07:00`` in UTC."""
    whole = datetime.fromtimestamp(int(moment), UTC).strftime("%Y-%m-%dT%H:%M:%S")
    nanos = round((moment - int(moment)) * 1e9)
    return f"{whole}.{nanos:09d}Z"


def choose_container(pod: Mapping[str, Any], wanted: str) -> str:
    """The container a log request reads (``LogLocation``)."""
    spec = as_dict(pod.get("spec"))
    name = str(as_dict(pod.get("metadata")).get("name", ""))
    main = [str(as_dict(c).get("name", "")) for c in as_list(spec.get("containers"))]
    init = [str(as_dict(c).get("name", "")) for c in as_list(spec.get("initContainers"))]
    if wanted:
        if wanted not in main and wanted not in init:
            raise LogUnavailable(f"container {wanted} is not valid for pod {name}")
        return wanted
    if len(main) == 1:
        return main[0]
    if not main:
        raise LogUnavailable(f"a container name must be specified for pod {name}")
    message = (
        f"a container name must be specified for pod {name}, choose one of: [{' '.join(main)}]"
    )
    if init:
        message += f" or one of the init containers: [{' '.join(init)}]"
    raise LogUnavailable(message)


def container_log(
    pod: Mapping[str, Any], container: str, now: float, output: Sequence[str] = ()
) -> list[tuple[float, str]]:
    """(time, line) of ``container``'s log as of ``now``; ``LogUnavailable`` when the kubelet
    would refuse it. A pod not bound to a node has none (an empty log, not an error).
    ``output`` is what the container's program printed (``simulator.burnin``): it appears
    once the container terminated, before its exit line."""
    metadata = as_dict(pod.get("metadata"))
    name = str(metadata.get("name", ""))
    spec = as_dict(pod.get("spec"))
    if not spec.get("nodeName"):
        return []
    status = as_dict(pod.get("status"))
    statuses = [
        as_dict(s)
        for kind in ("initContainerStatuses", "containerStatuses")
        for s in as_list(status.get(kind))
    ]
    found = next((s for s in statuses if s.get("name") == container), None)
    state = as_dict(found.get("state")) if found else {}
    running, terminated = as_dict(state.get("running")), as_dict(state.get("terminated"))
    started = _seconds(running.get("startedAt")) or _seconds(terminated.get("startedAt"))
    if started is None:
        reason = str(as_dict(state.get("waiting")).get("reason") or "ContainerCreating")
        raise LogUnavailable(
            f'container "{container}" in pod "{name}" is waiting to start: {reason}'
        )
    image = next(
        (
            str(as_dict(c).get("image", ""))
            for kind in ("initContainers", "containers")
            for c in as_list(spec.get(kind))
            if as_dict(c).get("name") == container
        ),
        "",
    )
    finished = _seconds(terminated.get("finishedAt")) if terminated else None
    end = finished if finished is not None else now
    lines = [(started, f"[{container}] started: image {image}")]
    step = 1
    while started + step * PROGRESS_SECONDS <= end:
        moment = started + step * PROGRESS_SECONDS
        lines.append((moment, f"[{container}] running: {step * PROGRESS_SECONDS} s elapsed"))
        step += 1
    if terminated:
        lines += [(end, text) for text in output]
        code = terminated.get("exitCode", 0)
        reason = terminated.get("reason") or ("Completed" if code == 0 else "Error")
        lines.append((end, f"[{container}] exited with code {code} ({reason})"))
    return lines


def render(lines: list[tuple[float, str]], *, tail: int | None, timestamps: bool) -> str:
    """The log text: the last ``tail`` lines (all when None), each ending in a newline."""
    chosen = lines if tail is None else lines[len(lines) - tail :] if tail > 0 else []
    return "".join(
        f"{log_timestamp(moment)} {text}\n" if timestamps else f"{text}\n"
        for moment, text in chosen
    )
