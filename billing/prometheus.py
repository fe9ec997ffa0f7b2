"""A small client for Prometheus's HTTP API: instant and range queries.

Prometheus answers ``{"status": "success", "data": {"resultType": ..., "result": [...]}}``;
values are strings and timestamps float seconds. An error carries ``errorType`` and
``error`` with HTTP 400 (bad_data), 422 (execution) or 503 (timeout, unavailable)
(prometheus/prometheus docs/querying/api.md). A range query may return at most 11,000
points per series (web/api/v1/api.go), so a long range is asked in chunks and joined.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import requests

# Prometheus refuses a range query of more points per series than this.
MAX_POINTS = 11_000


class PrometheusError(Exception):
    """Prometheus could not be reached or refused the query; ``error_type`` is Prometheus's
    own (``bad_data``, ``execution``, ``timeout``...) or ``unavailable``/``bad_response``."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(f"{error_type}: {message}")
        self.error_type = error_type
        self.message = message


@dataclass
class Series:
    """One time series: its labels and its (unix seconds, value) points, NaN left out."""

    labels: dict[str, str]
    points: list[tuple[float, float]] = field(default_factory=list)


@dataclass
class Result:
    series: list[Series]
    warnings: list[str] = field(default_factory=list)


class Prometheus:
    """Queries against one Prometheus (or anything speaking its API, such as Thanos)."""

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 30.0,
        token: str = "",
        session: requests.Session | None = None,
    ) -> None:
        if not url:
            raise PrometheusError("bad_config", "no Prometheus URL is configured")
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.session = session or requests.Session()
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"

    def query(self, query: str, at: float | None = None) -> Result:
        """An instant query: one point per series."""
        params: dict[str, str] = {"query": query}
        if at is not None:
            params["time"] = _seconds(at)
        data, warnings = self._get("/api/v1/query", params)
        kind = data.get("resultType")
        if kind == "scalar":
            return Result([Series({}, _points([data.get("result")]))], warnings)
        if kind != "vector":
            raise PrometheusError("bad_response", f"an instant query returned {kind!r}")
        series = [
            Series(_labels(item), _points([item.get("value")]))
            for item in _items(data.get("result"))
        ]
        return Result(series, warnings)

    def query_range(self, query: str, start: float, end: float, step: float) -> Result:
        """A range query from ``start`` to ``end`` (inclusive) every ``step`` seconds, in as
        many requests as the 11,000-point limit needs; series are joined by their labels."""
        if step <= 0:
            raise PrometheusError("bad_data", "the step must be positive")
        if end < start:
            raise PrometheusError("bad_data", "the end is before the start")
        joined: dict[tuple[tuple[str, str], ...], Series] = {}
        warnings: list[str] = []
        chunk = step * (MAX_POINTS - 1)
        chunk_start = start
        while chunk_start <= end:
            chunk_end = min(end, chunk_start + chunk)
            params = {
                "query": query,
                "start": _seconds(chunk_start),
                "end": _seconds(chunk_end),
                "step": _seconds(step),
            }
            data, more = self._get("/api/v1/query_range", params)
            warnings += more
            if data.get("resultType") != "matrix":
                raise PrometheusError(
                    "bad_response", f"a range query returned {data.get('resultType')!r}"
                )
            for item in _items(data.get("result")):
                labels = _labels(item)
                key = tuple(sorted(labels.items()))
                series = joined.setdefault(key, Series(labels))
                for point in _points(_list(item.get("values"))):
                    # Chunks meet at one timestamp; keep it once.
                    if not series.points or point[0] > series.points[-1][0]:
                        series.points.append(point)
            chunk_start = chunk_end + step
        return Result(list(joined.values()), warnings)

    def _get(self, path: str, params: Mapping[str, str]) -> tuple[dict[str, Any], list[str]]:
        try:
            response = self.session.get(self.url + path, params=params, timeout=self.timeout)
        except requests.RequestException as exc:
            raise PrometheusError("unavailable", f"{self.url} could not be reached: {exc}") from exc
        try:
            body = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            text = response.text.strip()[:200]
            raise PrometheusError(
                "bad_response", f"HTTP {response.status_code} without a JSON body: {text}"
            )
        if body.get("status") != "success":
            raise PrometheusError(
                str(body.get("errorType") or f"http_{response.status_code}"),
                str(body.get("error") or "Prometheus gave no reason"),
            )
        data = body.get("data")
        if not isinstance(data, dict):
            raise PrometheusError("bad_response", "the answer has no data object")
        return data, [str(w) for w in _list(body.get("warnings"))]


def _seconds(value: float) -> str:
    return f"{value:.3f}".rstrip("0").rstrip(".")


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _items(value: object) -> list[dict[str, Any]]:
    return [item for item in _list(value) if isinstance(item, dict)]


def _labels(item: Mapping[str, Any]) -> dict[str, str]:
    metric = item.get("metric")
    if not isinstance(metric, dict):
        return {}
    return {str(k): str(v) for k, v in metric.items()}


def _points(values: list[Any]) -> list[tuple[float, float]]:
    points = []
    for pair in values:
        if not isinstance(pair, list | tuple) or len(pair) != 2:
            continue
        try:
            at, value = float(pair[0]), float(pair[1])
        except (TypeError, ValueError):
            continue
        if math.isfinite(value):
            points.append((at, value))
    return points
