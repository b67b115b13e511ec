"""Fixtures shared by test files: the machine's threads, the slice sweep every study test reads, the vLLM engine.

**Two workers, one thread each.** `make test` runs pytest with two xdist workers on the two cores (`-n 2 --dist
loadgroup`); each worker and every process it starts gets one torch thread (two threads each on two cores was 30x
slower). Tests run serially (`pytest tests` without `-n`) too.

**Generate once, assert many times.** `slice_sweep` runs one small sweep of every experiment notebook on the embedded
model (`SLICE`: the MuSoBench build, MuSoBench, NoveltyBench, attention entropy, overthinking) and compiles its report,
once per pytest run: the xdist workers share it through a file lock, so the second one waiting for it reads the first
one's folders. Every test that only reads a study's run folder or the report reads these; the tests that need it are
marked `xdist_group("slice")` so that they sit on the worker that builds it while the other worker does the rest.

**Slow tests** (`@pytest.mark.slow`: papermill runs, sweeps, servers, fresh venvs) are left out of `make test-fast`.

Without vLLM its tests skip (vLLM is an optional extra), except under `make test-vllm`, which sets
REASONING_STUDY_REQUIRE_VLLM=1 so that a broken CPU build fails loudly instead of skipping."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch is imported anywhere: one thread per worker and per child

import pytest
import yaml
from hypothesis import settings as hypothesis_settings

# Property tests: `make pytest` (CI) loads the "ci" profile, derandomized, so a CI run tries the same examples every
# time and a red CI is never a new random draw; `make fuzz` explores fresh seeds on this machine, and what it finds
# becomes an example in the code's notebook (e.g. `format_interval(0.0, -0.0, 0.5, 0)`).
hypothesis_settings.register_profile("ci", derandomize=True, print_blob=True)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

ROOT = Path(__file__).resolve().parents[1]
HAVE_VLLM = importlib.util.find_spec("vllm") is not None
REQUIRE_VLLM = os.environ.get("REASONING_STUDY_REQUIRE_VLLM") == "1"


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "slow: a papermill run, a sweep, a server, a fresh venv or the embedded model generating "
        "(left out of `make test-fast`)",
    )


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Under `--dist loadgroup` a worker's grouped tests must carry xdist's group suffix in their node ids: where it is
    lost (pytest 9.2 node ids, pytest-xdist#1386) the groups silently spread over both workers, and one waits for the other."""
    if not getattr(config.option, "loadgroup", False):
        return
    lost = [item.nodeid for item in items if item.get_closest_marker("xdist_group") and "@" not in item.nodeid]
    if lost:
        raise pytest.UsageError(
            f"--dist loadgroup does not group here (pytest {pytest.__version__}; pytest-xdist#1386): "
            f"{lost[0]} has no group in its node id. Install pytest<9.2 (settings.ini's dev layer)."
        )


def need_vllm():
    "Skip (or, under `make test-vllm`, fail) when vLLM cannot be imported."
    if HAVE_VLLM:
        return
    if REQUIRE_VLLM:
        pytest.fail("REASONING_STUDY_REQUIRE_VLLM=1 but vLLM is not importable in this environment")
    pytest.skip("vLLM is not installed (an optional extra; `make test-vllm` runs these tests with its CPU build)")


# --- the slice sweep: every study once, on the embedded model ---------------------------------------------------

# Each cell's settings are the smallest that still give the readers what they assert: MuSoBench on two SubsetSum levels
# (scored answers with confidences in both paradigms, so every figure of one task is drawn), overthinking at both
# granularities on one question per benchmark (the prefix contract, the shared probes), NoveltyBench's short category.
SLICE = """
name: slice
experiments:
  - notebook: musobench_build
    parameters: {tasks: [subsetsum], levels: [1], per_level: 1, workers: 1}
  - notebook: musobench
    parameters: {tasks: [subsetsum], levels: [1, 2], per_level: 1, max_tokens: 48, sc_samples: 2, reflection_ks: [0], cpu_threads: 1}
  - notebook: musobench
    label: musobench-novelty
    parameters: {tasks: [noveltybench], novelty_prompts: 2, novelty_categories: [Random Generation & Selection], novelty_k: 3,
                 novelty_mode: independent, max_tokens: 64, cpu_threads: 1}
  - notebook: attention_entropy
    parameters: {tasks: [subsetsum], levels: [1], per_level: 1, max_new_tokens: 4, bins: 2, step_width: 2, num_threads: 1}
  - notebook: overthinking
    parameters: {n_items: 1, max_tokens: 40, probe_max_tokens: 6, judge_max_tokens: 24, granularity: [utterance, "tokens:32"],
                 musobench_max_tokens: 64, musobench_probe_tokens: 32, num_threads: 1}
"""
CELL_PARAMETERS = {e.get("label", e["notebook"]): e.get("parameters", {}) for e in yaml.safe_load(SLICE)["experiments"]}


