"""Placeholder, filled in by its own slice."""

from __future__ import annotations

from django.urls import URLPattern

urlpatterns: list[URLPattern] = []
