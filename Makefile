# Quick start: `make demo`, then `make test`. Both create .venv on first use.
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
STAMP := $(VENV)/.fp8tower-installed
HAS_GPU := $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo 1)
DEMO_DIR ?= out/demo
# The torch version installed on a machine without a GPU (a CPU build on our machines).
CPU_TORCH ?= 2.13.0
# The full 27B tower with a GPU; a tiny hybrid model on a CPU-only machine.
DEMO_MODEL ?= $(if $(HAS_GPU),qwen3.5-27b,tiny-hybrid)
# End-to-end decode of a transformers model built from a config (random weights).
GEN_MODEL ?= $(if $(HAS_GPU),qwen3-8b,tiny-hybrid)

.PHONY: test demo install clean

install: $(STAMP)

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
ifeq ($(HAS_GPU),1)
	$(PY) -m pip install -q torch
else
	# torch by version, through pip's own configuration (PIP_INDEX_URL / PIP_EXTRA_INDEX_URL,
	# pip.conf): a CPU build where that configuration provides one (README, "Development").
	$(PY) -m pip install -q torch==$(CPU_TORCH)
endif
	$(PY) -m pip install -q -e '.[triton,report,dev]'
	# CUTLASS headers only (the cutlass backend and its CI compile test); see pyproject's extra.
	$(PY) -m pip install -q --no-deps 'nvidia-cutlass>=4.2'
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q

demo: $(STAMP)
	$(BIN)/fp8tower info
	$(BIN)/fp8tower bench tower --model $(DEMO_MODEL) --m 1 --arms unmerged,merged \
	  --json $(DEMO_DIR)/tower.json
	$(BIN)/fp8tower trace capture --model $(DEMO_MODEL) --arm unmerged --m 1 --force --out $(DEMO_DIR)/unmerged
	$(BIN)/fp8tower trace capture --model $(DEMO_MODEL) --arm merged --m 1 --force --out $(DEMO_DIR)/merged
	$(BIN)/fp8tower trace report $(DEMO_DIR)/unmerged $(DEMO_DIR)/merged \
	  --html $(DEMO_DIR)/report.html --json $(DEMO_DIR)/report.json
	$(BIN)/fp8tower bench generate --model $(GEN_MODEL) --batch 1 --context 64 --steps 8 \
	  --arms bf16,fp8:per_tensor --json $(DEMO_DIR)/generate.json
	@echo "HTML report: $(DEMO_DIR)/report.html"

clean:
	rm -rf $(VENV) out
