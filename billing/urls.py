"""Billing URLs: dashboards (billing.views), prices, invoices and budgets
(billing.finance_views) and right-sizing (billing.rightsizing_views). Every URL with a
``tenant`` argument is tenant-scoped and 404s for outsiders."""

from __future__ import annotations

from billing import finance_views, idle_views, rightsizing_views, views

app_name = "billing"

urlpatterns = (
    views.urlpatterns
    + finance_views.urlpatterns
    + rightsizing_views.urlpatterns
    + idle_views.urlpatterns
)
