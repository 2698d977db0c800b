# ETT — two commands on a fresh machine: `make demo`, then `make test`.
# Everything is installed into .venv by these targets; nothing is installed by hand.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
CHROMIUM ?= /usr/bin/chromium
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: help install install-trainer install-browser gpu-wheels demo test test-fast test-integration lint typecheck bench clean stop

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
	# The framework adapters' extras, held to the torch above (a newer one is a CUDA download).
	echo torch==2.13.0 > $(VENV)/torch-pin.txt
	$(PIP) install -q -c $(VENV)/torch-pin.txt -e '.[lightning,transformers]'
	@touch $@

install: $(VENV)/.web-installed  ## web + worker + dev tools into .venv (no torch)

install-trainer: $(VENV)/.trainer-installed  ## add torch + TorchRec for the trainer

# The borrowed GPU machine is offline and has torch 2.11 (Python 3.12) but no TorchRec:
# bench/gpu_lifecycle.sh installs these wheels there (see README "On a GPU").
GPU_WHEELS := fbgemm-gpu-cpu==1.6.0 torchrec==1.6.1 tensordict==0.15.3 iopath==0.1.9 \
              portalocker==4.4.2 cloudpickle==3.1.3 pyvers==0.2.3
gpu-wheels:  ## download the wheels bench/gpu_lifecycle.sh needs on a GPU machine into .whl/
	$(PYTHON) -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
	  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
	  --platform manylinux2014_x86_64 -d .whl $(GPU_WHEELS)

install-browser:  ## Debian chromium for the UI tests (never `playwright install`)
	@[ -x $(CHROMIUM) ] || ($(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq chromium)

demo: install install-trainer  ## embedded Postgres+Redis, worker, collector, a real TorchRec job, dashboard on :8000
	$(PY) -m ettweb.platform.demo

# Tests run in TEST_WORKERS processes (pytest-xdist), each with its own test database; the
# torch tests keep to one of them (tests/conftest.py: TORCH_GROUP). TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2
XDIST = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadgroup)

# The browser tests' full-page screenshots (one per page: tests/ettweb/test_pages_browser.py)
# are kept as the run's artifacts; each run starts the folder afresh, so none is stale.
SCREENSHOTS ?= $(CURDIR)/artifacts/screenshots

# PYTHONDONTWRITEBYTECODE (set on some machines) would make every test process rewrite every
# test module's asserts from source at each run: the test targets let Python cache them.
TEST_ENV = env -u PYTHONDONTWRITEBYTECODE

test: install install-trainer install-browser  ## the whole test suite (embedded servers unless DATABASE_URL/CELERY_BROKER_URL are set); screenshots in artifacts/screenshots/
	rm -rf "$(SCREENSHOTS)"
	$(TEST_ENV) ETT_SCREENSHOT_DIR="$(SCREENSHOTS)" $(PY) -m pytest $(XDIST)

test-fast: install install-trainer  ## the inner loop: every test but browsers, real servers and the slow ones, a fifth of the property tests' examples, stop at the first failure
	$(TEST_ENV) ETT_TEST_EXAMPLES=0.2 $(PY) -m pytest $(XDIST) -q -x -m "not integration and not browser and not slow"

test-integration: install install-trainer  ## only the tests that run real processes against real servers
	$(TEST_ENV) $(PY) -m pytest $(XDIST) -m integration

lint: install  ## ruff + mypy + the import contracts (the seams)
	$(VENV)/bin/ruff check .
	DJANGO_SETTINGS_MODULE=ettweb.settings.test $(VENV)/bin/lint-imports
	DATABASE_URL=postgres://lint@localhost/lint CELERY_BROKER_URL=redis://localhost:6379/0 $(VENV)/bin/mypy

bench: install install-trainer  ## run every benchmark
	@for b in bench/*.py; do n=$$(basename $$b .py); [ $$n = __init__ ] || $(PY) -m bench.$$n; done

stop:  ## stop whatever a demo left running (worker, beat, collector, web) and the embedded Postgres and Redis
	$(PY) -m ettweb.platform.demo --stop

clean: stop  ## remove the embedded servers' data, spools and checkpoints
	rm -rf var
