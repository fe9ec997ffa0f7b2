from __future__ import annotations

from django.apps import AppConfig


class GitopsConfig(AppConfig):
    name = "gitops"
    verbose_name = "GitOps"
