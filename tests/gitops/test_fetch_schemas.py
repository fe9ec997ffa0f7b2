"""``manage.py fetch_schemas``: pinned upstream CRDs downloaded, verified and swapped in whole.

The downloads come from a real HTTP server on loopback laid out as raw.githubusercontent.com
is (``<owner>/<repo>/<commit>/<path>``). The made-up components need nothing beside the
project; the last tests serve ``../shared/crds`` (verbatim copies of the upstream files at the
pinned commits) and check every pin of ``gitops.upstream`` against them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import http.server
import json
import socket
import threading
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import CommandError, call_command

from gitops import upstream
from gitops.checks.schema import SchemaRegistry, get_registry
from gitops.upstream import Component, UpstreamFile
from tests.gitops.checks_support import require_crds
from tests.support.crds import crd


def _crd(kind: str, group: str = "example.com") -> bytes:
    spec = {"type": "object", "properties": {"size": {"type": "integer"}}}
    schema = {"type": "object", "properties": {"spec": spec}}
    return yaml.safe_dump(crd(kind, group, schema=schema)).encode()


def _pin(path: str, data: bytes) -> UpstreamFile:
    return UpstreamFile(path, hashlib.sha256(data).hexdigest(), len(data))


class _Files(http.server.BaseHTTPRequestHandler):
    served: dict[str, bytes] = {}

    def do_GET(self) -> None:
        data = self.served.get(self.path.lstrip("/"))
        if data is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, dict[str, bytes]]]:
    """A file server on loopback: (base URL, {url path: body}) to fill."""
    served: dict[str, bytes] = {}
    handler = type("Handler", (_Files,), {"served": served})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", served
    finally:
        httpd.shutdown()
        httpd.server_close()


WIDGET = _crd("Widget")
GADGET = _crd("Gadget")
COMMIT = "0123456789abcdef0123456789abcdef01234567"
WIDGETS = Component(
    "widgets",
    "v1.0.0",
    "example/widgets",
    COMMIT,
    folder="widgets",
    files=(
        _pin("config/crd/example.com_widgets.yaml", WIDGET),
        _pin("config/crd/example.com_gadgets.yaml", GADGET),
    ),
)


def _serve(served: dict[str, bytes], component: Component, bodies: dict[str, bytes]) -> None:
    for file in component.files:
        served[f"{component.repo}/{component.commit}/{file.path}"] = bodies[file.name]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_it_installs_verified_files_and_the_checks_read_them(
    server: tuple[str, dict[str, bytes]], tmp_path: Path
) -> None:
    base, served = server
    _serve(
        served, WIDGETS, {"example.com_widgets.yaml": WIDGET, "example.com_gadgets.yaml": GADGET}
    )
    lines: list[str] = []
    report = upstream.fetch(
        tmp_path / "schemas", components=[WIDGETS], base_url=base, progress=lines.append
    )
    assert [o.file for o in report.installed] == [
        "widgets/example.com_widgets.yaml",
        "widgets/example.com_gadgets.yaml",
    ]
    assert lines[0].startswith("[1/2] widgets v1.0.0 example.com_widgets.yaml: ok, ")
    assert (tmp_path / "schemas/widgets/example.com_widgets.yaml").read_bytes() == WIDGET
    sources = json.loads((tmp_path / "schemas/SOURCES.json").read_text())["files"]
    assert sources["widgets/example.com_widgets.yaml"]["version"] == "v1.0.0"
    assert upstream.installed_versions(tmp_path / "schemas") == {"widgets": "v1.0.0"}
    registry = get_registry(tmp_path / "schemas")
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    assert registry.validate({**widget, "spec": {"size": 3}}) == []
    [error] = registry.validate({**widget, "spec": {"size": 3, "colour": "red"}})
    assert error.path == "spec.colour"


def test_a_bad_download_keeps_the_previous_copy_and_says_why(
    server: tuple[str, dict[str, bytes]], tmp_path: Path
) -> None:
    base, served = server
    target = tmp_path / "schemas"
    good = {"example.com_widgets.yaml": WIDGET, "example.com_gadgets.yaml": GADGET}
    _serve(served, WIDGETS, good)
    assert len(upstream.fetch(target, components=[WIDGETS], base_url=base).installed) == 2
    # The same release again, served wrong: one file altered, one cut short.
    altered = WIDGET.replace(b"integer", b"string ")
    _serve(
        served,
        WIDGETS,
        {"example.com_widgets.yaml": altered, "example.com_gadgets.yaml": GADGET[:100]},
    )
    report = upstream.fetch(target, components=[WIDGETS], base_url=base)
    assert report.installed == []
    messages = {o.file: o.message for o in report.problems}
    assert messages["widgets/example.com_widgets.yaml"].startswith("checksum mismatch: sha256 ")
    assert messages["widgets/example.com_gadgets.yaml"] == (
        f"truncated: 100 bytes, expected {len(GADGET)}; previous copy kept"
    )
    assert "previous copy kept" in messages["widgets/example.com_widgets.yaml"]
    assert (target / "widgets/example.com_widgets.yaml").read_bytes() == WIDGET
    assert (target / "widgets/example.com_gadgets.yaml").read_bytes() == GADGET


def test_a_malformed_crd_is_reported_and_skipped_the_rest_kept(
    server: tuple[str, dict[str, bytes]], tmp_path: Path
) -> None:
    base, served = server
    not_a_crd = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"
    component = Component(
        "mixed",
        "v2",
        "example/mixed",
        COMMIT,
        folder="mixed",
        files=(_pin("a/widgets.yaml", WIDGET), _pin("a/broken.yaml", not_a_crd)),
    )
    _serve(served, component, {"widgets.yaml": WIDGET, "broken.yaml": not_a_crd})
    report = upstream.fetch(tmp_path / "schemas", components=[component], base_url=base)
    assert [o.file for o in report.installed] == ["mixed/widgets.yaml"]
    [problem] = report.problems
    assert problem.message == "malformed: not a CustomResourceDefinition; none installed"
    assert not (tmp_path / "schemas/mixed/broken.yaml").exists()


def test_a_malformed_crd_in_a_schema_directory_is_skipped_not_fatal(tmp_path: Path) -> None:
    (tmp_path / "good.yaml").write_bytes(WIDGET)
    (tmp_path / "bad.yaml").write_bytes(b"kind: CustomResourceDefinition\nspec: {}\n")
    (tmp_path / "broken.yaml").write_bytes(b"kind: [unclosed\n")
    registry = SchemaRegistry.from_dir(tmp_path)
    assert registry.knows("example.com/v1", "Widget")
    assert [line.split(":")[0] for line in registry.skipped] == ["bad.yaml", "broken.yaml"]
    assert "not a CustomResourceDefinition" in registry.skipped[0]


def test_without_network_nothing_changes_and_the_command_says_so(tmp_path: Path) -> None:
    target = tmp_path / "schemas"
    (target / "widgets").mkdir(parents=True)
    (target / "widgets/example.com_widgets.yaml").write_bytes(WIDGET)
    base = f"http://127.0.0.1:{_closed_port()}"
    report = upstream.fetch(target, components=[WIDGETS], base_url=base)
    assert report.offline.startswith("no network: ")
    assert len(report.outcomes) == 1  # stopped at the first: no file would arrive
    assert sorted(p.name for p in target.rglob("*")) == ["example.com_widgets.yaml", "widgets"]
    with pytest.raises(CommandError, match=r"Offline \(no network: .*nothing downloaded"):
        call_command("fetch_schemas", "--dir", str(target), "--base-url", base, stdout=StringIO())
    out = StringIO()
    call_command(
        "fetch_schemas", "--dir", str(target), "--base-url", base, "--offline-ok", stdout=out
    )
    assert "Built-in kinds are still validated" in out.getvalue()
    assert (target / "widgets/example.com_widgets.yaml").read_bytes() == WIDGET


def test_a_missing_file_upstream_is_reported(
    server: tuple[str, dict[str, bytes]], tmp_path: Path
) -> None:
    base, served = server
    served[f"{WIDGETS.repo}/{COMMIT}/config/crd/example.com_widgets.yaml"] = WIDGET
    report = upstream.fetch(tmp_path / "schemas", components=[WIDGETS], base_url=base)
    [problem] = report.problems
    assert problem.message == "download failed: HTTP 404 Not Found; none installed"
    assert [o.file for o in report.installed] == ["widgets/example.com_widgets.yaml"]


# Pins ../shared/crds holds no copy of (it was assembled before them): their checksums were
# taken from the release's own file (git show <commit>:<path>). Drop an entry once ../shared
# has the file; the test below then verifies it like the others.
NOT_IN_SHARED = frozenset(
    {"cert-manager/values.schema.json", "jobset/jobset.x-k8s.io_jobsets.yaml"}
)


def test_every_pin_matches_the_upstream_file_it_names() -> None:
    crds = require_crds()
    names = [f"{c.folder}/{f.name}" for c in upstream.COMPONENTS for f in c.files]
    assert len(names) == len(set(names))
    present = sorted(
        str(p.relative_to(crds)) for p in crds.rglob("*") if p.suffix in (".yaml", ".json")
    )
    assert set(names) >= NOT_IN_SHARED
    assert not NOT_IN_SHARED & set(present), "../shared has it now: drop it from NOT_IN_SHARED"
    assert sorted(set(names) - NOT_IN_SHARED) == present
    for component in upstream.COMPONENTS:
        assert len(component.commit) == 40
        for file in component.files:
            if f"{component.folder}/{file.name}" in NOT_IN_SHARED:
                continue
            data = (crds / component.folder / file.name).read_bytes()
            assert upstream.verify(file, data) == "", (component.name, file.name)


@pytest.mark.django_db
def test_the_command_installs_the_pinned_set_and_the_portal_reads_it(
    server: tuple[str, dict[str, bytes]], tmp_path: Path, settings: Any
) -> None:
    crds = require_crds()
    base, served = server
    # Only what ../shared holds is served: a pin it lacks is a download that fails (404), which
    # the command reports, installing the rest.
    components = [
        dataclasses.replace(
            c, files=tuple(f for f in c.files if f"{c.folder}/{f.name}" not in NOT_IN_SHARED)
        )
        for c in upstream.COMPONENTS
    ]
    for component in components:
        _serve(
            served,
            component,
            {f.name: (crds / component.folder / f.name).read_bytes() for f in component.files},
        )
    target = tmp_path / "schemas"
    out = StringIO()
    if NOT_IN_SHARED:
        with pytest.raises(CommandError, match="HTTP 404"):
            call_command("fetch_schemas", "--dir", str(target), "--base-url", base, stdout=out)
    else:
        call_command("fetch_schemas", "--dir", str(target), "--base-url", base, stdout=out)
    total = sum(len(c.files) for c in upstream.COMPONENTS)
    installed = total - len(NOT_IN_SHARED)
    assert f"Installed {installed} of {total} files into schemas/" in out.getvalue()
    assert f"[{total}/{total}] " in out.getvalue()
    registry = get_registry(target)
    assert registry.knows("kueue.x-k8s.io/v1beta2", "ClusterQueue")
    assert registry.knows("serving.kserve.io/v1beta1", "InferenceService")
    assert "vcluster" in registry.helm_charts()

    from gitops.schemas import directory_with_crds, schema_source

    # What the portal and the demo's simulator (portal/management/commands/serve.py) read.
    settings.GITOPS_SCHEMA_DIR = str(target)
    assert directory_with_crds() == str(target)
    assert schema_source().origin == "directory"
