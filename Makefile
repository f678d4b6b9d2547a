# Cascade — the two commands of the README, and a few helpers.
#   make demo   builds the tiny model and data, starts the services, runs the demo
#   make test   runs the whole test suite
# Both create .venv and install what they need on a machine that has only Python.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# The CPU build of torch is pinned first so that no dependency pulls a multi-GB CUDA build.
# On a GPU machine: make install TORCH_SPEC="torch==2.13.0" EXTRAS="all,dev,vllm" with your CUDA index.
TORCH_SPEC ?= torch==2.13.0
EXTRAS     ?= all,dev

.PHONY: install demo test lint proto servers clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e ".[$(EXTRAS)]"
	touch $@

demo: install
	$(VENV)/bin/cascade demo

test: install
	bash .ci/servers.sh
	$(PY) -m pytest

lint: install
	$(VENV)/bin/ruff check services tests bench

servers:
	bash .ci/servers.sh

proto: install
	$(PY) -m services.common.protogen

clean:
	rm -rf $(VENV) .cascade .pytest_cache
