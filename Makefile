# torchhw: every target creates the virtual environment it needs on first use.
#   make run        execute the whole course with papermill (quick mode) into runs/<timestamp>/
#   make test       every test: unit tests, nbval (strict) over every notebook, the browser tests
#   make lab        open JupyterLab at notebooks/ with the course's settings (no news prompt)
#   make notebooks  regenerate every notebook's committed outputs on a fresh kernel
#   make bench      the benchmark command (matmul and memory bandwidth on this machine)
#   make browser    only the JupyterLab-in-Chromium tests (marker `browser`; part of make test)
#   make portability  nbval over every notebook under emulated machines (ISA, threads); CI runs it
#   make badges     rewrite the notebooks' Colab/Binder badges and setup cells from pyproject.toml
#   make handouts   static HTML site of the executed course in build/handouts/, works offline
#   make binder     simulate Binder's build (binder/) in a fresh environment, run notebook 00
#   make learner    a fresh venv with only the learner's dependencies runs notebook 01
#   make stress     run the 2-rank and 2-node DDP jobs 50 times each and count failures (ARGS="--runs N")

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# Which torch build: `default` lets pip choose (on Linux x86-64 from PyPI that is the CUDA build,
# several GB, which also runs on a CPU); `cpu` takes the CPU-only build (about 200 MB) from
# PyTorch's CPU index. Set it on first install: make venv TORCH=cpu
TORCH  ?= default
ifeq ($(TORCH),cpu)
TORCH_INDEX := --extra-index-url https://download.pytorch.org/whl/cpu
endif

# Progress bars off in tests and committed outputs, so nbval compares like with like.
# `make run` shows them only at a terminal, never in CI (see torchhw.runner.progress_wanted).
test unit browser notebooks binder portability: export TQDM_DISABLE = 1
export PIP_DISABLE_PIP_VERSION_CHECK = 1

.PHONY: learner portability stress venv run test unit lab notebooks bench constraints clean browser badges handouts binder

venv: $(STAMP)

$(STAMP): requirements.txt constraints.txt pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt $(TORCH_INDEX)
	$(BIN)/python -m pip install --quiet --no-deps -e .
	@touch $@

run: $(STAMP)
	$(BIN)/torchhw run $(ARGS)

# every test: the default suite (unit tests, nbval over every notebook, two at a time), then
# the browser tests. `make portability` (CI runs it too) repeats nbval under other machines.
test: $(STAMP)
	$(BIN)/python -m pytest $(ARGS)
	$(MAKE) --no-print-directory browser ARGS=

portability: $(STAMP)
	$(BIN)/torchhw portability $(ARGS)

unit: $(STAMP)
	$(BIN)/python -m pytest tests $(ARGS)

lab: $(STAMP)
	$(BIN)/torchhw lab $(ARGS)

browser: $(STAMP)
	$(BIN)/python -m pytest -m browser tests $(ARGS)

badges: $(STAMP)
	$(BIN)/torchhw badges $(ARGS)

handouts: $(STAMP)
	$(BIN)/torchhw handouts $(ARGS)

binder: $(STAMP)
	$(BIN)/torchhw binder $(ARGS)

notebooks: $(STAMP)
	$(BIN)/torchhw regen $(ARGS)

bench: $(STAMP)
	$(BIN)/torchhw bench $(ARGS)

learner: $(STAMP)
	$(BIN)/torchhw learner

stress: $(STAMP)
	$(BIN)/python -m pytest -m slow tests
	$(BIN)/torchhw stress $(ARGS)

constraints: $(STAMP)
	$(BIN)/python -m pip freeze --exclude-editable | sed 's/+cpu$$//' > constraints.txt.new
	@echo "wrote constraints.txt.new: review it, then move it over constraints.txt"

clean:
	rm -rf $(VENV) runs build src/*.egg-info
