# Two commands on a fresh machine: `make demo` and `make test`. Both create .venv and
# install what they need.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
STAMP := $(VENV)/.installed
RUN ?= runs/demo

.PHONY: demo test bench compile check lint images clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e ".[data,train,eval,deploy,dev]"
	$(PY) -m pip install -q --no-deps nvidia-pytriton==0.7.0
	{ test -x /usr/sbin/nginx && test -x /usr/bin/prometheus; } \
	  || apt-get install -y -q --no-install-recommends nginx prometheus >/dev/null \
	  || (apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends nginx prometheus >/dev/null)
	$(BIN)/llmops deploy setup
	$(PYTHON) -m venv $(VENV)/checkov
	$(VENV)/checkov/bin/pip install -q checkov==3.3.30
	touch $(STAMP)

$(VENV)/.bench: $(STAMP)
	$(PY) -m pip install -q -e ".[data,train,eval,deploy,dev,bench]"
	touch $@

demo: $(STAMP)
	$(BIN)/llmops run --out $(RUN)

test: $(STAMP)
	$(BIN)/ruff check --select F,E9 components pipelines tests
	$(BIN)/llmops compile --check
	$(PY) -m pytest -q tests

bench: $(VENV)/.bench
	$(PY) -m tests.benchmarks.run_all

compile: $(STAMP)
	$(BIN)/llmops compile

check: $(STAMP)
	$(BIN)/llmops compile --check

lint: $(STAMP)
	$(BIN)/ruff check --select F,E9 components pipelines tests

clean:
	rm -rf $(VENV) runs build .pytest_cache .hypothesis
