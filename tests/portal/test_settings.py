"""Settings come from the environment; production-like settings pass `check --deploy`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from portal.encryption import demo_key
from portal.env import ImproperlyConfiguredEnv, env, env_bool, env_int, env_list

ROOT = Path(__file__).resolve().parents[2]

PRODUCTION_ENV = {
    "SECRET_KEY": "x7!" + "k" * 60 + "-production-like-secret",
    "PORTAL_ENCRYPTION_KEYS": "koQBDE9kUrZOxUeoLgISjktc3Bk1ZxS9UhqKlEFzUcQ=",
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


def _outside_env() -> dict[str, str]:
    """This process's environment without what the tests set for themselves (DEBUG, from
    pyproject's pytest env) or what would change the settings under test."""
    prefixes = ("SECRET", "SECURE", "OIDC", "SESSION_", "CACHE_URL", "DEBUG", "PORTAL_ENC")
    base = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    base.pop("DATABASE_URL", None)
    return base


def _check_deploy(extra: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    base = _outside_env()
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


def _import_settings(
    expr: str, extra: dict[str, str], tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    code = (
        "import os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'portal.settings'); "
        f"from django.conf import settings; print({expr})"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**_outside_env(), "PORTAL_VAR_DIR": str(tmp_path), **extra},
        capture_output=True,
        text=True,
        timeout=60,
    )


def _settings_value(expr: str, extra: dict[str, str], tmp_path: Path) -> str:
    """``expr`` evaluated on settings imported from ``extra`` (a local run unless it says
    otherwise: DEBUG=true, as `make demo` and the tests run)."""
    result = _import_settings(expr, {"DEBUG": "true", **extra}, tmp_path)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


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


# --- production defaults -----------------------------------------------------------------------

DEMO_KEY = "django-insecure-embedded-default-for-the-local-demo-only"


def test_it_refuses_to_start_without_a_key_unless_debug(tmp_path: Path) -> None:
    for extra in ({}, {"DEBUG": "false"}, {"SECRET_KEY": DEMO_KEY}, {"SECRET_KEY_FILE": ""}):
        result = _import_settings("settings.SECRET_KEY", extra, tmp_path)
        assert result.returncode != 0, extra
        assert "ImproperlyConfigured: SECRET_KEY is not set" in result.stderr
        assert "DEBUG=true" in result.stderr  # the message says how to run a demo
    # A local run says so, and only then gets the embedded key.
    assert _settings_value("settings.SECRET_KEY", {}, tmp_path) == DEMO_KEY
    key_file = tmp_path / "key"
    key_file.write_text(PRODUCTION_ENV["SECRET_KEY"] + "\n")
    production = {
        "SECRET_KEY_FILE": str(key_file),
        "PORTAL_ENCRYPTION_KEYS": PRODUCTION_ENV["PORTAL_ENCRYPTION_KEYS"],
        "DEBUG": "false",
    }
    assert (
        _settings_value("settings.SECRET_KEY", production, tmp_path)
        == (PRODUCTION_ENV["SECRET_KEY"])
    )


def test_it_refuses_to_start_without_an_encryption_key_unless_debug(tmp_path: Path) -> None:
    keys = "settings.PORTAL_ENCRYPTION_KEYS"
    production = {"SECRET_KEY": PRODUCTION_ENV["SECRET_KEY"], "DEBUG": "false"}
    result = _import_settings(keys, production, tmp_path)
    assert result.returncode != 0
    assert "ImproperlyConfigured: PORTAL_ENCRYPTION_KEYS is not set" in result.stderr
    assert "DEBUG=true" in result.stderr
    # A file holds the keys, one a line: the first encrypts, both decrypt (a rotation).
    new = "-vHTS0_heV_6RIAqSfzRuDFS992lM_2L006FFKyvu6M="
    key_file = tmp_path / "keys"
    key_file.write_text(f"{new}\n{PRODUCTION_ENV['PORTAL_ENCRYPTION_KEYS']}\n")
    given = {**production, "PORTAL_ENCRYPTION_KEYS_FILE": str(key_file)}
    assert _settings_value(keys, given, tmp_path) == str(
        [new, PRODUCTION_ENV["PORTAL_ENCRYPTION_KEYS"]]
    )
    bad = _import_settings(keys, {**production, "PORTAL_ENCRYPTION_KEYS": "not-a-key"}, tmp_path)
    assert "key 1 is not a Fernet key" in bad.stderr and "not-a-key" not in bad.stderr
    # A local run derives a demo key from the embedded SECRET_KEY.
    assert _settings_value(keys, {}, tmp_path) == str([demo_key(DEMO_KEY)])


HARDENING = (
    "settings.SECURE_SSL_REDIRECT, settings.SECURE_HSTS_SECONDS, "
    "settings.SECURE_HSTS_INCLUDE_SUBDOMAINS, settings.SECURE_HSTS_PRELOAD, "
    "settings.SESSION_COOKIE_SECURE, settings.CSRF_COOKIE_SECURE"
)


def test_it_hardens_https_by_default_in_production_and_not_in_a_demo(tmp_path: Path) -> None:
    production = {
        "SECRET_KEY": PRODUCTION_ENV["SECRET_KEY"],
        "PORTAL_ENCRYPTION_KEYS": PRODUCTION_ENV["PORTAL_ENCRYPTION_KEYS"],
        "DEBUG": "false",
    }
    assert _settings_value(HARDENING, production, tmp_path) == (
        "True 31536000 True False True True"
    )
    # Each is switched off explicitly, e.g. behind an ingress that redirects itself.
    off = {"SECURE_SSL_REDIRECT": "false", "SECURE_HSTS_SECONDS": "0", "SECURE_COOKIES": "no"}
    assert _settings_value(HARDENING, {**production, **off}, tmp_path) == (
        "False 0 True False False False"
    )
    assert _settings_value(HARDENING, {}, tmp_path) == "False 0 False False False False"


def test_a_minimal_deployment_passes_check_deploy_but_for_preload(tmp_path: Path) -> None:
    # Nothing but the keys and a host name: no HTTPS setting to remember.
    result = _check_deploy(
        {
            "SECRET_KEY": PRODUCTION_ENV["SECRET_KEY"],
            "PORTAL_ENCRYPTION_KEYS": PRODUCTION_ENV["PORTAL_ENCRYPTION_KEYS"],
            "ALLOWED_HOSTS": "portal.example.com",
        },
        tmp_path,
    )
    output = result.stdout + result.stderr
    assert "System check identified 1 issue" in output, output
    assert "security.W021" in output  # HSTS preload stays the operator's choice


def test_the_policy_lets_sso_sign_in_redirect_to_the_provider(tmp_path: Path) -> None:
    value = _settings_value(
        "settings.CONTENT_SECURITY_POLICY['DIRECTIVES']['form-action']",
        {"OIDC_SERVER_URL": "https://sso.example.com:8443/realms/ai", "OIDC_CLIENT_ID": "p"},
        tmp_path,
    )
    assert value == "[\"'self'\", 'https://sso.example.com:8443']"


def test_it_shares_the_cache_between_processes(tmp_path: Path) -> None:
    backend = "settings.CACHES['default']['BACKEND'], settings.CACHES['default']['LOCATION']"
    assert _settings_value(backend, {}, tmp_path) == (
        "django.core.cache.backends.db.DatabaseCache portal_cache"
    )
    redis = {"CACHE_URL": "redis://:pw@redis.example.com:6379/2"}
    assert _settings_value(backend, redis, tmp_path) == (
        "django.core.cache.backends.redis.RedisCache redis://:pw@redis.example.com:6379/2"
    )
    result = _import_settings(
        backend, {"DEBUG": "true", "CACHE_URL": "memcached://u:s3cr3t@m"}, tmp_path
    )
    assert result.returncode != 0
    assert "CACHE_URL must be a redis://" in result.stderr
    assert "s3cr3t" not in result.stderr


def test_it_reads_the_session_idle_timeout(tmp_path: Path) -> None:
    assert _settings_value("settings.SESSION_IDLE_TIMEOUT_SECONDS", {}, tmp_path) == "3600"
    value = {"SESSION_IDLE_TIMEOUT_SECONDS": "900"}
    assert _settings_value("settings.SESSION_IDLE_TIMEOUT_SECONDS", value, tmp_path) == "900"
    bad = {"DEBUG": "true", "SESSION_IDLE_TIMEOUT_SECONDS": "0"}
    result = _import_settings("settings.SESSION_IDLE_TIMEOUT_SECONDS", bad, tmp_path)
    assert "SESSION_IDLE_TIMEOUT_SECONDS=0 must be a positive number" in result.stderr


def test_it_reads_the_metrics_token_and_the_required_probes(tmp_path: Path) -> None:
    token_file = tmp_path / "metrics-token"
    token_file.write_text("from-a-mounted-secret\n")
    token = {"METRICS_TOKEN_FILE": str(token_file)}
    assert _settings_value("settings.METRICS_TOKEN", token, tmp_path) == "from-a-mounted-secret"
    assert _settings_value("repr(settings.METRICS_TOKEN)", {}, tmp_path) == "''"
    required = "settings.PORTAL_READINESS_REQUIRED"
    assert _settings_value(required, {}, tmp_path) == "['database', 'git']"
    more = {"PORTAL_READINESS_REQUIRED": "database,git,broker"}
    assert _settings_value(required, more, tmp_path) == "['database', 'git', 'broker']"
    typo = {"DEBUG": "true", "PORTAL_READINESS_REQUIRED": "database,gti"}
    result = _import_settings(required, typo, tmp_path)
    assert result.returncode != 0
    assert "PORTAL_READINESS_REQUIRED names unknown components: gti" in result.stderr
