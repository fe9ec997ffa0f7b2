# The two commands a newcomer needs: `make demo` and `make test`. Both start from a clean clone.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/pip --disable-pip-version-check
MANAGE := $(BIN)/python manage.py
ADDR   ?= 127.0.0.1:8000
# pytest-xdist processes: one per core (CI has two); PYTEST_WORKERS=0 runs in this process.
PYTEST_WORKERS ?= auto
PYTEST := $(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadgroup --durations=25
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test test-sqlite-subset lint format worker system-deps node-deps screenshots clean

# The demo and the checks are local runs: DEBUG=true lets the settings use the embedded
# SECRET_KEY, which they refuse anywhere else (a deployment sets its own; docs/operator-guide.md).
demo test test-sqlite-subset lint format: export DEBUG := true

$(VENV)/bin/python:
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is needed"'
	@$(PYTHON) -m venv --help >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq python3-venv; }
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(VENV)/.installed-app: pyproject.toml | $(VENV)/bin/python
	$(PIP) install -q -e .
	@touch $@

$(VENV)/.installed-test: pyproject.toml | $(VENV)/bin/python
	$(PIP) install -q -e '.[test]'
	@touch $@ $(VENV)/.installed-app

## demo: install, migrate an SQLite database under var/, seed demo data and serve on $(ADDR)
demo: $(VENV)/.installed-app
	$(MANAGE) migrate --noinput -v0
	$(MANAGE) createcachetable
	@# The pinned upstream CRDs, so the demo's checks validate custom resources too (and its
	@# simulator serves them); offline it goes on with the built-in kinds only.
	$(MANAGE) fetch_schemas --offline-ok
	$(MANAGE) seed_demo
	@echo "Portal on http://$(ADDR)/  (sign in as platform, alice, carol, erin, ... with demo-password-1)"
	$(MANAGE) serve --demo-jobs $(ADDR)

## system-deps: what the browser, SSO and metering tests need from Debian when missing
system-deps:
	@missing=""; \
	[ -x /usr/bin/chromium ] || missing="$$missing chromium"; \
	command -v node >/dev/null 2>&1 || missing="$$missing nodejs"; \
	command -v npm >/dev/null 2>&1 || missing="$$missing npm"; \
	command -v prometheus >/dev/null 2>&1 || missing="$$missing prometheus"; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

## node-deps: the OIDC provider the SSO tests start (npm oidc-provider, pinned by package-lock)
node-deps: tests/oidc/node_modules/.installed

tests/oidc/node_modules/.installed: tests/oidc/package.json tests/oidc/package-lock.json
	cd tests/oidc && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

## test: install what the tests need, check and lint, and run the whole suite on DATABASE_URL (SQLite without it)
test: lint system-deps node-deps
	$(MANAGE) check
	$(MANAGE) makemigrations --check --dry-run
	$(PYTEST) $(PYTEST_ARGS)

## test-sqlite-subset: only the tests that depend on the database engine (marked db_engine), on SQLite
test-sqlite-subset: $(VENV)/.installed-test system-deps node-deps
	DATABASE_URL= $(PYTEST) -m db_engine $(PYTEST_ARGS)

## screenshots: the guides' pictures (docs/img/) of a freshly seeded demo, in headless Chromium
screenshots: $(VENV)/.installed-test system-deps
	$(BIN)/python -m docs.screenshots

## lint: ruff (lint and format check) and mypy
lint: $(VENV)/.installed-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy portal tenants gitops fleet catalog billing api portalctl simulator

format: $(VENV)/.installed-test
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

## worker: a Celery worker with the beat schedule (needs CELERY_BROKER_URL, e.g. redis://127.0.0.1:6379/0)
worker: $(VENV)/.installed-app
	@[ -n "$$CELERY_BROKER_URL" ] || { echo "set CELERY_BROKER_URL (e.g. redis://127.0.0.1:6379/0)"; exit 2; }
	$(BIN)/celery -A portal worker --beat --loglevel=INFO

clean:
	rm -rf $(VENV) var tests/oidc/node_modules
