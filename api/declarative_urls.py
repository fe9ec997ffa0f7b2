"""The declarative API's URLs (included by ``api.urls``): a list and a resource route per
kind, and the apply route.

Regular expressions, not converters, for the tenant: the kind segment is a fixed word, so these
routes never shadow the other tenant-scoped API routes beside them."""

from __future__ import annotations

from django.urls import URLPattern, re_path

from api import declarative_views as views

TENANT = r"(?P<tenant>[^/]+)"


def _kind_urls(plural: str) -> list[URLPattern]:
    list_view, detail_view = views.KIND_VIEWS[plural]
    return [
        re_path(
            rf"^api/v1/tenants/{TENANT}/{plural}/$",
            list_view.as_view(),
            name=f"declarative-{plural}",
        ),
        re_path(
            rf"^api/v1/tenants/{TENANT}/{plural}/(?P<name>[^/]+)/$",
            detail_view.as_view(),
            name=f"declarative-{plural}-detail",
        ),
    ]


urlpatterns = [
    re_path(r"^api/v1/apply/$", views.ApplyView.as_view(), name="declarative-apply"),
    *(url for plural in views.KIND_VIEWS for url in _kind_urls(plural)),
]
