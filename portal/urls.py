from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from portal import views
from portal.admin_login import ThrottledAdminAuthenticationForm

# The admin's sign-in spends the login throttle's budget too (portal/admin_login.py).
admin.site.login_form = ThrottledAdminAuthenticationForm

urlpatterns = [
    path("", views.home, name="home"),
    path("switch/", views.switch_tenant, name="switch_tenant"),
    path("jobs/", views.job_list, name="job_list"),
    path("jobs/<int:job_id>/", views.job_detail, name="job_detail"),
    path("static-vendor/plotly.min.js", views.plotly_js, name="plotly_js"),
    path("", include("tenants.urls")),
    path("", include("gitops.urls")),
    path("", include("fleet.urls")),
    path("", include("catalog.urls")),
    path("", include("catalog.urls_admin")),
    path("", include("billing.urls")),
    path("", include("api.urls")),
    path("git/", include("gitops.githttp")),
    path("accounts/", include("allauth.urls")),
    path("django-admin/", admin.site.urls),
]
