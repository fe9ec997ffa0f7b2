"""Fleet URLs. The ``fleet/`` pages are for platform admins (404 for everyone else); the
tenant status page resolves through get_tenant_for_user (tests/tenants/test_isolation.py walks
it). Node names may hold dots, so they are matched as ``str``."""

from __future__ import annotations

from django.urls import path

from fleet import hooks, netbox_views, remediation_views, reservation_views, views

app_name = "fleet"

urlpatterns = [
    path("fleet/", views.overview, name="overview"),
    path("fleet/sync/", views.sync_now, name="sync"),
    path("fleet/flavors/recount/", views.reconcile_flavors, name="reconcile_flavors"),
    path("fleet/portal-deployment/", views.portal_deployment, name="portal_deployment"),
    path("fleet/nodes/", views.node_list, name="nodes"),
    path("fleet/burn-in/", views.burn_in_settings, name="burn_in_settings"),
    path("fleet/nodes/<str:name>/", views.node_detail, name="node"),
    path("fleet/nodes/<str:name>/cordon/", views.node_cordon, name="cordon"),
    path("fleet/nodes/<str:name>/uncordon/", views.node_uncordon, name="uncordon"),
    path("fleet/nodes/<str:name>/drain/", views.node_drain, name="drain"),
    path("fleet/nodes/<str:name>/burn-in/", views.node_burn_in, name="burn_in"),
    path("fleet/nodes/<str:name>/mark-ready/", views.node_mark_ready, name="mark_ready"),
    path("fleet/topology/", views.topology_page, name="topology"),
    path("fleet/reservations/", reservation_views.reservations_page, name="reservations"),
    path(
        "fleet/reservations/<str:name>/release/",
        reservation_views.release_node,
        name="release_node",
    ),
    path("fleet/netbox/", netbox_views.netbox_page, name="netbox"),
    path("fleet/netbox/sync/", netbox_views.netbox_sync_now, name="netbox_sync"),
    path("fleet/status/", views.flux_status, name="status"),
    path("fleet/queues/", views.fleet_queues, name="queues"),
    path("fleet/remediation/", remediation_views.remediation_page, name="remediation"),
    path(
        "fleet/remediation/<int:pk>/return/",
        remediation_views.return_node,
        name="remediation_return",
    ),
    path("fleet/remediation/resume/", remediation_views.resume_pool, name="remediation_resume"),
    path("t/<slug:tenant>/status/", views.tenant_status, name="tenant_status"),
    path("t/<slug:tenant>/queue/", views.tenant_queue, name="tenant_queue"),
    # Flux notification-controller's generic-hmac Provider posts here (fleet.hooks).
    path("hooks/flux/", hooks.flux_events, name="flux_events"),
]
