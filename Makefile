# torchhw: every target creates the virtual environment it needs on first use.
#   make run        execute the whole course with papermill (quick mode) into runs/<timestamp>/
#   make test       unit tests + nbval (strict) over every notebook
#   make lab        open JupyterLab at notebooks/
#   make notebooks  regenerate every notebook's committed outputs on a fresh kernel
#   make bench      the benchmark command (matmul and memory bandwidth on this machine)

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

# Progress bars off in logs and committed outputs, so nbval compares like with like.
export TQDM_DISABLE ?= 1
export PIP_DISABLE_PIP_VERSION_CHECK = 1

.PHONY: venv run test unit lab notebooks bench constraints clean

venv: $(STAMP)

$(STAMP): requirements.txt constraints.txt pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	@touch $@

run: $(STAMP)
	$(BIN)/torchhw run $(ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest $(ARGS)

unit: $(STAMP)
	$(BIN)/python -m pytest tests $(ARGS)

lab: $(STAMP)
	$(BIN)/jupyter lab --notebook-dir=. --ServerApp.default_url=/lab/tree/notebooks $(ARGS)

notebooks: $(STAMP)
	$(BIN)/torchhw regen $(ARGS)

bench: $(STAMP)
	$(BIN)/torchhw bench $(ARGS)

constraints: $(STAMP)
	$(BIN)/python -m pip freeze --exclude-editable | sed 's/+cpu$$//' > constraints.txt.new
	@echo "wrote constraints.txt.new: review it, then move it over constraints.txt"

clean:
	rm -rf $(VENV) runs build src/*.egg-info
