# torchhw: every target creates the virtual environment it needs on first use.
#   make run        execute the whole course with papermill (quick mode) into runs/<timestamp>/
#   make test       every test: unit tests, nbval (strict) over every notebook, the browser tests
#   make lab        open JupyterLab at notebooks/ with the course's settings (no news prompt);
#                   installs the learner's package and Lab only, no test tools
#   make notebooks  regenerate every notebook's committed outputs on a fresh kernel
#   make bench      the benchmark command (matmul and memory bandwidth on this machine)
#   make browser    only the JupyterLab-in-Chromium tests (marker `browser`; part of make test)
#   make portability  nbval over every notebook under emulated machines (ISA, threads); CI runs it
#   make badges     rewrite the notebooks' Colab/Binder badges and setup cells from pyproject.toml
#   make handouts   static HTML site of the executed course in build/handouts/, works offline
#   make binder     simulate Binder's build (binder/) in a fresh environment, run notebook 00
#   make learner    a fresh venv with only the learner's dependencies runs notebook 01
#   make colab      Colab's setup cell in a venv with Colab's versions: nothing is upgraded
#   make system     find or install chromium, npm and shellcheck, which the tests need
#   make stress     run the 2-rank launch, the fault-free and the crashing 2-node DDP jobs 50 times
#                   each; count every failure and print its cause (ARGS="--runs N")
#   make gpu-check  on a CUDA GPU: the `gpu` tests and every notebook with device cuda, a dated
#                   report in reference/gpu-check/ and a card in reference/cards/; needs only a
#                   Python with torch (no .venv), installs what is missing from build/gpu-wheels/
#   make gpu-wheels download, for a GPU machine without network, the wheels gpu-check installs
#                   (Python 3.12, Linux x86-64) into build/gpu-wheels/; FULL=1 adds the learner's
#                   large ones (numpy, matplotlib, scikit-learn...); never torch

# the first of these that runs and is 3.11 or newer (a pyenv shim of an absent version does not);
# else plain python3, so that bootstrap.py can say why it is too old
PYTHON ?= $(shell for p in python3.11 python3.12 python3.13 python3.14 python3.15 python3; do $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null && command -v $$p && break; done || true)
ifeq ($(PYTHON),)
PYTHON := $(shell command -v python3)
endif
VENV   ?= .venv
BIN    := $(VENV)/bin
# Which torch build: `default` lets pip choose (on Linux x86-64 from PyPI that is the CUDA build,
# several GB, which also runs on a CPU); `cpu` takes the CPU-only build (about 200 MB) from
# PyTorch's CPU index. The choice is remembered in .venv/: `make venv TORCH=cpu` switches an
# existing environment, and later targets keep it.
TORCH  ?=
# Creates or updates .venv/ (src/torchhw/course/bootstrap.py: the standard library only); it
# does nothing, in well under a second, when the environment is already what is asked for.
BOOTSTRAP = $(PYTHON) src/torchhw/course/bootstrap.py --venv $(VENV) $(if $(TORCH),--torch $(TORCH))

# Progress bars off in tests and committed outputs, so nbval compares like with like.
# `make run` shows them only at a terminal, never in CI (see torchhw.runner.progress_wanted).
test unit browser notebooks binder portability colab: export TQDM_DISABLE = 1
export PIP_DISABLE_PIP_VERSION_CHECK = 1

.PHONY: learner portability stress venv venv-course run test unit lab notebooks bench \
	constraints clean browser badges handouts binder system colab deps gpu-check gpu-wheels

NO_PYTHON = echo "no python3 on PATH: install Python 3.11 or newer, or name one: make PYTHON=/path/to/python3.11 ..." >&2; exit 2
# the whole toolchain: the learner's package, the course's tooling and the test suite
venv:
	@test -n "$(PYTHON)" || { $(NO_PYTHON); }
	@$(BOOTSTRAP) --extras dev
# the learner's package and JupyterLab only: what `make lab` needs
venv-course:
	@test -n "$(PYTHON)" || { $(NO_PYTHON); }
	@$(BOOTSTRAP) --extras course

run: venv
	$(BIN)/torchhw run $(ARGS)

# every test: the default suite (unit tests, nbval over every notebook, two at a time), then
# the browser tests. `make portability` (CI runs it too) repeats nbval under other machines.
test: venv
	$(BIN)/torchhw system --install
	$(BIN)/python -m pytest $(ARGS)
	$(MAKE) --no-print-directory browser ARGS=

