"""Tenant URLs. Every URL with a ``tenant`` argument is tenant-scoped and 404s for outsiders
(tests/tenants/test_isolation.py walks them all)."""

from __future__ import annotations

from django.urls import path

from tenants import views

app_name = "tenants"

urlpatterns = [
    path("tenants/", views.tenant_list, name="list"),
    path("tenants/new/", views.tenant_create, name="create"),
    path("audit/", views.platform_audit, name="platform_audit"),
    path("t/<slug:tenant>/", views.tenant_detail, name="detail"),
    path("t/<slug:tenant>/settings/", views.tenant_settings, name="settings"),
    path("t/<slug:tenant>/settings/gpu-quota/", views.tenant_gpu_quota, name="gpu_quota"),
    path("t/<slug:tenant>/settings/mig/", views.tenant_mig, name="mig"),
    path("t/<slug:tenant>/members/", views.tenant_members, name="members"),
    path("t/<slug:tenant>/members/<int:member_id>/role/", views.member_role, name="member_role"),
    path(
        "t/<slug:tenant>/invitations/<int:invitation_id>/withdraw/",
        views.invitation_revoke,
        name="invitation_revoke",
    ),
    path(
        "t/<slug:tenant>/members/<int:member_id>/remove/", views.member_remove, name="member_remove"
    ),
    path("t/<slug:tenant>/audit/", views.tenant_audit, name="audit"),
]
