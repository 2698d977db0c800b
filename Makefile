# ETT — two commands on a fresh machine: `make demo`, then `make test`.
# Everything is installed into .venv by these targets; nothing is installed by hand.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
CHROMIUM ?= /usr/bin/chromium
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: help install install-trainer install-browser demo test test-fast test-integration lint typecheck bench clean stop

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

$(VENV)/.web-installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel
	$(PIP) install -q -e '.[dev]'
	@touch $@

# torch stays out of the web/worker install. torchrec's wheel requires the `fbgemm-gpu`
# distribution by name, so the CPU build and torchrec are installed with --no-deps.
$(VENV)/.trainer-installed: $(VENV)/.web-installed
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q fbgemm-gpu-cpu==1.8.0
	$(PIP) install -q --no-deps torchrec==1.8.0
	$(PIP) install -q tensordict torchmetrics==1.0.3 tqdm pyre-extensions
	@touch $@

install: $(VENV)/.web-installed  ## web + worker + dev tools into .venv (no torch)

install-trainer: $(VENV)/.trainer-installed  ## add torch + TorchRec for the trainer

install-browser:  ## Debian chromium for the UI tests (never `playwright install`)
	@[ -x $(CHROMIUM) ] || ($(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq chromium)

demo: install install-trainer  ## embedded Postgres+Redis, worker, collector, a real TorchRec job, dashboard on :8000
	$(PY) -m ettweb.demo

test: install install-trainer install-browser  ## the whole test suite (embedded servers unless DATABASE_URL/CELERY_BROKER_URL are set)
	$(PY) -m pytest

test-integration: install install-trainer  ## only the tests that run real processes against real servers
	$(PY) -m pytest -m integration

lint: install  ## ruff + mypy
	$(VENV)/bin/ruff check .
	DATABASE_URL=postgres://lint@localhost/lint CELERY_BROKER_URL=redis://localhost:6379/0 $(VENV)/bin/mypy

bench: install install-trainer  ## run every benchmark
	@for b in bench/*.py; do n=$$(basename $$b .py); [ $$n = __init__ ] || $(PY) -m bench.$$n; done

stop:  ## stop the embedded Postgres and Redis
	$(PY) -m ettweb.embedded stop

clean: stop  ## remove the embedded servers' data, spools and checkpoints
	rm -rf var
