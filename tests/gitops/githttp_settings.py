"""Settings for the gunicorn that test_githttp starts: the portal's, Git endpoint at /git/."""

from __future__ import annotations

from portal.settings import *  # noqa: F403

ROOT_URLCONF = "tests.gitops.urls_githttp"
