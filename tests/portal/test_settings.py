"""Settings come from the environment; production-like settings pass `check --deploy`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from portal.env import ImproperlyConfiguredEnv, env, env_bool, env_int, env_list

ROOT = Path(__file__).resolve().parents[2]

PRODUCTION_ENV = {
    "SECRET_KEY": "x7!" + "k" * 60 + "-production-like-secret",
    "ALLOWED_HOSTS": "portal.example.com",
    "DATABASE_URL": "postgres://portal@db.example.com:5432/portal",
    "CELERY_BROKER_URL": "redis://redis.example.com:6379/0",
    "SECURE_SSL_REDIRECT": "true",
    "SECURE_HSTS_SECONDS": "31536000",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS": "true",
    "SECURE_HSTS_PRELOAD": "true",
    "OIDC_SERVER_URL": "https://sso.example.com/realms/ai",
    "OIDC_CLIENT_ID": "portal",
}


def _check_deploy(extra: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SECRET", "SECURE", "OIDC"))}
    base.pop("DATABASE_URL", None)
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env={**base, "PORTAL_VAR_DIR": str(tmp_path), **extra},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_it_passes_check_deploy_with_production_settings(tmp_path: Path) -> None:
    secret_file = tmp_path / "oidc-secret"
    secret_file.write_text("s3cret-from-a-mounted-file\n")
    result = _check_deploy(
        {**PRODUCTION_ENV, "OIDC_CLIENT_SECRET_FILE": str(secret_file)}, tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_it_fails_check_deploy_on_the_embedded_defaults(tmp_path: Path) -> None:
    result = _check_deploy({}, tmp_path)
    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr + result.stdout


def test_it_reads_secrets_from_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "key"
    path.write_text("from-file\n")
    monkeypatch.delenv("PORTAL_X", raising=False)
    monkeypatch.setenv("PORTAL_X_FILE", str(path))
    assert env("PORTAL_X") == "from-file"
    monkeypatch.setenv("PORTAL_X", "direct")
    assert env("PORTAL_X") == "direct"
    monkeypatch.setenv("PORTAL_Y_FILE", str(tmp_path / "missing"))
    with pytest.raises(ImproperlyConfiguredEnv, match="PORTAL_Y_FILE"):
        env("PORTAL_Y")


def test_it_parses_typed_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PORTAL_B", "yes")
    monkeypatch.setenv("PORTAL_I", "42")
    monkeypatch.setenv("PORTAL_L", " a, b ,,c ")
    assert env_bool("PORTAL_B") is True
    assert env_int("PORTAL_I", 0) == 42
    assert env_list("PORTAL_L") == ["a", "b", "c"]
    monkeypatch.setenv("PORTAL_B", "maybe")
    with pytest.raises(ImproperlyConfiguredEnv, match="PORTAL_B"):
        env_bool("PORTAL_B")
    monkeypatch.setenv("PORTAL_I", "4x")
    with pytest.raises(ImproperlyConfiguredEnv, match="not an integer"):
        env_int("PORTAL_I", 0)
    monkeypatch.setenv("PORTAL_I", "")
    assert env_int("PORTAL_I", 7) == 7


def _settings_value(expr: str, extra: dict[str, str], tmp_path: Path) -> str:
    code = (
        "import os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'portal.settings'); "
        f"from django.conf import settings; print({expr})"
    )
    base = {k: v for k, v in os.environ.items() if k not in PRODUCTION_ENV}
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**base, "PORTAL_VAR_DIR": str(tmp_path), **extra},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout.strip()


def test_it_defaults_to_sqlite_and_honours_database_url(tmp_path: Path) -> None:
    engine = "settings.DATABASES['default']['ENGINE']"
    assert _settings_value(engine, {"DATABASE_URL": ""}, tmp_path).endswith("sqlite3")
    assert (tmp_path / "portal.sqlite3").parent.exists()
    pg = _settings_value(engine, {"DATABASE_URL": PRODUCTION_ENV["DATABASE_URL"]}, tmp_path)
    assert pg == "django.db.backends.postgresql"


def test_it_configures_the_oidc_provider_from_env(tmp_path: Path) -> None:
    apps = _settings_value(
        "settings.SOCIALACCOUNT_PROVIDERS['openid_connect']['APPS'][0]['settings']",
        {"OIDC_SERVER_URL": "https://sso.example.com/realms/ai", "OIDC_CLIENT_ID": "portal"},
        tmp_path,
    )
    assert "'server_url': 'https://sso.example.com/realms/ai'" in apps
    assert "'oauth_pkce_enabled': True" in apps
