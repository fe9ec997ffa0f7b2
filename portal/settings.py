"""Settings for the AI factory portal, read from the environment.

Without DEBUG, this is a deployment: it must bring its own SECRET_KEY and gets the production
defaults (HTTPS redirect, HSTS, secure cookies, hashed static files). With DEBUG=true (set by
`make demo`, `make test` and pytest) the portal runs on its embedded defaults: the demo key,
SQLite under ``var/``, the in-process task runner, local accounts. Production sets
DATABASE_URL (PostgreSQL), CELERY_BROKER_URL (Redis), SECRET_KEY, ALLOWED_HOSTS and the OIDC_*
variables; see docs/operator-guide.md. Any secret may be given as ``NAME_FILE`` instead.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import dj_database_url
from celery.schedules import crontab, schedule
from csp.constants import NONCE, NONE, SELF
from django.core.exceptions import ImproperlyConfigured

from portal.encryption import check_key, demo_key
from portal.env import ImproperlyConfiguredEnv, env, env_bool, env_int, env_list

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env("PORTAL_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("DEBUG", False)
# Anything that is not explicitly a local run is treated as a deployment, so that forgetting a
# variable fails safe: no key means no start, and HTTPS hardening is on unless turned off.
PRODUCTION = not DEBUG
# The embedded key only ever serves a local demo or test run. Sessions, password-reset links
# and signed values made with a published key can be forged, so a deployment must not start
# with it (raised here, at import, so that gunicorn, Celery and manage.py all refuse alike).
DEMO_SECRET_KEY = "django-insecure-embedded-default-for-the-local-demo-only"
SECRET_KEY = env("SECRET_KEY") or (DEMO_SECRET_KEY if DEBUG else "")
if PRODUCTION and SECRET_KEY in ("", DEMO_SECRET_KEY):
    raise ImproperlyConfigured(
        "SECRET_KEY is not set (or is the embedded demo key) and DEBUG is off. A deployment "
        "sets SECRET_KEY or SECRET_KEY_FILE to a long random value, e.g. the output of "
        "`python -c 'import secrets; print(secrets.token_urlsafe(50))'`; a local demo or test "
        "run sets DEBUG=true (as `make demo` and `make test` do) to use the embedded key."
    )
# Keys that encrypt the secrets the portal keeps and must read back (webhook signing secrets,
# portal/encryption.py), outside the database: Fernet keys, comma-separated (or one a line in
# PORTAL_ENCRYPTION_KEYS_FILE). The first encrypts, all decrypt: to rotate, put a new key
# first, run `manage.py rotate_encryption_key`, then drop the old one. A local run without one
# derives a key from SECRET_KEY (demo-only: the embedded SECRET_KEY is public); a deployment
# refuses to start without one, as for SECRET_KEY.
PORTAL_ENCRYPTION_KEYS = [k for k in re.split(r"[,\s]+", env("PORTAL_ENCRYPTION_KEYS")) if k]
if not PORTAL_ENCRYPTION_KEYS:
    if PRODUCTION:
        raise ImproperlyConfigured(
            "PORTAL_ENCRYPTION_KEYS is not set and DEBUG is off. A deployment sets "
            "PORTAL_ENCRYPTION_KEYS or PORTAL_ENCRYPTION_KEYS_FILE to a Fernet key, e.g. the "
            "output of `python -c 'from cryptography.fernet import Fernet; "
            "print(Fernet.generate_key().decode())'`, kept outside the database (it encrypts "
            "the webhook signing secrets); a local demo or test run sets DEBUG=true to derive "
            "one from the embedded SECRET_KEY."
        )
    PORTAL_ENCRYPTION_KEYS = [demo_key(SECRET_KEY)]
for _number, _key in enumerate(PORTAL_ENCRYPTION_KEYS, 1):
    try:
        check_key(_key)
    except ValueError:
        # The key itself is not repeated: error output ends up in logs.
        raise ImproperlyConfiguredEnv(
            f"PORTAL_ENCRYPTION_KEYS: key {_number} is not a Fernet key (32 url-safe "
            "base64-encoded bytes, as Fernet.generate_key() makes)"
        ) from None
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    "allauth",
    "allauth.account",
    "allauth.socialaccount",
    "allauth.socialaccount.providers.openid_connect",
    "csp",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_prometheus",
    "portal",
    "tenants",
    "gitops",
    "fleet",
    "catalog",
    "billing",
    "api",
]

MIDDLEWARE = [
    # First: /healthz, /readyz and /metrics answer before the HTTPS redirect and host checks.
    "portal.middleware.ProbeMiddleware",
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "csp.middleware.CSPMiddleware",
    "portal.middleware.RequestIdMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "portal.middleware.SessionIdleTimeoutMiddleware",
    "allauth.account.middleware.AccountMiddleware",
    "django_prometheus.middleware.PrometheusAfterMiddleware",
]

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "portal.context_processors.navigation",
                "catalog.context_processors.inbox",
            ],
        },
    },
]

# --- database -----------------------------------------------------------------------------
DATABASE_URL = env("DATABASE_URL", f"sqlite:///{VAR_DIR / 'portal.sqlite3'}")
DATABASES = {
    "default": dj_database_url.parse(DATABASE_URL, conn_max_age=env_int("DB_CONN_MAX_AGE", 0))
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # A file, not memory, so a Celery worker started by a test sees the test database; WAL
    # and a busy timeout let the web process and the in-process runner write side by side.
    Path(DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)
    # One file per test process, so that two test runs on one machine do not share it.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / f"test-{os.getpid()}.sqlite3")}
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
    }
elif DATABASES["default"]["ENGINE"].startswith("django.db.backends.postgresql"):
    # libpq waits for ever by default: a database host that drops packets, or a port something
    # else listens on without answering, would hang every request, worker and readiness probe.
    DATABASES["default"].setdefault("OPTIONS", {})
    DATABASES["default"]["OPTIONS"].setdefault(
        "connect_timeout", env_int("DATABASE_CONNECT_TIMEOUT", 5)
    )
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- authentication -------------------------------------------------------------------------
AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "allauth.account.auth_backends.AuthenticationBackend",
]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Failed sign-ins: allauth's "login_failed" rate limit, which the Django admin's sign-in spends
# too (portal/admin_login.py). Syntax and meaning are allauth's own (the installed
# allauth/account/app_settings.py, RATE_LIMITS, whose default is "10/m/ip,5/300s/key"; and
# allauth/core/internal/ratelimit.py: parse_rate reads "<amount>/<duration s|m|h|d>/<per>",
# consume records a failure in every listed window, oldest ones dropping out, and refuses
# once any is full; a refused attempt is not recorded where it was refused, a successful
# sign-in gives back what it spent). "ip" is the client address (ALLAUTH_TRUSTED_PROXY_COUNT
# below), "key" the account name as typed. allauth has no per-(address, account) window, so a
# locked account is locked from every address; the best it allows is that one address may
# fail fewer times (5) than lock an account (10) in the same window: no one address can lock
# anyone out, several can for one window (10 minutes) after they stop, and an account still
# takes at most allauth's default number of guesses a day (1,440).
ACCOUNT_RATE_LIMITS = {"login_failed": "5/10m/ip,10/10m/key"}
# How many proxies (an ingress, a load balancer) append to X-Forwarded-For before the portal:
# allauth counts that many entries from the right to find the client's address. 0 (the
# default) uses the TCP peer: behind a proxy every client then shares the proxy's address and
# its per-address budget.
ALLAUTH_TRUSTED_PROXY_COUNT = env_int("ALLAUTH_TRUSTED_PROXY_COUNT", 0)
LOGIN_URL = "account_login"
LOGIN_REDIRECT_URL = "home"
ACCOUNT_LOGOUT_REDIRECT_URL = "account_login"
ACCOUNT_LOGIN_METHODS = {"username", "email"}
ACCOUNT_SIGNUP_FIELDS = ["email*", "username*", "password1*", "password2*"]
# Accounts are made by platform admins or arrive through SSO; nobody signs up on their own.
PORTAL_LOCAL_SIGNUP = env_bool("PORTAL_LOCAL_SIGNUP", False)
ACCOUNT_ADAPTER = "tenants.auth.AccountAdapter"
SOCIALACCOUNT_ADAPTER = "tenants.auth.SocialAccountAdapter"
# An address added under /accounts/email/ counts for nothing until its owner follows the mail's
# link (allauth's EmailAddress.verified; the identity provider's email_verified claim sets the
# same flag): only a verified address identifies a person (tenants.services.verified_holders).
ACCOUNT_EMAIL_VERIFICATION = "optional"
SOCIALACCOUNT_EMAIL_VERIFICATION = "none"
SOCIALACCOUNT_AUTO_SIGNUP = True
SOCIALACCOUNT_LOGIN_ON_GET = False
SOCIALACCOUNT_STORE_TOKENS = False

# OpenID Connect (Keycloak or any OIDC provider). Enabled when OIDC_SERVER_URL is set.
OIDC_PROVIDER_ID = env("OIDC_PROVIDER_ID", "keycloak")
OIDC_PROVIDER_NAME = env("OIDC_PROVIDER_NAME", "Keycloak")
OIDC_SERVER_URL = env("OIDC_SERVER_URL")
OIDC_CLIENT_ID = env("OIDC_CLIENT_ID")
OIDC_CLIENT_SECRET = env("OIDC_CLIENT_SECRET")
OIDC_SCOPES = env_list("OIDC_SCOPES", ["openid", "profile", "email"])
# The claim that carries group paths such as /tenants/<slug>/admin (Keycloak's group mapper).
OIDC_GROUPS_CLAIM = env("OIDC_GROUPS_CLAIM", "groups")
OIDC_GROUP_PREFIX = env("OIDC_GROUP_PREFIX", "/")
SOCIALACCOUNT_PROVIDERS: dict[str, dict[str, object]] = {
    "openid_connect": {"OAUTH_PKCE_ENABLED": True}
}
if OIDC_SERVER_URL:
    SOCIALACCOUNT_PROVIDERS["openid_connect"]["APPS"] = [
        {
            "provider_id": OIDC_PROVIDER_ID,
            "name": OIDC_PROVIDER_NAME,
            "client_id": OIDC_CLIENT_ID,
            "secret": OIDC_CLIENT_SECRET,
            "settings": {
                "server_url": OIDC_SERVER_URL,
                "oauth_pkce_enabled": True,
                "scope": OIDC_SCOPES,
            },
        }
    ]

# --- security -------------------------------------------------------------------------------
SESSION_COOKIE_SECURE = env_bool("SECURE_COOKIES", PRODUCTION)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SESSION_COOKIE_HTTPONLY = True
# HTTPS only, on by default in a deployment; each is switched off explicitly, e.g.
# SECURE_SSL_REDIRECT=false when the ingress already redirects, SECURE_HSTS_SECONDS=0.
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", PRODUCTION)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 365 * 24 * 3600 if PRODUCTION else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", PRODUCTION)
# Preloading is hard to undo and covers the whole registrable domain: the operator's choice.
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# Paths (regular expressions, no leading slash) served over plain HTTP too. The portal
# deployed on its own fleet exempts ^git/: Flux clones over the in-cluster Service, which
# speaks HTTP only (gitops/render/portal.py).
SECURE_REDIRECT_EXEMPT = env_list("SECURE_REDIRECT_EXEMPT")
if env("SECURE_PROXY_SSL_HEADER"):
    # e.g. "HTTP_X_FORWARDED_PROTO,https" behind an ingress that terminates TLS
    _header, _value = env("SECURE_PROXY_SSL_HEADER").split(",", 1)
    SECURE_PROXY_SSL_HEADER = (_header.strip(), _value.strip())

# Sessions end after this long without a request the person made (htmx polling of an open tab
# does not count: portal.middleware.SessionIdleTimeoutMiddleware).
SESSION_IDLE_TIMEOUT_SECONDS = env_int("SESSION_IDLE_TIMEOUT_SECONDS", 3600)
if SESSION_IDLE_TIMEOUT_SECONDS <= 0:
    raise ImproperlyConfiguredEnv(
        f"SESSION_IDLE_TIMEOUT_SECONDS={SESSION_IDLE_TIMEOUT_SECONDS} must be a positive number "
        "of seconds"
    )

# Content-Security-Policy (django-csp): scripts and styles only from the portal itself. Pages
# carry no inline script, event handler or style attribute (portal.js wires the behaviour,
# fleet/charts.py ships figures as JSON). The one exception is a nonce, on chart pages only,
# for the empty <style> elements plotly.js needs (templates/portal/_plotly.html). htmx's own
# indicator <style> is switched off in the htmx-config meta tag and eval is not allowed.
_form_action = [SELF]
if OIDC_SERVER_URL:
    # The SSO button posts to the portal, which redirects to the identity provider; browsers
    # check form-action on that redirect too.
    _oidc = urlsplit(OIDC_SERVER_URL)
    _form_action.append(f"{_oidc.scheme}://{_oidc.netloc}")
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF, NONCE],
        "img-src": [SELF, "data:"],
        "font-src": [SELF],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [NONE],
        "frame-ancestors": [NONE],
        "form-action": _form_action,
    },
}

# --- cache ----------------------------------------------------------------------------------
# The login throttle (allauth's rate limits) counts failures in the default cache, so every
# web process must share it: Redis when CACHE_URL is set, else a table in the database
# (`manage.py createcachetable`; the test database gets it when it is created).
CACHE_URL = env("CACHE_URL")
if CACHE_URL:
    if not CACHE_URL.startswith(("redis://", "rediss://", "unix://")):
        # Only the scheme: the URL may carry a password.
        _scheme = CACHE_URL.split(":", 1)[0]
        raise ImproperlyConfiguredEnv(
            f"CACHE_URL must be a redis://, rediss:// or unix:// URL, not {_scheme}:"
        )
    CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": CACHE_URL}
    }
else:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.db.DatabaseCache",
            "LOCATION": "portal_cache",
        }
    }

# --- static files ---------------------------------------------------------------------------
STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(env("STATIC_ROOT", str(VAR_DIR / "static")))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "whitenoise.storage.CompressedManifestStaticFilesStorage"
            if env_bool("STATIC_MANIFEST", PRODUCTION)
            else "django.contrib.staticfiles.storage.StaticFilesStorage"
        )
    },
}
WHITENOISE_USE_FINDERS = True
if not PRODUCTION:
    # WhiteNoise warns about a missing STATIC_ROOT; the demo serves from the finders instead.
    STATIC_ROOT.mkdir(parents=True, exist_ok=True)

LANGUAGE_CODE = "en-gb"
TIME_ZONE = env("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

# --- email ----------------------------------------------------------------------------------
EMAIL_BACKEND = env("EMAIL_BACKEND", "django.core.mail.backends.filebased.EmailBackend")
EMAIL_FILE_PATH = str(VAR_DIR / "mail")
EMAIL_HOST = env("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = env("EMAIL_HOST_USER")
EMAIL_HOST_PASSWORD = env("EMAIL_HOST_PASSWORD")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
DEFAULT_FROM_EMAIL = env("DEFAULT_FROM_EMAIL", "portal@localhost")
# Mail goes through the outbox (catalog.OutgoingMail): its job waits this long after the first
# unsent mail, so a burst of decisions is sent by a few jobs rather than one job per mail.
CATALOG_OUTBOX_DELAY_SECONDS = env_int("CATALOG_OUTBOX_DELAY_SECONDS", 2)
# How the portal is reached from outside: links in e-mails point here.
PORTAL_BASE_URL = env("PORTAL_BASE_URL", "http://127.0.0.1:8000")

# --- background tasks -----------------------------------------------------------------------
# With no broker the in-process runner (portal/jobs.py) executes tasks on a thread pool after
# the transaction commits and runs the beat schedule on a timer thread. With a broker, tasks go
# to Celery workers and `celery beat` runs the schedule.
CELERY_BROKER_URL = env("CELERY_BROKER_URL")
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = env("CELERY_TASK_DEFAULT_QUEUE", "portal")
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
CELERY_BEAT_SCHEDULE = {
    "housekeeping": {"task": "portal.housekeeping", "schedule": crontab(minute="*/15")},
    "git-maintenance": {"task": "gitops.maintain", "schedule": crontab(minute=7)},
}
PORTAL_EMBEDDED_WORKERS = env_int("PORTAL_EMBEDDED_WORKERS", 2)
PORTAL_JOB_MAX_ATTEMPTS = env_int("PORTAL_JOB_MAX_ATTEMPTS", 3)
PORTAL_JOB_RETENTION_DAYS = env_int("PORTAL_JOB_RETENTION_DAYS", 30)

# --- GitOps ---------------------------------------------------------------------------------
# The portal's own bare repository (the source of truth Flux reads, directly over the portal's
# read-only Git HTTP endpoint or through a forge the portal pushes to).
GITOPS_REPO_PATH = Path(env("GITOPS_REPO_PATH", str(VAR_DIR / "git" / "fleet.git")))
GITOPS_MAIN_BRANCH = env("GITOPS_MAIN_BRANCH", "main")
GITOPS_FLEET_NAME = env("GITOPS_FLEET_NAME", "ai-factory")
# A YAML file describing the fleet's GPU flavors; empty = the built-in demo fleet.
GITOPS_FLEET_FILE = env("GITOPS_FLEET_FILE")
# Upstream CRD schemas (and the charts' values schemas) used by the checks: what
# `manage.py fetch_schemas` downloads (the pinned releases in gitops/upstream.py), or any folder
# of CRD files. Built-in kinds need none of it (kubernetes-validate, at the fleet's version).
GITOPS_SCHEMA_DIR = env("GITOPS_SCHEMA_DIR", str(VAR_DIR / "schemas"))
# Where fetch_schemas downloads from: a mirror laid out as <base>/<owner>/<repo>/<commit>/<path>
# (an air-gapped fleet's); empty: raw.githubusercontent.com.
GITOPS_SCHEMA_BASE_URL = env("GITOPS_SCHEMA_BASE_URL", "")
# Whether a change whose checks are partial (custom resources without a schema, a check that
# could not run) may merge. The demo allows it (DEBUG); a deployment refuses it unless told.
GITOPS_ALLOW_PARTIAL_CHECKS = env_bool("GITOPS_ALLOW_PARTIAL_CHECKS", DEBUG)

# --- Schemas from the cluster (issue 13, point 4) ---
# Where the schema check takes custom resource schemas from: "cluster" (the CRDs the cluster
# serves, read by the fleet sync), "directory" (GITOPS_SCHEMA_DIR, the offline option) or
# "auto" (the cluster's when read within GITOPS_SCHEMA_MAX_AGE_SECONDS, else the directory).
GITOPS_SCHEMA_SOURCE = env("GITOPS_SCHEMA_SOURCE", "auto")
if GITOPS_SCHEMA_SOURCE not in ("cluster", "directory", "auto"):
    raise ImproperlyConfigured("GITOPS_SCHEMA_SOURCE must be cluster, directory or auto")
GITOPS_SCHEMA_MAX_AGE_SECONDS = env_int("GITOPS_SCHEMA_MAX_AGE_SECONDS", 3600)
# How often the fleet sync lists the served CRDs again (it runs more often than that).
FLEET_CRD_REFRESH_SECONDS = env_int("FLEET_CRD_REFRESH_SECONDS", 300)
GITOPS_REQUIRED_APPROVALS = env_int("GITOPS_REQUIRED_APPROVALS", 1)
# Who may review, merge and close changes: the access rules module (gitops knows no roles).
GITOPS_CHANGE_POLICY = "tenants.access.change_refusal"
# Called with (change, acting_user) when a change is closed unmerged: what it carried goes back
# (a tenant's settings), so the database does not keep what main never got.
GITOPS_ON_CLOSED = "tenants.services.on_change_closed"
# The tenant as it should run, with its live resources (the catalog owns them; tenants may not
# import it): what a change of a tenant's settings is checked and rendered with.
TENANT_DESIRED_SPEC = "catalog.specs.desired_tenant"
# Called with (membership, actor=...) when a member leaves a tenant or stops being its admin:
# the robot tokens they made there are revoked (the API owns tokens; tenants may not import it).
TENANT_MEMBER_LEFT = "api.tokens.revoke_with_member"
# A change that only takes people out of tenant clusters (or narrows their role there) merges
# once its checks pass, without waiting for an approval (gitops.services.do_merge_revocation).
GITOPS_AUTO_MERGE_REVOCATIONS = env_bool("GITOPS_AUTO_MERGE_REVOCATIONS", True)
GITOPS_COMMITTER_NAME = env("GITOPS_COMMITTER_NAME", "AI factory portal")
GITOPS_COMMITTER_EMAIL = env("GITOPS_COMMITTER_EMAIL", "portal@ai-factory.invalid")
# A Git remote (optional): URL and HTTPS credentials. Without GITOPS_FORGE it is the source of
# truth that every replica writes main to with compare-and-swap pushes (remote-truth mode,
# docs/operator-guide.md "Several replicas"); with a forge, where pull requests are opened.
GITOPS_REMOTE_URL = env("GITOPS_REMOTE_URL")
GITOPS_REMOTE_USERNAME = env("GITOPS_REMOTE_USERNAME", "git")
GITOPS_REMOTE_PASSWORD = env("GITOPS_REMOTE_PASSWORD")
# --- remote-truth mode: how long one fetch/push may take, and how long a merge waits for an
# unreachable remote (retrying with growing pauses) before it fails and the change stays open.
GITOPS_REMOTE_TIMEOUT_SECONDS = env_int("GITOPS_REMOTE_TIMEOUT_SECONDS", 20)
GITOPS_REMOTE_WAIT_SECONDS = env_int("GITOPS_REMOTE_WAIT_SECONDS", 30)
# Open pull requests on a forge instead of in the portal: github | gitlab | gitea.
GITOPS_FORGE = env("GITOPS_FORGE")
GITOPS_FORGE_API_URL = env("GITOPS_FORGE_API_URL")
GITOPS_FORGE_REPO = env("GITOPS_FORGE_REPO")  # owner/name, or the GitLab project id or path
GITOPS_FORGE_TOKEN = env("GITOPS_FORGE_TOKEN")
GITOPS_FORGE_WEBHOOK_SECRET = env("GITOPS_FORGE_WEBHOOK_SECRET")
# Platform tokens that may clone the portal's repositories over HTTP (the flux-system
# GitRepository's secret): the fleet repository and every tenant's projection. Tenants' own
# sources use per-tenant tokens the portal issues and writes into their namespaces.
GITOPS_HTTP_TOKENS = env_list("GITOPS_HTTP_TOKENS")
# Bounds of one request to the Git HTTP endpoint (gitops/githttp.py): the largest upload-pack
# request body, inflated (413 above it), and how long git may run for one request.
GITOPS_HTTP_MAX_BODY_BYTES = env_int("GITOPS_HTTP_MAX_BODY_BYTES", 10 * 1024 * 1024)
GITOPS_HTTP_TIMEOUT_SECONDS = float(env("GITOPS_HTTP_TIMEOUT_SECONDS", "60"))
# Where the per-tenant projection repositories live; empty: tenants/ beside GITOPS_REPO_PATH.
GITOPS_TENANT_REPOS_DIR = env("GITOPS_TENANT_REPOS_DIR")
# Flux notification-controller Receiver URL to call after a merge, so Flux reconciles at once.
FLUX_RECEIVER_URL = env("FLUX_RECEIVER_URL")
FLUX_RECEIVER_TOKEN = env("FLUX_RECEIVER_TOKEN")

# What the whole-tree checks found in each tenant's directory, kept by the directory's content
# (gitops.checks.partition), so a check run at 10,000 tenants reads the tenants a change
# touches, not all of them. A SQLite file of this replica's; "memory": this process only.
GITOPS_CHECK_CACHE = env("GITOPS_CHECK_CACHE", str(VAR_DIR / "check-cache.sqlite3"))
# A Celery worker process warms those values, main's tree and the schemas in the background
# when it starts (gitops.merge_queue.warm), so its first batch does not pay for them.
GITOPS_WARM_WORKERS = env_bool("GITOPS_WARM_WORKERS", True)
# --- Sleep and wake (catalog.idle_actions, gitops.policy_merge) ----------------------------
# A change that only puts an endpoint or tenant cluster to sleep or wakes it merges once its
# checks pass, approved by the standing idle policy; false: it waits for a review.
GITOPS_POLICY_AUTO_MERGE = env_bool("GITOPS_POLICY_AUTO_MERGE", True)

# --- Merge queue (gitops.merge_queue) ------------------------------------------------------
# Approved changes put into the queue ("merge when ready") are squashed onto main together, in
# batches of at most this many, checked once per batch and merged in one compare-and-swap.
GITOPS_MERGE_QUEUE_BATCH = env_int("GITOPS_MERGE_QUEUE_BATCH", 100)
# How long a runner's hold on the queue lasts without renewal: after a crash, the next runner
# waits this long before it takes the interrupted batch's changes up again.
GITOPS_MERGE_QUEUE_LEASE_SECONDS = env_int("GITOPS_MERGE_QUEUE_LEASE_SECONDS", 300)
# Every change added starts a run; the schedule picks up what a lost message left behind.
CELERY_BEAT_SCHEDULE["gitops-merge-queue"] = {
    "task": "gitops.merge_queue",
    "schedule": schedule(timedelta(seconds=60)),
}

# --- Fleet (the Kubernetes cluster the portal reads) ---------------------------------------
# Where the API server is, in this order: FLEET_KUBECONFIG (a kubeconfig file, optionally a
# context), FLEET_IN_CLUSTER (the pod's service account), FLEET_API_URL (a plain URL with an
# optional bearer token). With none of them, the portal talks to the built-in simulator,
# which `manage.py serve` starts at FLEET_SIMULATOR_ADDR unless FLEET_SIMULATOR is false.
FLEET_KUBECONFIG = env("FLEET_KUBECONFIG")
FLEET_KUBE_CONTEXT = env("FLEET_KUBE_CONTEXT")
FLEET_IN_CLUSTER = env_bool("FLEET_IN_CLUSTER")
FLEET_SIMULATOR_ADDR = env("FLEET_SIMULATOR_ADDR", "127.0.0.1:8001")
_real_cluster = bool(FLEET_KUBECONFIG or FLEET_IN_CLUSTER or env("FLEET_API_URL"))
FLEET_SIMULATOR = env_bool("FLEET_SIMULATOR", not _real_cluster)
FLEET_SIMULATOR_CONFIG = env("FLEET_SIMULATOR_CONFIG")  # YAML; empty = the demo fleet
FLEET_API_URL = env("FLEET_API_URL", "" if _real_cluster else f"http://{FLEET_SIMULATOR_ADDR}")
FLEET_API_TOKEN = env("FLEET_API_TOKEN")
FLEET_API_CA_FILE = env("FLEET_API_CA_FILE")
FLEET_API_TIMEOUT = float(env("FLEET_API_TIMEOUT", "10"))
# How often the inventory and status are read, and after how long unread data counts as stale.
FLEET_SYNC_SECONDS = env_int("FLEET_SYNC_SECONDS", 5 if FLEET_SIMULATOR else 30)
FLEET_STALE_AFTER_SECONDS = env_int("FLEET_STALE_AFTER_SECONDS", 300)
# How often the admin pages' live regions (approval, change, merge queue, node) ask for news;
# an unchanged answer is a 204 from a few indexed reads (portal/live.py).
LIVE_ADMIN_POLL_MS = env_int("LIVE_ADMIN_POLL_MS", 2000)
# A drain retries an eviction a PodDisruptionBudget refused after this long, twice.
FLEET_EVICTION_RETRY_SECONDS = float(env("FLEET_EVICTION_RETRY_SECONDS", "5"))
# Node label naming the pool (the portal flavor) a GPU node belongs to.
FLEET_POOL_LABEL = env("FLEET_POOL_LABEL", "ai-factory.io/pool")
CELERY_BEAT_SCHEDULE["fleet-sync"] = {
    "task": "fleet.sync",
    "schedule": schedule(timedelta(seconds=FLEET_SYNC_SECONDS)),
}
# --- Status as events (fleet.watch and the Flux events hook) ---------------------------------
# The fleet watcher (`manage.py fleet_watch`, or a thread of `manage.py serve` when FLEET_WATCH)
# keeps the status rows current from Kubernetes watches; the scheduled sync above stays as the
# fallback. A watch not heard from (event or bookmark) for FLEET_WATCH_STALE_SECONDS is shown as
# stale. Each watch request asks the API server to end it after FLEET_WATCH_TIMEOUT_SECONDS.
FLEET_WATCH = env_bool("FLEET_WATCH", True)
FLEET_WATCH_TIMEOUT_SECONDS = env_int("FLEET_WATCH_TIMEOUT_SECONDS", 300)
FLEET_WATCH_STALE_SECONDS = env_int("FLEET_WATCH_STALE_SECONDS", 180)
# POST /hooks/flux/: events of notification-controller's generic-hmac Provider, verified with
# this key (the Provider's Secret `token`); empty: the hook answers 404. Events older than
# FLUX_EVENT_MAX_AGE_SECONDS are refused, and accepted ones are remembered that long.
FLUX_WEBHOOK_SECRET = env("FLUX_WEBHOOK_SECRET")
if not FLUX_WEBHOOK_SECRET and FLEET_SIMULATOR and DEBUG:
    # The demo: `serve` hands the same per-process key to the simulator it starts, so its
    # notification-controller signs as a real one would; nothing to configure.
    FLUX_WEBHOOK_SECRET = secrets.token_hex(32)
FLUX_EVENT_MAX_AGE_SECONDS = env_int("FLUX_EVENT_MAX_AGE_SECONDS", 600)
# Queue positions: Kueue's visibility API read per ClusterQueue with work waiting, this often,
# this many pending workloads a request (Kueue's own default page is 1,000, its maximum 100,000).
FLEET_QUEUE_POSITIONS_SECONDS = env_int("FLEET_QUEUE_POSITIONS_SECONDS", FLEET_SYNC_SECONDS)
FLEET_QUEUE_POSITIONS_PAGE = env_int("FLEET_QUEUE_POSITIONS_PAGE", 500)
CELERY_BEAT_SCHEDULE["fleet-queue-positions"] = {
    "task": "fleet.queue_positions",
    "schedule": schedule(timedelta(seconds=FLEET_QUEUE_POSITIONS_SECONDS)),
}
# --- Remediation (fleet.remediation) ---------------------------------------------------------
# The loop runs after every fleet sync and on its own this often (a fault the watcher wrote is
# acted on within this many seconds). The policy (guard, grace, hysteresis, return) is edited
# on /fleet/remediation/.
FLEET_REMEDIATION_SECONDS = env_int("FLEET_REMEDIATION_SECONDS", FLEET_SYNC_SECONDS)
CELERY_BEAT_SCHEDULE["fleet-remediate"] = {
    "task": "fleet.remediate",
    "schedule": schedule(timedelta(seconds=FLEET_REMEDIATION_SECONDS)),
}
CELERY_BEAT_SCHEDULE["fleet-flavors"] = {
    "task": "fleet.reconcile_flavors",
    "schedule": crontab(minute="*/10"),
}
# Catalog requests follow their pull requests and the cluster as often as the fleet is read.
CELERY_BEAT_SCHEDULE["catalog-advance"] = {
    "task": "catalog.advance",
    "schedule": schedule(timedelta(seconds=FLEET_SYNC_SECONDS)),
}
CELERY_BEAT_SCHEDULE["catalog-expire"] = {
    "task": "catalog.expire_reservations",
    "schedule": crontab(minute=5),
}
CELERY_BEAT_SCHEDULE["catalog-idle-merge"] = {
    "task": "catalog.idle_merge",
    "schedule": schedule(timedelta(seconds=FLEET_SYNC_SECONDS)),
}

# --- Node burn-in (fleet.burnin) ---------------------------------------------------------------
# A GPU node the fleet sync sees for the first time is cordoned and burnt in (the DCGM
# diagnostic, then NCCL's all-reduce, as Jobs in FLEET_BURN_IN_NAMESPACE) before it takes work.
FLEET_BURN_IN_AUTO = env_bool("FLEET_BURN_IN_AUTO", True)
FLEET_BURN_IN_NAMESPACE = env("FLEET_BURN_IN_NAMESPACE", "gpu-burn-in")
# NVIDIA's DCGM image (tag scheme <DCGM version>-<build>-<os>: NVIDIA/DCGM docker/Makefile).
FLEET_BURN_IN_DIAG_IMAGE = env(
    "FLEET_BURN_IN_DIAG_IMAGE", "nvcr.io/nvidia/cloud-native/dcgm:4.4.1-2-ubuntu22.04"
)
# An image with nccl-tests' all_reduce_perf on its PATH (NVIDIA's cuda-dl-base carries them).
FLEET_BURN_IN_NCCL_IMAGE = env(
    "FLEET_BURN_IN_NCCL_IMAGE", "nvcr.io/nvidia/cuda-dl-base:24.11-cuda12.6-devel-ubuntu24.04"
)
# all_reduce_perf's average bus bandwidth (GB/s) a healthy node reaches, per GPU product (the
# nvidia.com/gpu.product label), as JSON; a node passes at FLEET_BURN_IN_PASS_SHARE of it.
FLEET_BURN_IN_EXPECTED_BUSBW = json.loads(
    env(
        "FLEET_BURN_IN_EXPECTED_BUSBW",
        '{"NVIDIA-H200": 450, "NVIDIA-H100-80GB-HBM3": 450, "NVIDIA-A100-SXM4-80GB": 220,'
        ' "NVIDIA-L40S": 20}',
    )
)
FLEET_BURN_IN_PASS_SHARE = float(env("FLEET_BURN_IN_PASS_SHARE", "0.9"))
# A test Job running longer than this fails (a level 3 diagnostic takes up to an hour).
FLEET_BURN_IN_DEADLINE_SECONDS = env_int("FLEET_BURN_IN_DEADLINE_SECONDS", 7200)
# A node of a multi-node NVLink domain (nvidia.com/gpu.clique) is also tested across the
# domain (fleet.burnin); the expected all-reduce bus bandwidth across nodes per GPU product, as
# JSON; the pods reach each other by ssh with the keys of FLEET_BURN_IN_SSH_SECRET.
FLEET_BURN_IN_DOMAIN = env_bool("FLEET_BURN_IN_DOMAIN", True)
FLEET_BURN_IN_EXPECTED_DOMAIN_BUSBW = json.loads(
    env(
        "FLEET_BURN_IN_EXPECTED_DOMAIN_BUSBW",
        '{"NVIDIA-GB200": 700, "NVIDIA-H200": 350, "NVIDIA-H100-80GB-HBM3": 350,'
        ' "NVIDIA-A100-SXM4-80GB": 180}',
    )
)
FLEET_BURN_IN_SSH_SECRET = env("FLEET_BURN_IN_SSH_SECRET", "burn-in-ssh")
CELERY_BEAT_SCHEDULE["fleet-burn-in"] = {
    "task": "fleet.burn_in",
    "schedule": schedule(timedelta(seconds=FLEET_SYNC_SECONDS)),
}

# --- NetBox (fleet.netbox) -------------------------------------------------------------------
# Optional: with NETBOX_URL set, each node's validation state (lifecycle and last burn-in) is
# written to a custom field of its NetBox device (found by the node's name), NetBox's serial is
# read back, and its GPUs are kept as inventory items. See docs/operator-guide.md, "NetBox".
NETBOX_URL = env("NETBOX_URL")
NETBOX_TOKEN = env("NETBOX_TOKEN")
NETBOX_VALIDATION_FIELD = env("NETBOX_VALIDATION_FIELD", "gpu_validation")
NETBOX_SITE = env("NETBOX_SITE")  # a site's slug: look devices up in that site only
# Node labels (set by the cluster's admins) with the NetBox device's name, unless it is the
# node's name, and with the machine's serial, compared with NetBox's.
NETBOX_NAME_LABEL = env("NETBOX_NAME_LABEL")
NETBOX_SERIAL_LABEL = env("NETBOX_SERIAL_LABEL")
NETBOX_GPU_ITEMS = env_bool("NETBOX_GPU_ITEMS", True)  # create missing GPU inventory items
NETBOX_GPU_MANUFACTURER = env("NETBOX_GPU_MANUFACTURER", "nvidia")  # a manufacturer's slug
NETBOX_TIMEOUT_SECONDS = float(env("NETBOX_TIMEOUT_SECONDS", "10"))
if NETBOX_URL:
    CELERY_BEAT_SCHEDULE["fleet-netbox"] = {
        "task": "fleet.netbox_sync",
        "schedule": schedule(timedelta(seconds=env_int("NETBOX_SYNC_SECONDS", 3600))),
    }

# --- Outbound webhooks (catalog.outbound) ---------------------------------------------------
# Tenants' URLs called, signed, when their requests change state. Plain http:// and hosts that
# resolve to loopback, private or link-local addresses are refused unless allowed here; a local
# run (DEBUG) allows both, so the demo and the tests can call a receiver on 127.0.0.1.
WEBHOOKS_ALLOW_HTTP = env_bool("WEBHOOKS_ALLOW_HTTP", DEBUG)
WEBHOOKS_ALLOW_PRIVATE = env_bool("WEBHOOKS_ALLOW_PRIVATE", DEBUG)
# Connect and read timeout of one call, in seconds.
WEBHOOKS_TIMEOUT_SECONDS = float(env("WEBHOOKS_TIMEOUT_SECONDS", "5"))
# An endpoint is disabled (and its admins told) after this many failed deliveries in a row.
WEBHOOKS_DISABLE_AFTER = env_int("WEBHOOKS_DISABLE_AFTER", 5)
# How often due retries are looked for (the first attempt is made as soon as the event commits).
CELERY_BEAT_SCHEDULE["catalog-webhooks"] = {
    "task": "catalog.webhooks",
    "schedule": schedule(timedelta(seconds=env_int("WEBHOOKS_POLL_SECONDS", 10))),
}

# --- Billing: the GPU usage ledger ---------------------------------------------------------
# Where DCGM samples come from: "prometheus" (BILLING_PROMETHEUS_URL, production) or
# "exporter", the embedded default: the portal scrapes dcgm-exporter endpoints itself
# (BILLING_EXPORTER_URLS; the built-in simulator's /metrics when unset). See
# docs/operator-guide.md, "Metering".
BILLING_SOURCE = env("BILLING_SOURCE", "exporter" if FLEET_SIMULATOR else "prometheus")
if BILLING_SOURCE not in ("prometheus", "exporter"):
    raise ImproperlyConfigured("BILLING_SOURCE must be 'prometheus' or 'exporter'")
BILLING_PROMETHEUS_URL = env("BILLING_PROMETHEUS_URL")
BILLING_PROMETHEUS_TOKEN = env("BILLING_PROMETHEUS_TOKEN")
BILLING_PROMETHEUS_TIMEOUT = float(env("BILLING_PROMETHEUS_TIMEOUT", "30"))
# Label matchers added to every DCGM query, e.g. {job="nvidia-dcgm-exporter"} when other jobs
# scrape the same exporters (or {cluster="gpu-a"} on a Prometheus of several fleets).
BILLING_PROMETHEUS_SELECTOR = env("BILLING_PROMETHEUS_SELECTOR")
BILLING_EXPORTER_URLS = env_list(
    "BILLING_EXPORTER_URLS", [f"{FLEET_API_URL}/metrics"] if FLEET_SIMULATOR else []
)
BILLING_EXPORTER_TOKEN = env("BILLING_EXPORTER_TOKEN", FLEET_API_TOKEN if FLEET_SIMULATOR else "")
# The resolution of the ledger: the range queries' step and the scrape slot, in seconds.
BILLING_STEP_SECONDS = env_int("BILLING_STEP_SECONDS", 60)
if BILLING_STEP_SECONDS < 1 or 3600 % BILLING_STEP_SECONDS:
    # Every hour must start on a step, or a step would straddle two hours' lines.
    raise ImproperlyConfigured("BILLING_STEP_SECONDS must divide 3600 (e.g. 15, 30, 60)")
# An hour is complete this long after it ends (the last scrapes have to land first).
BILLING_INGEST_LAG_SECONDS = env_int("BILLING_INGEST_LAG_SECONDS", 120)
# Dashboards mark their data as lagging when the ledger's latest complete hour ended more
# than this long ago (an hour's ingest normally lands a few minutes after it ends).
BILLING_LAGGING_AFTER_MINUTES = env_int("BILLING_LAGGING_AFTER_MINUTES", 120)
# With no cursor yet, the periodic ingest starts this many hours back; it never catches up
# more than BILLING_MAX_CATCHUP_HOURS in one run (a backfill job does longer ranges).
BILLING_FIRST_HOURS = env_int("BILLING_FIRST_HOURS", 24)
BILLING_MAX_CATCHUP_HOURS = env_int("BILLING_MAX_CATCHUP_HOURS", 48)
BILLING_SAMPLE_RETENTION_HOURS = env_int("BILLING_SAMPLE_RETENTION_HOURS", 48)
CELERY_BEAT_SCHEDULE["billing-ingest"] = {
    "task": "billing.ingest",
    "schedule": crontab(minute="5,20,35,50"),
}
if BILLING_SOURCE == "exporter":
    CELERY_BEAT_SCHEDULE["billing-scrape"] = {
        "task": "billing.scrape",
        "schedule": schedule(timedelta(seconds=BILLING_STEP_SECONDS)),
    }

# --- Billing: OpenCost ----------------------------------------------------------------------
# OpenCost's API (port 9003; Kubecost's ends in /model) for CPU, RAM, storage and network cost
# per namespace. The demo's simulator answers the same allocation API from its own
# placements and prices; with a real cluster and no OpenCost, leave it empty.
BILLING_OPENCOST_URL = env(
    "BILLING_OPENCOST_URL", f"http://{FLEET_SIMULATOR_ADDR}" if FLEET_SIMULATOR else ""
)
BILLING_OPENCOST_TIMEOUT = float(env("BILLING_OPENCOST_TIMEOUT", "30"))

# --- Billing: prices, invoices, budgets -------------------------------------------------------
# One currency for every price and invoice (ISO 4217). Invoices of a month are drafted on the
# BILLING_INVOICE_DAY of the next month (UTC), once the ledger has the whole month; finance
# reviews and issues them (BILLING_AUTO_ISSUE=true issues them as drafted).
BILLING_CURRENCY = env("BILLING_CURRENCY", "EUR").upper()
if len(BILLING_CURRENCY) != 3 or not BILLING_CURRENCY.isalpha():
    raise ImproperlyConfigured("BILLING_CURRENCY must be an ISO 4217 code such as EUR or USD")
BILLING_INVOICE_DAY = env_int("BILLING_INVOICE_DAY", 2)
if not 1 <= BILLING_INVOICE_DAY <= 28:
    raise ImproperlyConfigured("BILLING_INVOICE_DAY must be a day from 1 to 28")
BILLING_AUTO_ISSUE = env_bool("BILLING_AUTO_ISSUE", False)
BILLING_BUDGET_THRESHOLDS = [
    int(t) for t in env_list("BILLING_BUDGET_THRESHOLDS", ["50", "80", "100"]) if t.isdigit()
]
CELERY_BEAT_SCHEDULE["billing-invoices"] = {
    "task": "billing.invoices",
    "schedule": crontab(minute=30, hour=6, day_of_month=str(BILLING_INVOICE_DAY)),
}
CELERY_BEAT_SCHEDULE["billing-budgets"] = {
    "task": "billing.budgets",
    "schedule": crontab(minute="10,40"),
}

# --- Billing: idle reclaim (billing/idle.py) -------------------------------------------------
# How often the idle policies are evaluated over the ledger: detection, notices, and the
# actions whose grace has run out.
BILLING_IDLE_EVERY_SECONDS = env_int("BILLING_IDLE_EVERY_SECONDS", 300)
CELERY_BEAT_SCHEDULE["billing-idle"] = {
    "task": "billing.idle",
    "schedule": schedule(timedelta(seconds=BILLING_IDLE_EVERY_SECONDS)),
}

# --- Health, readiness and metrics (portal/health.py, portal/metrics.py) ---------------------
# /metrics answers only `Authorization: Bearer <METRICS_TOKEN>`; unset, it is off (404).
METRICS_TOKEN = env("METRICS_TOKEN")
# The apps' readiness checks, by component name (the portal imports no app).
PORTAL_READINESS_CHECKS = {
    "git": "gitops.health.git_store",
    "git_remote": "gitops.health.git_remote",
    "cluster": "fleet.health.cluster_api",
}
# Components whose failure makes /readyz answer 503 (takes the pod out of the Service); the
# others are reported only. See docs/architecture.md, "Health, readiness and metrics".
PORTAL_READINESS_REQUIRED = env_list("PORTAL_READINESS_REQUIRED", ["database", "git"])
_unknown = set(PORTAL_READINESS_REQUIRED) - {"database", "broker", *PORTAL_READINESS_CHECKS}
if _unknown:
    raise ImproperlyConfiguredEnv(
        f"PORTAL_READINESS_REQUIRED names unknown components: {', '.join(sorted(_unknown))}"
    )
# Each network check (broker, Git remote, cluster API) gives up after this long.
PORTAL_READINESS_TIMEOUT_SECONDS = float(env("PORTAL_READINESS_TIMEOUT_SECONDS", "2"))
# A reachable Git remote is remembered this long, so probes every few seconds from every
# replica do not each call the forge.
PORTAL_READINESS_REMOTE_CACHE_SECONDS = env_int("PORTAL_READINESS_REMOTE_CACHE_SECONDS", 30)
# The portal's own metrics, computed from the database at scrape time (each app its own).
PORTAL_METRICS_COLLECTORS = [
    "portal.metrics.job_metrics",
    "gitops.metrics.change_metrics",
    "fleet.metrics.sync_metrics",
]
# How far back the duration histograms (checks, Flux apply lag) look.
PORTAL_METRICS_WINDOW_SECONDS = env_int("PORTAL_METRICS_WINDOW_SECONDS", 3600)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "portal.middleware.RequestIdLogFilter"}},
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"}
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "plain",
            "filters": ["request_id"],
        }
    },
    "root": {"handlers": ["console"], "level": env("LOG_LEVEL", "INFO")},
}


# --- REST API (api/) ---------------------------------------------------------------------------
# Tokens first, then the browser's session (the docs page, htmx pages calling the API). Every
# call needs a signed-in caller whose token scopes cover the method (api.permissions); errors
# are RFC 9457 problem details (api.problems). JSON in and out; the schema is OpenAPI 3.
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # First: a caller that sends a token gets its 401 challenge, and is never taken
        # for the session that may ride along.
        "api.auth.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["api.permissions.ScopedAccess"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "api.problems.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "AI factory portal API",
    "DESCRIPTION": "Tenants, requests, changes, fleet capacity, usage and cost.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["api.permissions.ScopedAccess"],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # Two models call their choices "state"; name each enum after its model.
    "ENUM_NAME_OVERRIDES": {
        "RequestStateEnum": "catalog.models.ResourceRequest.State",
        "ReviewStateEnum": "gitops.models.Review.State",
        "JobStatusEnum": "portal.models.Job.Status",
        # A change's status kept its name when jobs (with a status of their own) joined.
        "StatusEnum": "gitops.models.ChangeRequest.Status",
        # An idle case's kind (billing.idle) beside a change's, which keeps its name.
        "IdleKindEnum": "billing.models.IdleKind",
        "KindEnum": "gitops.models.ChangeRequest.Kind",
    },
}
