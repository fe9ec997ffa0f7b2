"""Tenant-side catalog URLs: every URL with a ``tenant`` argument 404s for outsiders
(tests/tenants/test_isolation.py walks them all)."""

from __future__ import annotations

from django.urls import path

from catalog import views, views_endpoints, views_jobs, views_webhooks

app_name = "catalog"

urlpatterns = [
    path("t/<slug:tenant>/catalog/", views.home, name="home"),
    path("t/<slug:tenant>/catalog/<str:kind>/new/", views.new, name="new"),
    path("t/<slug:tenant>/catalog/<str:kind>/preview/", views.preview, name="preview"),
    path("t/<slug:tenant>/requests/", views.request_list, name="requests"),
    path("t/<slug:tenant>/requests/<int:request_id>/", views.request_detail, name="request"),
    path("t/<slug:tenant>/requests/<int:request_id>/edit/", views.request_edit, name="edit"),
    path("t/<slug:tenant>/requests/<int:request_id>/cancel/", views.request_cancel, name="cancel"),
    path(
        "t/<slug:tenant>/resources/<int:resource_id>/modify/",
        views.resource_modify,
        name="modify",
    ),
    path(
        "t/<slug:tenant>/resources/<int:resource_id>/decommission/",
        views.resource_decommission,
        name="decommission",
    ),
    path(
        "t/<slug:tenant>/resources/<int:resource_id>/wake/",
        views.resource_wake,
        name="wake",
    ),
    path("t/<slug:tenant>/gateway-key/", views.gateway_key, name="gateway_key"),
    path(
        "t/<slug:tenant>/endpoints/<slug:endpoint>/",
        views_endpoints.endpoint,
        name="endpoint",
    ),
    path(
        "t/<slug:tenant>/endpoints/<slug:endpoint>/key/",
        views_endpoints.endpoint_key,
        name="endpoint_key",
    ),
    path(
        "t/<slug:tenant>/resources/<int:resource_id>/kubeconfig/",
        views.kubeconfig,
        name="kubeconfig",
    ),
    path("t/<slug:tenant>/jobs/", views_jobs.job_list, name="jobs"),
    path("t/<slug:tenant>/jobs/new/", views_jobs.job_new, name="job_new"),
    path("t/<slug:tenant>/jobs/<slug:job>/", views_jobs.job_detail, name="job"),
    path("t/<slug:tenant>/jobs/<slug:job>/logs/", views_jobs.job_logs, name="job_logs"),
    path("t/<slug:tenant>/jobs/<slug:job>/cancel/", views_jobs.job_cancel, name="job_cancel"),
    path("t/<slug:tenant>/webhooks/", views_webhooks.webhooks, name="webhooks"),
    path(
        "t/<slug:tenant>/webhooks/<int:endpoint_id>/",
        views_webhooks.webhook,
        name="webhook",
    ),
    path(
        "t/<slug:tenant>/webhooks/<int:endpoint_id>/deliveries/<int:delivery_id>/redeliver/",
        views_webhooks.webhook_redeliver,
        name="webhook_redeliver",
    ),
]
