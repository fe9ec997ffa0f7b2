"""Test URLconf: the read-only Git HTTP endpoint at /git/, as the lead wires it in portal/urls."""

from __future__ import annotations

from django.urls import include, path

urlpatterns = [path("git/", include("gitops.githttp"))]
