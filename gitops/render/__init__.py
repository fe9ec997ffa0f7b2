"""Pure renderers: specs in, Kubernetes objects (plain dicts) and file trees out. No I/O and
nothing from other apps is imported here.

One module per kind (``kueue``, ``kserve``, ``vcluster``, ...) returns objects; ``tree`` lays
them out as the fleet repository's files, dumped by ``yamlio``; ``validate`` rejects specs
that cannot be rendered with a ``SpecError``.
"""

from __future__ import annotations

from gitops.render.tree import (
    objects_for,
    render_cluster_bootstrap,
    render_infrastructure,
    render_portal_deployment,
    render_repository,
    render_tenant_tree,
    render_tenants_index,
    tenant_file_objects,
)
from gitops.render.validate import validate_fleet, validate_tenant
from gitops.render.yamlio import dump_documents, load_documents

__all__ = [
    "dump_documents",
    "load_documents",
    "objects_for",
    "render_cluster_bootstrap",
    "render_infrastructure",
    "render_portal_deployment",
    "render_repository",
    "render_tenant_tree",
    "render_tenants_index",
    "tenant_file_objects",
    "validate_fleet",
    "validate_tenant",
]