def shared_folder(tmp_path_factory) -> Path:
    "A folder all xdist workers of this pytest run see (each worker's base temp sits in it); the base temp when serial."
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def once_per_run(tmp_path_factory, name: str, build) -> Path:
    """`build(folder)` run once per pytest run, whichever worker asks first; the others wait on a file lock and read the
    folder. A build that failed is not tried again: its error is raised wherever the folder is asked for."""
    from filelock import FileLock

    folder = shared_folder(tmp_path_factory) / name
    with FileLock(str(folder) + ".lock"):
        done, failed = folder.with_suffix(".done"), folder.with_suffix(".failed")
        if not (done.is_file() or failed.is_file()):
            try:
                build(folder)
            except BaseException as e:
                failed.write_text(f"{type(e).__name__}: {e}")
                raise
            done.touch()
    if failed.is_file():
        pytest.fail(
            f"the shared {name} could not be built (see the first test that asked for it): {failed.read_text()[-3000:]}"
        )
    return folder


def papermill_command(notebook: Path, output: Path, params: dict) -> list[str]:
    "papermill on an experiment notebook with `nbs/` as its working directory, each parameter as YAML."
    args = [
        str(Path(sys.executable).parent / "papermill"),
        str(notebook),
        str(output),
        "--cwd",
        str(ROOT / "nbs"),
        "-k",
        "python3",
    ]
    return args + [a for name, value in params.items() for a in ("-y", json.dumps({name: value}))]


@dataclass(frozen=True)
class SliceSweep:
    "The slice sweep's folder, with its run folders by cell and its compiled report."

    folder: Path

    @property
    def report(self) -> Path:
        return self.folder / "report"

    def run(self, cell: str) -> Path:
        return self.folder / cell

    def rerun(self, cell: str, into: Path, timeout: float = 900) -> subprocess.CompletedProcess:
        "The cell's notebook again with its parameters, on a copy of its run folder at `into` (the shared one is never written)."
        shutil.copytree(self.run(cell), into)
        notebook = (
            ROOT / "nbs" / "experiments" / f"{json.loads((into / 'sweep_cell.json').read_text())['notebook']}.ipynb"
        )
        return subprocess.run(
            papermill_command(
                notebook, into.parent / f"{into.name}.ipynb", {**CELL_PARAMETERS[cell], "out_dir": str(into)}
            ),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def run_slice(folder: Path):
    folder.mkdir(parents=True)
    (folder / "slice.yaml").write_text(SLICE)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "reasoning_study.cli",
            str(folder / "slice.yaml"),
            "--out",
            str(folder / "outputs"),
            "--report",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]


@pytest.fixture(scope="session")
def slice_sweep(tmp_path_factory) -> SliceSweep:
    "Every experiment notebook once on the embedded model (SLICE), with the compiled report: built once per pytest run."
    return SliceSweep(once_per_run(tmp_path_factory, "slice", run_slice) / "outputs" / "slice")


# --- vLLM -------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def vllm_engine():
    "The vLLM backend on the embedded SmolLM2: on CPU float32 (comparable token for token) and eager (no 3-min compile)."
    need_vllm()
    import torch

    from reasoning_study.backends.presets import ModelPreset, load_backend
    from reasoning_study.backends.request import SamplingParams

    precision = dict(batch_invariant=True) if torch.cuda.is_available() else dict(dtype="float32", enforce_eager=True)
    preset = ModelPreset(
        "smollm2-vllm", "embedded:SmolLM2-135M-Instruct", "vllm", "never", SamplingParams(max_tokens=32)
    )
    yield load_backend(preset, max_model_len=2048, gpu_memory_utilization=0.3, **precision)
    # shut the engine down while pytest still captures output (its exit logging otherwise hits closed streams)
    import gc

    from reasoning_study.backends import vllm

    for llm in vllm._ENGINES.values():
        shutdown = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        if hasattr(shutdown, "shutdown"):
            shutdown.shutdown()
    vllm._ENGINES.clear()
    gc.collect()
