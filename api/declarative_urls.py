"""The declarative API's URLs (included by ``api.urls``).

Regular expressions, not converters: the kind segment is one of three words, so these routes
never shadow the other tenant-scoped API routes beside them."""

from __future__ import annotations

from django.urls import re_path

from api import declarative_views as views

TENANT = r"(?P<tenant>[-a-zA-Z0-9_]+)"
PLURAL = r"(?P<plural>clusters|gpushares|endpoints)"

urlpatterns = [
    re_path(r"^api/v1/apply/$", views.ApplyView.as_view(), name="declarative-apply"),
    re_path(
        rf"^api/v1/tenants/{TENANT}/{PLURAL}/$",
        views.DocumentListView.as_view(),
        name="declarative-list",
    ),
    re_path(
        rf"^api/v1/tenants/{TENANT}/{PLURAL}/(?P<name>[^/]+)/$",
        views.DocumentView.as_view(),
        name="declarative-detail",
    ),
]