portability: venv
	$(BIN)/torchhw portability $(ARGS)

# unit tests only: no notebooks, no browser, none of the tests that build an environment
unit: venv
	$(BIN)/python -m pytest tests -m "not browser and not slow and not install" $(ARGS)

lab: venv-course
	$(BIN)/torchhw lab $(ARGS)

browser: venv
	$(BIN)/torchhw system --install chromium npm
	$(BIN)/python -m pytest -m browser tests $(ARGS)

# the programs outside Python the tests need (chromium, npm, shellcheck): found or installed
system: venv
	$(BIN)/torchhw system --install $(ARGS)

# Colab's setup cell in a venv with Colab's preinstalled versions: nothing upgraded, 04 runs
colab: venv
	$(BIN)/torchhw colab

# binder/requirements.txt from pyproject.toml and constraints.txt
deps: venv
	$(BIN)/torchhw deps $(ARGS)

badges: venv
	$(BIN)/torchhw badges $(ARGS)

handouts: venv
	$(BIN)/torchhw handouts $(ARGS)

binder: venv
	$(BIN)/torchhw binder $(ARGS)

notebooks: venv
	$(BIN)/torchhw regen $(ARGS)

bench: venv
	$(BIN)/torchhw bench $(ARGS)

learner: venv
	$(BIN)/torchhw learner

stress: venv
	$(BIN)/python -m pytest -m slow tests
	$(BIN)/torchhw stress $(ARGS)

# after an upgrade: constraints.txt.new from .venv/, the header and comments kept
constraints: venv
	$(BIN)/torchhw deps --freeze

# The GPU check runs on the machine's own Python and torch, not in .venv/ (a GPU machine lent
# for minutes has torch and no time for `make venv`): the first of .venv's python, python3 and
# $(PYTHON) that has torch; the package itself comes from src/ (PYTHONPATH), so no install is
# needed to start. Name another: make gpu-check GPU_PYTHON=/path/to/python
HAS_TORCH = -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("torch") is None)'
GPU_PYTHON ?= $(shell for p in $(BIN)/python python3 $(PYTHON); do $$p $(HAS_TORCH) 2>/dev/null && command -v $$p && break; done || true)
gpu-check:
	@test -n "$(GPU_PYTHON)" || { echo "gpu-check: no python with torch found ($(BIN)/python, python3, $(PYTHON)): name one: make gpu-check GPU_PYTHON=/path/to/python" >&2; exit 2; }
	PYTHONPATH=$(CURDIR)/src$${PYTHONPATH:+:$$PYTHONPATH} $(GPU_PYTHON) -m torchhw gpu-check $(ARGS)

# Wheels for gpu-check on a machine without network (Python 3.12, Linux x86-64, as the GPU
# machines we borrow; GPU_PY=3.11 for another), at the versions constraints.txt pins: the
# Jupyter stack, pytest and the small learner dependencies always; FULL=1 adds the large ones.
# Never torch: the GPU machine's own build is the one under test. Carry build/gpu-wheels/ with
# the checkout.
# pip reads the dependencies' markers with the Python that downloads, not 3.12: aiohttp is
# papermill's on 3.12 only, so it is named; setuptools builds torchhw's editable install.
GPU_WHEELS     ?= build/gpu-wheels
GPU_PY         ?= 3.12
GPU_WHEELS_SET  = papermill nbclient nbformat ipykernel jupyter_client pytest pytest-timeout \
	ipywidgets psutil PyYAML setuptools aiohttp
GPU_WHEELS_FULL = numpy matplotlib scikit-learn
gpu-wheels:
	@test -n "$(PYTHON)" || { $(NO_PYTHON); }
	$(PYTHON) -m pip download --only-binary=:all: --python-version $(GPU_PY) --implementation cp \
		--platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
		--platform manylinux_2_28_x86_64 --platform any -c constraints.txt \
		--dest $(GPU_WHEELS) $(GPU_WHEELS_SET) $(if $(FULL),$(GPU_WHEELS_FULL))
	@du -sh $(GPU_WHEELS)

# runs/ holds your measured reports and cards: remove it yourself when you mean to
clean:
	rm -rf $(VENV) build src/*.egg-info
