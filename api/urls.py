from __future__ import annotations

from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.routers import SimpleRouter

from api import token_views
from api.base import ApiViewMixin
from api.views_catalog import ChangeViewSet, JobViewSet, RequestViewSet
from api.views_idle import IdleCaseViewSet
from api.views_jobs import BatchJobViewSet
from api.views_queues import FleetQueueView, QueueSummaryView, WorkloadViewSet
from api.views_sleep import WakeViewSet
from api.views_tenants import CapacityView, InvoiceViewSet, MemberViewSet, TenantViewSet, UsageView

app_name = "api"


class SchemaView(ApiViewMixin, SpectacularAPIView):
    """The OpenAPI document; its calls with a token are logged like any other."""


class DocsView(SpectacularSwaggerSplitView):
    """Swagger UI, its settings served as a script of their own (no inline script for the
    CSP to refuse) and its files from drf-spectacular-sidecar's static files."""

    template_name = "api/swagger_ui.html"


router = SimpleRouter()
router.register("tenants", TenantViewSet, basename="tenant")
router.register("requests", RequestViewSet, basename="request")
router.register("changes", ChangeViewSet, basename="change")
router.register("invoices", InvoiceViewSet, basename="invoice")
router.register("jobs", JobViewSet, basename="job")

members = MemberViewSet.as_view({"get": "list", "post": "create"})
member = MemberViewSet.as_view({"get": "retrieve", "patch": "partial_update", "delete": "destroy"})
batch_jobs = BatchJobViewSet.as_view({"get": "list", "post": "create"})
batch_job = BatchJobViewSet.as_view({"get": "retrieve", "delete": "destroy"})
batch_job_logs = BatchJobViewSet.as_view({"get": "logs"})

idle_cases = IdleCaseViewSet.as_view({"get": "list"})
idle_case = IdleCaseViewSet.as_view({"get": "retrieve"})
idle_wake = IdleCaseViewSet.as_view({"post": "wake"})
idle_exempt = IdleCaseViewSet.as_view({"post": "exempt"})

urlpatterns = [
    path("api/v1/schema/", SchemaView.as_view(), name="schema"),
    path("api/v1/tenants/<slug:slug>/idle/", idle_cases, name="idle_cases"),
    path("api/v1/tenants/<slug:slug>/idle/<int:case_id>/", idle_case, name="idle_case"),
    path("api/v1/tenants/<slug:slug>/idle/<int:case_id>/wake/", idle_wake, name="idle_wake"),
    path("api/v1/tenants/<slug:slug>/idle/<int:case_id>/exempt/", idle_exempt, name="idle_exempt"),
    path("api/v1/docs/", DocsView.as_view(url_name="api:schema"), name="docs"),
    path("api/v1/tenants/<slug:slug>/members/", members, name="members"),
    path("api/v1/tenants/<slug:slug>/members/<str:username>/", member, name="member"),
    path("api/v1/tenants/<slug:slug>/jobs/", batch_jobs, name="batch_jobs"),
    path("api/v1/tenants/<slug:slug>/jobs/<slug:name>/", batch_job, name="batch_job"),
    path(
        "api/v1/tenants/<slug:slug>/jobs/<slug:name>/logs/",
        batch_job_logs,
        name="batch_job_logs",
    ),
    path(
        "api/v1/tenants/<slug:slug>/usage/",
        UsageView.as_view({"get": "retrieve"}),
        name="usage",
    ),
    path(
        "api/v1/tenants/<slug:slug>/workloads/",
        WorkloadViewSet.as_view({"get": "list"}),
        name="workloads",
    ),
    path(
        "api/v1/tenants/<slug:slug>/queue/",
        QueueSummaryView.as_view({"get": "retrieve"}),
        name="queue",
    ),
    path(
        "api/v1/tenants/<slug:slug>/resources/<str:kind>/<slug:name>/wake/",
        WakeViewSet.as_view({"post": "wake"}),
        name="wake",
    ),
    path("api/v1/fleet/capacity/", CapacityView.as_view(), name="capacity"),
    path("api/v1/fleet/queues/", FleetQueueView.as_view(), name="fleet_queues"),
    path("api/tokens/", token_views.token_list, name="tokens"),
    path("api/tokens/<str:prefix>/", token_views.token_detail, name="token_detail"),
    path("t/<slug:tenant>/robots/", token_views.robots, name="robots"),
    path("", include("api.declarative_urls")),
    path("api/v1/", include(router.urls)),
]
